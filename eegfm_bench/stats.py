"""Paired statistics shared by the sweeps, the negative controls and the provenance audit.

* :func:`paired_deltas` — per-fold differences from the clean condition in percentage points
  (paper 003, App. H, Tables 10–17).
* :func:`wilcoxon_holm` — two-sided Wilcoxon signed-rank of each model against a reference model across
  folds, Holm-corrected across models (paper 003, Tables 10–17: the ∗/∇ marks).
* :func:`cluster_bootstrap` — percentile bootstrap that resamples whole clusters (subjects, records) with
  replacement (paper 001 §4.6; paper 000 App. C "identity-aware" intervals).
* :func:`paired_cluster_bootstrap` — model-minus-comparator metric difference on the same resampled
  subjects, within fixed folds (mean-fold target), across LOSO folds, or pooled (paper 001 §4.2.2, §4.6);
  scored from multiplicity weights (:func:`weighted_auroc`, :func:`weighted_metric`).
* :func:`paired_wilcoxon` — Wilcoxon signed-rank across folds with the paired d (paper 001 §4.6).
* :func:`sign_flip_test` — conditional exact/Monte-Carlo sign-flip test of a mean paired difference
  (paper 001 §4.2.1, §4.6).
* :func:`leave_one_cluster_out` — whether a verdict flips when any one subject is left out of its evidence.
* :func:`min_detectable_delta` — the smallest paired difference a design's subject count can detect.

Everything here works on plain numpy / pandas objects; nothing re-runs a model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as _st
from statsmodels.stats.multitest import multipletests


def paired_deltas(df: pd.DataFrame, *, clean: str = "clean", by: Sequence[str] = ("model", "fold"),
                  condition_col: str = "condition", value_col: str = "value") -> pd.DataFrame:
    """Per-fold paired change from the clean condition, in percentage points.

    Parameters
    ----------
    df : DataFrame
        Long result rows for one metric (e.g. balanced accuracy in [0, 1]) with columns ``by``,
        ``condition_col`` and ``value_col``.
    clean : str
        Name of the unperturbed condition.

    Returns
    -------
    DataFrame
        Rows of every non-clean condition with an added ``delta_pp`` = 100·(value − clean value of the same
        ``by`` group).

    Raises
    ------
    ValueError
        If some group has no clean row (the delta would be undefined).
    """
    by = list(by)
    base = df[df[condition_col] == clean].set_index(by)[value_col]
    if base.index.has_duplicates:
        raise ValueError(f"more than one {clean!r} row per {by}; filter to one metric/head/regime first")
    out = df[df[condition_col] != clean].copy()
    keys = pd.MultiIndex.from_frame(out[by]) if len(by) > 1 else pd.Index(out[by[0]])
    missing = ~keys.isin(base.index)
    if missing.any():
        raise ValueError(f"no {clean!r} row for groups {sorted(set(map(tuple, out.loc[missing, by].values)))[:5]}; "
                         "fix: run the clean condition for every fold before computing deltas")
    out["delta_pp"] = 100.0 * (out[value_col].to_numpy() - base.reindex(keys).to_numpy())
    return out


@dataclass
class WilcoxonResult:
    """One model-vs-reference comparison across folds."""

    model: str
    reference: str
    n_folds: int
    median_diff: float
    statistic: float
    p_value: float
    p_holm: float
    mark: str  # "∗" model significantly better, "∇" significantly worse, "" otherwise


def wilcoxon_holm(per_fold: dict[str, Sequence[float]], reference: str, alpha: float = 0.05) -> list[WilcoxonResult]:
    """Two-sided Wilcoxon signed-rank test of every model against ``reference`` across folds, Holm-corrected.

    Parameters
    ----------
    per_fold : dict
        ``model -> values`` aligned by fold (same fold order for every model), e.g. per-fold deltas in pp.
    reference : str
        Reference model (paper 003 uses EEGNet).
    alpha : float
        Family-wise error level for the marks.

    Returns
    -------
    list of WilcoxonResult
        One per non-reference model; ``mark`` is "∗" (better than reference) or "∇" (worse) when the
        Holm-adjusted p < alpha.

    Raises
    ------
    KeyError
        If ``reference`` is not in ``per_fold``.
    ValueError
        If a model has a different number of folds from the reference.
    """
    if reference not in per_fold:
        raise KeyError(f"reference model {reference!r} not among {sorted(per_fold)}; fix: set reference to one of them")
    ref = np.asarray(per_fold[reference], dtype=float)
    rows, pvals = [], []
    for model, vals in per_fold.items():
        if model == reference:
            continue
        v = np.asarray(vals, dtype=float)
        if v.shape != ref.shape:
            raise ValueError(f"{model}: {v.size} folds vs {ref.size} for {reference}; pair the same folds")
        d = v - ref
        if np.allclose(d, 0):
            stat, p = 0.0, 1.0
        else:
            res = _st.wilcoxon(v, ref, alternative="two-sided", zero_method="wilcox")
            stat, p = float(res.statistic), float(res.pvalue)
        rows.append([model, d]); pvals.append(p)
    if not rows:
        return []
    p_holm = multipletests(pvals, alpha=alpha, method="holm")[1]
    out = []
    for (model, d), p, ph in zip(rows, pvals, p_holm):
        med = float(np.median(d))
        mark = ("∗" if med > 0 else "∇") if ph < alpha else ""
        out.append(WilcoxonResult(model, reference, int(d.size), med, float("nan") if p == 1.0 and np.allclose(d, 0) else stat,
                                  p, float(ph), mark))
    return out


@dataclass
class BootstrapCI:
    """A point estimate with a percentile bootstrap interval."""

    estimate: float
    low: float
    high: float
    level: float
    n_boot: int
    n_clusters: int
    samples: np.ndarray

    def excludes_zero(self) -> bool:
        """True when the interval lies entirely above or below 0."""
        return bool(self.low > 0 or self.high < 0)


def cluster_bootstrap(statistic: Callable[[np.ndarray], float], clusters: Sequence, *, n_boot: int = 1000,
                      level: float = 0.95, seed: int = 0, min_clusters: int = 2) -> BootstrapCI:
    """Percentile bootstrap resampling whole clusters with replacement.

    Parameters
    ----------
    statistic : callable
        ``statistic(idx) -> float`` evaluated on integer row indices ``idx`` (rows of the caller's arrays);
        it is called once on all rows for the estimate and once per bootstrap replicate on the rows of the
        resampled clusters (a cluster drawn twice contributes its rows twice).
    clusters : sequence, shape (n_rows,)
        Cluster label per row (subject, record, participant).
    n_boot : int
        Number of replicates.
    level : float
        Two-sided coverage of the interval.
    min_clusters : int
        Fewer distinct clusters raise.

    Returns
    -------
    BootstrapCI

    Raises
    ------
    ValueError
        If there are fewer than ``min_clusters`` clusters (the interval would be meaningless).
    """
    clusters = np.asarray(clusters)
    uniq, inv = np.unique(clusters, return_inverse=True)
    if uniq.size < min_clusters:
        raise ValueError(f"cluster bootstrap needs at least {min_clusters} clusters, got {uniq.size}; "
                         "fix: evaluate on more subjects/records or use fewer, larger folds")
    members = [np.flatnonzero(inv == k) for k in range(uniq.size)]
    rng = np.random.default_rng(seed)
    est = float(statistic(np.arange(clusters.size)))
    samples = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, uniq.size, uniq.size)
        samples[b] = statistic(np.concatenate([members[k] for k in pick]))
    a = (1 - level) / 2
    lo, hi = np.nanquantile(samples, [a, 1 - a])
    return BootstrapCI(est, float(lo), float(hi), level, n_boot, int(uniq.size), samples)


# ------------------------------------------------------------------------------------------------------------------
# Paired model-vs-comparator uncertainty (paper 001 §4.2.1, §4.2.2, §4.6)
# ------------------------------------------------------------------------------------------------------------------
def weighted_auroc(positive: np.ndarray, score: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC with per-row weights, vectorised over weight vectors (ties count one half).

    With integer weights it equals :func:`sklearn.metrics.roc_auc_score` on the rows repeated that many
    times, so a bootstrap replicate can be scored from its multiplicity counts without copying rows.

    Parameters
    ----------
    positive : ndarray of bool, shape (n,)
        True for the positive class.
    score : ndarray, shape (n,)
        Higher means more positive.
    weights : ndarray, shape (n,) or (n_rep, n)
        Non-negative row weights, one row per replicate.

    Returns
    -------
    ndarray, shape (n_rep,)
        AUROC per replicate; NaN where a class has zero total weight.
    """
    positive = np.asarray(positive, dtype=bool)
    W = np.atleast_2d(np.asarray(weights, dtype=float))
    uniq, g = np.unique(np.asarray(score), return_inverse=True)
    M = sparse.csr_matrix((np.ones(g.size), (g, np.arange(g.size))), shape=(uniq.size, g.size))
    Wp = np.asarray(M @ (W * positive).T).T  # (n_rep, n_groups), groups in ascending score
    Wn = np.asarray(M @ (W * ~positive).T).T
    below = np.cumsum(Wn, axis=1) - Wn
    num = np.sum(Wp * (below + 0.5 * Wn), axis=1)
    den = Wp.sum(1) * Wn.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def weighted_metric(metric: str, y_idx: np.ndarray, proba: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Balanced accuracy or AUROC under row weights, vectorised over replicates.

    Parameters
    ----------
    metric : {"auroc", "balanced_accuracy"}
        AUROC: binary on ``proba[:, 1]``, multi-class one-vs-rest macro (as the probes report it).
        Balanced accuracy: mean recall of the argmax over classes with positive weight.
    y_idx : ndarray of int, shape (n,)
        Class indices 0..n_classes-1.
    proba : ndarray, shape (n, n_classes)
    weights : ndarray, shape (n,) or (n_rep, n)

    Returns
    -------
    ndarray, shape (n_rep,)
        NaN where the metric is undefined (AUROC with a class of zero weight).

    Raises
    ------
    ValueError
        For an unknown metric.
    """
    W = np.atleast_2d(np.asarray(weights, dtype=float))
    k = proba.shape[1]
    if metric == "auroc":
        if k == 2:
            return weighted_auroc(y_idx == 1, proba[:, 1], W)
        per = np.stack([weighted_auroc(y_idx == c, proba[:, c], W) for c in range(k)], axis=1)
        return per.mean(1)
    if metric == "balanced_accuracy":
        correct = proba.argmax(1) == y_idx
        onehot = (y_idx[:, None] == np.arange(k)[None, :]).astype(float)
        den = W @ onehot
        num = W @ (onehot * correct[:, None])
        with np.errstate(invalid="ignore", divide="ignore"):
            rec = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        return np.nanmean(rec, axis=1)
    raise ValueError(f"unknown metric {metric!r}; fix: 'auroc' or 'balanced_accuracy'")


@dataclass
class PairedBootstrapCI(BootstrapCI):
    """A paired difference (model A minus comparator B) with its cluster-bootstrap interval.

    ``estimate``, ``low``, ``high`` and ``samples`` are in the metric's units (AUROC in [0, 1]); multiply by
    100 for percentage points. ``mode`` says what was resampled: ``within_fold`` (clusters inside each fixed
    test fold, mean-fold target), ``between_fold`` (held-out folds, each a single subject, e.g. LOSO) or
    ``pooled`` (clusters across the pooled out-of-fold rows).
    """

    estimate_a: float = float("nan")
    estimate_b: float = float("nan")
    mode: str = ""
    target: str = ""
    metric: str = ""
    stratified: bool = False
    n_invalid: int = 0

    def to_dict(self) -> dict:
        """JSON-ready summary without the replicate samples."""
        return {k: getattr(self, k) for k in ("estimate", "low", "high", "level", "n_boot", "n_clusters",
                                               "estimate_a", "estimate_b", "mode", "target", "metric",
                                               "stratified", "n_invalid")}


def _as_proba(p, n_classes: int, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    if p.ndim == 1:
        if n_classes != 2:
            raise ValueError(f"{name} is 1-D but there are {n_classes} classes; fix: pass (n, n_classes) probabilities")
        p = np.stack([1 - p, p], axis=1)
    if p.shape[1] != n_classes:
        raise ValueError(f"{name} has {p.shape[1]} columns for {n_classes} classes")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name} holds NaN/inf (rows outside every test fold?); fix: pass out-of-fold rows only")
    return p


def _resample_weights(rng, cl_inv, n_cl, strata, n_boot):
    """(n_boot, n_rows) multiplicity weights from resampling clusters (within each stratum)."""
    counts = np.zeros((n_boot, n_cl))
    for members in strata:
        m = members.size
        counts[:, members] = rng.multinomial(m, np.full(m, 1.0 / m), size=n_boot)
    return counts[:, cl_inv]


def paired_cluster_bootstrap(y: Sequence, proba_a: np.ndarray, proba_b: np.ndarray, clusters: Sequence,
                             fold_ids: Sequence | None = None, *, metric: str = "auroc", target: str = "mean_fold",
                             stratify: str | bool = "auto", n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                             min_clusters: int = 2, chunk: int = 250) -> PairedBootstrapCI:
    """Paired cluster bootstrap of a model-minus-comparator metric difference (paper 001 §4.2.2, §4.6).

    Both predictions are scored on the same resampled clusters (subjects or recordings) in every replicate,
    so the interval is paired; it is conditional on the fixed out-of-fold predictions (no refitting, no
    comparator-selection or seed variance — §4.6).

    * ``target="mean_fold"``: the difference of the mean-fold metrics. If every test fold holds at least
      ``min_clusters`` clusters, clusters are resampled *within* each fold (the REVE ds004504 interval); if every
      fold holds exactly one cluster (LOSO), the folds themselves are resampled (the CHB-MIT held-out-subject
      interval).
    * ``target="pooled"``: the difference of metrics on all out-of-fold rows pooled, clusters resampled across
      the data (the BIOT ds004504 intervals).

    Parameters
    ----------
    y : sequence, shape (n,)
        Labels.
    proba_a, proba_b : ndarray, shape (n,) or (n, n_classes)
        Out-of-fold probabilities of the model (A) and the comparator (B), rows aligned with ``y``
        (1-D: probability of the larger label of a binary task).
    clusters : sequence, shape (n,)
        Subject (or recording) per row.
    fold_ids : sequence, shape (n,), optional
        Test fold of each row (see :func:`fold_ids_from_folds`); required for ``mean_fold``.
    metric : {"auroc", "balanced_accuracy"}
    target : {"mean_fold", "pooled"}
    stratify : {"auto", True, False}
        Resample clusters within label strata, keeping each replicate's class balance; "auto" does so when
        every cluster carries one label (subject-level diagnoses), which keeps AUROC defined.
    n_boot : int
        Replicates.
    level : float
        Two-sided coverage.
    seed : int
    min_clusters : int
        Fewest clusters per fold (``within_fold``) or in total.
    chunk : int
        Replicates scored at once (memory ~ chunk × n × 8 bytes).

    Returns
    -------
    PairedBootstrapCI

    Raises
    ------
    ValueError
        Too few clusters for the bootstrap (naming the folds), folds mixing single- and multi-cluster test
        sets, a metric undefined on the observed data of a fold, stratification requested with mixed-label
        clusters, misaligned inputs, or more than 5 % of replicates with an undefined metric.
    """
    data = _PairedData.build(y, proba_a, proba_b, clusters, metric=metric, target=target, stratify=stratify)
    rng = np.random.default_rng(seed)
    if target == "pooled":
        ea, eb, samples, mode = _pooled_replicates(data, rng, n_boot=n_boot, min_clusters=min_clusters, chunk=chunk)
    else:
        ea, eb, samples, mode = _mean_fold_replicates(data, rng, fold_ids, n_boot=n_boot, min_clusters=min_clusters,
                                                      chunk=chunk)
    bad = np.isnan(samples)
    if bad.mean() > 0.05:
        raise ValueError(f"{int(bad.sum())} of {n_boot} replicates have an undefined {metric} (a resample without a "
                         "class); fix: stratify=True (one label per cluster) or target='pooled'")
    a = (1 - level) / 2
    lo, hi = np.quantile(samples[~bad], [a, 1 - a])
    return PairedBootstrapCI(ea - eb, float(lo), float(hi), level, n_boot, data.n_clusters, samples,
                             estimate_a=ea, estimate_b=eb, mode=mode, target=target, metric=metric,
                             stratified=bool(data.stratify), n_invalid=int(bad.sum()))


@dataclass
class _PairedData:
    """The two arms' probabilities, encoded labels and clusters of :func:`paired_cluster_bootstrap`, checked."""

    y_idx: np.ndarray
    A: np.ndarray
    B: np.ndarray
    cl_inv: np.ndarray
    cl_label: np.ndarray
    n_clusters: int
    n_classes: int
    metric: str
    stratify: bool

    @classmethod
    def build(cls, y, proba_a, proba_b, clusters, *, metric: str, target: str, stratify) -> "_PairedData":
        """Encode the labels and clusters and check the inputs align (errors as documented by the caller)."""
        y = np.asarray(y)
        classes, y_idx = np.unique(y, return_inverse=True)
        k = classes.size
        if k < 2:
            raise ValueError("paired bootstrap needs at least two classes in y")
        n = y.size
        A, B = _as_proba(proba_a, k, "proba_a"), _as_proba(proba_b, k, "proba_b")
        clusters = np.asarray(clusters)
        if A.shape[0] != n or B.shape[0] != n or clusters.shape[0] != n:
            raise ValueError(f"y ({n}), proba_a ({A.shape[0]}), proba_b ({B.shape[0]}) and clusters "
                             f"({clusters.shape[0]}) must align row by row")
        if target not in ("mean_fold", "pooled"):
            raise ValueError(f"target {target!r}; fix: 'mean_fold' or 'pooled'")
        cl_ids, cl_inv = np.unique(clusters, return_inverse=True)
        cl_label_n = np.bincount(np.unique(np.stack([cl_inv, y_idx], 1), axis=0)[:, 0], minlength=cl_ids.size)
        single_label = bool(np.all(cl_label_n == 1))
        if stratify == "auto":
            stratify = single_label
        if stratify and not single_label:
            raise ValueError("stratify=True needs one label per cluster; some clusters carry several; fix: "
                             "stratify=False")
        cl_label = np.zeros(cl_ids.size, dtype=np.int64)
        cl_label[cl_inv] = y_idx
        return cls(y_idx, A, B, cl_inv, cl_label, int(cl_ids.size), k, metric, stratify)

    def strata_of(self, cl_subset: np.ndarray) -> list[np.ndarray]:
        """The clusters resampled together: all of ``cl_subset``, or one group per label when stratified."""
        if not self.stratify:
            return [cl_subset]
        return [cl_subset[self.cl_label[cl_subset] == c] for c in range(self.n_classes)
                if np.any(self.cl_label[cl_subset] == c)]

    def diff_reps(self, rng, rows: np.ndarray, strata: list[np.ndarray], n_rep: int) -> np.ndarray:
        """``n_rep`` replicates of metric(A) − metric(B) on ``rows``, clusters resampled within ``strata``."""
        sub_inv = np.searchsorted(np.unique(self.cl_inv[rows]), self.cl_inv[rows])
        uniq_cl = np.unique(self.cl_inv[rows])
        local_strata = [np.searchsorted(uniq_cl, s) for s in strata]
        W = _resample_weights(rng, sub_inv, uniq_cl.size, local_strata, n_rep)
        ma = weighted_metric(self.metric, self.y_idx[rows], self.A[rows], W)
        mb = weighted_metric(self.metric, self.y_idx[rows], self.B[rows], W)
        return ma - mb

    def point(self, rows: np.ndarray) -> tuple[float, float]:
        """The observed metric of A and of B on ``rows``."""
        ones = np.ones(rows.size)
        return (float(weighted_metric(self.metric, self.y_idx[rows], self.A[rows], ones)[0]),
                float(weighted_metric(self.metric, self.y_idx[rows], self.B[rows], ones)[0]))


def _pooled_replicates(data: _PairedData, rng, *, n_boot: int, min_clusters: int, chunk: int):
    """The pooled target: clusters resampled across all rows. Returns ``(est_a, est_b, samples, "pooled")``."""
    if data.n_clusters < min_clusters:
        raise ValueError(f"cluster bootstrap needs at least {min_clusters} clusters, got {data.n_clusters}; "
                         "fix: evaluate on more subjects/recordings")
    rows = np.arange(data.y_idx.size)
    ea, eb = data.point(rows)
    strata = data.strata_of(np.arange(data.n_clusters))
    samples = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        samples[s:s + chunk] = data.diff_reps(rng, rows, strata, min(chunk, n_boot - s))
    return ea, eb, samples, "pooled"


def _mean_fold_replicates(data: _PairedData, rng, fold_ids, *, n_boot: int, min_clusters: int, chunk: int):
    """The mean-fold target: clusters resampled within each test fold (``within_fold``), or the folds themselves
    when each holds one cluster (``between_fold``). Returns ``(est_a, est_b, samples, mode)``."""
    n = data.y_idx.size
    if fold_ids is None:
        raise ValueError("target='mean_fold' needs fold_ids (test fold per row); fix: pass fold_ids= or "
                         "target='pooled'")
    fold_ids = np.asarray(fold_ids)
    if fold_ids.shape[0] != n:
        raise ValueError(f"fold_ids has {fold_ids.shape[0]} entries for {n} rows")
    folds = [np.flatnonzero(fold_ids == f) for f in np.unique(fold_ids)]
    n_cl = np.array([np.unique(data.cl_inv[r]).size for r in folds])
    if not (np.all(n_cl == 1) or np.all(n_cl >= min_clusters)):
        few = np.flatnonzero(n_cl < min_clusters).tolist()
        raise ValueError(f"too few subjects for a within-fold bootstrap: folds {few} hold fewer than "
                         f"{min_clusters} clusters (counts {n_cl.tolist()}); fix: use folds with at least "
                         f"{min_clusters} subjects each, LOSO (one subject per fold), or target='pooled'")
    pa, pb = zip(*(data.point(r) for r in folds))
    pa, pb = np.array(pa), np.array(pb)
    if np.isnan(pa).any() or np.isnan(pb).any():
        bad = np.flatnonzero(np.isnan(pa) | np.isnan(pb)).tolist()
        raise ValueError(f"{data.metric} is undefined in folds {bad} (test fold lacks a class); the mean-fold target "
                         "does not exist; fix: target='pooled'")
    ea, eb = float(pa.mean()), float(pb.mean())
    if np.all(n_cl == 1):
        if len(folds) < min_clusters:
            raise ValueError(f"held-out-subject bootstrap needs at least {min_clusters} folds, got {len(folds)}")
        counts = rng.multinomial(len(folds), np.full(len(folds), 1 / len(folds)), size=n_boot)
        return ea, eb, counts @ (pa - pb) / len(folds), "between_fold"
    samples = np.zeros(n_boot)
    for r in folds:
        strata = data.strata_of(np.unique(data.cl_inv[r]))
        for s in range(0, n_boot, chunk):
            samples[s:s + chunk] += data.diff_reps(rng, r, strata, min(chunk, n_boot - s))
    return ea, eb, samples / len(folds), "within_fold"


def fold_ids_from_folds(folds: Sequence[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Test-fold index of each of ``n`` rows; -1 for rows in no test fold.

    Raises
    ------
    ValueError
        If a row is in two test folds.
    """
    out = np.full(n, -1, dtype=np.int64)
    for k, (_, te) in enumerate(folds):
        te = np.asarray(te)
        if np.any(out[te] >= 0):
            raise ValueError(f"fold {k} re-tests rows of an earlier fold; pass one CV repeat at a time")
        out[te] = k
    return out


@dataclass
class ClusterStability:
    """Whether a verdict survives leaving out any one cluster (subject) of its evidence.

    Attributes
    ----------
    verdict : str
        The verdict on all clusters.
    flips : dict
        Cluster → the verdict without it, for every cluster whose removal changes the verdict (sorted by cluster).
    undecided : dict
        Cluster → why no verdict exists without it (e.g. a fold left without a class); such a cluster is not a flip.
    n_clusters : int
    """

    verdict: str
    flips: dict
    undecided: dict
    n_clusters: int

    @property
    def rests_on_one(self) -> bool:
        """True when leaving out some single cluster flips the verdict."""
        return bool(self.flips)

    def mark(self) -> str:
        """The short mark of the tables: ``rests on one subject (S004 → partly)`` or ``""`` when stable."""
        if not self.flips:
            return ""
        return "rests on one subject (" + "; ".join(f"{k} → {v}" for k, v in self.flips.items()) + ")"


def leave_one_cluster_out(verdict: Callable[[np.ndarray], str], clusters: Sequence) -> ClusterStability:
    """Leave-one-subject-out stability of a verdict computed from fixed predictions (no refitting).

    The verdict is recomputed once on all rows and once without each cluster's rows in turn; a cluster whose
    removal changes it is a *flip*: the verdict rests on that one cluster.

    Parameters
    ----------
    verdict : callable
        ``verdict(rows) -> str`` on integer row indices of the caller's arrays (the rows kept). It may raise
        ``ValueError`` when no verdict exists on the rows kept (recorded in ``undecided``).
    clusters : sequence, shape (n_rows,)
        Cluster (subject) per row.

    Returns
    -------
    ClusterStability

    Raises
    ------
    ValueError
        From ``verdict`` on all rows (there is no verdict to test), or fewer than 2 clusters.
    """
    clusters = np.asarray(clusters)
    uniq = np.unique(clusters)
    if uniq.size < 2:
        raise ValueError(f"leave-one-subject-out needs at least 2 subjects, got {uniq.size}")
    full = verdict(np.arange(clusters.size))
    flips, undecided = {}, {}
    for c in uniq:
        keep = np.flatnonzero(clusters != c)
        try:
            v = verdict(keep)
        except ValueError as err:
            undecided[str(c)] = str(err)
            continue
        if v != full:
            flips[str(c)] = v
    return ClusterStability(full, flips, undecided, int(uniq.size))


SUBJECT_SD_PILOT = 0.15
"""Assumed SD across subjects of a per-subject paired difference (balanced accuracy units) when no pilot is given:
:func:`min_detectable_delta`'s default, as ``eegfm-bench plan`` prints it. Source: a pilot, the eyes positive control
(``configs/experiment/positive_control_eegmmidb_eyes.yaml``) reduced to EEGNet, the 4-40 Hz variation, 4 s stride and
10 epochs: EEGNet 4-40 Hz minus headline per held-out subject had SD 0.154 over the 7 subjects.
Another task's spread may differ several-fold; pass a pilot's own."""


def min_detectable_delta(n_subjects: int, sd_subject: float = SUBJECT_SD_PILOT, *, level: float = 0.95,
                         power: float = 0.8) -> float:
    """The smallest paired difference the paired subject-cluster bootstrap detects with ``power`` (paper 001 §4.6).

    The bootstrap resamples ``n`` held-out subjects, so its replicates spread like the mean of ``n`` per-subject
    differences drawn with replacement: SE = sd·sqrt((n − 1) / n) / sqrt(n) (the plug-in SD). A true difference Δ
    gives an interval that excludes zero with probability ``power`` when Δ ≥ (z_{(1+level)/2} + z_{power})·SE.
    Assumes subjects independent, the per-subject differences roughly normal with SD ``sd_subject`` (from a pilot's
    or a synthetic spread), and the design's every subject tested once; within-subject (window) noise is inside
    ``sd_subject``.

    Parameters
    ----------
    n_subjects : int
        Held-out subjects the interval resamples (all test folds together).
    sd_subject : float
        SD across subjects of the per-subject paired difference, metric units (balanced accuracy in [0, 1]).
    level, power : float
        Two-sided interval coverage and the wanted power.

    Returns
    -------
    float
        Δ in the metric's units.

    Raises
    ------
    ValueError
        Fewer than 2 subjects, a negative SD, or level/power outside (0, 1).
    """
    if n_subjects < 2 or sd_subject < 0 or not (0 < level < 1 and 0 < power < 1):
        raise ValueError(f"min_detectable_delta(n_subjects={n_subjects}, sd_subject={sd_subject}, level={level}, "
                         f"power={power}); fix: at least 2 subjects, sd >= 0, level and power in (0, 1)")
    se = sd_subject * np.sqrt((n_subjects - 1) / n_subjects) / np.sqrt(n_subjects)
    return float((_st.norm.ppf((1 + level) / 2) + _st.norm.ppf(power)) * se)


@dataclass
class PairedTest:
    """Paired comparison of per-fold (or per-subject) values of a model and a comparator."""

    test: str
    n: int
    mean_diff: float
    median_diff: float
    statistic: float
    p_value: float
    cohen_dz: float
    exact: bool = True
    n_resamples: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _paired(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired values must be 1-D and aligned, got {a.shape} and {b.shape}")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("paired values hold NaN (a fold with an undefined metric); fix: drop that fold from both")
    if a.size < 2:
        raise ValueError(f"a paired test needs at least 2 folds/subjects, got {a.size}")
    return a - b


def _dz(d: np.ndarray) -> float:
    sd = np.std(d, ddof=1)
    return float(np.mean(d) / sd) if sd > 0 else float("nan")


def paired_wilcoxon(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Two-sided Wilcoxon signed-rank test of model vs comparator across folds (paper 001 §4.6).

    Parameters
    ----------
    a, b : sequence of float, shape (n_folds,)
        Per-fold metric of the model and the comparator, same fold order (e.g. 23 CHB-MIT LOSO folds).

    Returns
    -------
    PairedTest
        ``statistic`` is scipy's W; ``cohen_dz`` is mean(d)/SD(d) (the paper's paired d). LOSO training sets
        overlap, so the p-value is nominal.

    Raises
    ------
    ValueError
        Misaligned input, NaN, fewer than 2 pairs, or all differences zero.
    """
    d = _paired(a, b)
    if np.all(d == 0):
        raise ValueError("all paired differences are zero; the Wilcoxon test is undefined")
    res = _st.wilcoxon(d, alternative="two-sided", zero_method="wilcox")
    return PairedTest("wilcoxon", int(d.size), float(d.mean()), float(np.median(d)), float(res.statistic),
                      float(res.pvalue), _dz(d))


def _sign_sums(d: np.ndarray) -> np.ndarray:
    """All 2^len(d) values of sum(±d_i)."""
    signs = 1 - 2 * ((np.arange(2 ** d.size)[:, None] >> np.arange(d.size)[None, :]) & 1)
    return signs @ d


def sign_flip_test(diffs: Sequence[float], *, exact_max_n: int = 30, n_resamples: int = 100_000,
                   seed: int = 0, alternative: str = "two-sided") -> PairedTest:
    """Conditional sign-flip (paired randomisation) test of a mean difference (paper 001 §4.2.1, §4.6).

    Under the null the sign of each paired difference (one per held-out subject or fold) is exchangeable;
    the statistic is the mean difference. Conditional on the fixed predictions (no refitting).

    For ``n <= exact_max_n`` the p-value is exact over all 2^n sign patterns, counted by meeting in the middle
    (the sums of the two halves' 2^(n/2) patterns, one sorted and searched), which gives the same value as
    :func:`scipy.stats.permutation_test` (``permutation_type="samples"``, ``n_resamples=inf``) but in
    milliseconds for the paper's n = 23 LOSO folds, where scipy's enumeration takes minutes. Above
    ``exact_max_n``, scipy's Monte-Carlo test with ``n_resamples`` patterns is used.

    Parameters
    ----------
    diffs : sequence of float, shape (n,)
        Model-minus-comparator differences.
    exact_max_n : int
        Largest n counted exactly.
    n_resamples : int
        Monte-Carlo patterns above ``exact_max_n``.
    seed : int
        Seed of the Monte-Carlo patterns.
    alternative : {"two-sided", "greater", "less"}
        Two-sided p is ``min(1, 2·min(p_greater, p_less))`` (scipy's convention).

    Returns
    -------
    PairedTest

    Raises
    ------
    ValueError
        Fewer than 2 differences, NaN, or an unknown alternative.
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative {alternative!r}; fix: 'two-sided', 'greater' or 'less'")
    d = _paired(np.asarray(diffs, dtype=float), np.zeros(len(diffs)))
    n = d.size
    t = float(d.mean())
    if n <= exact_max_n:
        h = n // 2
        s1 = _sign_sums(d[:h])
        s2 = np.sort(_sign_sums(d[h:]))
        tot = t * n
        tol = 1e-12 * max(1.0, np.abs(d).sum())  # ties up to rounding count as extreme, as scipy does
        n_ge = np.sum(s2.size - np.searchsorted(s2, tot - tol - s1, side="left"))
        n_le = np.sum(np.searchsorted(s2, tot + tol - s1, side="right"))
        p_g, p_l = n_ge / 2.0 ** n, n_le / 2.0 ** n
        p = {"greater": p_g, "less": p_l, "two-sided": min(1.0, 2 * min(p_g, p_l))}[alternative]
        return PairedTest("sign_flip", n, t, float(np.median(d)), t, float(p), _dz(d), exact=True,
                          n_resamples=int(2 ** n))
    res = _st.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                               vectorized=True, n_resamples=n_resamples, alternative=alternative,
                               rng=np.random.default_rng(seed))
    return PairedTest("sign_flip", n, t, float(np.median(d)), float(res.statistic), float(res.pvalue), _dz(d),
                      exact=False, n_resamples=int(n_resamples))
