"""Recover: linear provenance information (LPI) of frozen embeddings (paper 000 §3.1, App. C).

LPI is the held-out log-score gain, in bits per native unit (window, or view in a paired design), of a
calibrated linear provenance probe over the training-prevalence baseline:

    LPI = mean_i [ log2 q(p_i | z_i) − log2 π_train(p_i) ]

where ``q`` is a multinomial logistic regression fitted on training embeddings only, its inverse regularisation
``C`` selected on validation log-loss and its probabilities temperature-scaled on validation. It measures how
*accessible* provenance is to this probe family, not whether any task head *uses* it; zero or negative values
mean this probe did not beat the baseline on the evaluated support. Uncertainty is reported twice: an
identity-aware interval resampling whole subjects, and the naive interval resampling units as if independent.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from eegfm_bench.stats import cluster_bootstrap

__all__ = ["LPIResult", "fit_provenance_probe", "linear_provenance_information"]

#: Probabilities are floored here before log2 so one underflowed probability cannot make LPI −inf.
PROBA_FLOOR = 1e-15


@dataclass
class LPIResult:
    """Recover output (paper 000 §3.1).

    Attributes
    ----------
    lpi_bits : float
        Held-out log-score gain over the training-prevalence baseline, bits per ``unit``.
    low, high : float
        Identity-aware (subject-cluster) percentile bootstrap interval, bits per ``unit``.
    naive_low, naive_high : float
        Interval resampling units independently (what trial-level resampling would report).
    level : float
        Coverage of both intervals.
    baseline_bits : float
        Mean held-out log-loss of the training-prevalence baseline, bits per ``unit`` (log2 K for balanced views).
    probe_bits : float
        Mean held-out log-loss of the calibrated probe, bits per ``unit`` (``baseline_bits − lpi_bits``).
    probe_accuracy, chance_accuracy : float
        Held-out accuracy of the calibrated probe, and of always predicting the largest training group.
    C : float
        Inverse L2 strength selected on validation.
    n_test, n_clusters, n_boot : int
    classes : list
        Provenance groups, in the probe's column order.
    unit : str
        Native unit the bits are counted in ("view" or "window").
    """

    lpi_bits: float
    low: float
    high: float
    naive_low: float
    naive_high: float
    level: float
    baseline_bits: float
    probe_bits: float
    probe_accuracy: float
    chance_accuracy: float
    C: float
    n_test: int
    n_clusters: int
    n_boot: int
    classes: list
    unit: str

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        out = asdict(self)
        out["classes"] = [str(c) for c in self.classes]
        out["width_ratio"] = ((self.high - self.low) / (self.naive_high - self.naive_low)
                              if self.naive_high > self.naive_low else float("nan"))
        return out


def fit_provenance_probe(z_train: np.ndarray, p_train: np.ndarray, z_val: np.ndarray, p_val: np.ndarray,
                         Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0), seed: int = 0):
    """Fit the calibrated linear provenance probe of LPI.

    Parameters
    ----------
    z_train : ndarray, shape (n_train, d)
        Training embeddings (the only data the probe's weights see).
    p_train : array-like, shape (n_train,)
        Provenance group per training row.
    z_val : ndarray, shape (n_val, d)
        Validation embeddings: select ``C`` by log-loss, then fit the temperature.
    p_val : array-like, shape (n_val,)
    Cs : sequence of float
        Candidate inverse L2 strengths (ties go to the first, i.e. strongest regularisation if ascending).
    seed : int

    Returns
    -------
    calibrated : CalibratedClassifierCV
        Temperature-scaled probe wrapping the frozen ``StandardScaler → LogisticRegression`` pipeline.
    C : float
        The selected ``C``.

    Raises
    ------
    ValueError
        If training holds a single provenance group, or validation holds a group training lacks.

    References
    ----------
    Paper 000 §3.1 and App. J.2: train-only fitting, validation selection and calibration.
    """
    p_train = np.asarray(p_train)
    p_val = np.asarray(p_val)
    groups = np.unique(p_train)
    if groups.size < 2:
        raise ValueError(f"provenance has a single group {groups.tolist()} in training; LPI needs at least two; "
                         "fix: pool recordings of at least two provenance groups into the training split")
    unseen = sorted(set(np.unique(p_val).tolist()) - set(groups.tolist()))
    if unseen:
        raise ValueError(f"validation provenance groups {unseen} are absent from training; "
                         "fix: stratify the split so every provenance group occurs in training")
    if not Cs:
        raise ValueError("Cs is empty; fix: pass candidate C values, e.g. (0.01, 0.1, 1, 10)")
    best, best_loss, best_C = None, np.inf, None
    for C in Cs:
        model = make_pipeline(StandardScaler(), LogisticRegression(C=float(C), max_iter=2000, random_state=seed))
        model.fit(z_train, p_train)
        loss = log_loss(p_val, model.predict_proba(z_val), labels=model.classes_)
        if loss < best_loss - 1e-12:
            best, best_loss, best_C = model, loss, float(C)
    calibrated = CalibratedClassifierCV(FrozenEstimator(best), method="temperature").fit(z_val, p_val)
    return calibrated, best_C


def linear_provenance_information(z_train: np.ndarray, p_train, z_val: np.ndarray, p_val, z_test: np.ndarray,
                                  p_test, clusters_test, *, Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0),
                                  n_boot: int = 1000, level: float = 0.95, seed: int = 0,
                                  unit: str = "window") -> LPIResult:
    """Linear provenance information (LPI) with identity-aware and naive bootstrap intervals.

    Parameters
    ----------
    z_train, z_val, z_test : ndarray, shape (n_split, d)
        Embeddings of the identity-disjoint splits (one row per native unit).
    p_train, p_val, p_test : array-like, shape (n_split,)
        Provenance group per row.
    clusters_test : array-like, shape (n_test,)
        Identity (subject) per test row; the identity-aware interval resamples these whole.
    Cs : sequence of float
        Candidate ``C`` for :func:`fit_provenance_probe`.
    n_boot : int
        Bootstrap replicates for each interval.
    level : float
        Interval coverage.
    seed : int
    unit : str
        Name of the native unit for reporting ("view" in a paired design).

    Returns
    -------
    LPIResult
        LPI in bits per ``unit``.

    Raises
    ------
    ValueError
        If a test group is absent from training (its baseline and probe probability are undefined), or from
        :func:`fit_provenance_probe` / :func:`eegfm_bench.stats.cluster_bootstrap` (fewer than two subjects).

    References
    ----------
    Paper 000 §3.1 (LPI, predictive V-information), App. C (identity-aware intervals; 14–31× wider on ERP).
    """
    p_train = np.asarray(p_train)
    p_test = np.asarray(p_test)
    clusters_test = np.asarray(clusters_test)
    groups, counts = np.unique(p_train, return_counts=True)
    unseen = sorted(set(np.unique(p_test).tolist()) - set(groups.tolist()))
    if unseen:
        raise ValueError(f"test provenance groups {unseen} are absent from training; "
                         "fix: every provenance group must occur in the training split")
    probe, C = fit_provenance_probe(z_train, p_train, z_val, p_val, Cs=Cs, seed=seed)
    proba = probe.predict_proba(z_test)
    col = {c: j for j, c in enumerate(probe.classes_.tolist())}
    j = np.array([col[v] for v in p_test.tolist()])
    prior = dict(zip(groups.tolist(), (counts / counts.sum()).tolist()))
    q = np.maximum(proba[np.arange(p_test.size), j], PROBA_FLOOR)
    base = np.array([prior[v] for v in p_test.tolist()])
    gain = np.log2(q) - np.log2(base)
    stat = lambda idx: float(gain[idx].mean())  # noqa: E731
    ci = cluster_bootstrap(stat, clusters_test, n_boot=n_boot, level=level, seed=seed)
    naive = cluster_bootstrap(stat, np.arange(p_test.size), n_boot=n_boot, level=level, seed=seed)
    pred = probe.classes_[proba.argmax(axis=1)]
    return LPIResult(
        lpi_bits=ci.estimate, low=ci.low, high=ci.high, naive_low=naive.low, naive_high=naive.high, level=level,
        baseline_bits=float(-np.log2(base).mean()), probe_bits=float(-np.log2(q).mean()),
        probe_accuracy=float(np.mean(pred == p_test)), chance_accuracy=float(counts.max() / counts.sum()),
        C=C, n_test=int(p_test.size), n_clusters=ci.n_clusters, n_boot=n_boot,
        classes=probe.classes_.tolist(), unit=unit)
