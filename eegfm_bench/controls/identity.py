"""Dataset-identity probe (paper 001 §4.4, Table 7).

Can a linear probe tell which dataset a recording came from? Two datasets are restricted to their shared
channels, windows are averaged to one vector per unit (recording, or subject), and a balanced logistic probe
predicts dataset membership under stratified K-fold CV over units. Reported: AUROC in the full space, AUROC
after in-fold PCA-50 (k capped by the training-fold size and the dimension), a permuted-label null (dataset
labels shuffled across units, same folds) and balanced subsamples (``min(n_a, n_b)`` units drawn from the
larger dataset). A ceiling AUROC means dataset membership is decodable; device, montage, preprocessing,
population and clinical composition are confounded within it (§4.4), so it is not diagnostic transfer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from sklearn.model_selection import StratifiedKFold

from eegfm_bench.controls.probes import ProbeSpec, check_folds, fit_predict_folds


def shared_channels(ch_a: Sequence[str], ch_b: Sequence[str], names: tuple[str, str] = ("A", "B")) -> list[str]:
    """Channels present in both montages, in the order of ``ch_a`` (case-insensitive names).

    Parameters
    ----------
    ch_a, ch_b : sequence of str
        Channel names of the two datasets (already normalised by the montage module, e.g. ``Fp1``).
    names : (str, str)
        Dataset names for the error message.

    Returns
    -------
    list of str
        Shared names as spelled in ``ch_a``.

    Raises
    ------
    ValueError
        If no channel is shared; the message lists what each dataset has.
    """
    lower_b = {c.lower() for c in ch_b}
    shared = [c for c in ch_a if c.lower() in lower_b]
    if not shared:
        raise ValueError(f"datasets {names[0]!r} and {names[1]!r} share no channel: {names[0]} has {list(ch_a)}, "
                         f"{names[1]} has {list(ch_b)}; fix: map both to a common montage (e.g. standard 10-20 names "
                         "or the same bipolar derivations) before the identity probe")
    return shared


def restrict_to_shared(X_a: np.ndarray, ch_a: Sequence[str], X_b: np.ndarray, ch_b: Sequence[str],
                       names: tuple[str, str] = ("A", "B")) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Select the shared channels (in one order) from two arrays whose axis 1 is channels.

    Parameters
    ----------
    X_a : ndarray, shape (n_windows_a, n_chans_a, ...)
        Windows ``(n, n_chans, n_times)`` or per-channel features ``(n, n_chans, k)`` of dataset A.
    ch_a : sequence of str, length n_chans_a
    X_b : ndarray, shape (n_windows_b, n_chans_b, ...)
    ch_b : sequence of str, length n_chans_b
    names : (str, str)

    Returns
    -------
    X_a_shared : ndarray, shape (n_windows_a, n_shared, ...)
    X_b_shared : ndarray, shape (n_windows_b, n_shared, ...)
    shared : list of str

    Raises
    ------
    ValueError
        If no channel is shared, or a channel list does not match its array.
    """
    for X, ch, nm in ((X_a, ch_a, names[0]), (X_b, ch_b, names[1])):
        if np.ndim(X) < 2 or np.shape(X)[1] != len(ch):
            raise ValueError(f"{nm}: {len(ch)} channel names for array of shape {np.shape(X)} (axis 1 = channels)")
    shared = shared_channels(ch_a, ch_b, names)
    ia = [list(c.lower() for c in ch_a).index(c.lower()) for c in shared]
    ib = [list(c.lower() for c in ch_b).index(c.lower()) for c in shared]
    return np.asarray(X_a)[:, ia], np.asarray(X_b)[:, ib], shared


def aggregate_units(F: np.ndarray, units: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Mean feature vector per unit (recording or subject), paper 001 §3.3/§4.4.

    Parameters
    ----------
    F : ndarray, shape (n_windows, n_features)
    units : sequence, shape (n_windows,)

    Returns
    -------
    F_units : ndarray, shape (n_units, n_features)
    unit_ids : ndarray, shape (n_units,)
    """
    ids, inv = np.unique(np.asarray(units), return_inverse=True)
    out = np.zeros((ids.size, F.shape[1]))
    np.add.at(out, inv, F)
    return out / np.bincount(inv)[:, None], ids


@dataclass
class IdentityResult:
    """Dataset-identity probe outcome (paper 001 Table 7). AUROCs are mean over folds."""

    names: tuple
    n_units: tuple
    n_features: int
    n_folds: int
    auroc_full: float
    auroc_pca: float
    pca_k: int
    null_aurocs: np.ndarray
    balanced_aurocs: np.ndarray
    fold_auroc_full: np.ndarray
    fold_auroc_pca: np.ndarray

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, np.ndarray):
                d[k] = v.tolist()
        d["null_mean"] = float(np.mean(self.null_aurocs)) if self.null_aurocs.size else None
        d["balanced_mean"] = float(np.mean(self.balanced_aurocs)) if self.balanced_aurocs.size else None
        return d


def _cv_auroc(F, lab, folds, spec):
    from sklearn.metrics import roc_auc_score

    proba, ks = fit_predict_folds(F, lab, folds, spec, 2)
    aucs = np.array([roc_auc_score(lab[te], proba[te, 1]) for _, te in folds])
    return aucs, ks


def dataset_identity_probe(F_a: np.ndarray, units_a: Sequence, F_b: np.ndarray, units_b: Sequence, *,
                           names: tuple[str, str] = ("A", "B"), n_folds: int = 5, pca_k: int = 50, C: float = 1.0,
                           n_permutations: int = 20, n_balanced: int = 10, seed: int = 0,
                           progress: bool = False) -> IdentityResult:
    """Decode dataset membership from unit-mean representations (paper 001 §4.4).

    Parameters
    ----------
    F_a : ndarray, shape (n_windows_a, n_features)
        Window features or embeddings of dataset A, computed on the channels shared with B
        (see :func:`restrict_to_shared`, :func:`identity_from_windows`).
    units_a : sequence, shape (n_windows_a,)
        Recording (or subject) per window of A; one unit per id.
    F_b, units_b
        The same for dataset B (same feature dimension).
    names : (str, str)
        Dataset names (labels 0 and 1).
    n_folds : int
        Stratified folds over units.
    pca_k : int
        In-fold PCA size, capped per fold at ``min(pca_k, n_train_units, n_features)``; the cap used is
        reported as ``pca_k``.
    C : float
        Logistic-probe inverse regularisation (balanced class weights, after StandardScaler).
    n_permutations : int
        Permuted-label null draws (paper: 20).
    n_balanced : int
        Balanced-subsample draws (paper: 10).
    seed : int
    progress : bool
        tqdm bar over the null and balanced draws.

    Returns
    -------
    IdentityResult

    Raises
    ------
    ValueError
        If feature dimensions differ, or either dataset has fewer units than ``n_folds`` (too few recordings
        for the requested folds).
    """
    from tqdm.auto import tqdm

    F_a, F_b = np.asarray(F_a, dtype=np.float64), np.asarray(F_b, dtype=np.float64)
    if F_a.ndim != 2 or F_b.ndim != 2 or F_a.shape[1] != F_b.shape[1]:
        raise ValueError(f"feature matrices must be 2-D with one dimension: got {F_a.shape} and {F_b.shape}; "
                         "fix: compute both on the shared channels (restrict_to_shared) and flatten")
    Ua, _ = aggregate_units(F_a, units_a)
    Ub, _ = aggregate_units(F_b, units_b)
    for U, nm in ((Ua, names[0]), (Ub, names[1])):
        if U.shape[0] < n_folds:
            raise ValueError(f"dataset {nm!r} has {U.shape[0]} units (recordings) for {n_folds} folds; "
                             f"fix: n_folds <= {U.shape[0]} or add recordings")
    rng = np.random.default_rng(seed)

    def run(Ua_, Ub_, shuffle=False, pca=None):
        F = np.vstack([Ua_, Ub_])
        lab = np.r_[np.zeros(len(Ua_), int), np.ones(len(Ub_), int)]
        if shuffle:  # permute first, then stratify the folds on the permuted labels (both classes in every fold)
            lab = lab[rng.permutation(lab.size)]
        cv = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
        folds = check_folds(list(cv.split(F, lab)), lab.size)
        spec = ProbeSpec(kind="logreg", C=C, pca=pca, cap_pca=True, seed=seed)
        return _cv_auroc(F, lab, folds, spec)

    full, _ = run(Ua, Ub)
    pca_f, ks = run(Ua, Ub, pca=pca_k)
    null = np.array([run(Ua, Ub, shuffle=True)[0].mean()
                     for _ in tqdm(range(n_permutations), desc="identity null", disable=not progress)])
    n_min = min(len(Ua), len(Ub))
    bal = []
    for _ in tqdm(range(n_balanced), desc="identity balanced", disable=not progress):
        ia = rng.choice(len(Ua), n_min, replace=False)
        ib = rng.choice(len(Ub), n_min, replace=False)
        bal.append(run(Ua[ia], Ub[ib])[0].mean())
    return IdentityResult(tuple(names), (len(Ua), len(Ub)), F_a.shape[1], n_folds, float(full.mean()),
                          float(pca_f.mean()), int(min(ks)), null, np.array(bal), full, pca_f)


def identity_from_windows(X_a: np.ndarray, ch_a: Sequence[str], units_a: Sequence, X_b: np.ndarray,
                          ch_b: Sequence[str], units_b: Sequence, sfreq: float, *, family: str = "simple",
                          names: tuple[str, str] = ("A", "B"), feature_kwargs: dict | None = None,
                          **kwargs) -> IdentityResult:
    """Identity probe on handcrafted features of two datasets' raw windows, on their shared channels.

    Parameters
    ----------
    X_a : ndarray, shape (n_windows_a, n_chans_a, n_times)
        Windows of dataset A (same sfreq and window length as B).
    ch_a : sequence of str
    units_a : sequence, shape (n_windows_a,)
        Recording per window.
    X_b, ch_b, units_b
        The same for dataset B.
    sfreq : float
        Hz, common to both.
    family : {"simple", "enhanced"}
        Handcrafted family (:mod:`eegfm_bench.controls.features`).
    names : (str, str)
    feature_kwargs : dict, optional
        Passed to the feature family (e.g. ``study_summaries=False`` when only one channel is shared).
    **kwargs
        Passed to :func:`dataset_identity_probe`.

    Returns
    -------
    IdentityResult

    Raises
    ------
    ValueError
        If the datasets share no channel (listing each one's channels) and everything the feature extraction
        and :func:`dataset_identity_probe` raise.
    """
    from eegfm_bench.controls.features import handcrafted_features

    Xa, Xb, shared = restrict_to_shared(X_a, ch_a, X_b, ch_b, names)
    fk = feature_kwargs or {}
    Fa, _ = handcrafted_features(Xa, sfreq, shared, family=family, **fk)
    Fb, _ = handcrafted_features(Xb, sfreq, shared, family=family, **fk)
    return dataset_identity_probe(Fa, units_a, Fb, units_b, names=names, **kwargs)
