"""Dataset-identity probe (paper 001 §4.4, Table 7).

Can a linear probe tell which dataset a recording came from? Two datasets are restricted to their shared
channels, windows are averaged to one vector per unit (recording), and a balanced logistic probe predicts dataset
membership under stratified K-fold CV over units, **grouped by subject** (``StratifiedGroupKFold``): every
recording of a subject falls in one fold, so a probe cannot score by recognising a subject it saw in training
(EEGMMIDB contributes several recordings per subject; with recording-level folds one subject sat on both sides and
the permuted nulls rose to 0.52-0.58, above the paper's 0.488-0.506). Recording-level folds are available on
request (``group_by="recording"``) and labelled so in the result. Reported: AUROC in the full space, AUROC after
in-fold PCA-50 (k capped by the training-fold size and the dimension), a permuted-label null (dataset labels
shuffled across *subjects*, so each subject's recordings keep one label, same grouping), reported with its mean,
SD and 5-95 % range, and balanced subsamples (``min(n_a, n_b)`` subjects drawn from the larger dataset). A ceiling AUROC means dataset membership is decodable; device, montage, preprocessing,
population and clinical composition are confounded within it (§4.4), so it is not diagnostic transfer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedGroupKFold
from tqdm.auto import tqdm

from eegfm_bench.controls.features import handcrafted_features
from eegfm_bench.controls.probes import ProbeSpec, check_folds, fit_predict_folds
from eegfm_bench.data.preprocessing import reference_windows


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
    group_by: str = "subject"
    n_groups: tuple = ()

    def to_dict(self) -> dict:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, np.ndarray):
                out[k] = v.tolist()
        nl = np.asarray(self.null_aurocs, dtype=float)
        out["null_mean"] = float(np.mean(nl)) if nl.size else None
        out["null_sd"] = float(np.std(nl, ddof=1)) if nl.size > 1 else None
        out["null_q05"], out["null_q95"] = (float(np.quantile(nl, 0.05)), float(np.quantile(nl, 0.95))) if nl.size \
            else (None, None)
        out["balanced_mean"] = float(np.mean(self.balanced_aurocs)) if self.balanced_aurocs.size else None
        out["fold_unit"] = "recording folds grouped by subject" if self.group_by == "subject" else \
            "recording folds, NOT grouped by subject (one subject may sit on both sides of a fold)"
        return out


def _cv_auroc(F, lab, folds, spec):
    proba, ks = fit_predict_folds(F, lab, folds, spec, 2)
    aucs = np.array([roc_auc_score(lab[te], proba[te, 1]) for _, te in folds])
    return aucs, ks


def dataset_identity_probe(F_a: np.ndarray, units_a: Sequence, F_b: np.ndarray, units_b: Sequence, *,
                           names: tuple[str, str] = ("A", "B"), n_folds: int = 5, pca_k: int = 50, C: float = 1.0,
                           n_permutations: int = 20, n_balanced: int = 10, seed: int = 0,
                           progress: bool = False, subjects_a: Sequence | None = None,
                           subjects_b: Sequence | None = None, group_by: str = "subject") -> IdentityResult:
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
    subjects_a, subjects_b : sequence, shape (n_windows,), optional
        Subject per window (required for ``group_by="subject"``); the two datasets' ids are kept apart.
    group_by : {"subject", "recording"}
        ``subject`` (default): folds, the permuted null and the balanced draws work on subjects, every recording of
        a subject in one fold; ``recording``: recordings as independent units (only on request: a subject with
        several recordings can then sit on both sides of a fold, which inflates the AUROC).

    Returns
    -------
    IdentityResult

    Raises
    ------
    ValueError
        If feature dimensions differ, either dataset has fewer units (subjects) than ``n_folds``, a recording maps
        to two subjects, or ``group_by="subject"`` without the subjects.
    """
    F_a, F_b = np.asarray(F_a, dtype=np.float64), np.asarray(F_b, dtype=np.float64)
    if F_a.ndim != 2 or F_b.ndim != 2 or F_a.shape[1] != F_b.shape[1]:
        raise ValueError(f"feature matrices must be 2-D with one dimension: got {F_a.shape} and {F_b.shape}; "
                         "fix: compute both on the shared channels (restrict_to_shared) and flatten")
    if group_by not in ("subject", "recording"):
        raise ValueError(f"group_by {group_by!r}; fix: 'subject' (default) or 'recording'")
    Ua, ids_a = aggregate_units(F_a, units_a)
    Ub, ids_b = aggregate_units(F_b, units_b)
    ga, gb = _unit_groups(units_a, subjects_a, ids_a, units_b, subjects_b, ids_b, names, group_by, n_folds)
    rng = np.random.default_rng(seed)
    probe = dict(n_folds=n_folds, C=C, seed=seed, rng=rng)
    full, _ = _identity_auroc(Ua, Ub, ga, gb, **probe)
    pca_f, ks = _identity_auroc(Ua, Ub, ga, gb, pca=pca_k, **probe)
    null = np.array([_identity_auroc(Ua, Ub, ga, gb, shuffle=True, **probe)[0].mean()
                     for _ in tqdm(range(n_permutations), desc="identity null", disable=not progress)])
    sa, sb = np.unique(ga), np.unique(gb)
    bal = _balanced_draws(Ua, Ub, ga, gb, sa, sb, n_balanced, progress, probe)
    return IdentityResult(tuple(names), (len(Ua), len(Ub)), F_a.shape[1], n_folds, float(full.mean()),
                          float(pca_f.mean()), int(min(ks)), null, np.array(bal), full, pca_f, group_by,
                          (int(sa.size), int(sb.size)))


def _unit_groups(units_a, subjects_a, ids_a, units_b, subjects_b, ids_b, names, group_by: str, n_folds: int):
    """The fold group of every unit of A and of B (its subject, or the unit itself), checked against ``n_folds``."""
    if group_by == "subject":
        if subjects_a is None or subjects_b is None:
            raise ValueError("group_by='subject' needs subjects_a and subjects_b (subject per window); fix: pass "
                             "them, or group_by='recording' (recording-level folds, labelled as such)")
        ga = _unit_subjects(units_a, subjects_a, ids_a, names[0])
        gb = _unit_subjects(units_b, subjects_b, ids_b, names[1])
    else:
        ga, gb = np.asarray([f"{names[0]}:{u}" for u in ids_a]), np.asarray([f"{names[1]}:{u}" for u in ids_b])
    for g, nm in ((ga, names[0]), (gb, names[1])):
        if np.unique(g).size < n_folds:
            raise ValueError(f"dataset {nm!r} has {np.unique(g).size} {group_by}s for {n_folds} folds; "
                             f"fix: n_folds <= {np.unique(g).size} or add {group_by}s")
    return ga, gb


def _identity_auroc(Ua, Ub, ga, gb, *, n_folds: int, C: float, seed: int, rng, shuffle: bool = False, pca=None):
    """Per-fold AUROCs (and PCA sizes) of the dataset-membership probe on unit means ``Ua`` (label 0) and ``Ub``
    (label 1); ``shuffle`` permutes the dataset labels across groups first (each group's units keep one label)."""
    F = np.vstack([Ua, Ub])
    groups = np.r_[ga, gb]
    lab = np.r_[np.zeros(len(Ua), int), np.ones(len(Ub), int)]
    if shuffle:  # dataset labels permuted across groups (each group's units keep one label), then stratified
        g_ids, g_inv = np.unique(groups, return_inverse=True)
        g_lab = np.zeros(g_ids.size, int)
        g_lab[g_inv] = lab
        lab = g_lab[rng.permutation(g_ids.size)][g_inv]
    cv = StratifiedGroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    folds = check_folds(list(cv.split(F, lab, groups)), lab.size)
    spec = ProbeSpec(kind="logreg", C=C, pca=pca, cap_pca=True, seed=seed)
    return _cv_auroc(F, lab, folds, spec)


def _balanced_draws(Ua, Ub, ga, gb, sa, sb, n_balanced: int, progress: bool, probe: dict) -> list[float]:
    """Mean AUROC of ``n_balanced`` draws of as many groups from each dataset (the smaller one's count)."""
    n_min = min(sa.size, sb.size)
    bal = []
    for _ in tqdm(range(n_balanced), desc="identity balanced", disable=not progress):
        ka = np.isin(ga, probe["rng"].choice(sa, n_min, replace=False))
        kb = np.isin(gb, probe["rng"].choice(sb, n_min, replace=False))
        bal.append(_identity_auroc(Ua[ka], Ub[kb], ga[ka], gb[kb], **probe)[0].mean())
    return bal


def _unit_subjects(units: Sequence, subjects: Sequence, ids: np.ndarray, name: str) -> np.ndarray:
    """The subject of each unit id in ``ids`` (prefixed with the dataset name so the two never share an id)."""
    units, subjects = np.asarray(units), np.asarray(subjects)
    if subjects.shape != units.shape:
        raise ValueError(f"{name}: {subjects.shape[0]} subjects for {units.shape[0]} windows")
    out = []
    for u in ids:
        s = np.unique(subjects[units == u])
        if s.size != 1:
            raise ValueError(f"{name}: recording {u!r} belongs to subjects {s.tolist()}; fix: one subject per unit")
        out.append(f"{name}:{s[0]}")
    return np.asarray(out)


def identity_from_windows(X_a: np.ndarray, ch_a: Sequence[str], units_a: Sequence, X_b: np.ndarray,
                          ch_b: Sequence[str], units_b: Sequence, sfreq: float, *, family: str = "simple",
                          names: tuple[str, str] = ("A", "B"), feature_kwargs: dict | None = None,
                          reference: str = "average", **kwargs) -> IdentityResult:
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
    reference : {"average", "none"}
        The windows' reference: with ``average``, a dataset restricted to the shared channels is re-referenced
        over them (a common-mode offset left by dropped channels would tell the datasets apart by itself).
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
    Xa, Xb, shared = restrict_to_shared(X_a, ch_a, X_b, ch_b, names)
    Xa, Xb = np.array(Xa, dtype=np.float64), np.array(Xb, dtype=np.float64)
    for X, ch in ((Xa, ch_a), (Xb, ch_b)):
        if len(shared) < len(ch):  # the reference over the shared channels, not the dataset's own montage
            reference_windows(X, reference)
    fk = feature_kwargs or {}
    Fa, _ = handcrafted_features(Xa, sfreq, shared, family=family, **fk)
    Fb, _ = handcrafted_features(Xb, sfreq, shared, family=family, **fk)
    return dataset_identity_probe(Fa, units_a, Fb, units_b, names=names, **kwargs)
