"""The test-time perturbation sweep (paper 003 App. D, H): engine, callback, `eegfm-bench sweep`, report.

Real-data tests train tiny EEGNets with the cv runner once per module:

* ``eegmmidb_mi`` (2 folds × 1 epoch, as ``configs/experiment/tiny_ci.yaml``) for "every condition writes its
  rows", resumability, failures and not-applicable rows — its clean accuracy is near chance, which these
  checks do not need;
* ``eegmmidb_eyes`` (eyes open vs closed, fold 1 only, 6 epochs) for "−15 dB white noise lowers balanced
  accuracy": a tiny EEGNet learns that task well above chance in seconds, motor imagery it does not.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from eegfm_bench.cli import main
from eegfm_bench.runs.cv.command import run_cv
from eegfm_bench.config import ConfigError
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.data.windows import WindowSet
from eegfm_bench.perturb.channels import dropout_mask
from eegfm_bench.perturb.conditions import ChannelDropout, PerturbContext, default_conditions, parse_condition
from eegfm_bench.perturb.dataset import PerturbedWindows
from eegfm_bench.perturb.evaluate import (
    NOT_APPLICABLE,
    filter_from_preprocessing,
    not_applicable_reason,
    perturb_context,
)
from eegfm_bench.perturb.noise import FilterSpec
from eegfm_bench.reports.sweep import add_labels, degradation_table, fold_deltas, table_markdown
from eegfm_bench.runs.cv.output import load_fold_model
from eegfm_bench.runs.sweep.command import evaluate_conditions, run_sweep
from eegfm_bench.registry import UnknownNameError
from eegfm_bench.results import KEY_COLUMNS, ROW_COLUMNS

from eegfm_testutils import requires_data

REPO = Path(__file__).resolve().parents[2]
EEGMMIDB = ['FC5', 'FC3', 'FC1', 'FCz', 'FC2', 'FC4', 'FC6', 'C5', 'C3', 'C1', 'Cz', 'C2', 'C4', 'C6', 'CP5', 'CP3',
            'CP1', 'CPz', 'CP2', 'CP4', 'CP6', 'Fp1', 'Fpz', 'Fp2', 'AF7', 'AF3', 'AFz', 'AF4', 'AF8', 'F7', 'F5', 'F3',
            'F1', 'Fz', 'F2', 'F4', 'F6', 'F8', 'FT7', 'FT8', 'T7', 'T8', 'T9', 'T10', 'TP7', 'TP8', 'P7', 'P5', 'P3',
            'P1', 'Pz', 'P2', 'P4', 'P6', 'P8', 'PO7', 'PO3', 'POz', 'PO4', 'PO8', 'O1', 'Oz', 'O2', 'Iz']
ignore_missing = pytest.mark.filterwarnings("ignore::eegfm_bench.perturb.regions.MissingElectrodesWarning")


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def mi_cv(tmp_path_factory):
    """Tiny EEGNet, eegmmidb_mi, 2 folds x 1 epoch (configs/experiment/tiny_ci.yaml)."""
    cfg = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())
    cfg["out_dir"] = str(tmp_path_factory.mktemp("mi") / "cv")
    cfg["trainer"]["accelerator"] = "cpu"
    run_cv(cfg, progress=False)
    return Path(cfg["out_dir"])


@pytest.fixture(scope="module")
def eyes_cv(tmp_path_factory):
    """Tiny EEGNet, eegmmidb_eyes (7 subjects), fold 1 of 3, 6 epochs: clean accuracy well above chance."""
    cfg = {"experiment": "tiny_eyes", "task": "eegmmidb_eyes", "out_dir": str(tmp_path_factory.mktemp("eyes") / "cv"),
           "seed": 0, "data": {"batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [1]},
           "trainer": {"max_epochs": 6, "patience": 6, "accelerator": "cpu"}, "optim": {"lr": 0.003},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 2, "kernel_length": 32}}]}
    run_cv(cfg, progress=False)
    return Path(cfg["out_dir"])


def _sweep_cfg(cv_dir: Path, out: Path, **kw) -> dict:
    return {"cv_out_dir": str(cv_dir), "out_dir": str(out), "batch_size": 16, "trainer": {"accelerator": "cpu"},
            **kw}


def _rows(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "results.csv")


# ---------------------------------------------------------------------------------------------- real data
@requires_data
@ignore_missing
def test_sweep_writes_every_condition_and_resumes(mi_cv, tmp_path, capsys):
    out = tmp_path / "sweep"
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(_sweep_cfg(mi_cv, out)))
    assert main(["sweep", "--config", str(path), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "white_snr=-15dB" in printed and "| 1 | eegnet |" in printed and "sweep.md" in printed
    df = _rows(out)
    assert list(df.columns[:len(ROW_COLUMNS)]) == ROW_COLUMNS
    assert {"note", "details", "checkpoint", "perturb_seed"} <= set(df.columns)
    all_conds = [c.name for c in default_conditions("eegmmidb_mi", variable_channels=True)]
    removed = [c for c in all_conds if c.endswith("_removed")]
    assert len(all_conds) == 26 and len(removed) == 5
    for fold in (0, 1):
        f = df[df.fold == fold]
        assert f.condition.iloc[0] == "clean"  # clean first
        assert list(dict.fromkeys(f.condition)) == all_conds
        ok = f[f.metric != NOT_APPLICABLE]
        assert len(ok) == 21 * 3 and set(ok.metric) == {"balanced_accuracy", "auroc", "cohen_kappa"}
        for metric, lo in (("balanced_accuracy", 0.0), ("auroc", 0.0), ("cohen_kappa", -1.0)):
            v = ok[ok.metric == metric].value
            assert len(v) == 21 and ((v >= lo) & (v <= 1)).all()
        na = f[f.metric == NOT_APPLICABLE]
        assert sorted(na.condition) == sorted(removed) and na.value.isna().all()
        assert na.note.str.contains("fixed channel set").all()
    assert not df.duplicated(subset=KEY_COLUMNS).any()
    assert set(df.n_windows) == {16} and set(df.n_subjects) == {2} and set(df.perturb_seed) == {0}
    # same model, same windows, no retraining: the sweep's clean rows equal the cv's
    cv_rows = pd.read_csv(mi_cv / "results.csv")
    for metric in ("balanced_accuracy", "auroc", "cohen_kappa"):
        a = df[(df.condition == "clean") & (df.metric == metric)].sort_values("fold").value.to_numpy()
        b = cv_rows[(cv_rows.condition == "clean") & (cv_rows.metric == metric)].sort_values("fold").value.to_numpy()
        np.testing.assert_allclose(a, b, atol=1e-6)
    # dropout masks by channel name: in each row's details and in dropout_masks.json (Table 5)
    masks = json.loads((out / "dropout_masks.json").read_text())["eegmmidb"]
    assert masks["ch_names"] == EEGMMIDB
    for m in masks["masks"]:
        expect = dropout_mask(EEGMMIDB, m["p"], 0, "eegmmidb", rule="paper")
        assert m["dropped"] == list(expect.dropped) and m["n_dropped"] == expect.n_dropped
        det = json.loads(df[df.condition == f"dropout_p={m['p']:g}_zero"].details.iloc[0])
        assert det["dropped"] == list(expect.dropped) and det["n_chans"] == 64
    det = json.loads(df[df.condition == "white_snr=-5dB"].details.iloc[0])
    assert det["filter"] == {"sfreq": 128.0, "l_freq": 1.0, "h_freq": 40.0, "notch_freq": [60.0], "native_sfreq": 160.0}
    det = json.loads(df[df.condition == "region=primary_zero"].details.iloc[0])
    assert "C3" in det["channels"] and "TTP7h" in det["missing"]
    # report: deltas in pp, markdown, curves
    deltas = pd.read_csv(out / "deltas.csv")
    d = deltas[(deltas.fold == 0) & (deltas.condition == "white_snr=-15dB")].iloc[0]
    assert d.delta_pp == pytest.approx(100 * (d.value - d.clean))
    md = (out / "sweep.md").read_text()
    for text in ("## Degradation: all models", "Not applicable", "dropout_p=0.5_removed", "| eegmmidb (64 ch) | 0.50 |",
                 "degradation_curves.png", "smallest attainable p is 0.5"):
        assert text in md
    png = (out / "degradation_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    folder = out / "predictions" / f"eegnet-full-flatten-{df.config_hash.iloc[0][:8]}-fold0"
    assert len(list(folder.glob("*.csv"))) == 21
    assert json.loads((out / "failures.json").read_text()) == []
    # rerun: every condition is skipped, nothing new is written
    before = (out / "results.csv").read_bytes()
    assert main(["sweep", "--config", str(path), "--no-progress"]) == 0
    assert (out / "results.csv").read_bytes() == before


@requires_data
@ignore_missing
def test_failure_in_one_condition_keeps_the_others(mi_cv, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    conds = ["clean", "white_snr=0dB", "dropout_p=0.3_zero", "dropout_p=0.5_zero"]
    cfg = _sweep_cfg(mi_cv, out, conditions=conds, save_predictions=False)
    real_apply = ChannelDropout.apply

    def broken(self, x, ch_names, rng, ctx):
        if self.p == 0.3:
            raise RuntimeError("simulated crash inside dropout_p=0.3")
        return real_apply(self, x, ch_names, rng, ctx)

    monkeypatch.setattr(ChannelDropout, "apply", broken)
    with pytest.raises(RuntimeError, match="2 condition\\(s\\) failed"):
        run_sweep(cfg, progress=False)
    df = _rows(out)
    assert sorted(set(df.condition)) == sorted(set(conds) - {"dropout_p=0.3_zero"})
    assert len(df) == 2 * 3 * 3  # 2 folds x 3 conditions x 3 metrics
    fails = json.loads((out / "failures.json").read_text())
    assert [(f["fold"], f["condition"]) for f in fails] == [(0, "dropout_p=0.3_zero"), (1, "dropout_p=0.3_zero")]
    assert "simulated crash" in fails[0]["error"] and "Traceback" in fails[0]["traceback"]
    assert "dropout_p=0.3_zero" in (out / "sweep.md").read_text()  # listed under failures
    # a hard crash (not caught) inside a later condition loses none of the rows written before it
    monkeypatch.setattr(ChannelDropout, "apply",
                        lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt("simulated kill")))
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # Lightning turns Ctrl-C inside a loop into exit(1)
        run_sweep({**cfg, "out_dir": str(tmp_path / "killed")}, progress=False)
    killed = _rows(tmp_path / "killed")
    assert set(killed.condition) == {"clean", "white_snr=0dB"} and set(killed.fold) == {0}
    # fixed: the rerun writes only the failed condition, and keeps the earlier rows as they were
    monkeypatch.setattr(ChannelDropout, "apply", real_apply)
    run_sweep(cfg, progress=False)
    df2 = _rows(out)
    assert len(df2) == 2 * 4 * 3
    pd.testing.assert_frame_equal(df2.iloc[:len(df)].reset_index(drop=True), df.reset_index(drop=True))
    assert set(df2.iloc[len(df):].condition) == {"dropout_p=0.3_zero"}
    assert json.loads((out / "failures.json").read_text()) == []
    before = (out / "results.csv").read_bytes()
    run_sweep(cfg, progress=False)
    assert (out / "results.csv").read_bytes() == before


@requires_data
def test_removal_on_eegnet_gives_not_applicable_rows(mi_cv, tmp_path):
    out = tmp_path / "sweep"
    run_sweep(_sweep_cfg(mi_cv, out, conditions=["dropout_p=0.5_removed", "region=primary_removed", "clean"],
                          save_predictions=False, trainer={"accelerator": "cpu", "loggers": ["csv", "tensorboard"]}),
               progress=False)
    # each condition's metrics reached the trackers (one logger run per fold and model group)
    logged = pd.read_csv(next((out / "logs" / "sweep-fold0").glob("eegnet-full-flatten-*/metrics.csv")))
    assert "sweep/eegnet-full-flatten/clean/balanced_accuracy" in logged.columns
    assert list((out / "tb" / "sweep-fold1").rglob("events.out.tfevents.*"))
    df = _rows(out)
    assert list(dict.fromkeys(df.condition)) == ["clean", "dropout_p=0.5_removed", "region=primary_removed"]
    na = df[df.metric == NOT_APPLICABLE]
    assert len(na) == 4 and na.value.isna().all() and set(na.fold) == {0, 1}
    assert na.note.str.startswith("eegnet has a fixed channel set").all()
    assert json.loads(na.details.iloc[0])["n_dropped"] >= 1  # the mask is recorded even when not applicable
    assert len(df[df.condition == "clean"]) == 6


@requires_data
def test_white_noise_at_minus_15_db_lowers_balanced_accuracy(eyes_cv, tmp_path):
    out = tmp_path / "sweep"
    run_sweep(_sweep_cfg(eyes_cv, out, conditions=["clean", "white_snr=10dB", "white_snr=-15dB"], reference=None),
               progress=False)
    bacc = _rows(out).query("metric == 'balanced_accuracy'").set_index("condition").value
    assert bacc["clean"] >= 0.75, f"the tiny EEGNet did not learn eyes open/closed (clean {bacc['clean']:.3f})"
    assert bacc["white_snr=-15dB"] <= bacc["clean"] - 0.15
    assert bacc["white_snr=-15dB"] < bacc["white_snr=10dB"]


@requires_data
def test_bad_config_fails_before_any_model_runs(mi_cv, tmp_path, monkeypatch):
    def no(*a, **k):
        raise AssertionError("a model or the windows were loaded before the config was validated")

    monkeypatch.setattr("eegfm_bench.runs.cv.output.load_fold_model", no)
    monkeypatch.setattr("eegfm_bench.runs.sweep.command.load_fold_model", no)  # the name runs/sweep/command.py imports
    monkeypatch.setattr("eegfm_bench.data.windows.load_windows", no)
    base = _sweep_cfg(mi_cv, tmp_path / "s")
    with pytest.raises(UnknownNameError, match="white_snr=<snr>dB"):
        run_sweep({**base, "conditions": ["clean", "gaussian_snr=5dB"]})
    with pytest.raises(UnknownNameError, match="primary, control"):
        run_sweep({**base, "conditions": ["region=frontal_zero"]})
    from eegfm_bench.perturb.conditions import ConditionError

    for bad in ("white_snr=infdB", "pink_snr=nandB"):
        with pytest.raises(ConditionError, match="finite"):
            run_sweep({**base, "conditions": [bad]})
    with pytest.raises(ConditionError, match=r"'dropout_p=1.5_zero': dropout probability must be in \(0, 1\).*fix:"):
        run_sweep({**base, "conditions": ["dropout_p=1.5_zero"]})
    with pytest.raises(ConfigError, match="attribution-only"):
        run_sweep({**base, "conditions": ["region_sub=primary"]})
    with pytest.raises(ConfigError, match="reference model 'labram'"):
        run_sweep({**base, "reference": "labram"})
    with pytest.raises(ConfigError, match="exactly one of"):
        run_sweep({"out_dir": str(tmp_path / "s")})
    with pytest.raises(ConfigError, match="unknown key condition. Did you mean 'conditions'"):
        run_sweep({**base, "condition": ["clean"]})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**base, "conditions": ["clean", "white_snr=-5dB", "dropout_p=0.5_gone"]}))
    with pytest.raises(UnknownNameError, match="zero, removed"):
        main(["sweep", "--config", str(path), "--no-progress"])
    assert not (tmp_path / "s").exists()


def test_the_sweep_config_is_typed_and_a_workers_copy_loads_again(tmp_path):
    """``load_sweep_config`` returns the frozen :class:`SweepConfig` (``cv_out_dir`` from ``cv_config``, the default
    ``out_dir``) without reading the cv run; a launcher's worker re-reads the parent's config."""
    from dataclasses import FrozenInstanceError

    from eegfm_bench.runs.sweep.command import _worker_config
    from eegfm_bench.config.sweep import SweepConfig
    from eegfm_bench.runs.sweep.config import load_sweep_config

    cv = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())
    path = tmp_path / "cv.yaml"
    path.write_text(yaml.safe_dump({**cv, "out_dir": str(tmp_path / "cv")}))
    cfg = load_sweep_config({"cv_config": str(path), "launcher": {"kind": "local"}}, ["--trainer.accelerator", "cpu"])
    assert isinstance(cfg, SweepConfig) and cfg.cv_out_dir == str(tmp_path / "cv")
    assert cfg.out_dir == str(tmp_path / "cv" / "sweep") and cfg.trainer["accelerator"] == "cpu"
    with pytest.raises(FrozenInstanceError):
        cfg.seed = 1
    again = load_sweep_config(_worker_config(cfg))
    assert again.cv_out_dir == cfg.cv_out_dir and again.launcher.kind == "none" and again.trainer == cfg.trainer


@requires_data
@ignore_missing
def test_perturbation_of_a_window_does_not_depend_on_its_batch(mi_cv):
    """A window's noise depends on (seed, condition, window) only: batch size, order and neighbours do not matter."""
    from torch.utils.data import DataLoader

    cv = yaml.safe_load((mi_cv / "config.yaml").read_text())
    from eegfm_bench.runs.cv.output import CVRun

    run = CVRun(mi_cv)
    ws = run.windows("eegnet")
    te = run.fold_indices(ws, 0)[2]
    ctx, _ = perturb_context(ws.meta, cv["task"], seed=0)
    for name in ("white_snr=0dB", "pink_snr=-5dB", "region_noise=primary_snr=-3dB", "dropout_p=0.5_zero"):
        ds = PerturbedWindows(ws, te, parse_condition(name), ctx)
        assert not ds.error
        by = {}
        for bs in (8, 64, 3):
            xs, idx = [], []
            for b in DataLoader(ds, batch_size=bs, shuffle=False):
                xs.append(b["x"].numpy()), idx.append(b["index"].numpy())
            by[bs] = np.concatenate(xs)[np.argsort(np.concatenate(idx))]
        np.testing.assert_array_equal(by[8], by[64])
        np.testing.assert_array_equal(by[3], by[64])
        rev = np.stack([ds[i]["x"].numpy() for i in reversed(range(len(ds)))])[::-1]  # one window at a time
        np.testing.assert_array_equal(rev, by[64])
        assert not np.allclose(by[64], np.asarray(ws.X[te]))  # the perturbation did something
    # another seed, another noise; the same window in another subset (rows), the same noise
    a = PerturbedWindows(ws, te, parse_condition("white_snr=0dB"), ctx)[0]["x"]
    b = PerturbedWindows(ws, te, parse_condition("white_snr=0dB"), PerturbContext(ctx.dataset, ctx.task, ctx.filter, 1))[0]["x"]
    c = PerturbedWindows(ws, te[[3, 0]], parse_condition("white_snr=0dB"), ctx)[1]["x"]
    assert not torch.allclose(a, b) and torch.equal(a, c)
    # the sweep's probabilities do not depend on the batch size or the DataLoader workers
    model = load_fold_model(run.checkpoints(folds=[0])[0].path)
    conds = [parse_condition(c) for c in ("clean", "white_snr=0dB", "dropout_p=0.5_zero", "region=control_removed")]
    r1 = {r.condition: r for r in evaluate_conditions({"m": model}, ws, te, conds, ctx, batch_size=5,
                                                        trainer={"accelerator": "cpu"})}
    r2 = {r.condition: r for r in evaluate_conditions({"m": model}, ws, te, conds, ctx, batch_size=16, num_workers=2,
                                                        trainer={"accelerator": "cpu"})}
    assert r1["region=control_removed"].status == NOT_APPLICABLE
    for c in ("clean", "white_snr=0dB", "dropout_p=0.5_zero"):
        assert r1[c].status == r2[c].status == "ok" and len(r1[c].index) == len(te)
        np.testing.assert_allclose(r1[c].probs, r2[c].probs, atol=1e-6)
    assert not np.allclose(r1["clean"].probs, r1["white_snr=0dB"].probs)


# ---------------------------------------------------------------------------------------------- synthetic
def _labram(head: str, **head_kwargs) -> FMClassifier:
    return FMClassifier(backbone="labram", head=head, ch_names=EEGMMIDB, n_times=800, n_classes=2,
                        backbone_kwargs=dict(num_layers=1, conv_out_channels=4, num_heads=2), head_kwargs=head_kwargs)


@ignore_missing
def test_channel_removal_applies_to_the_heads_that_take_any_token_count():
    """Whether a ``*_removed`` condition applies is the head's own answer for its settings
    (``PoolingHead.takes_any_token_count``), not its name: ``mlp`` with ``pooling: flatten`` is tied to the token
    count as ``flatten`` is (its forward would raise), with ``pooling: mean`` it is not; ``plan`` asks the same of a
    run's head, a closed-form head through its carrier."""
    from eegfm_bench.config.cv import RunConfig
    from eegfm_bench.runs.cv.cells import takes_any_token_count

    removed = parse_condition("dropout_p=0.5_removed")
    tied = {"flatten": {}, "mlp": {"pooling": "flatten", "hidden": [8]}}
    free = {"mean": {}, "max": {}, "attention": {}, "mean_tile": {}, "mlp": {"pooling": "mean", "hidden": [8]}}
    for head, kw in tied.items():
        reason = not_applicable_reason(removed, _labram(head, **kw))
        assert reason.startswith(f"the {head} head of labram is tied to the build-time token count"), reason
    for head, kw in free.items():
        assert not_applicable_reason(removed, _labram(head, **kw)) is None, head
    # attribution under a channel-removal condition asks the same question first (it raised only for the montage)
    from eegfm_bench.interpret.attribution import explain_fold
    from eegfm_bench.models.base import ChannelContractError

    ws = _synthetic_ws(np.zeros((2, 64, 800), np.float32), [0, 1])
    with pytest.raises(ChannelContractError, match=r"'dropout_p=0.5_removed' \(channels removed\) does not apply: "
                                                   r"the mlp head of labram is tied to the build-time token count"):
        explain_fold(_labram("mlp", pooling="flatten", hidden=[8]), ws, np.arange(2), condition="dropout_p=0.5_removed",
                     acfg=None)
    run = RunConfig(model="labram", heads=["mlp", "mean", "ridge", "flatten"],
                    head_kwargs={"mlp": {"pooling": "flatten"}, "ridge": {"alphas": [1.0]}})
    assert [takes_any_token_count(run, h) for h in run.heads] == [False, True, False, False]
    assert takes_any_token_count(RunConfig(model="labram", heads=["mlp"], head_kwargs={"pooling": "mean"}), "mlp")


def _synthetic_ws(X, y) -> WindowSet:
    n = len(y)
    return WindowSet(X, np.asarray(y), np.array([f"S{i % 2}" for i in range(n)]), np.array(["R1"] * n), np.arange(n),
                     np.full(n, "eegmmidb"), EEGMMIDB, 200.0, ["a", "b"], {"cache_key": "synthetic"})


@ignore_missing
def test_removed_channels_run_on_a_variable_channel_model():
    torch.manual_seed(0)
    ctx = PerturbContext("eegmmidb", "eegmmidb_mi", FilterSpec(200.0, 0.1, 75.0, 60.0), seed=3)
    rng = np.random.default_rng(0)
    ws = _synthetic_ws(rng.standard_normal((6, 64, 800)).astype(np.float32), [0, 1, 0, 1, 0, 1])
    conds = [parse_condition(c) for c in ("clean", "dropout_p=0.5_removed", "region=primary_removed",
                                          "dropout_p=0.5_zero", "white_snr=-5dB")]
    models = {"mean": _labram("mean"), "flatten": _labram("flatten")}
    assert not_applicable_reason(conds[1], models["mean"]) is None
    assert "flatten head" in not_applicable_reason(conds[1], models["flatten"])
    tr = {"accelerator": "cpu"}
    res = evaluate_conditions(models, ws, np.arange(6), conds, ctx, batch_size=4, trainer=tr)
    got = {(r.model, r.condition): r for r in res}
    assert len(res) == 10
    n_drop = dropout_mask(EEGMMIDB, 0.5, 3, "eegmmidb", rule=ctx.mask).n_dropped
    assert got["mean", "dropout_p=0.5_removed"].status == "ok"
    assert got["mean", "dropout_p=0.5_removed"].details["n_chans"] == 64 - n_drop
    assert got["mean", "region=primary_removed"].details["n_chans"] == 64 - 17  # 17 primary electrodes present
    assert got["flatten", "region=primary_removed"].status == NOT_APPLICABLE
    assert got["flatten", "dropout_p=0.5_zero"].status == "ok"
    assert got["mean", "dropout_p=0.5_removed"].probs.shape == (6, 2)
    # removing channels is not zero-padding them
    assert not np.allclose(got["mean", "dropout_p=0.5_removed"].probs, got["mean", "dropout_p=0.5_zero"].probs)
    # results do not depend on the batch size
    again = evaluate_conditions({"mean": models["mean"]}, ws, np.arange(6), conds, ctx, batch_size=6, trainer=tr)
    for r in again:
        np.testing.assert_allclose(r.probs, got["mean", r.condition].probs, atol=1e-5)


@ignore_missing
def test_head_only_models_with_one_frozen_backbone_share_its_forward(monkeypatch):
    from eegfm_bench.perturb.evaluate import backbone_fingerprint, shared_backbone_groups

    ctx = PerturbContext("eegmmidb", "eegmmidb_mi", FilterSpec(200.0, 0.1, 75.0, 60.0), seed=1)
    ws = _synthetic_ws(np.random.default_rng(1).standard_normal((5, 64, 800)).astype(np.float32), [0, 1, 0, 1, 1])
    conds = [parse_condition(c) for c in ("clean", "white_snr=0dB", "dropout_p=0.3_removed")]

    def head_only(head, seed=0):
        return FMClassifier(backbone="labram", head=head, regime="head_only", ch_names=EEGMMIDB, n_times=800,
                            n_classes=2, init_seed=seed, backbone_kwargs=dict(num_layers=1, conv_out_channels=4,
                                                                              num_heads=2))
    models = {"mean": head_only("mean"), "flatten": head_only("flatten"), "other": head_only("mean", seed=1),
              "full": _labram("mean")}
    prec = dict.fromkeys(models, "32-true")
    assert backbone_fingerprint(models["mean"].backbone) == backbone_fingerprint(models["flatten"].backbone)
    assert backbone_fingerprint(models["mean"].backbone) != backbone_fingerprint(models["other"].backbone)
    assert shared_backbone_groups(models, prec) == [["mean", "flatten"], ["other"], ["full"]]
    assert shared_backbone_groups(models, {**prec, "flatten": "bf16-mixed"}) == [["mean"], ["flatten"], ["other"],
                                                                                 ["full"]]
    calls = []
    original = type(models["mean"].backbone).tokens

    def counting(self, x, ch_names):
        calls.append(x.shape[0])
        return original(self, x, ch_names)
    monkeypatch.setattr(type(models["mean"].backbone), "tokens", counting)
    tr = {"accelerator": "cpu"}
    shared = {(r.model, r.condition): r for r in evaluate_conditions(models, ws, np.arange(5), conds, ctx,
                                                                     batch_size=5, trainer=tr)}
    n_shared = len(calls)
    calls.clear()
    alone = {(r.model, r.condition): r for r in evaluate_conditions(models, ws, np.arange(5), conds, ctx, batch_size=5,
                                                                    trainer=tr, share_backbones=False)}
    # clean and noise: 3 forwards (shared pair, other, full) instead of 4; removed: flatten not applicable
    assert (n_shared, len(calls)) == (3 + 3 + 3, 4 + 4 + 3)
    assert shared.keys() == alone.keys() and shared["flatten", "dropout_p=0.3_removed"].status == NOT_APPLICABLE
    for key, r in shared.items():
        assert r.status == alone[key].status
        if r.status == "ok":
            np.testing.assert_allclose(r.probs, alone[key].probs, atol=1e-6)
    assert not np.allclose(shared["mean", "clean"].probs, shared["flatten", "clean"].probs)


def test_filters_follow_the_applied_preprocessing():
    filt, notes = filter_from_preprocessing({"sfreq": 128.0, "l_freq": 1.0, "h_freq": 40.0, "notch": 60.0,
                                             "native_sfreq": 160.0})
    assert filt == FilterSpec(128.0, 1.0, 40.0, (60.0,), native_sfreq=160.0) and "native 160 Hz" in notes[0]
    filt, notes = filter_from_preprocessing({"sfreq": 160.0, "l_freq": 1.0, "h_freq": 40.0, "notch": 60.0,
                                             "native_sfreq": 160.0})
    assert filt == FilterSpec(160.0, 1.0, 40.0, (60.0,)) and notes == []
    filt, notes = filter_from_preprocessing({"sfreq": 100.0, "l_freq": 0.5, "h_freq": 45.0, "notch": 50.0})
    assert filt.notch_freq is None and "Nyquist" in notes[0]
    with pytest.raises(KeyError, match="notch"):
        filter_from_preprocessing({"sfreq": 128.0, "l_freq": 1.0, "h_freq": 40.0})


def test_degradation_table_ranks_and_marks():
    """7 folds: model A always loses less than eegnet, B always more (exact p = 1/64, Holm x2 < 0.05)."""
    rows = []
    for fold in range(7):
        for model, loss in (("eegnet", 0.10), ("A", 0.02), ("B", 0.20)):
            loss = loss + 0.001 * fold
            for cond, v in (("clean", 0.80), ("white_snr=-5dB", 0.80 - loss), ("pink_snr=-5dB", 0.80 - loss / 2)):
                rows.append({"model": model, "init": "random", "regime": "full", "head": "flatten", "fold": fold,
                             "condition": cond, "metric": "balanced_accuracy", "value": v})
    deltas = fold_deltas(add_labels(pd.DataFrame(rows)))
    assert len(deltas) == 7 * 3 * 2
    means, marks, tests = degradation_table(deltas, ["white_snr=-5dB", "pink_snr=-5dB"], reference="eegnet")
    assert list(means.index) == ["A", "eegnet", "B"]
    assert means.loc["A", "white_snr=-5dB"] == pytest.approx(-2.3)
    assert means.loc["B", "pink_snr=-5dB"] == pytest.approx(-10.15)
    assert means.loc["eegnet", "Average"] == pytest.approx((-10.3 - 5.15) / 2)
    assert marks.loc["A", "Average"] == "∗" and marks.loc["B", "Average"] == "∇" and marks.loc["eegnet", "Average"] == ""
    t = {(r["condition"], r["model"]): r for r in tests}
    assert t["Average", "A"]["p_value"] == pytest.approx(1 / 64) and t["Average", "A"]["p_holm"] == pytest.approx(1 / 32)
    md = table_markdown(means, marks)
    assert md.splitlines()[2].startswith("| 1 | A | **-2.3**∗ |") and "<u>-10.3</u>" in md


@requires_data
@ignore_missing
def test_sweep_with_two_local_workers_gives_the_sequential_rows(mi_cv, tmp_path):
    """Launcher (issue 13): the (backbone group x fold) units as 2 local worker jobs, the same rows."""
    conds = ["clean", "white_snr=-5dB", "dropout_p=0.5_zero"]
    seq, loc = tmp_path / "seq", tmp_path / "loc"
    for out, extra in ((seq, []), (loc, ["--launcher", "local", "--workers", "2"])):
        path = tmp_path / f"{out.name}.yaml"
        path.write_text(yaml.safe_dump(_sweep_cfg(mi_cv, out, conditions=conds, save_predictions=False)))
        assert main(["sweep", "--config", str(path), "--no-progress", *extra]) == 0
    cols = ["model", "fold", "condition", "metric", "value", "n_windows", "config_hash"]
    a, b = (_rows(d).sort_values(cols[:4])[cols].reset_index(drop=True) for d in (seq, loc))
    pd.testing.assert_frame_equal(a, b)
    assert len(list((loc / "parts").glob("*.parquet"))) == len(list((seq / "parts").glob("*.parquet")))
    assert (loc / "sweep.md").is_file() and json.loads((loc / "cells.json").read_text())


# ---------------------------------------------------------------------------------------------- a user's condition
def _install_spikes(root: Path) -> Path:
    """A dist-info declaring ``spikes = user_condition:Spikes`` in the group ``eegfm_bench.conditions``, as
    ``pip install`` of a package with that entry point would leave (tests/user_condition.py)."""
    dist = root / "eegfm_user_spikes-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: eegfm-user-spikes\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[eegfm_bench.conditions]\nspikes = user_condition:Spikes\n")
    return root


@requires_data
@ignore_missing
def test_a_users_condition_runs_in_a_real_sweep_and_is_labelled_and_plotted(mi_cv, tmp_path, monkeypatch):
    """Issue 33 item 4: a condition written outside the package, drawing with rng.integers / uniform / normal,
    declared as an entry point: every cell of ``eegfm-bench sweep`` runs it (rows, no failure), its windows do
    not depend on the batch, and ``eegfm-bench report`` — in a fresh process — labels its table with its
    display name and draws it in its family's panel."""
    import subprocess
    import sys

    from torch.utils.data import DataLoader

    from eegfm_bench.reports.sweep import degradation_panels
    from eegfm_bench.runs.cv.output import CVRun
    from user_condition import SPIKES

    plugin = _install_spikes(tmp_path / "site")
    monkeypatch.syspath_prepend(str(plugin))
    conds = ["clean", "white_snr=0dB", "spikes=2", "spikes=40"]
    out = tmp_path / "sweep"
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(_sweep_cfg(mi_cv, out, conditions=conds, batch_size=5)))
    assert main(["sweep", "--config", str(tmp_path / "sweep.yaml"), "--no-progress"]) == 0
    assert json.loads((out / "failures.json").read_text()) == []
    df = _rows(out)
    for fold in (0, 1):
        f = df[df.fold == fold]
        assert list(dict.fromkeys(f.condition)) == conds and len(f) == 4 * 3 and f.value.notna().all()
    # the windows: row i drawn from window i's generators only (batch size 3 or 64, one window at a time)
    cv = yaml.safe_load((mi_cv / "config.yaml").read_text())
    run = CVRun(mi_cv)
    ws = run.windows("eegnet")
    te = run.fold_indices(ws, 0)[2]
    ctx, _ = perturb_context(ws.meta, cv["task"], seed=0)
    ds = PerturbedWindows(ws, te, parse_condition("spikes=40"), ctx)
    by = [np.concatenate([b["x"].numpy() for b in DataLoader(ds, batch_size=bs)]) for bs in (3, 64)]
    np.testing.assert_array_equal(by[0], by[1])
    np.testing.assert_array_equal(np.stack([ds[i]["x"].numpy() for i in range(len(ds))]), by[1])
    hit = (np.abs(by[1] - np.asarray(ws.X[te])).max(axis=1) > 1.0).sum(axis=1)  # samples with a spike, per window
    assert 8 <= hit.min() and hit.max() <= 40 * 8 and len(set(hit)) > 1
    # the degradation curves: the four standard panels, then the condition's own family with its two levels
    rows = add_labels(df)
    panels = degradation_panels(rows)
    assert list(panels)[4:] == [SPIKES] and len(panels) == 5
    (pts,) = panels[SPIKES].values()
    assert [p[0] for p in pts] == [0.0, 2.0, 40.0]
    ok = rows[rows.metric == "balanced_accuracy"].sort_values("fold")
    np.testing.assert_array_equal(pts[2][1], ok[ok.condition == "spikes=40"].value.to_numpy())
    png = (out / "degradation_curves.png").read_bytes()
    assert int.from_bytes(png[16:20], "big") == int(4.5 * 5 * 110)  # five panels wide
    # the page, written by another process that knows the condition only through its entry point
    env = {**__import__("os").environ, "PYTHONPATH": f"{plugin}:{REPO / 'tests'}:{REPO}"}
    done = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "report", str(out)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    html = (out / "report.html").read_text()
    assert 'robustness:spike artefacts (count)' in html and "robustness:white noise (SNR in dB)" in html
    assert "spikes=40" in html and __import__("base64").b64encode(png).decode()[:400] in html  # the 5-panel figure
