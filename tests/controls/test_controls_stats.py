"""Paired uncertainty for model-vs-comparator margins (paper 001 §4.2.2, §4.6) in eegfm_bench.stats."""
import numpy as np
import pytest
from scipy import stats as st
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from eegfm_bench import stats as S


def test_weighted_metrics_equal_sklearn_on_repeated_rows():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)
    P = rng.dirichlet(np.ones(3), 60)
    P[:5] = P[5:10]  # ties
    W = rng.integers(0, 4, (6, 60))
    for w in W:
        yr, Pr = np.repeat(y, w), np.repeat(P, w, axis=0)
        got = S.weighted_metric("auroc", y, P, w)[0]
        assert got == pytest.approx(roc_auc_score(yr, Pr, multi_class="ovr", average="macro"))
        assert S.weighted_metric("balanced_accuracy", y, P, w)[0] == pytest.approx(
            balanced_accuracy_score(yr, Pr.argmax(1)))
        yb = (y == 1)
        s = np.round(P[:, 1], 1)
        assert S.weighted_auroc(yb, s, w)[0] == pytest.approx(roc_auc_score(np.repeat(yb, w), np.repeat(s, w)))
    assert np.isnan(S.weighted_auroc(np.array([True, True]), np.array([0.1, 0.2]), np.ones(2))[0])


def folded(n_folds=5, subj_per_fold=8, n_win=15, effect_a=0.0, seed=0):
    """Two models' scores on subjects with subject-level labels; A gains ``effect_a`` in separation."""
    rng = np.random.default_rng(seed)
    n_subj = n_folds * subj_per_fold
    subj = np.repeat(np.arange(n_subj), n_win)
    fold = subj // subj_per_fold
    y = (subj % 2).astype(int)
    subj_eff = rng.normal(0, 1.0, n_subj)[subj]  # clustered: subjects shift both models' scores
    base = 0.8 * y + subj_eff
    a = base + effect_a * y + rng.normal(0, 1, y.size)
    b = base + rng.normal(0, 1, y.size)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    return y, sig(a), sig(b), subj, fold


def test_cluster_bootstrap_ci_covers_a_zero_difference_in_90_percent():
    cover = 0
    for rep in range(100):
        y, a, b, subj, fold = folded(seed=rep)
        ci = S.paired_cluster_bootstrap(y, a, b, subj, fold, n_boot=300, seed=rep)
        assert ci.mode == "within_fold" and ci.stratified
        cover += ci.low <= 0 <= ci.high
    assert cover >= 90


def test_bootstrap_detects_a_real_margin_and_reports_both_estimates():
    y, a, b, subj, fold = folded(effect_a=2.0, seed=1)
    ci = S.paired_cluster_bootstrap(y, a, b, subj, fold, n_boot=500)
    assert ci.low > 0 and ci.excludes_zero()
    per_fold = [roc_auc_score(y[fold == f], a[fold == f]) - roc_auc_score(y[fold == f], b[fold == f])
                for f in range(5)]
    assert ci.estimate == pytest.approx(np.mean(per_fold))
    assert ci.estimate == pytest.approx(ci.estimate_a - ci.estimate_b)
    pooled = S.paired_cluster_bootstrap(y, a, b, subj, target="pooled", n_boot=300)
    assert pooled.mode == "pooled"
    assert pooled.estimate == pytest.approx(roc_auc_score(y, a) - roc_auc_score(y, b))


def test_loso_resamples_held_out_subjects():
    rng = np.random.default_rng(2)
    subj = np.repeat(np.arange(10), 20)
    y = np.tile([0, 1], 100)  # every subject has both classes (CHB-MIT-like)
    a = y + rng.normal(0, 1, 200)
    b = y + rng.normal(0, 1.2, 200)
    ci = S.paired_cluster_bootstrap(y, a / 10 + 0.5, b / 10 + 0.5, subj, subj, n_boot=400)
    assert ci.mode == "between_fold" and not ci.stratified
    per = [roc_auc_score(y[subj == s], a[subj == s]) - roc_auc_score(y[subj == s], b[subj == s]) for s in range(10)]
    assert ci.estimate == pytest.approx(np.mean(per))
    assert np.min(per) - 1e-12 <= ci.low <= ci.high <= np.max(per) + 1e-12


def test_too_few_subjects_for_the_bootstrap_raise():
    y, a, b, subj, fold = folded(n_folds=3, subj_per_fold=4)
    fold = fold.copy()
    fold[subj == 0] = 99  # a fold holding a single subject next to multi-subject folds
    with pytest.raises(ValueError, match=r"too few subjects.*folds \[3\]"):
        S.paired_cluster_bootstrap(y, a, b, subj, fold, n_boot=10)
    with pytest.raises(ValueError, match="at least 2 clusters"):
        S.paired_cluster_bootstrap([0, 1, 0, 1], [.2, .7, .4, .6], [.3, .6, .5, .4], [7, 7, 7, 7], target="pooled")
    with pytest.raises(ValueError, match="target='pooled'"):  # LOSO with subject labels: fold AUROC undefined
        S.paired_cluster_bootstrap(y, a, b, subj, subj, n_boot=10)


def test_sign_flip_matches_scipy_exact_and_is_fast_for_23_folds():
    rng = np.random.default_rng(3)
    d = rng.normal(0.03, 0.1, 12)
    ref = st.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                              vectorized=True, n_resamples=np.inf)
    assert S.sign_flip_test(d).p_value == pytest.approx(ref.pvalue)
    assert S.sign_flip_test(np.ones(5)).p_value == pytest.approx(2 / 32)
    r = S.sign_flip_test(rng.normal(0.05, 0.1, 23))
    assert r.exact and r.n_resamples == 2 ** 23 and 0 < r.p_value < 1
    mc = S.sign_flip_test(rng.normal(0, 1, 40), n_resamples=2000)
    assert not mc.exact


def test_paired_wilcoxon_and_dz():
    rng = np.random.default_rng(4)
    b = rng.uniform(0.6, 0.8, 23)
    a = b + rng.normal(0.05, 0.08, 23)
    r = S.paired_wilcoxon(a, b)
    ref = st.wilcoxon(a, b)
    assert r.statistic == ref.statistic and r.p_value == pytest.approx(ref.pvalue)
    assert r.cohen_dz == pytest.approx(np.mean(a - b) / np.std(a - b, ddof=1))
    with pytest.raises(ValueError, match="NaN"):
        S.paired_wilcoxon([0.1, np.nan], [0.2, 0.3])


def test_fold_ids_from_folds():
    folds = [(np.array([2, 3]), np.array([0, 1])), (np.array([0, 1]), np.array([2, 3]))]
    np.testing.assert_array_equal(S.fold_ids_from_folds(folds, 5), [0, 0, 1, 1, -1])
