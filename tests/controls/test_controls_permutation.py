"""Label-permutation control (paper 001 §4.2.3)."""
import numpy as np
import pytest

from eegfm_bench.controls import permutation as M
from eegfm_bench.controls.probes import grouped_folds


def data(n_subj=10, n_win=10, d=4, shift=0.0, per_subject_label=True, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_subj), n_win)
    y = np.repeat(np.arange(n_subj) % 2, n_win) if per_subject_label else np.tile(np.arange(n_win) % 2, n_subj)
    X = rng.standard_normal((g.size, d))
    X[:, 0] += shift * y
    return X, y, g


def test_p_value_formula():
    assert M.permutation_p_value(0.8, [0.5] * 100) == pytest.approx(1 / 101)
    assert M.permutation_p_value(0.5, [0.5, 0.6, 0.4, 0.3]) == pytest.approx(3 / 5)


def test_separable_problem_gives_small_p():
    X, y, g = data(shift=3.0, per_subject_label=False)
    folds = grouped_folds(g, None, 5)
    res = M.permutation_test(X, y, folds, groups=g, n_permutations=100, progress=False)
    assert res.scheme == "within_subject"
    assert res.observed > 0.95
    assert res.p_value <= 0.02
    assert abs(res.null_mean - 0.5) < 0.1


def test_noise_gives_roughly_uniform_p_values():
    ps = []
    for rep in range(40):
        X, y, g = data(n_subj=6, n_win=6, shift=0.0, per_subject_label=False, seed=100 + rep)
        folds = grouped_folds(g, None, 3)
        ps.append(M.permutation_test(X, y, folds, groups=g, n_permutations=19, seed=rep, kind="lda",
                                     progress=False).p_value)
    ps = np.array(ps)
    assert abs(ps.mean() - 0.5) <= 0.1
    assert np.mean(ps <= 0.05) <= 0.15  # a level-0.05 test rejects rarely under the null


def test_subject_label_scheme_with_pooled_statistic():
    X, y, g = data(n_subj=20, shift=2.0)
    folds = grouped_folds(g, y, 4)
    res = M.permutation_test(X, y, folds, groups=g, n_permutations=30, statistic="pooled", progress=False,
                             level="subject", aggregate_by=g)
    assert res.scheme == "subject_label" and res.level == "subject"
    assert res.observed == pytest.approx(1.0)
    assert abs(res.null_mean - 0.5) < 0.15
    assert res.p_value <= 2 / 31 + 1e-12


def test_permute_labels_keeps_the_structure():
    rng = np.random.default_rng(0)
    _, y, g = data(per_subject_label=False, n_win=7)
    yp = M.permute_labels(y, g, "within_subject", rng)
    for s in np.unique(g):
        assert sorted(yp[g == s]) == sorted(y[g == s])
    assert not np.array_equal(yp, y)
    _, y, g = data(per_subject_label=True, n_subj=20)
    yp = M.permute_labels(y, g, "subject_label", rng)
    for s in np.unique(g):
        assert np.unique(yp[g == s]).size == 1
    assert yp.sum() == y.sum()
    assert not np.array_equal(yp, y)


def test_scheme_that_does_not_fit_names_the_one_that_does():
    X, y, g = data(per_subject_label=True)
    with pytest.raises(ValueError, match="use scheme='subject_label'"):
        M.permutation_test(X, y, grouped_folds(g, y, 5), groups=g, scheme="within_subject", progress=False)
    X, y, g = data(per_subject_label=False)
    with pytest.raises(ValueError, match="use scheme='within_subject'"):
        M.permute_labels(y, g, "subject_label", np.random.default_rng(0))
    y_mixed = y.copy()
    y_mixed[g == 0] = 0
    with pytest.raises(ValueError, match="neither"):
        M.infer_scheme(y_mixed, g)
    with pytest.raises(ValueError, match="unknown permutation scheme"):
        M.check_scheme(y, g, "shuffle")


def test_mean_fold_statistic_undefined_in_loso_with_subject_labels():
    X, y, g = data(n_subj=6, shift=2.0)
    loso = [(np.flatnonzero(g != s), np.flatnonzero(g == s)) for s in range(6)]
    with pytest.raises(ValueError, match="statistic='pooled'"):
        M.permutation_test(X, y, loso, groups=g, n_permutations=5, progress=False)


def test_reusing_label_free_steps_equals_refitting_the_whole_pipeline():
    X, y, g = data(shift=1.0, per_subject_label=False, d=12)
    folds = grouped_folds(g, None, 5)
    kw = dict(groups=g, n_permutations=8, progress=False, pca=5, C=0.5, seed=3)
    fast = M.permutation_test(X, y, folds, reuse_unsupervised=True, **kw)
    slow = M.permutation_test(X, y, folds, reuse_unsupervised=False, **kw)
    assert fast.observed == pytest.approx(slow.observed, abs=1e-10)
    np.testing.assert_allclose(fast.null, slow.null, atol=1e-10)


def test_draws_that_leave_a_fold_unscorable_are_redrawn_and_counted():
    """12 subjects with one label each, 4 folds of 3: a subject-label permutation often gives a one-class test fold
    (AUROC undefined): such draws are redrawn (a restricted permutation test), never a crash."""
    X, y, g = data(n_subj=12, n_win=6, shift=2.0)
    folds = grouped_folds(g, y, 4)
    res = M.permutation_test(X, y, folds, groups=g, n_permutations=40, seed=1, progress=False)
    assert res.scheme == "subject_label" and res.statistic == "mean_fold"
    assert res.n_redrawn > 0 and np.isfinite(res.null).all() and res.null.size == 40
    assert res.observed > 0.8 and res.p_value <= 0.1 and res.null_mean < 0.65
    assert res.to_dict()["n_redrawn"] == res.n_redrawn
    pooled = M.permutation_test(X, y, folds, groups=g, n_permutations=40, seed=1, progress=False, statistic="pooled")
    assert pooled.n_redrawn < res.n_redrawn  # pooled needs only the training folds to hold both classes
    for tr, te in folds:  # every draw kept can be scored: both classes in each training fold
        assert M.evaluable(y, folds, 2, "mean_fold")


def test_feature_preprocessing_is_paper_001_section_3_3():
    from eegfm_bench.runs.controls.config import DEFAULT_FEATURE_PREPROCESSING as P

    assert (P["sfreq"], P["l_freq"], P["h_freq"], P["reference"], P["window_s"]) == (200.0, 0.5, 70.0, "average", 4.0)
    assert "§3.3" in P["source"] and "0.5-70 Hz" in P["source"]
