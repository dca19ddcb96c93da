"""Label-permutation control (paper 001 §3.6 "Label dependence", §4.2.3, Control 3).

The labels are permuted and the *whole* probe pipeline (scaler, in-fold PCA, classifier) is refitted inside
each of the fixed folds (the label-free scaler and PCA are fitted once per fold and reused, which yields the
same predictions as refitting them; see ``reuse_unsupervised``); the observed statistic is compared with the permutation null by

    p = (1 + #{null ≥ observed}) / (N + 1).

Permutation schemes (chosen to keep the label structure the task has):

* ``within_subject`` — labels shuffled among the windows of each subject (CHB-MIT: every subject contributes
  both classes). Requires every subject to hold at least two classes.
* ``subject_label`` — one label per subject, permuted across subjects and broadcast to that subject's
  windows (ds004504: diagnosis per participant). Requires the label to be constant within every subject.
  With one row per subject (subject-mean vectors) it is the ordinary unit-label permutation.
* ``window`` — a free shuffle of all windows, ignoring subjects. Not used by the paper; only for data without
  subject structure. Never chosen by ``scheme="auto"``.

``scheme="auto"`` picks ``within_subject`` or ``subject_label`` from the labels and raises when neither fits.

Draws the statistic cannot be computed on. A ``subject_label`` permutation over few subjects
can leave a training fold without a class (no probe can be fitted) or, for ``statistic="mean_fold"``, a test fold
with one class (AUROC undefined): ≈ 50 % of draws at ds004504 AD-vs-FTD sizes. Such a draw is redrawn (a
*restricted* permutation test: the null is the permutation distribution conditional on every fold being
evaluable, a set that contains the observed labelling, so the p-value stays valid), and the number of redraws is
counted in the result and the report. ``statistic="pooled"`` (the pooled out-of-fold value) needs only the training
folds to hold every class.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from eegfm_bench.controls.probes import (ProbeSpec, aggregate_proba, check_folds, encode_labels,
                                         fit_predict_folds, fit_unsupervised_steps)
from eegfm_bench.stats import weighted_metric

SCHEMES = ("within_subject", "subject_label", "window")


def _classes_per_group(y: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids, inv = np.unique(groups, return_inverse=True)
    pairs = np.unique(np.stack([inv, np.unique(y, return_inverse=True)[1]], 1), axis=0)
    return ids, np.bincount(pairs[:, 0], minlength=ids.size)


def infer_scheme(y: Sequence, groups: Sequence) -> str:
    """The permutation scheme the labels admit (paper 001 §3.6).

    Parameters
    ----------
    y : sequence, shape (n_windows,)
        Labels.
    groups : sequence, shape (n_windows,)
        Subject per window.

    Returns
    -------
    str
        ``"within_subject"`` if every subject holds ≥ 2 classes, ``"subject_label"`` if every subject holds
        exactly one.

    Raises
    ------
    ValueError
        If some subjects hold one class and others several (neither scheme preserves the label structure).
    """
    y, g = np.asarray(y), np.asarray(groups)
    ids, n_cls = _classes_per_group(y, g)
    if np.all(n_cls >= 2):
        return "within_subject"
    if np.all(n_cls == 1):
        return "subject_label"
    raise ValueError(f"{int((n_cls == 1).sum())} subjects hold one class (e.g. {ids[n_cls == 1][:3].tolist()}) and "
                     f"{int((n_cls >= 2).sum())} hold several (e.g. {ids[n_cls >= 2][:3].tolist()}): neither "
                     "'within_subject' nor 'subject_label' preserves this label structure; fix: check the labels, "
                     "restrict to one kind of subject, or pass scheme='window' knowingly (free shuffle)")


def check_scheme(y: Sequence, groups: Sequence | None, scheme: str) -> None:
    """Raise if ``scheme`` does not fit the labels, naming the scheme that does.

    Raises
    ------
    ValueError
        ``within_subject`` with subjects holding one class; ``subject_label`` with subjects holding several;
        an unknown scheme; a subject scheme without ``groups``.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown permutation scheme {scheme!r}; fix: one of {SCHEMES} or 'auto'")
    if scheme == "window":
        return
    if groups is None:
        raise ValueError(f"scheme {scheme!r} needs the subject of every window; fix: pass groups=")
    y, g = np.asarray(y), np.asarray(groups)
    ids, n_cls = _classes_per_group(y, g)
    if scheme == "within_subject" and np.any(n_cls < 2):
        single = ids[n_cls < 2]
        hint = ("the label is per subject: use scheme='subject_label' (one label per participant, broadcast to its "
                "windows)" if np.all(n_cls == 1) else "neither subject scheme fits (mixed); see infer_scheme")
        raise ValueError(f"within-subject shuffling needs both classes in every subject, but {single.size} subjects "
                         f"have one class (e.g. {single[:5].tolist()}), whose labels it would leave unchanged; "
                         f"fix: {hint}")
    if scheme == "subject_label" and np.any(n_cls > 1):
        multi = ids[n_cls > 1]
        hint = ("every subject holds several classes: use scheme='within_subject'" if np.all(n_cls > 1)
                else "neither subject scheme fits (mixed); see infer_scheme")
        raise ValueError(f"subject-label permutation needs one label per subject, but {multi.size} subjects carry "
                         f"several (e.g. {multi[:5].tolist()}); fix: {hint}")


def permute_labels(y: Sequence, groups: Sequence | None, scheme: str, rng: np.random.Generator) -> np.ndarray:
    """One permutation of ``y`` under ``scheme`` (see the module docstring).

    Parameters
    ----------
    y : sequence, shape (n_windows,)
    groups : sequence, shape (n_windows,), optional
        Subject per window (not needed for ``window``).
    scheme : {"within_subject", "subject_label", "window"}
    rng : numpy.random.Generator

    Returns
    -------
    ndarray, shape (n_windows,)
        Permuted labels.

    Raises
    ------
    ValueError
        As :func:`check_scheme`.
    """
    y = np.asarray(y)
    check_scheme(y, groups, scheme)
    if scheme == "window":
        return y[rng.permutation(y.size)]
    g = np.asarray(groups)
    out = y.copy()
    ids, inv = np.unique(g, return_inverse=True)
    if scheme == "within_subject":
        order = np.argsort(inv, kind="stable")
        bounds = np.flatnonzero(np.diff(inv[order])) + 1
        for idx in np.split(order, bounds):
            out[idx] = y[idx[rng.permutation(idx.size)]]
        return out
    first = np.zeros(ids.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(y.size)[::-1]  # first row of each subject
    subj_label = y[first]
    return subj_label[rng.permutation(ids.size)][inv]


def permutation_p_value(observed: float, null: Sequence[float]) -> float:
    """``(1 + #{null ≥ observed}) / (N + 1)`` (paper 001 §4.2.3); 100 permutations give p ≥ 0.0099.

    Raises
    ------
    ValueError
        If ``null`` is empty or holds NaN.
    """
    null = np.asarray(null, dtype=float)
    if null.size == 0 or np.isnan(null).any() or np.isnan(observed):
        raise ValueError("permutation p-value needs a non-empty null and an observed value without NaN")
    return float((1 + np.sum(null >= observed)) / (null.size + 1))


@dataclass
class PermutationResult:
    """Observed statistic, permutation null and p-value of one Control-3 analysis."""

    observed: float
    null: np.ndarray
    p_value: float
    scheme: str
    metric: str
    level: str
    statistic: str
    n_permutations: int
    seed: int
    n_redrawn: int = 0

    @property
    def null_mean(self) -> float:
        return float(np.mean(self.null))

    @property
    def null_sd(self) -> float:
        return float(np.std(self.null, ddof=1)) if self.null.size > 1 else float("nan")

    def to_dict(self) -> dict:
        """JSON-ready summary (the null as a list)."""
        out = asdict(self)
        out["null"] = self.null.tolist()
        out.update(null_mean=self.null_mean, null_sd=self.null_sd)
        return out


def _score(y_idx, proba, units, metric, n_classes):
    """Metric on one set of rows (unit means when ``units`` is given), NaN when undefined.

    Uses :func:`eegfm_bench.stats.weighted_metric` with unit weights (equal to scikit-learn's
    ``roc_auc_score`` / ``balanced_accuracy_score``, checked in the tests) to avoid scikit-learn's
    per-call validation cost over thousands of refits."""
    if units is not None:
        proba, y_idx, _ = aggregate_proba(proba, y_idx, units)
    if metric == "auroc" and np.unique(y_idx).size < n_classes:
        return float("nan")
    return float(weighted_metric(metric, y_idx, proba, np.ones(y_idx.size))[0])


def _statistic(y_idx, proba, folds, units, level, metric, statistic, n_classes, ks):
    if statistic == "pooled":
        rows = np.concatenate([te for _, te in folds])
        return _score(y_idx[rows], proba[rows], None if units is None else units[rows], metric, n_classes)
    v = np.array([_score(y_idx[te], proba[te], None if units is None else units[te], metric, n_classes)
                  for _, te in folds])
    if np.isnan(v).any():
        raise ValueError(f"{metric} is undefined in {int(np.isnan(v).sum())} folds at the {level} level (test fold "
                         "lacks a class, e.g. LOSO with per-subject labels); fix: statistic='pooled'")
    return float(v.mean())


def evaluable(y_idx: np.ndarray, folds, n_classes: int, statistic: str, units: np.ndarray | None = None) -> bool:
    """Whether a labelling can be scored: every training fold holds every class and, for ``mean_fold``, every test
    fold at least two (at the unit level when ``units`` is given)."""
    for tr, te in folds:
        if np.unique(y_idx[tr]).size < n_classes:
            return False
        if statistic == "mean_fold" and np.unique(y_idx[te]).size < 2:  # (a unit's label is its windows')
            return False
    return True


MAX_REDRAWS = 1000
"""Draws tried per permutation before giving up (a scheme whose evaluable draws are that rare is refused)."""


def permutation_test(X: np.ndarray, y: Sequence, folds, *, groups: Sequence | None, scheme: str = "auto",
                     n_permutations: int = 100, metric: str = "auroc", level: str = "window",
                     aggregate_by: Sequence | None = None, statistic: str = "mean_fold",
                     spec: ProbeSpec | None = None, seed: int = 0, progress: bool = True,
                     reuse_unsupervised: bool = True, **spec_kwargs) -> PermutationResult:
    """Label-permutation test with the whole probe refitted inside each fixed fold (paper 001 §4.2.3).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_features)
        Features or embeddings (one row per subject for subject-mean analyses).
    y : sequence, shape (n_windows,)
        Observed labels.
    folds : sequence of (train_idx, test_idx)
        The fixed folds of the observed analysis, reused for every permutation.
    groups : sequence, shape (n_windows,) or None
        Subject per window (None only with ``scheme="window"``).
    scheme : {"auto", "within_subject", "subject_label", "window"}
        See the module docstring.
    n_permutations : int
        N (default 100, as in the paper).
    metric : {"auroc", "balanced_accuracy"}
    level : str
        ``"window"`` or the name of the ``aggregate_by`` level (mean probability per unit).
    aggregate_by : sequence, shape (n_windows,), optional
        Unit per window when ``level`` is not ``"window"``.
    statistic : {"mean_fold", "pooled"}
        Mean of per-fold values (the paper's) or the pooled out-of-fold value (needed when test folds hold
        one class, e.g. LOSO with per-subject labels).
    spec : ProbeSpec, optional
        The observed analysis's probe (or pass its fields as keywords).
    seed : int
        Seed of the permutation generator.
    progress : bool
        tqdm progress bar over permutations.
    reuse_unsupervised : bool
        Fit the label-free steps (scaler, in-fold PCA) once per fold and refit only the classifier per
        permutation. Identical predictions to refitting the whole pipeline, since those steps never see the
        labels (:func:`~eegfm_bench.controls.probes.fit_unsupervised_steps`); False refits everything.

    Returns
    -------
    PermutationResult

    Raises
    ------
    ValueError
        If the scheme does not fit the labels (naming the one that does), folds are invalid or leak subjects,
        a permutation leaves a training fold without a class, or the statistic is undefined.
    """
    if metric not in ("auroc", "balanced_accuracy"):
        raise ValueError(f"metric {metric!r}; fix: 'auroc' or 'balanced_accuracy'")
    if statistic not in ("mean_fold", "pooled"):
        raise ValueError(f"statistic {statistic!r}; fix: 'mean_fold' or 'pooled'")
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_windows, n_features), got {X.shape}")
    y = np.asarray(y)
    if scheme == "auto":
        if groups is None:
            raise ValueError("scheme='auto' needs groups (subject per window); fix: pass groups= or scheme='window'")
        scheme = infer_scheme(y, groups)
    check_scheme(y, groups, scheme)
    units = None
    if level != "window":
        if aggregate_by is None:
            raise ValueError(f"level {level!r} needs aggregate_by (unit per window)")
        units = np.asarray(aggregate_by)
    spec = spec if spec is not None else ProbeSpec(**spec_kwargs)
    folds = check_folds(folds, X.shape[0], groups)
    y_idx, classes = encode_labels(y)
    nc = classes.size

    pre = fit_unsupervised_steps(X, folds, spec) if reuse_unsupervised else None
    proba, ks = fit_predict_folds(X, y_idx, folds, spec, nc, pre)
    observed = _statistic(y_idx, proba, folds, units, level, metric, statistic, nc, ks)
    rng = np.random.default_rng(seed)
    null = np.empty(n_permutations)
    redrawn = 0
    for i in tqdm(range(n_permutations), desc=f"label permutation ({scheme})", disable=not progress):
        for _ in range(MAX_REDRAWS):
            yp = permute_labels(y_idx, groups, scheme, rng)
            if evaluable(yp, folds, nc, statistic, units):
                break
            redrawn += 1
        else:
            raise ValueError(f"permutation {i}: {MAX_REDRAWS} draws in a row left a fold that cannot be scored (a "
                             f"training fold without a class{' or a one-class test fold' if statistic == 'mean_fold' else ''}"
                             "); fix: fewer folds, statistic='pooled', or another scheme")
        proba, ks = fit_predict_folds(X, yp, folds, spec, nc, pre)
        null[i] = _statistic(yp, proba, folds, units, level, metric, statistic, nc, ks)
    return PermutationResult(observed, null, permutation_p_value(observed, null), scheme, metric, level, statistic,
                             n_permutations, seed, redrawn)
