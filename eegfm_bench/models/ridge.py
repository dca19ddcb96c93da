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

When the fitting rows outnumber the features (``n > p``: a clinical corpus of 10⁵ windows and pooled features),
the same solution is computed in the primal instead: the ``p × p`` scatter matrix
``G = X_cᵀ X_c`` and ``X_cᵀ Y_c`` are accumulated over row chunks of the (memory-mapped) features, one
eigendecomposition of ``G`` serves every ``alpha``, and the rows to predict are projected chunk by chunk. Peak
memory is then ``O(p² + chunk_rows · p)``: in both forms it is bounded by ``min(n, p)²`` plus one chunk, never by
the corpus. The two forms give the same decisions to floating-point rounding (``(K + αI)⁻¹`` vs
``(G + αI)⁻¹``; the tests ask ``1e-8`` on the decisions), so ``form="auto"`` picks the smaller one.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-2, 6, 9))
"""Regularisation grid (``alpha``, as scikit-learn's): 1e-2 … 1e6."""

ROW_CHUNK_VALUES = 1 << 22
"""Primal form: rows per pass are chosen so that one chunk holds about this many float64 values (32 MiB)."""

FORMS = ("auto", "dual", "primal")


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



def _row_chunks(rows: np.ndarray, p: int):
    step = max(1, ROW_CHUNK_VALUES // max(1, p))
    for r0 in range(0, rows.size, step):
        yield r0, rows[r0:r0 + step]


def _row_means(X, rows: np.ndarray) -> np.ndarray:
    mu = np.zeros(X.shape[1], dtype=np.float64)
    for _, r in _row_chunks(rows, X.shape[1]):
        mu += np.asarray(X[r], dtype=np.float64).sum(0)
    return mu / rows.size


def _scatter(X, rows: np.ndarray, mu: np.ndarray, Yc: np.ndarray):
    """``G = (X_r − μ)ᵀ(X_r − μ)`` ``(p, p)`` and ``(X_r − μ)ᵀ Y_c`` ``(p, n_targets)``, over row chunks."""
    p = X.shape[1]
    G = np.zeros((p, p))
    XtY = np.zeros((p, Yc.shape[1]))
    for r0, r in _row_chunks(rows, p):
        F = np.asarray(X[r], dtype=np.float64) - mu
        G += F.T @ F
        XtY += F.T @ Yc[r0:r0 + r.size]
    return G, XtY


def _project(X, rows: np.ndarray, mu: np.ndarray, M: np.ndarray) -> np.ndarray:
    """``(X_r − μ) M`` over row chunks: ``(rows.size, M.shape[1])``."""
    out = np.empty((rows.size, M.shape[1]))
    for r0, r in _row_chunks(rows, X.shape[1]):
        out[r0:r0 + r.size] = (np.asarray(X[r], dtype=np.float64) - mu) @ M
    return out


def _select_alpha(decisions, y_val: np.ndarray, n_classes: int, alphas: Sequence[float]):
    """Balanced accuracy of the validation rows per ``alpha`` and the best ``alpha`` (the first of ties)."""
    scores = [_balanced_accuracy(y_val, _decision_to_index(decisions(float(a))), n_classes) for a in alphas]
    return float(alphas[int(np.argmax(scores))]), scores


def _fit_dual(X, y_idx, tr, va, te, classes, alphas, chunk, coef):
    mu = _col_means(X, tr, chunk)
    K, (Kv,) = _kernels(X, tr, [va], mu, chunk)
    Y = _targets(classes[y_idx[tr]], classes)
    ybar = Y.mean(0)
    evals, evecs = np.linalg.eigh(K)
    evals = np.clip(evals, 0.0, None)
    best, scores = _select_alpha(lambda a: Kv @ _solve(evals, evecs, Y - ybar, a) + ybar, y_idx[va],
                                 classes.size, alphas)
    fit = np.concatenate([tr, va])
    mu = _col_means(X, fit, chunk)
    K, (Kt,) = _kernels(X, fit, [te], mu, chunk)
    Y = _targets(classes[y_idx[fit]], classes)
    ybar = Y.mean(0)
    A = np.linalg.solve(K + best * np.eye(K.shape[0]), Y - ybar)
    out = {}
    if coef:
        W = np.empty((X.shape[1], A.shape[1]))
        for c0 in range(0, X.shape[1], chunk):
            sl = slice(c0, c0 + chunk)
            W[sl] = (np.asarray(X[fit, sl], dtype=np.float64) - mu[sl]).T @ A
        out = {"coef": W.T, "intercept": ybar - mu @ W}
    return Kt @ A + ybar, best, scores, out


def _fit_primal(X, y_idx, tr, va, te, classes, alphas, coef):
    mu = _row_means(X, tr)
    Y = _targets(classes[y_idx[tr]], classes)
    ybar = Y.mean(0)
    G, XtY = _scatter(X, tr, mu, Y - ybar)
    evals, U = np.linalg.eigh(G)
    evals = np.clip(evals, 0.0, None)
    B = U.T @ XtY
    # the validation rows' class per alpha, projected one row chunk at a time (never all of (X_v − μ) U at once)
    preds = np.empty((len(alphas), va.size), dtype=np.int64)
    for r0, r in _row_chunks(va, X.shape[1]):
        Z = (np.asarray(X[r], dtype=np.float64) - mu) @ U
        for k, a in enumerate(alphas):
            preds[k, r0:r0 + r.size] = _decision_to_index(Z @ (B / (evals + float(a))[:, None]) + ybar)
    scores = [_balanced_accuracy(y_idx[va], preds[k], classes.size) for k in range(len(alphas))]
    best = float(alphas[int(np.argmax(scores))])  # the first of ties
    fit = np.concatenate([tr, va])
    mu = _row_means(X, fit)
    Y = _targets(classes[y_idx[fit]], classes)
    ybar = Y.mean(0)
    G, XtY = _scatter(X, fit, mu, Y - ybar)
    W = np.linalg.solve(G + best * np.eye(G.shape[0]), XtY)
    out = {"coef": W.T, "intercept": ybar - mu @ W} if coef else {}
    return _project(X, te, mu, W) + ybar, best, scores, out


def ridge_probe(X, y, train_idx, val_idx, test_idx, *, alphas: Sequence[float] = DEFAULT_ALPHAS,
                chunk: int = 4096, coef: bool = False, form: str = "auto") -> dict:
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
        ``classes``, ``alpha``, ``val_scores`` (balanced accuracy per alpha), ``n_features``, ``form`` (the form used).

    Raises
    ------
    ValueError
        Empty index sets, fewer than two classes in the training + validation rows, a non-positive alpha, or an
        unknown ``form``.
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
    if form not in FORMS:
        raise ValueError(f"ridge probe: form must be one of {FORMS}, got {form!r}")
    if form == "auto":
        form = "primal" if tr.size + va.size > X.shape[1] else "dual"
    if form == "primal":
        D, best, scores, out_coef = _fit_primal(X, y_idx, tr, va, te, classes, alphas, coef)
    else:
        D, best, scores, out_coef = _fit_dual(X, y_idx, tr, va, te, classes, alphas, chunk, coef)
    if D.shape[1] == 1:
        D = np.hstack([-D, D])
    P = np.exp(D - D.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    return {"decision": D, "proba": P, "pred": D.argmax(1), "classes": classes, "alpha": best,
            "val_scores": dict(zip(map(float, alphas), scores)), "n_features": int(X.shape[1]), "form": form,
            **out_coef}


__all__ = ["ridge_probe", "DEFAULT_ALPHAS"]
