"""Closed-form ridge probe on cached tokens, streamed so that wide (flattened) features never need a dense
``p × p`` Gram matrix (the peers' ridge probe, OpenEEGBench).

The probe is scikit-learn's ``RidgeClassifierCV`` with ``cv`` = the validation subjects: targets in {-1, 1} per
class (one column for two classes), ``fit_intercept`` (features and targets centred on the fitting rows), the
regularisation ``alpha`` chosen by the validation subjects' balanced accuracy among ``alphas`` (the first of
ties, as scikit-learn's grid search), then refitted on training + validation rows with that ``alpha``. It is solved
in the dual: with ``n`` fitting rows, only the ``n × n`` kernel ``K = X_c X_cᵀ`` of the centred rows and the
``m × n`` cross-kernels of the rows to predict are formed, accumulated over column chunks of the
``(n_windows, n_features)`` matrix (a memory map is read chunk by chunk); one eigendecomposition of ``K`` serves
every ``alpha``. Peak memory is ``O(n² + n · chunk)`` floats whatever ``n_features`` is.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-2, 6, 9))
"""Regularisation grid (``alpha``, as scikit-learn's): 1e-2 … 1e6."""


def _flat(X) -> np.ndarray:
    return X.reshape(X.shape[0], -1) if X.ndim > 2 else X


def _col_means(X, rows: np.ndarray, chunk: int) -> np.ndarray:
    p = X.shape[1]
    mu = np.empty(p, dtype=np.float64)
    for c0 in range(0, p, chunk):
        mu[c0:c0 + chunk] = np.asarray(X[rows, c0:c0 + chunk], dtype=np.float64).mean(0)
    return mu


def _kernels(X, fit_rows: np.ndarray, other: Sequence[np.ndarray], mu: np.ndarray, chunk: int):
    """``K = (X_f − μ)(X_f − μ)ᵀ`` and ``[(X_o − μ)(X_f − μ)ᵀ for o in other]``, accumulated over column chunks."""
    p = X.shape[1]
    K = np.zeros((fit_rows.size, fit_rows.size))
    cross = [np.zeros((o.size, fit_rows.size)) for o in other]
    for c0 in range(0, p, chunk):
        sl = slice(c0, c0 + chunk)
        F = np.asarray(X[fit_rows, sl], dtype=np.float64) - mu[sl]
        K += F @ F.T
        for j, o in enumerate(other):
            cross[j] += (np.asarray(X[o, sl], dtype=np.float64) - mu[sl]) @ F.T
    return K, cross


def _targets(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """scikit-learn's ``LabelBinarizer(neg_label=-1)``: one column for two classes, else one per class."""
    Y = np.where(y[:, None] == classes[None, :], 1.0, -1.0)
    return Y[:, 1:] if classes.size == 2 else Y


def _decision_to_index(D: np.ndarray) -> np.ndarray:
    return (D[:, 0] > 0).astype(int) if D.shape[1] == 1 else D.argmax(1)


def _balanced_accuracy(y_idx: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    rec = [np.mean(pred[y_idx == k] == k) for k in range(n_classes) if np.any(y_idx == k)]
    return float(np.mean(rec))


def _solve(evals, evecs, Yc, alpha):
    """Dual coefficients ``(K + αI)⁻¹ Y_c`` from ``K = V diag(s) Vᵀ``."""
    return evecs @ ((evecs.T @ Yc) / (evals + alpha)[:, None])


def ridge_probe(X, y, train_idx, val_idx, test_idx, *, alphas: Sequence[float] = DEFAULT_ALPHAS,
                chunk: int = 4096, coef: bool = False) -> dict:
    """Fit the ridge probe (module docstring) and predict the test rows.

    Parameters
    ----------
    X : array or memmap, shape (n_windows, n_features) or (n_windows, n_tokens, d_model)
        Features (tokens are flattened token-major, as the ``flatten`` head does).
    y : array, shape (n_windows,)
        Labels (any hashable values).
    train_idx, val_idx, test_idx : int arrays
        Row indices; ``alpha`` is chosen on ``val_idx``.
    alphas : sequence of float
        The grid (scikit-learn's ``alpha``).
    chunk : int
        Feature columns per pass.
    coef : bool
        Also return the primal solution: ``coef`` ``(n_targets, n_features)`` and ``intercept`` ``(n_targets,)``
        (``decision = X · coefᵀ + intercept``; one target for two classes), one more pass over the columns.

    Returns
    -------
    dict
        ``decision`` ``(n_test, n_classes)`` (the two-class column mirrored to ``[-d, d]``), ``proba`` (softmax of
        ``decision``: a monotone map, so AUROC is that of the decision values), ``pred`` (class indices),
        ``classes``, ``alpha``, ``val_scores`` (balanced accuracy per alpha), ``n_features``.

    Raises
    ------
    ValueError
        Empty index sets, fewer than two classes in the training + validation rows, or a non-positive alpha.
    """
    X = _flat(X)
    y = np.asarray(y)
    tr, va, te = (np.asarray(i, dtype=np.int64) for i in (train_idx, val_idx, test_idx))
    if not (tr.size and va.size and te.size):
        raise ValueError(f"ridge probe: empty rows (train {tr.size}, val {va.size}, test {te.size})")
    if any(float(a) <= 0 for a in alphas):
        raise ValueError(f"ridge probe: alphas must be > 0, got {list(alphas)}")
    classes = np.unique(y[np.concatenate([tr, va])])
    if classes.size < 2:
        raise ValueError("ridge probe: the training and validation rows hold one class")
    y_idx = np.searchsorted(classes, y)
    # 1) alpha on the validation subjects: fit on train, score balanced accuracy on val
    mu = _col_means(X, tr, chunk)
    K, (Kv,) = _kernels(X, tr, [va], mu, chunk)
    Y = _targets(y[tr], classes)
    ybar = Y.mean(0)
    evals, evecs = np.linalg.eigh(K)
    evals = np.clip(evals, 0.0, None)
    scores = []
    for a in alphas:
        D = Kv @ _solve(evals, evecs, Y - ybar, float(a)) + ybar
        scores.append(_balanced_accuracy(y_idx[va], _decision_to_index(D), classes.size))
    best = float(alphas[int(np.argmax(scores))])  # the first of ties
    # 2) refit on train + val with that alpha, predict the test rows
    fit = np.concatenate([tr, va])
    mu = _col_means(X, fit, chunk)
    K, (Kt,) = _kernels(X, fit, [te], mu, chunk)
    Y = _targets(y[fit], classes)
    ybar = Y.mean(0)
    A = np.linalg.solve(K + best * np.eye(K.shape[0]), Y - ybar)
    D = Kt @ A + ybar
    out_coef = {}
    if coef:
        W = np.empty((X.shape[1], A.shape[1]))
        for c0 in range(0, X.shape[1], chunk):
            sl = slice(c0, c0 + chunk)
            W[sl] = (np.asarray(X[fit, sl], dtype=np.float64) - mu[sl]).T @ A
        out_coef = {"coef": W.T, "intercept": ybar - mu @ W}
    if D.shape[1] == 1:
        D = np.hstack([-D, D])
    P = np.exp(D - D.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    return {"decision": D, "proba": P, "pred": D.argmax(1), "classes": classes, "alpha": best,
            "val_scores": dict(zip(map(float, alphas), scores)), "n_features": int(X.shape[1]), **out_coef}


__all__ = ["ridge_probe", "DEFAULT_ALPHAS"]
