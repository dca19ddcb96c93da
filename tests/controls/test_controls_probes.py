"""Fold-local frozen probes (paper 001 §3.5)."""
import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from eegfm_bench.controls import probes as P


def subject_data(n_subj=10, n_win=20, d=8, shift=2.0, per_subject_label=True, seed=0):
    """Windows of subjects; class 1 is shifted by ``shift`` along the first feature."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_subj), n_win)
    if per_subject_label:
        y = np.repeat(np.arange(n_subj) % 2, n_win)
    else:
        y = np.tile(np.arange(n_win) % 2, n_subj)
    X = rng.standard_normal((groups.size, d)) + 0.5 * rng.standard_normal((n_subj, d))[groups]
    X[:, 0] += shift * y
    return X, y, groups


def test_fold_local_pipeline_matches_manual_sklearn():
    X, y, g = subject_data()
    folds = P.grouped_folds(g, y, n_folds=5, seed=1)
    res = P.evaluate_probe(X, y, folds, kind="logreg", C=0.1, pca=3, groups=g)
    for tr, te in folds:
        manual = make_pipeline(StandardScaler(), PCA(3, random_state=42),
                               LogisticRegression(C=0.1, class_weight="balanced", max_iter=1000))
        manual.fit(X[tr], y[tr])
        np.testing.assert_allclose(res.proba[te], manual.predict_proba(X[te]), atol=1e-8)
    assert set(res.fold_metrics.pca_k) == {3}


@pytest.mark.parametrize("kind", ["logreg", "lda", "svm_rbf"])
def test_each_probe_separates_a_separable_problem(kind):
    X, y, g = subject_data(shift=4.0)
    folds = P.grouped_folds(g, y, n_folds=5)
    res = P.evaluate_probe(X, y, folds, kind=kind, groups=g, aggregate_by=g)
    assert res.mean_fold("auroc") > 0.97
    assert res.mean_fold("balanced_accuracy") > 0.9
    assert res.mean_fold("auroc", "subject") == pytest.approx(1.0)
    assert np.allclose(res.proba.sum(1), 1.0)


def test_chance_on_noise():
    X, y, g = subject_data(shift=0.0, n_subj=20)
    res = P.evaluate_probe(X, y, P.grouped_folds(g, y, 5), groups=g)
    assert abs(res.pooled["window"]["auroc"] - 0.5) < 0.1


def test_pca_before_scaler_order_and_svm_probabilities():
    pipe = P.make_probe("logreg", pca=5, pca_position="before_scaler")
    assert [n for n, _ in pipe.steps] == ["pca", "scaler", "clf"]
    pipe = P.make_probe("svm_rbf", pca=5)
    assert [n for n, _ in pipe.steps] == ["scaler", "pca", "clf"]
    # default: the paper's SVC(probability=True) (libsvm Platt scaling + pairwise coupling)
    clf = pipe.named_steps["clf"]
    assert isinstance(clf, SVC) and clf.probability and clf.C == 10.0
    pipe = P.make_probe("svm_rbf", svm_probability="calibrated")
    assert isinstance(pipe.named_steps["clf"], CalibratedClassifierCV)
    assert pipe.named_steps["clf"].estimator.C == 10.0
    with pytest.raises(ValueError, match="libsvm"):
        P.make_probe("svm_rbf", svm_probability="platt")


def test_svm_probability_libsvm_vs_calibrated_three_classes():
    """3 classes: libsvm couples one-vs-one probabilities, CalibratedClassifierCV normalises one-vs-rest sigmoids;
    ranking (AUROC) agrees, single probabilities do not (the size quoted in the probes module's docstring)."""
    import warnings

    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 100)

    def draw():
        X = rng.normal(size=(300, 8))
        X[:, 0] += 0.8 * y
        X[:, 1] += 1.0 * (y == 1)
        return X

    X, Xt = draw(), draw()
    p = {}
    for m in ("libsvm", "calibrated"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the deprecation warning of SVC(probability=True) is silenced
            p[m] = P.make_probe("svm_rbf", svm_probability=m).fit(X, y).predict_proba(Xt)
        assert np.allclose(p[m].sum(1), 1.0)
    auc = {m: roc_auc_score(y, v, multi_class="ovr") for m, v in p.items()}
    assert auc["libsvm"] == pytest.approx(0.70768, abs=1e-4) and abs(auc["libsvm"] - auc["calibrated"]) < 1e-3
    d = np.abs(p["libsvm"] - p["calibrated"])
    assert 0.2 < d.max() < 0.3 and 0.03 < d.mean() < 0.08


def test_subject_and_window_levels_are_reported_separately():
    X, y, g = subject_data(shift=0.8, n_subj=12)
    res = P.evaluate_probe(X, y, P.grouped_folds(g, y, 3), groups=g, aggregate_by=g)
    s = res.summary()
    assert set(s.level) == {"window", "subject"}
    sub = res.fold_metrics[res.fold_metrics.level == "subject"]
    assert set(sub.n_units) == {4}  # 12 subjects / 3 folds
    # the subject-level score is the mean probability per subject
    tr, te = P.grouped_folds(g, y, 3)[0]
    up, uy, ids = P.aggregate_proba(res.proba[te], y[te], g[te])
    np.testing.assert_allclose(up[:, 1], [res.proba[te][g[te] == s, 1].mean() for s in ids])
    rows = res.to_rows(model="m", task="t")
    assert {"auroc_window", "auroc_subject", "balanced_accuracy_subject"} <= {r["metric"] for r in rows}


def test_aggregating_units_with_both_classes_raises():
    X, y, g = subject_data(per_subject_label=False)
    with pytest.raises(ValueError, match="more than one label.*aggregate_by=None"):
        P.evaluate_probe(X, y, P.grouped_folds(g, None, 5), groups=g, aggregate_by=g)


def test_loso_with_subject_labels_has_undefined_fold_auroc():
    X, y, g = subject_data(n_subj=6)
    loso = [(np.flatnonzero(g != s), np.flatnonzero(g == s)) for s in range(6)]
    res = P.evaluate_probe(X, y, loso, groups=g)
    assert np.isnan(res.fold_values("auroc")).all()
    with pytest.raises(ValueError, match="pooled"):
        res.mean_fold("auroc")
    assert res.pooled["window"]["auroc"] > 0.8


def test_multiclass_auroc():
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(15), 10)
    y = np.repeat(np.arange(15) % 3, 10)
    X = rng.standard_normal((150, 6))
    X[np.arange(150), y] += 3.0
    res = P.evaluate_probe(X, y, P.grouped_folds(g, y, 5), groups=g, kind="lda")
    assert res.proba.shape == (150, 3)
    assert res.mean_fold("auroc") > 0.95


def test_leaking_or_overlapping_folds_raise():
    X, y, g = subject_data()
    idx = np.arange(len(y))
    with pytest.raises(ValueError, match="leaks subjects"):
        P.evaluate_probe(X, y, [(idx[:145], idx[145:])], groups=g)  # subject 7 on both sides
    with pytest.raises(ValueError, match="already tested"):
        P.check_folds([(idx[:100], idx[100:]), (idx[:50], idx[150:])], len(y))
    with pytest.raises(ValueError, match="outside"):
        P.check_folds([(idx, np.array([500]))], len(y))


def test_too_few_subjects_for_folds_raises():
    _, y, g = subject_data(n_subj=4)
    with pytest.raises(ValueError, match="4 subjects for 5 folds"):
        P.grouped_folds(g, y, n_folds=5)
    with pytest.raises(ValueError, match="class .* has 2 subjects for 3 stratified folds"):
        P.grouped_folds(g, y, n_folds=3)


def test_pca_larger_than_training_fold_raises_or_caps():
    X, y, g = subject_data(n_subj=6, n_win=5, d=40)
    folds = P.grouped_folds(g, y, 3)
    with pytest.raises(ValueError, match="cap_pca=True"):
        P.evaluate_probe(X, y, folds, pca=30)
    res = P.evaluate_probe(X, y, folds, pca=30, cap_pca=True)
    assert set(res.fold_metrics.pca_k) == {20}  # 4 training subjects × 5 windows


def test_training_fold_missing_a_class_raises():
    X, y, g = subject_data(n_subj=4)
    fold = [(np.flatnonzero(np.isin(g, [0, 2])), np.flatnonzero(np.isin(g, [1, 3])))]
    with pytest.raises(ValueError, match="lacks class"):
        P.evaluate_probe(X, y, fold)


def test_unknown_probe_names_the_valid_ones():
    with pytest.raises(KeyError, match="logreg"):
        P.make_probe("xgboost")


def test_paired_comparison_of_two_probe_results_on_the_same_folds():
    from eegfm_bench import stats as S

    X, y, g = subject_data(n_subj=20, shift=1.5, seed=4)
    rng = np.random.default_rng(5)
    X_weak = X.copy()
    X_weak[:, 0] = rng.standard_normal(len(y))  # comparator loses the informative feature
    folds = P.grouped_folds(g, y, 4)
    strong = P.evaluate_probe(X, y, folds, groups=g)
    weak = P.evaluate_probe(X_weak, y, folds, groups=g)
    cmp_ = P.paired_comparison(strong, weak, y, folds, g, n_boot=400)
    np.testing.assert_allclose(cmp_.fold_diffs, strong.fold_values() - weak.fold_values(), atol=1e-12)
    assert cmp_.bootstrap.estimate == pytest.approx(strong.mean_fold() - weak.mean_fold())
    assert cmp_.bootstrap.low > 0
    assert cmp_.wilcoxon.n == 4 and cmp_.sign_flip.p_value == pytest.approx(S.sign_flip_test(cmp_.fold_diffs).p_value)
    sub = P.paired_comparison(strong, weak, y, folds, g, level="subject", aggregate_by=g, n_boot=200)
    assert sub.bootstrap.n_clusters == 20
