"""Every statistic in :mod:`eegfm_bench.stats` against a value a plausible wrong implementation would not give
(issue 23): hand-computed tables, exact distributions, degenerate cases with known answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from eegfm_bench import stats as S


def test_holm_with_unequal_p_values_matches_the_hand_computed_table():
    """Exact two-sided Wilcoxon p-values on 6 folds (2 · #{sign patterns with W- <= observed} / 64):
    d = 1..6 all positive: W- = 0, p = 2/64; one negative (rank 1): W- = 1, p = 4/64; ranks 1 and 2 negative:
    W- = 3 (subsets {}, {1}, {2}, {3}, {1,2}), p = 10/64. Holm (step-down): 3·p1, max(3·p1, 2·p2), max(., p3) =
    0.09375, 0.125, 0.15625 — Bonferroni would give 0.09375, 0.1875, 0.46875; an unadjusted test 0.03125, ...
    """
    ref = [0.0] * 6
    per_fold = {"ref": ref, "a": [1, 2, 3, 4, 5, 6], "b": [-1, 2, 3, 4, 5, 6], "c": [-1, -2, 3, 4, 5, 6]}
    res = {r.model: r for r in S.wilcoxon_holm(per_fold, "ref", alpha=0.1)}
    assert [res[m].p_value for m in "abc"] == pytest.approx([2 / 64, 4 / 64, 10 / 64])
    assert [res[m].p_holm for m in "abc"] == pytest.approx([0.09375, 0.125, 0.15625])
    assert [res[m].mark for m in "abc"] == ["∗", "", ""]
    # the order of the models does not change the adjustment (step-down on the sorted p-values)
    rev = {r.model: r.p_holm for r in S.wilcoxon_holm({"ref": ref, "c": per_fold["c"], "b": per_fold["b"],
                                                        "a": per_fold["a"]}, "ref", alpha=0.1)}
    assert rev == pytest.approx({m: res[m].p_holm for m in "abc"})
    # a worse model gets the ∇ mark
    worse = S.wilcoxon_holm({"ref": ref, "w": [-1, -2, -3, -4, -5, -6]}, "ref", alpha=0.05)[0]
    assert worse.p_holm == pytest.approx(2 / 64) and worse.mark == "∇" and worse.median_diff == -3.5


def test_paired_deltas_are_aligned_by_group_not_by_row_order():
    df = pd.DataFrame({"model": ["m", "m", "m", "m"], "fold": [1, 0, 0, 1],
                       "condition": ["noise", "noise", "clean", "clean"], "value": [0.60, 0.70, 0.75, 0.80]})
    out = S.paired_deltas(df).sort_values("fold")
    assert out["delta_pp"].tolist() == pytest.approx([100 * (0.70 - 0.75), 100 * (0.60 - 0.80)])  # -5, -20
    with pytest.raises(ValueError, match="no 'clean' row"):
        S.paired_deltas(df[df["fold"] == 0].assign(fold=[5, 0]))


def test_cluster_bootstrap_resamples_whole_clusters():
    """Two clusters: one row of 0 and 99 rows of 1. Resampling the two clusters gives only the means 0 (both
    draws the first), 1 (both the second) and 0.99 (one of each) — a row bootstrap would give values near 0.99."""
    values = np.r_[0.0, np.ones(99)]
    clusters = np.r_[0, np.ones(99, int)]
    ci = S.cluster_bootstrap(lambda idx: float(values[idx].mean()), clusters, n_boot=400, seed=0)
    uniq = set(np.round(ci.samples, 6).tolist())
    assert uniq <= {0.0, 0.99, 1.0} and 0.0 in uniq  # P(both draws cluster 0) = 1/4
    assert ci.n_clusters == 2


def test_paired_bootstrap_of_identical_models_is_exactly_zero():
    """A and B scored on the same resampled subjects in every replicate: identical predictions differ by exactly
    0 in every replicate (an unpaired bootstrap, resampling A and B independently, would give a wide interval)."""
    rng = np.random.default_rng(1)
    subj = np.repeat(np.arange(20), 10)
    y = (subj % 2).astype(int)
    fold = subj // 4
    p = 1 / (1 + np.exp(-(y + rng.normal(0, 1, y.size))))
    ci = S.paired_cluster_bootstrap(y, p, p.copy(), subj, fold, n_boot=300, seed=0)
    assert ci.estimate == 0.0 and ci.low == 0.0 and ci.high == 0.0 and np.all(ci.samples == 0)
    assert ci.mode == "within_fold"
    # a constant advantage of A in every fold shows as the estimate: AUROC 1 vs the noisy model's
    perfect = y.astype(float)
    ci2 = S.paired_cluster_bootstrap(y, perfect, p, subj, fold, n_boot=300, seed=0)
    fold_b = [S.weighted_metric("auroc", y[fold == f], np.c_[1 - p, p][fold == f], np.ones((fold == f).sum()))[0]
              for f in range(5)]
    assert ci2.estimate == pytest.approx(1 - np.mean(fold_b)) and ci2.low > 0


def test_weighted_auroc_counts_ties_as_one_half():
    """Positives 0.5, 0.9; negatives 0.5, 0.1: pairs (0.5 vs 0.5) tie = 1/2, the other three are won:
    AUROC = 3.5 / 4 (ignoring ties would give 3/4 or 1)."""
    y = np.array([True, True, False, False])
    s = np.array([0.5, 0.9, 0.5, 0.1])
    assert S.weighted_auroc(y, s, np.ones(4))[0] == pytest.approx(3.5 / 4)
    # weights are multiplicities: weight 2 on the tied negative = two such negatives: (2·0.5 + 2 + 2·1... )
    w = np.array([1.0, 1.0, 2.0, 1.0])  # negatives 0.5, 0.5, 0.1; positives 0.5, 0.9
    # pairs: p0.5 vs (n0.5, n0.5, n0.1) = 0.5+0.5+1; p0.9 vs all three = 3 -> 5 / 6
    assert S.weighted_auroc(y, s, w)[0] == pytest.approx(5 / 6)


def test_paired_wilcoxon_dz_uses_the_sample_sd():
    """d = (1, 2, 3, 4): mean 2.5, sample SD sqrt(5/3) = 1.2910: dz = 1.9365 (the population SD would give
    2.2361)."""
    r = S.paired_wilcoxon([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0])
    assert r.cohen_dz == pytest.approx(2.5 / np.sqrt(5 / 3)) and r.mean_diff == 2.5
    assert r.p_value == pytest.approx(2 / 16)  # exact: all 4 positive, W- = 0


def test_sign_flip_exact_p_by_hand():
    """d = (1, 2, 3): sums of the 8 sign patterns: ±1±2±3 -> {6, 4, 2, 0, 0, -2, -4, -6}; the observed sum 6 is
    met or exceeded by one pattern: p_greater = 1/8, two-sided 2/8 (a one-sided p would be 1/8)."""
    r = S.sign_flip_test([1.0, 2.0, 3.0])
    assert r.p_value == pytest.approx(0.25) and r.exact and r.n_resamples == 8
    assert S.sign_flip_test([1.0, 2.0, 3.0], alternative="greater").p_value == pytest.approx(0.125)
    # d = (1, -1, 2): sums {2, 0, 4, ...}: observed mean 2/3; patterns with sum >= 2: (1,-1,2)=2, (1,1,2)=4,
    # (-1,-1,2)=0 no, (-1,1,2)=2 -> 3/8; <= 2: 7/8 -> two-sided 2·3/8
    assert S.sign_flip_test([1.0, -1.0, 2.0]).p_value == pytest.approx(0.75)


def _three_subjects(n_per_class: int = 2):
    """Three subjects with both classes (``n_per_class`` windows each): A right on every window of S1, on half of each
    class of S2, on none of S3; B always says class 0 (balanced accuracy 0.5 on any resample)."""
    y, a, subj = [], [], []
    for s, right in (("S1", [1, 1]), ("S2", [1, 0]), ("S3", [0, 0])):
        for c in (0, 1):
            for w in range(n_per_class):
                ok = right[w % 2]
                y.append(c)
                a.append(c if ok else 1 - c)
                subj.append(s)
    y, a = np.asarray(y), np.asarray(a)
    return y, np.eye(2)[a] * 0.8 + 0.1, np.tile([0.9, 0.1], (y.size, 1)), np.asarray(subj)


@pytest.mark.parametrize("target", ["pooled", "mean_fold"])
def test_paired_bootstrap_replicates_are_means_of_resampled_subjects_not_windows(target):
    """Issue 33 item 6 (a): every replicate of A − B is (mean of 3 subjects' accuracies drawn with replacement) − 0.5,
    so it lies on the grid k/6 − 0.5 and its 95 % interval is [−0.5, +0.5] (all three draws S3, resp. S1, have
    probability 1/27 > 2.5 %). Resampling windows instead gives other values (ratios with random class counts) and
    an interval far inside ±0.5."""
    from eegfm_bench.stats import paired_cluster_bootstrap

    y, pa, pb, subj = _three_subjects(n_per_class=4)
    ci = paired_cluster_bootstrap(y, pa, pb, subj, np.zeros(y.size, int), metric="balanced_accuracy", target=target,
                                  stratify=False, n_boot=4000, seed=1)
    assert ci.mode == ("pooled" if target == "pooled" else "within_fold")
    assert ci.estimate == pytest.approx(0.0) and ci.n_clusters == 3
    on_grid = np.isclose((ci.samples + 0.5) * 6, np.round((ci.samples + 0.5) * 6))
    assert on_grid.all(), np.unique(ci.samples[~on_grid])[:5]
    assert set(np.round((ci.samples + 0.5) * 6).astype(int)) == set(range(7))  # 0/6 .. 6/6 all reached
    assert (ci.low, ci.high) == (pytest.approx(-0.5), pytest.approx(0.5))


def test_leave_one_cluster_out_names_the_subject_a_verdict_rests_on():
    """A verdict 'the mean of per-subject values [1, 1, 1, 0] is above thr', recomputed without each subject: without
    S4 the mean is 1, without any other 2/3. thr 0.5: stable; thr 0.7: 'above' rests on each of S1-S3; thr 0.8:
    'not above' rests on S4 alone."""
    from eegfm_bench.stats import leave_one_cluster_out

    vals = np.array([1.0, 1.0, 1.0, 0.0])
    subj = np.array(["S1", "S2", "S3", "S4"])
    for thr, flips in ((0.5, {}), (0.7, {s: "not above" for s in ("S1", "S2", "S3")}), (0.8, {"S4": "above"})):
        stab = leave_one_cluster_out(lambda rows: "above" if vals[rows].mean() > thr else "not above", subj)
        assert stab.verdict == ("above" if vals.mean() > thr else "not above")
        assert stab.flips == flips and stab.rests_on_one == bool(flips) and stab.n_clusters == 4

    def no_verdict_without_s1(rows):
        if "S1" not in subj[rows]:
            raise ValueError("S1 needed")
        return "x"

    stab = leave_one_cluster_out(no_verdict_without_s1, subj)
    assert stab.flips == {} and stab.undecided == {"S1": "S1 needed"}
    assert stab.mark() == ""


def test_min_detectable_delta_by_hand():
    """(z_.975 + z_.8) · sd · sqrt((n − 1) / n) / sqrt(n): n = 7, sd = 0.1 → 2.8016 · 0.1 · sqrt(6/7) / sqrt(7)."""
    from eegfm_bench.stats import min_detectable_delta

    want = (1.959964 + 0.841621) * 0.1 * np.sqrt(6 / 7) / np.sqrt(7)
    assert min_detectable_delta(7, 0.1) == pytest.approx(want, rel=1e-6)
    assert min_detectable_delta(28, 0.1) == pytest.approx(want * np.sqrt(7 / 28) * np.sqrt((27 / 28) / (6 / 7)),
                                                          rel=1e-6)
    with pytest.raises(ValueError, match="fix: at least 2 subjects"):
        min_detectable_delta(1, 0.1)
