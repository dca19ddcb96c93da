"""Four-gate attribution report (paper 001 §3.6 "Interpretive attribution framework", §5.5).

For each positive model-specific margin the gates are applied in order; the first gate that fails (or lacks
its evidence) ends the attribution claim, and later gates are reported as ``not_reached``:

(i)   **comparator** — the model's score exceeds the *stronger* tested handcrafted family under the task's
      probe and folds (§4.2.1: taking the stronger family, not the enhanced one unconditionally);
(ii)  **paired uncertainty** — the paired model-minus-strongest-comparator interval excludes zero on the
      positive side (:func:`eegfm_bench.stats.paired_cluster_bootstrap`);
(iii) **provenance** — none of the published pretraining corpora is, or belongs to the same source family as,
      the evaluation dataset (e.g. TUAB inside TUH/TUEG);
(iv)  **controls** — the pretrained representation exceeds matched random initialisation and its observed-label
      probe beats the permutation null (p < α); for adaptation claims it also exceeds the scrambled-label
      adaptation.

**How a gate that compares two arms decides.** Gates (ii) and (iv) compare two arms scored on the same windows:
each decides on the *paired subject-cluster bootstrap interval* of the difference
(:func:`eegfm_bench.stats.paired_cluster_bootstrap`, the interval of §4.6, default 95 %): ``pass`` when the interval
lies above zero, ``fail`` when it lies at or below zero, and ``inconclusive`` when it straddles zero — the folds
cannot tell the arms apart, so the claim ends there without being refuted. Without an interval the comparison of
means is reported but decides nothing (``inconclusive``): two means with no uncertainty cannot tell noise from an
effect (a chance-level eegmat adaptation, 0.501 vs 0.473 on folds split 2 / 2, passed gate (iv) on means alone).
The permutation part of gate (iv) is the paper's test with its α. *Choice made where the paper is silent:* paper 001
§4.2.2 and §4.2.4 report the random-init and scrambled-label contrasts descriptively (seeds share held-out subjects,
so no interval across seeds); here the seeds' predictions on the same windows are compared pairwise, resampling
subjects, which is an interval over subjects (not over seeds) — the unit the folds are built from. Each
:class:`GateResult` says what decided it (``decided_by``).

The framework is descriptive and post hoc (§3.6): it is not a prospective success criterion or an AUROC
threshold. Matched random initialisation and scrambled-label adaptation need the model layer; this module takes
their scores (:func:`random_init_contrast`, :func:`scrambled_label_contrast`) as inputs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np

from eegfm_bench.models.catalogue import corpus_overlap as pretraining_overlap
from eegfm_bench.stats import ClusterStability, leave_one_cluster_out, paired_cluster_bootstrap

GATES = (("i", "comparator"), ("ii", "paired uncertainty"), ("iii", "provenance"), ("iv", "controls"))
STATUSES = ("pass", "fail", "inconclusive", "missing", "not_reached")

@dataclass
class ClaimEvidence:
    """Everything the four gates read for one positive model-specific margin (paper 001 §3.6).

    Parameters
    ----------
    model, task : str
        The claim: ``model`` on ``task``.
    evaluation_dataset : str
        Dataset the task evaluates on (for gate iii).
    model_score : float
        The model's estimate (e.g. mean-fold AUROC) under the task's probe and folds.
    comparator_scores : mapping
        Handcrafted family → score under the same probe and folds (e.g. ``{"simple": .70, "enhanced": .715}``).
    paired_ci : (float, float), optional
        Interval of model minus the *stronger* comparator (same units as the scores).
    pretraining_corpora : sequence of str, optional
        Published pretraining inventory; None when unknown (gate iii is then ``missing``).
    random_init_scores : sequence of float, optional
        Matched fully-random-initialisation scores, one per seed.
    random_init_ci : (float, float), optional
        Paired subject-cluster interval of the model minus matched random init (mean over seeds), on the same
        windows; decides that part of gate (iv).
    permutation_p : float, optional
        Label-permutation p-value of the observed-label probe.
    adaptation : bool
        The claim concerns an adapted (LoRA/full) model: gate (iv) then also needs ``scrambled_label_score``.
    scrambled_label_score : float, optional
        Score after adaptation on permuted source labels (§4.2.4: the frozen probe refitted on the true labels).
    scrambled_correct_score : float, optional
        The same measurement after adaptation on the true labels (same schedule, same probe). When given, gate (iv)
        compares it — not ``model_score``, which may be another measurement (e.g. a cv head's own predictions) —
        with ``scrambled_label_score``.
    scrambled_ci : (float, float), optional
        Paired subject-cluster interval of correct- minus scrambled-label adaptation (mean over seeds, same windows);
        decides that part of gate (iv).
    ci_level : float
        Coverage of the intervals (for the report).
    paired_ci_flips : mapping, optional
        Subject → gate (ii)'s status without that subject, for every subject whose removal changes it
        (:func:`decision_stability`); gate (ii)'s detail then says the decision rests on one subject.
    random_init_flips, scrambled_flips : mapping, optional
        The same for gate (iv)'s ``random_init_ci`` and ``scrambled_ci``.
    alpha : float
        Level for the permutation p-value.
    metric : str
        Name of the score's metric (for the report).
    """

    model: str
    task: str
    evaluation_dataset: str
    model_score: float
    comparator_scores: Mapping[str, float]
    paired_ci: tuple[float, float] | None = None
    pretraining_corpora: Sequence[str] | None = None
    random_init_scores: Sequence[float] | None = None
    permutation_p: float | None = None
    adaptation: bool = False
    scrambled_label_score: float | None = None
    scrambled_correct_score: float | None = None
    alpha: float = 0.05
    metric: str = "auroc"
    random_init_ci: tuple[float, float] | None = None
    scrambled_ci: tuple[float, float] | None = None
    ci_level: float = 0.95
    paired_ci_flips: Mapping[str, str] | None = None
    random_init_flips: Mapping[str, str] | None = None
    scrambled_flips: Mapping[str, str] | None = None


@dataclass
class GateResult:
    """Outcome of one gate: ``status`` in :data:`STATUSES`, a one-line ``detail``, the numbers used and what decided
    it (``decided_by``: the interval, the test and its α, the inventory, or a comparison of means)."""

    gate: str
    name: str
    status: str
    detail: str
    values: dict = field(default_factory=dict)
    decided_by: str = ""


@dataclass
class GateReport:
    """The four gates of one claim, in order; ``stopped_at`` is the first gate that did not pass."""

    model: str
    task: str
    metric: str
    gates: list
    stopped_at: str | None
    attributed: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _gate_i(ev: ClaimEvidence) -> GateResult:
    g, name = GATES[0]
    if not ev.comparator_scores:
        return GateResult(g, name, "missing", "no handcrafted comparator score given")
    best_family = max(ev.comparator_scores, key=lambda k: ev.comparator_scores[k])
    best = float(ev.comparator_scores[best_family])
    margin = float(ev.model_score) - best
    vals = {"model": float(ev.model_score), "strongest_family": best_family, "strongest": best, "margin": margin}
    how = "point estimates (the model's mean-fold score against the stronger family's; its uncertainty is gate ii)"
    if margin > 0:
        return GateResult(g, name, "pass", f"{ev.model_score:.4f} > {best_family} {best:.4f} (+{margin:.4f})", vals,
                          how)
    return GateResult(g, name, "fail", f"{ev.model_score:.4f} does not exceed {best_family} {best:.4f}", vals, how)


def _gate_ii(ev: ClaimEvidence) -> GateResult:
    g, name = GATES[1]
    if ev.paired_ci is None:
        return GateResult(g, name, "missing", "no paired interval against the strongest comparator")
    lo, hi = map(float, ev.paired_ci)
    if lo > hi:
        raise ValueError(f"paired_ci {ev.paired_ci} has low > high")
    vals = {"low": lo, "high": hi, "level": ev.ci_level}
    status, word = interval_decision(lo, hi)
    how = f"paired subject-cluster bootstrap {ev.ci_level:.0%} interval of model − strongest comparator"
    rests = _rests(ev.paired_ci_flips, vals, "paired")
    return GateResult(g, name, status, f"paired CI [{lo:+.4f}, {hi:+.4f}] {word}{rests}", vals, how)


def decision_stability(y, pairs, clusters, fold_ids, *, metric: str = "auroc", n_boot: int = 2000,
                       level: float = 0.95, seed: int = 0) -> ClusterStability:
    """Whether a two-arm gate's decision (:func:`interval_decision` of the paired subject-cluster interval of A − B,
    averaged over ``pairs`` as gate (iv) averages seeds) changes when any one subject is left out, from the same
    out-of-fold predictions (no refitting).

    Parameters
    ----------
    y : sequence, shape (n,)
    pairs : sequence of (ndarray, ndarray), each shape (n, n_classes)
        The two arms' out-of-fold probabilities (one pair per seed), rows aligned with ``y``; every pair is
        bootstrapped with the same seed (the same resampled subjects) and the replicates averaged.
    clusters, fold_ids : sequence, shape (n,)
        Subject and test fold per row.
    metric, n_boot, level, seed
        As :func:`~eegfm_bench.stats.paired_cluster_bootstrap` (a fold may keep a single subject once one is left
        out: ``min_clusters=1``).

    Returns
    -------
    ClusterStability
        ``verdict`` is the status on all subjects; ``flips`` the subjects whose removal changes it.

    Raises
    ------
    ValueError
        When the interval cannot be computed on all subjects.
    """
    y, cl, fo = np.asarray(y), np.asarray(clusters), np.asarray(fold_ids)
    pairs = [(np.asarray(a), np.asarray(b)) for a, b in pairs]

    def decide(rows):
        reps = [paired_cluster_bootstrap(y[rows], a[rows], b[rows], cl[rows], fo[rows], metric=metric, n_boot=n_boot,
                                         level=level, seed=seed, min_clusters=1).samples for a, b in pairs]
        mean = np.nanmean(np.stack(reps), axis=0)
        lo, hi = np.quantile(mean[np.isfinite(mean)], [(1 - level) / 2, (1 + level) / 2])
        return interval_decision(float(lo), float(hi))[0]

    return leave_one_cluster_out(decide, cl)


def interval_decision(low: float, high: float) -> tuple[str, str]:
    """``(status, words)`` of a paired interval of A − B: ``pass`` above zero, ``fail`` at or below zero,
    ``inconclusive`` when it straddles zero (module docstring).

    Raises
    ------
    ValueError
        ``low > high`` or a non-finite bound.
    """
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise ValueError(f"interval [{low}, {high}] is not a finite interval with low <= high")
    if low > 0:
        return "pass", "lies above zero"
    if high <= 0:
        return "fail", "lies at or below zero"
    return "inconclusive", "straddles zero: the folds cannot decide"


def _gate_iii(ev: ClaimEvidence, related) -> GateResult:
    g, name = GATES[2]
    if ev.pretraining_corpora is None:
        return GateResult(g, name, "missing", "pretraining inventory unknown")
    hits = pretraining_overlap(ev.pretraining_corpora, ev.evaluation_dataset, related)
    vals = {"pretraining_corpora": list(ev.pretraining_corpora), "evaluation_dataset": ev.evaluation_dataset,
            "overlap": [list(h) for h in hits]}
    if hits:
        why = "; ".join(f"{c} ({r})" for c, r in hits)
        return GateResult(g, name, "fail", f"pretraining overlaps {ev.evaluation_dataset}: {why}", vals,
                          "the published pretraining inventory against the evaluation dataset's source family")
    return GateResult(g, name, "pass", f"no listed corpus overlaps {ev.evaluation_dataset}", vals,
                      "the published pretraining inventory against the evaluation dataset's source family")


def _gate_iv(ev: ClaimEvidence) -> GateResult:
    g, name = GATES[3]
    need = []
    if not ev.random_init_scores:
        need.append("matched random-init scores")
    if ev.permutation_p is None:
        need.append("permutation p-value")
    if ev.adaptation and ev.scrambled_label_score is None:
        need.append("scrambled-label adaptation score")
    if need:
        return GateResult(g, name, "missing", "missing " + ", ".join(need))
    rand = float(np.mean(ev.random_init_scores))
    vals = {"random_init_mean": rand, "random_init_n": len(ev.random_init_scores),
            "permutation_p": float(ev.permutation_p), "alpha": ev.alpha, "level": ev.ci_level}
    parts: list[tuple[str, str]] = []  # (status, detail)
    how = []
    parts.append(_arm_part("above matched random init", float(ev.model_score), rand, ev.random_init_ci, vals,
                           "random_init", ev.random_init_flips))
    how.append("random init: " + ("paired subject-cluster bootstrap interval" if ev.random_init_ci is not None
                                  else "means only (no interval: decides nothing)"))
    if ev.permutation_p < ev.alpha:
        parts.append(("pass", f"permutation p = {ev.permutation_p:.4g} < α = {ev.alpha}"))
    else:
        parts.append(("fail", f"permutation p = {ev.permutation_p:.4g} not below α = {ev.alpha}"))
    how.append(f"label permutation test, α = {ev.alpha}")
    if ev.adaptation:
        vals["scrambled_label_score"] = float(ev.scrambled_label_score)
        ref = ev.model_score if ev.scrambled_correct_score is None else float(ev.scrambled_correct_score)
        if ev.scrambled_correct_score is not None:
            vals["scrambled_correct_score"] = ref
        parts.append(_arm_part("correct- above scrambled-label adaptation", ref, float(ev.scrambled_label_score),
                               ev.scrambled_ci, vals, "scrambled", ev.scrambled_flips))
        how.append("scrambled labels: " + ("paired subject-cluster bootstrap interval" if ev.scrambled_ci is not None
                                          else "means only (no interval: decides nothing)"))
    statuses = [st for st, _ in parts]
    status = "fail" if "fail" in statuses else "inconclusive" if "inconclusive" in statuses else "pass"
    return GateResult(g, name, status, "; ".join(d for _, d in parts), vals, "; ".join(how))


def _arm_part(what: str, a: float, b: float, ci, vals: dict, key: str, flips=None) -> tuple[str, str]:
    """One two-arm comparison of gate (iv): decided by its paired interval of A − B, inconclusive without one; says
    when leaving out one subject changes that decision (``flips``: subject → status)."""
    vals[f"{key}_margin"] = a - b
    if ci is None:
        return "inconclusive", (f"{what}: {a:.4f} vs {b:.4f} (margin {a - b:+.4f}) with no paired interval, so the "
                                "comparison decides nothing")
    lo, hi = map(float, ci)
    vals[f"{key}_ci"] = [lo, hi]
    status, word = interval_decision(lo, hi)
    return status, f"{what}: margin {a - b:+.4f}, paired CI [{lo:+.4f}, {hi:+.4f}] {word}{_rests(flips, vals, key)}"


def _rests(flips, vals: dict, key: str) -> str:
    """``"; rests on one subject (S5 → pass)"`` for the subjects whose removal alone changes a decision (kept in
    ``vals[f"{key}_loso_flips"]``), else ``""``."""
    if not flips:
        return ""
    vals[f"{key}_loso_flips"] = dict(flips)
    return "; rests on one subject (" + "; ".join(f"{k} → {v}" for k, v in flips.items()) + ")"


def evaluate_gates(ev: ClaimEvidence, related: Mapping[str, Sequence[str]] | None = None) -> GateReport:
    """Apply the four gates in order; the first non-passing gate ends the claim (paper 001 §3.6).

    Parameters
    ----------
    ev : ClaimEvidence
    related : mapping, optional
        Source families for gate (iii) (default :data:`~eegfm_bench.models.catalogue.RELATED_SOURCES`).

    Returns
    -------
    GateReport
        Gates after the first ``fail`` / ``inconclusive`` / ``missing`` are ``not_reached``; ``attributed`` is True
        only when all four pass.

    Raises
    ------
    ValueError
        On a malformed interval (low > high).
    """
    checks = [lambda: _gate_i(ev), lambda: _gate_ii(ev), lambda: _gate_iii(ev, related), lambda: _gate_iv(ev)]
    results, stopped = [], None
    for (g, name), check in zip(GATES, checks):
        if stopped is not None:
            results.append(GateResult(g, name, "not_reached", f"claim ended at gate ({stopped})"))
            continue
        r = check()
        results.append(r)
        if r.status != "pass":
            stopped = g
    return GateReport(ev.model, ev.task, ev.metric, results, stopped, stopped is None)


def random_init_contrast(pretrained: float | Sequence[float], random_by_seed: Mapping[int, float | Sequence[float]]
                         ) -> dict:
    """Pretrained minus matched fully-random initialisation (paper 001 §4.2.2, Control 2), descriptive.

    Parameters
    ----------
    pretrained : float or sequence of float
        Pretrained score, or its per-fold values (averaged).
    random_by_seed : mapping
        Seed → score (or per-fold values) of the same architecture randomly initialised, with the same inputs,
        folds and probe.

    Returns
    -------
    dict
        ``pretrained``, ``random_per_seed``, ``random_grand_mean``, ``delta`` and ``delta_pp``. No interval:
        seeds share held-out subjects (§4.2.2).

    Raises
    ------
    ValueError
        If no random seed is given.
    """
    if not random_by_seed:
        raise ValueError("random_by_seed is empty; fix: run the matched random-init encoder for at least one seed")
    pre = float(np.mean(pretrained))
    per = {int(s): float(np.mean(v)) for s, v in random_by_seed.items()}
    grand = float(np.mean(list(per.values())))
    return {"pretrained": pre, "random_per_seed": per, "random_grand_mean": grand, "delta": pre - grand,
            "delta_pp": 100 * (pre - grand)}


def scrambled_label_contrast(correct: Sequence[float], scrambled: Sequence[float]) -> dict:
    """Correct- versus scrambled-label adaptation (paper 001 §4.2.4, Control 4), descriptive and unpaired.

    Parameters
    ----------
    correct : sequence of float
        Scores of adaptation runs on the true source labels (one per seed).
    scrambled : sequence of float
        Scores after adaptation on permuted source labels (one per seed).

    Returns
    -------
    dict
        Means, SDs, counts, ``delta`` and ``delta_pp``. Not an equivalence test (§4.2.4).

    Raises
    ------
    ValueError
        If either list is empty.
    """
    c, s = np.asarray(correct, dtype=float), np.asarray(scrambled, dtype=float)
    if c.size == 0 or s.size == 0:
        raise ValueError("need at least one correct-label and one scrambled-label run")
    sd = lambda v: float(np.std(v, ddof=1)) if v.size > 1 else float("nan")  # noqa: E731
    return {"correct_mean": float(c.mean()), "correct_sd": sd(c), "n_correct": int(c.size),
            "scrambled_mean": float(s.mean()), "scrambled_sd": sd(s), "n_scrambled": int(s.size),
            "delta": float(c.mean() - s.mean()), "delta_pp": float(100 * (c.mean() - s.mean()))}
