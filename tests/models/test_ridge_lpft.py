"""Ridge probe, MLP head and LP-FT (issue 15 part 2): the streaming ridge probe is scikit-learn's
``RidgeClassifierCV`` with the validation subjects as its split; the ridge and mlp heads and the lp_ft regime run
in a cv on real staged EEG; LP-FT's second stage starts from the first stage's best head."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from eegfm_testutils import requires_data


@pytest.mark.parametrize("n_classes", [2, 3])
def test_ridge_probe_equals_sklearn_ridgeclassifiercv_on_the_validation_split(n_classes):
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.model_selection import PredefinedSplit

    from eegfm_bench.models.ridge import DEFAULT_ALPHAS, ridge_probe

    rng = np.random.default_rng(n_classes)
    n, p = 90, 700
    y = rng.integers(0, n_classes, n)
    X = rng.normal(size=(n, 7, p // 7)) + 0.4 * y[:, None, None] * (rng.random((1, 7, p // 7)) < 0.03)
    tr, va, te = np.arange(50), np.arange(50, 70), np.arange(70, 90)
    r = ridge_probe(X, y, tr, va, te, chunk=33, coef=True)  # tokens flattened, 22 column chunks
    fit = np.r_[tr, va]
    sk = RidgeClassifierCV(alphas=DEFAULT_ALPHAS, cv=PredefinedSplit(np.r_[np.full(50, -1), np.zeros(20)]),
                           scoring="balanced_accuracy").fit(X[fit].reshape(len(fit), -1), y[fit])
    d = sk.decision_function(X[te].reshape(len(te), -1))
    assert r["alpha"] == sk.alpha_
    np.testing.assert_allclose(r["decision"][:, 1] if n_classes == 2 else r["decision"], d, atol=1e-10)
    np.testing.assert_allclose(r["coef"].reshape(np.shape(sk.coef_)), sk.coef_, atol=1e-10)
    np.testing.assert_allclose(r["intercept"].reshape(np.shape(sk.intercept_)), sk.intercept_, atol=1e-10)
    assert (r["pred"] == sk.predict(X[te].reshape(len(te), -1))).all()
    # the chunk size changes nothing (streaming)
    r2 = ridge_probe(X, y, tr, va, te, chunk=10_000)
    np.testing.assert_allclose(r["decision"], r2["decision"], atol=1e-10)
    with pytest.raises(ValueError, match="alphas must be > 0"):
        ridge_probe(X, y, tr, va, te, alphas=[0.0])



@pytest.mark.parametrize("n_classes", [2, 3])
def test_primal_and_dual_ridge_agree_and_equal_sklearn(n_classes):
    """Issue 35 item 4: the primal form (``p × p`` scatter over row chunks) gives the dual's decisions and
    scikit-learn's on rows that outnumber the features; features far from zero mean catch a primal without
    centring."""
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.model_selection import PredefinedSplit

    from eegfm_bench.models import ridge as rmod

    rng = np.random.default_rng(10 + n_classes)
    n, p = 600, 24
    y = rng.integers(0, n_classes, n)
    X = 50.0 + rng.normal(size=(n, p)) + 0.5 * y[:, None] * (np.arange(p) < 3)  # offset 50: centring matters
    tr, va, te = np.arange(350), np.arange(350, 480), np.arange(480, 600)
    primal = rmod.ridge_probe(X, y, tr, va, te, form="primal", coef=True)
    dual = rmod.ridge_probe(X, y, tr, va, te, form="dual", coef=True)
    auto = rmod.ridge_probe(X, y, tr, va, te)
    assert (primal["form"], dual["form"], auto["form"]) == ("primal", "dual", "primal")
    assert primal["alpha"] == dual["alpha"]
    np.testing.assert_allclose(primal["decision"], dual["decision"], atol=1e-8)
    np.testing.assert_allclose(primal["coef"], dual["coef"], atol=1e-8)
    np.testing.assert_allclose(primal["intercept"], dual["intercept"], atol=1e-6)
    fit = np.r_[tr, va]
    sk = RidgeClassifierCV(alphas=rmod.DEFAULT_ALPHAS, cv=PredefinedSplit(np.r_[np.full(tr.size, -1),
                                                                             np.zeros(va.size)]),
                           scoring="balanced_accuracy").fit(X[fit], y[fit])
    d = sk.decision_function(X[te])
    assert primal["alpha"] == sk.alpha_
    np.testing.assert_allclose(primal["decision"][:, 1] if n_classes == 2 else primal["decision"], d, atol=1e-8)
    # row chunks change nothing (a chunk of 7 rows: 50 passes over the fitting rows)
    old = rmod.ROW_CHUNK_VALUES
    try:
        rmod.ROW_CHUNK_VALUES = 7 * p
        chunked = rmod.ridge_probe(X, y, tr, va, te, form="primal")
    finally:
        rmod.ROW_CHUNK_VALUES = old
    np.testing.assert_allclose(chunked["decision"], primal["decision"], atol=1e-9)
    with pytest.raises(ValueError, match="form must be one of"):
        rmod.ridge_probe(X, y, tr, va, te, form="lsqr")


def test_primal_ridge_memory_is_bounded_by_the_features_not_the_rows(tmp_path):
    """40,000 memory-mapped windows × 32 features, read 2,048 rows at a time: the probe's peak numpy allocation
    (tracemalloc) stays under 4 MiB — the feature matrix is 5 MiB, the dual's ``n × n`` kernel alone would be
    12.8 GB — so nothing holds the rows at once beyond the index and the outputs."""
    import tracemalloc

    from eegfm_bench.models import ridge as rmod

    n, p = 40_000, 32
    rng = np.random.default_rng(0)
    X = np.lib.format.open_memmap(tmp_path / "f.npy", mode="w+", dtype=np.float32, shape=(n, p))
    y = rng.integers(0, 2, n)
    for r0 in range(0, n, 5000):
        X[r0:r0 + 5000] = rng.normal(size=(5000, p)) + 0.3 * y[r0:r0 + 5000, None]
    X.flush()
    X = np.load(tmp_path / "f.npy", mmap_mode="r")
    tr, va, te = np.arange(30_000), np.arange(30_000, 35_000), np.arange(35_000, n)
    old = rmod.ROW_CHUNK_VALUES
    rmod.ROW_CHUNK_VALUES = 2048 * p
    tracemalloc.start()
    try:
        r = rmod.ridge_probe(X, y, tr, va, te)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        rmod.ROW_CHUNK_VALUES = old
    assert r["form"] == "primal"
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert 0.6 < np.mean(r["pred"] == y[te]) <= 1.0


@requires_data
def test_ridge_mlp_and_lp_ft_in_a_cv(tmp_path, monkeypatch):
    import lightning as L
    import torch

    import eegfm_bench.models.closed_form as closed_form
    from eegfm_bench.runs.cv.command import run_cv

    got = {}
    real_ridge = closed_form.ridge_probe  # the ridge head's closed-form solve (CLOSED_FORM's "ridge" entry)
    monkeypatch.setattr(closed_form, "ridge_probe", lambda *a, **k: got.setdefault(len(got), real_ridge(*a, **k)))
    fits = []
    real_fit = L.Trainer.fit

    def fit(self, model, *a, **k):
        start = {n: t.detach().clone() for n, t in model.head.state_dict().items()}
        out = real_fit(self, model, *a, **k)
        best = self.checkpoint_callback.best_model_path if self.checkpoint_callback else ""
        saved = torch.load(best, map_location="cpu", weights_only=True)["state_dict"] if best else {}
        fits.append({"regime": model.regime, "start": start,
                     "best": {n[5:]: t for n, t in saved.items() if n.startswith("head.")}})
        return out

    monkeypatch.setattr(L.Trainer, "fit", fit)
    cfg = {"experiment": "rl", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "seed": 0, "confound": False,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 6, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 3, "patience": 3},
           "runs": [{"model": "labram", "regime": "head_only", "heads": ["ridge", "mlp"],
                     "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4},
                     "head_kwargs": {"mlp": {"hidden": [16]}}},
                    {"model": "labram", "regime": "lp_ft", "heads": ["mean"], "lp_ft": {"lp_max_epochs": 2},
                     "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = run_cv(cfg, progress=False)
    rows = pd.read_csv(tmp_path / "o" / "results.csv")
    assert set(zip(rows.regime, rows["head"])) == {("head_only", "ridge"), ("head_only", "mlp"), ("lp_ft", "mean")}
    assert len(table) == 3
    # ridge: the Lightning test loop's probabilities are the closed-form solution's (no SGD fit ran for it)
    r = got[0]
    pred = pd.read_csv(next((tmp_path / "o" / "predictions").glob("labram-head_only-ridge-*-fold0.csv")))
    np.testing.assert_allclose(pred[["p0", "p1"]].to_numpy(), r["proba"], atol=1e-4)
    alpha = rows[(rows["head"] == "ridge") & (rows.metric == "ridge_alpha")].value
    assert alpha.tolist() == [r["alpha"]]
    # LP-FT: stage 1 (head only, frozen) then stage 2 (full) starting from stage 1's best head
    assert [f["regime"] for f in fits] == ["head_only", "head_only", "full"]  # mlp cell, LP stage, FT stage
    lp, ft = fits[1], fits[2]
    assert lp["best"] and all(torch.equal(ft["start"][n], lp["best"][n]) for n in lp["best"])
    assert not all(torch.equal(lp["start"][n], lp["best"][n]) for n in lp["best"])  # stage 1 did train
    lpe = rows[(rows.regime == "lp_ft") & (rows.metric == "lp_epochs")].value
    assert lpe.between(1, 2).all()
    # sweep / probe read the lp_ft and ridge checkpoints like any other
    from eegfm_bench.runs.cv.output import CVRun, load_fold_model

    cks = CVRun(tmp_path / "o").checkpoints(["labram"], None, None, None)
    assert {(c.regime, c.head) for c in cks} == {("head_only", "ridge"), ("head_only", "mlp"), ("lp_ft", "mean")}
    models = {c.head: load_fold_model(c.path) for c in cks}
    d = models["mlp"].backbone.d_model
    # mlp head: one hidden layer of 16 on the d-dimensional mean: d·16 + 16 + 16·2 + 2 parameters
    hp = rows[(rows["head"] == "mlp") & (rows.metric == "head_params")].value
    assert hp.tolist() == [d * 16 + 16 + 16 * 2 + 2]
    # the ridge checkpoint is a flatten head holding the closed-form weights (two classes mirrored: [-w, w])
    w = models["ridge"].head.classifier.weight.detach().double().numpy()
    np.testing.assert_allclose(w[1], r["coef"][0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w[0], -r["coef"][0], rtol=1e-5, atol=1e-7)


def test_per_head_settings_and_check_take_the_new_heads(tmp_path, capsys):
    """head_kwargs per head ({mlp: {...}, ridge: {...}}); a setting a head does not take is refused before any data
    is read with the per-head fix; `eegfm-bench check` runs the ridge head and an lp_ft regime."""
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv.cells import run_check, head_kwargs_for, load_config

    base = {"experiment": "hk", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "confound": False,
            "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 4, "batch_size": 8},
            "split": {"scheme": "kfold", "k": 3, "n_val_groups": 1, "folds": [0]}, "trainer": {"max_epochs": 1}}
    tiny = {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}
    run = {"model": "labram", "regime": "head_only", "heads": ["mean", "mlp", "ridge"], "backbone_kwargs": tiny,
           "head_kwargs": {"mlp": {"hidden": [8]}, "ridge": {"alphas": [1.0, 10.0]}}}
    cfg = load_config({**base, "runs": [run]})
    r = cfg.runs[0]
    assert head_kwargs_for(r, "mlp") == {"hidden": [8]} and head_kwargs_for(r, "mean") is None
    assert head_kwargs_for(r, "ridge") == {"alphas": [1.0, 10.0]}
    with pytest.raises(ConfigError, match=r"head_kwargs \['hidden'\] are not settings of the mean head.*fix: per-head"):
        load_config({**base, "runs": [{**run, "head_kwargs": {"hidden": [8]}}]})
    run_check({**base, "runs": [{**run, "heads": ["ridge", "mlp"]},
                                   {"model": "labram", "regime": "lp_ft", "heads": ["mean"], "backbone_kwargs": tiny}]})
    out = capsys.readouterr().out
    assert out.count("ok ") == 3


def test_a_ridge_cell_hash_ignores_what_cannot_change_a_closed_form_probe():
    """The ridge cell trains no batch: the optimiser, schedule and batch size leave its hash (no needless retrain),
    precision (the tokens' dtype) and the ridge grid do not; a trained head's hash takes them all."""
    from eegfm_bench.runs.cv.cells import cell_hash, load_config

    def hashes(**over):
        cfg = load_config({"task": "eegmmidb_mi", "out_dir": "/tmp/x", "runs": [
            {"model": "labram", "regime": "head_only", "heads": ["ridge", "flatten"]}], **over})
        run = cfg.runs[0]
        return cell_hash(cfg, run, "ridge", "k"), cell_hash(cfg, run, "flatten", "k")

    base = hashes()
    for over in ({"optim": {"lr": 0.1}}, {"trainer": {"max_epochs": 3, "patience": 1}},
                 {"data": {"batch_size": 8}}):
        ridge, flat = hashes(**over)
        assert ridge == base[0], over
        assert flat != base[1], over
    assert hashes(trainer={"precision": "bf16-mixed"})[0] != base[0]
    cfg = load_config({"task": "eegmmidb_mi", "out_dir": "/tmp/x", "runs": [
        {"model": "labram", "regime": "head_only", "heads": ["ridge"], "head_kwargs": {"ridge": {"alphas": [1.0]}}}]})
    assert cell_hash(cfg, cfg.runs[0], "ridge", "k") != base[0]
