"""`eegfm-bench cv` through the one Trainer builder: typed configs, overrides, config-hash keyed results."""
import json
from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.runs.cv.command import run_cv
from eegfm_bench.runs.cv.cells import load_config

from eegfm_testutils import requires_data

REPO = Path(__file__).resolve().parents[2]
TINY = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())


def _cfg(tmp_path, **over):
    cfg = {**TINY, "out_dir": str(tmp_path / "out"), **over}
    cfg["split"] = {**TINY["split"], "folds": [0]}
    return cfg


def test_trainer_section_takes_any_lightning_argument_and_dotted_overrides(tmp_path):
    cfg = load_config({**_cfg(tmp_path), "trainer": {"max_epochs": 2, "strategy": "ddp", "devices": 2,
                                                     "accelerator": "cpu", "gradient_clip_val": 1.0,
                                                     "accumulate_grad_batches": 2, "precision": "bf16-mixed"}},
                      ["--trainer.devices", "1", "--data.batch_size", "8", "--trainer.strategy", "auto"])
    assert cfg.trainer["devices"] == 1 and cfg.trainer["strategy"] == "auto"  # trainer: Lightning's free-form kwargs
    assert cfg.trainer["gradient_clip_val"] == 1.0 and cfg.trainer["precision"] == "bf16-mixed"
    assert cfg.data.batch_size == 8 and cfg.trainer["patience"] == 5  # the default


@pytest.mark.parametrize("over, match", [
    ({"trainer": {"max_epoch": 2}}, r"unknown key trainer\.max_epoch\. Did you mean 'max_epochs'"),
    ({"data": {"batchsize": 2}}, r"unknown key data\.batchsize\. Did you mean 'batch_size'"),
    ({"experimnt": "x"}, r"unknown key experimnt\. Did you mean 'experiment'"),
    ({"runs": [{"model": "eegnet", "head": ["mean"]}]}, r"unknown key runs\.head\. Did you mean 'heads'"),
    ({"runs": [{"model": "eegnet", "trainer": {"max_epoch": 1}}]}, r"runs\[0\]\.trainer\.max_epoch\. Did you mean 'max_epochs'"),
    ({"runs": [{"model": "eegnet", "optim": {"lr_": 1}}]}, r"runs\[0\]\.optim\.lr_\. Did you mean 'lr'"),
    ({"trainer": {"accelerator": "gpu"}}, r"cannot run accelerator='gpu'.*fix: accelerator: cpu"),
    ({"trainer": {"precision": "16-mixed"}}, r"16-mixed.*needs a CUDA GPU.*fix: precision: bf16-mixed"),
    ({"trainer": {"strategy": "fsdp", "devices": 2, "accelerator": "cpu"}}, r"cannot run.*strategy='fsdp'.*fix: strategy: ddp"),
    ({"trainer": {"strategy": "ddp_spawn", "devices": 2, "accelerator": "cpu"}}, r"ddp_spawn.*fix: strategy: ddp"),
    ({"optim": {"learning_rate": 0.1}}, r"unknown key optim\.learning_rate\. Did you mean 'lr'"),
    ({"trainer": {"loggers": ["mlflow"]}}, r"unknown logger 'mlflow'"),
    ({"data": [1]}, r"`data` must be a mapping"),
    ({"data": {"batch_size": "auto"}, "trainer": {"strategy": "ddp", "devices": 2, "accelerator": "cpu"}},
     r"batch_size: auto runs Lightning's batch-size finder.*devices=2.*fix: find it once with --trainer.devices 1"),
    ({"data": {"batch_size": 0}}, r"data.batch_size = 0.*fix: whole numbers >= 1"),
    ({"data": {"batch_size": "big"}}, r"batch_size"),
])
def test_bad_config_is_refused_before_any_data_is_read(tmp_path, monkeypatch, over, match):
    import eegfm_bench.data.windows as W

    monkeypatch.setattr(W, "load_windows", lambda *a, **k: pytest.fail("data read before the config was checked"))
    with pytest.raises(ConfigError, match=match):
        run_cv(_cfg(tmp_path, **over), progress=False)


@requires_data
def test_rerun_retrains_only_cells_whose_config_changed(tmp_path, monkeypatch):
    fits = []
    real_fit = L.Trainer.fit
    monkeypatch.setattr(L.Trainer, "fit", lambda self, *a, **k: (fits.append(1), real_fit(self, *a, **k))[1])
    cfg = _cfg(tmp_path, optim={"lr": 1e-3})
    t1 = run_cv(cfg, progress=False)
    assert len(fits) == 1
    out = Path(cfg["out_dir"])
    rows1 = pd.read_csv(out / "results.csv")
    # unchanged rerun: nothing is trained, rows are byte-identical
    before = (out / "results.csv").read_bytes()
    run_cv(cfg, progress=False)
    assert len(fits) == 1 and (out / "results.csv").read_bytes() == before
    # changed lr: the cell is retrained under a new hash; the old rows stay under theirs; the summary is the new run's
    t2 = run_cv(_cfg(tmp_path, optim={"lr": 0.05}), progress=False)
    assert len(fits) == 2
    rows2 = pd.read_csv(out / "results.csv")
    hashes = rows2[rows2.metric == "balanced_accuracy"].config_hash.unique()
    assert len(hashes) == 2 and rows1.config_hash.iloc[0] in hashes
    new = rows2[(rows2.config_hash != rows1.config_hash.iloc[0]) & (rows2.metric == "balanced_accuracy")]
    assert float(t2["balanced_accuracy"].iloc[0]) == pytest.approx(float(new.value.iloc[0]), abs=5e-4)
    assert (out / "config.yaml").read_text().count("lr: 0.05") == 1
    ckpts = sorted(p.parent.parent.name for p in (out / "checkpoints").rglob("best.ckpt"))
    assert len(ckpts) == 2 and ckpts[0] != ckpts[1]  # one folder per config hash: nothing overwritten
    # back to the first lr: its cell is found again, nothing trains, the summary shows the first numbers
    t3 = run_cv(cfg, progress=False)
    assert len(fits) == 2
    pd.testing.assert_frame_equal(t1, t3)
    # --force retrains the current cell and replaces its rows (same hash)
    run_cv(cfg, progress=False, force=True)
    assert len(fits) == 3
    rows4 = pd.read_csv(out / "results.csv")
    assert len(rows4) == len(rows2)


def test_result_store_replaces_rows_of_the_same_key_and_keeps_other_hashes(tmp_path):
    from eegfm_bench.results import ROW_COLUMNS, ResultStore

    def row(value, chash="h1", fold=0):
        return {**dict.fromkeys(ROW_COLUMNS, "x"), "fold": fold, "metric": "balanced_accuracy", "value": value,
                "config_hash": chash, "seed": 0, "n_windows": 10, "n_subjects": 2}

    store = ResultStore(tmp_path)
    store.append([row(0.5), row(0.6, fold=1)])
    store.append([row(0.7)])  # same key: the newer value replaces the older
    store.append([row(0.9, chash="h2")])  # another config hash: kept beside it
    df = store.load().sort_values(["config_hash", "fold"])
    assert df[["config_hash", "fold", "value"]].values.tolist() == [["h1", "0", 0.7], ["h1", "1", 0.6], ["h2", "0", 0.9]]
    assert store.has(fold=0, config_hash="h2") and not store.has(fold=1, config_hash="h2")
    assert not ResultStore(tmp_path / "other", write=False).has(fold=0)
    ResultStore(tmp_path, write=False).append([row(0.1)])  # a DDP rank other than 0 writes nothing
    assert store.load()["value"].max() == 0.9 and 0.1 not in store.load()["value"].tolist()


@requires_data
def test_analyses_refuse_a_cv_run_made_with_another_config(tmp_path):
    from eegfm_bench.interpret.config import InterpretConfigError
    from eegfm_bench.runs.cv.output import StaleCVRunError
    from eegfm_bench.runs.interpret.probe import run_probes
    from eegfm_bench.runs.sweep.command import plan_sweep
    from eegfm_bench.runs.sweep.config import load_sweep_config

    cfg = _cfg(tmp_path)
    run_cv(cfg, progress=False)
    path = tmp_path / "cv.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ran = pd.read_csv(Path(cfg["out_dir"]) / "results.csv").config_hash.iloc[0]
    assert plan_sweep(load_sweep_config({"cv_config": str(path), "reference": None})).cells[0].config_hash == ran
    path.write_text(yaml.safe_dump({**cfg, "optim": {"lr": 0.02}}))  # edited after the run
    with pytest.raises(StaleCVRunError, match=rf"made with config hash {ran} but .* gives [0-9a-f]{{12}}: they differ in "
                                              r"optim\.lr: 0\.001 \(run\) vs 0\.02 \(file\).*fix: rerun"):
        plan_sweep(load_sweep_config({"cv_config": str(path), "reference": None}))
    with pytest.raises((StaleCVRunError, InterpretConfigError), match=rf"config hash {ran}"):
        run_probes({"cv_config": str(path), "out_dir": str(tmp_path / "i")}, progress=False)
    # pointing at the folder analyses the run as it is
    assert plan_sweep(load_sweep_config({"cv_out_dir": cfg["out_dir"], "reference": None})).cells[0].config_hash == ran


def test_equal_settings_hash_equally():
    from eegfm_bench.runs.cv.cells import cell_hash, load_config

    base = {**TINY, "out_dir": "x"}
    run = base["runs"][0]

    def h(**tr):
        cfg = load_config({**base, "trainer": {**TINY["trainer"], **tr}})
        return cell_hash(cfg, cfg.runs[0], run["heads"][0], "key")

    assert h(precision="32") == h(precision="32-true") == h(precision=32) == h()
    assert h(accelerator="auto") == h(accelerator="cpu")  # this machine: auto resolves to the CPU
    assert h(enable_progress_bar=True, loggers=["csv", "tensorboard"]) == h()  # never change a number
    assert h(devices=2, strategy="ddp") != h() and h(precision="bf16-mixed") != h() and h(max_epochs=2) != h()


@requires_data
def test_probe_and_attribution_reports_show_only_the_current_cv_config(tmp_path):
    from eegfm_bench.runs.interpret.attribute import run_attribution
    from eegfm_bench.runs.interpret.probe import run_probes

    icfg = {"cv_dir": str(tmp_path / "out"), "out_dir": str(tmp_path / "i"),
            "probe": {"poolings": ["mean"], "max_epochs": 2}, "attention": {"enabled": False},
            "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 2, "conservation_windows": 0,
                            "randomisation_windows": 0}}
    for lr in (1e-3, 0.05):  # the second cv config retrains the cell under a new hash
        run_cv(_cfg(tmp_path, optim={"lr": lr}), progress=False)
        run_probes(icfg, progress=False)
        run_attribution(icfg, progress=False)
    probes = pd.read_csv(tmp_path / "i" / "probes" / "results.csv")
    assert probes[probes.stage == "fine-tuned"].config_hash.nunique() == 2  # both kept in the store
    table = pd.read_csv(tmp_path / "i" / "probes" / "probe_table.csv")
    assert set(table["n_folds"]) == {1}  # ... but the report averages only the current one's fold
    checks = (tmp_path / "i" / "attribution" / "checks.md").read_text()
    assert "| 2 |" not in checks and "| 1 |" in checks


@requires_data
def test_batch_size_auto_and_compile(tmp_path, monkeypatch):
    """``data.batch_size: auto``: Lightning's batch-size finder runs once per run × head (on a CPU nothing runs out
    of memory, so it stops at the cap: max_batch_size, or the fold's training windows, less 5 %) and the rows say what it
    chose; ``compile: {backend: eager}`` fits and tests through ``torch.compile`` with the uncompiled numbers."""
    import torch
    from lightning.pytorch.tuner import Tuner

    calls = []
    real = Tuner.scale_batch_size
    monkeypatch.setattr(Tuner, "scale_batch_size", lambda self, *a, **k: (calls.append(k), real(self, *a, **k))[1])
    cfg = _cfg(tmp_path, data={**TINY.get("data", {}), "batch_size": "auto", "max_batch_size": 12})
    cfg["split"] = {**cfg["split"], "folds": [0, 1]}
    run_cv(cfg, progress=False)
    rows = pd.read_csv(Path(cfg["out_dir"]) / "results.csv")
    assert len(calls) == 1 and calls[0]["max_val"] == 12 and calls[0]["mode"] == "binsearch"  # once for 2 folds
    assert set(rows[rows.metric == "batch_size"].value) == {11.0}  # the cap less Lightning's 5 % margin
    # the size is kept with the out_dir (per cell hash and device): a later process (a rerun, a launcher's worker)
    # training another fold of the cell reuses it instead of searching again
    (found,) = (Path(cfg["out_dir"]) / "batch_size_auto").glob("*.json")
    assert found.name.endswith("@cpu.json") and json.loads(found.read_text())["batch_size"] == 11
    found.write_text(json.dumps({"batch_size": 7}))  # as if another worker had published 7 first
    run_cv({**cfg, "split": {**cfg["split"], "folds": [2]}}, progress=False)
    rows = pd.read_csv(Path(cfg["out_dir"]) / "results.csv")
    assert len(calls) == 1 and rows[(rows.metric == "batch_size") & (rows.fold == 2)].value.tolist() == [7.0]
    compiles = []
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **k: (compiles.append(k), real_compile(m, **k))[1])
    base = _cfg(tmp_path, out_dir=str(tmp_path / "plain"))
    run_cv(base, progress=False)
    run_cv({**base, "out_dir": str(tmp_path / "compiled"), "compile": {"backend": "eager"}}, progress=False)
    assert compiles == [{"backend": "eager"}]
    a, b = (pd.read_csv(tmp_path / d / "results.csv") for d in ("plain", "compiled"))
    keep = ~a.metric.isin(["fit_seconds"])
    pd.testing.assert_series_equal(a[keep].value.reset_index(drop=True), b[keep].value.reset_index(drop=True))
