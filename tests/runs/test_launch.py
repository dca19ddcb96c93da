"""Launchers (issue 13): cells as local worker jobs give the sequential rows; status; SLURM settings; resume."""
from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_testutils import requires_data


def _cfg(out: Path, **over) -> dict:
    cfg = {"experiment": "lt", "task": "eegmmidb_eyes", "out_dir": str(out), "seed": 0,
           "data": {"max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    cfg.update(over)
    return cfg


def _write(path: Path, cfg: dict) -> str:
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    df = df[~df["metric"].isin(["fit_seconds"])]
    return df.sort_values(["model", "fold", "metric"])[["model", "fold", "metric", "value", "n_windows",
                                                         "config_hash"]].reset_index(drop=True)


@requires_data
def test_local_workers_give_the_sequential_rows_and_status_resumes_what_is_missing(tmp_path, capsys):
    from eegfm_bench.cli import main
    from eegfm_bench.runs.cv.progress import cv_status

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", _write(tmp_path / "s.yaml", _cfg(tmp_path / "seq")), "--no-progress"]) == 0
        assert main(["cv", "--config", _write(tmp_path / "l.yaml", _cfg(tmp_path / "loc")), "--launcher", "local",
                     "--workers", "2", "--no-progress"]) == 0
    seq, loc = (pd.read_csv(tmp_path / d / "results.csv") for d in ("seq", "loc"))
    pd.testing.assert_frame_equal(_comparable(seq), _comparable(loc))
    parts = sorted((tmp_path / "loc" / "parts").glob("*.parquet"))
    assert len(parts) == 3 and len({p.name.split("-")[2] for p in parts}) == 2  # 3 cells, written by 2 workers
    assert (tmp_path / "loc" / "summary.md").is_file() and not (tmp_path / "loc" / "running").exists()
    # a worker killed mid-cell: its cell has no row (parts are atomic) and a stale marker of a dead process
    killed = next(p for p in parts if (pd.read_parquet(p)["fold"] == "2").any())
    killed.unlink()
    fold2 = next((tmp_path / "loc" / "checkpoints").glob("*/fold2"))
    assert not (fold2 / "last.ckpt").exists()  # a finished cell keeps best.ckpt only
    shutil.copy(fold2 / "best.ckpt", fold2 / "last.ckpt")  # what the killed worker left: its last epoch
    (tmp_path / "loc" / "results.csv").unlink()
    (tmp_path / "loc" / "running").mkdir()
    (tmp_path / "loc" / "running" / "x.json").write_text(json.dumps(
        {"cell": "eegnet/full/flatten/fold2/" + seq.config_hash.iloc[0], "host": os.uname().nodename,
         "pid": 2 ** 22 + 12345, "start": 0}))
    rows, cmd = cv_status(tmp_path / "loc")
    assert [r["state"] for r in rows] == ["done", "done", "missing"] and cmd.startswith("eegfm-bench cv --config")
    assert main(["status", str(tmp_path / "loc")]) == 0
    printed = capsys.readouterr().out
    assert "3 cells: 2 done, 0 running, 0 failed, 1 missing" in printed
    assert "results.csv is older than the newest rows" in printed  # the parts were not merged (killed parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", str(tmp_path / "loc" / "config.yaml"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 of 3 cells already have rows" in out  # config.yaml keeps the local launcher: a worker runs fold 2
    logs = [p.read_text() for p in (tmp_path / "loc" / "jobs").glob("*_log.out")]
    assert sum("resuming from" in t for t in logs) == 1  # fold 2's last.ckpt was kept: the worker resumed from it
    again = pd.read_csv(tmp_path / "loc" / "results.csv")
    assert not again.duplicated(["model", "fold", "metric", "config_hash"]).any()
    pd.testing.assert_frame_equal(_comparable(seq), _comparable(again))  # the resumed cell: the same numbers
    assert [r["state"] for r in cv_status(tmp_path / "loc")[0]] == ["done"] * 3


def test_slurm_settings_become_sbatch_options():
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.launch.launcher import chunks, sbatch_preview, slurm_parameters

    lc = {"kind": "slurm", "workers": 2, "cells_per_job": 2, "folder": None, "timeout_min": 120,
          "slurm": {"partition": "gpu", "account": "proj", "qos": "high", "gpus_per_node": 4, "cpus_per_task": 16,
                    "mem_gb": 128, "array_parallelism": 32, "setup": ["module load cuda"],
                    "additional": {"constraint": "h100"}}}
    p = slurm_parameters(lc, devices=4)
    assert p["slurm_partition"] == "gpu" and p["tasks_per_node"] == 4 and p["slurm_array_parallelism"] == 32
    text = sbatch_preview(lc, "/scratch/jobs", devices=4, n_jobs=50)
    for opt in ("--partition=gpu", "--account=proj", "--qos=high", "--gpus-per-node=4", "--ntasks-per-node=4",
                "--cpus-per-task=16", "--mem=128GB", "--time=120", "--constraint=h100", "--array=0-49%32",
                "--signal=USR2@90"):
        assert f"#SBATCH {opt}" in text, opt
    assert "module load cuda" in text
    assert chunks([str(i) for i in range(5)], lc) == [["0", "1"], ["2", "3"], ["4"]]
    assert chunks([str(i) for i in range(5)], {**lc, "kind": "local"}) == [["0", "2", "4"], ["1", "3"]]
    with pytest.raises(ConfigError, match="partition"):
        slurm_parameters({**lc, "slurm": {**lc["slurm"], "partition": None}})
    # gpus_per_node follows the trainer's devices unless set; fewer GPUs than devices is refused, naming the fix
    auto = {**lc, "slurm": {**lc["slurm"], "gpus_per_node": None}}
    assert slurm_parameters(auto, devices=4)["gpus_per_node"] == 4
    assert slurm_parameters(auto, devices=2, accelerator="cpu")["gpus_per_node"] == 0
    with pytest.raises(ConfigError, match="gpus_per_node = 1 but trainer.devices = 4.*fix: gpus_per_node: 4"):
        slurm_parameters({**lc, "slurm": {**lc["slurm"], "gpus_per_node": 1}}, devices=4)


def test_a_requeued_job_resubmits_itself_with_the_same_cells():
    from eegfm_bench.runs.launch.launcher import CellJob

    job = CellJob()
    d = job.checkpoint({"x": 1}, ["a/b/c/fold0/h"], 2)
    assert d.function is job and d.args == ({"x": 1}, ["a/b/c/fold0/h"], 2, "cv", None)


@requires_data
def test_plan_counts_cells_jobs_cached_passes_and_hours(tmp_path, capsys):
    from eegfm_bench.cli import main
    from eegfm_bench.runs.plan.command import run_plan

    cfg = _cfg(tmp_path / "p", trainer={"max_epochs": 2, "patience": 1},
               launcher={"kind": "local", "workers": 2}, confound={"enabled": True, "variations": ["band"]},
               runs=[{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                      "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}},
                     {"model": "labram", "regime": "head_only", "heads": ["mean", "flatten"],
                      "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}])
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([{"model": "eegnet", "device": "cuda", "fwd_per_s": 100.0, "fwd_bwd_per_s": 10.0},
                                 {"model": "labram", "device": "cuda", "fwd_per_s": 50.0, "fwd_bwd_per_s": 5.0}]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = run_plan(cfg, bench=str(bench), measure=False)
    assert p["n_cells"] == 9 and p["n_done"] == 0 and p["n_jobs"] == 2  # 3 cells x 3 folds, 2 local workers
    full = [r for r in p["todo"] if r["cell"].startswith("eegnet/")]
    ho = [r for r in p["todo"] if r["cell"].startswith("labram/")]
    for r in full:  # 2 epochs: forward+backward on train, forward on val each epoch, then the test
        w = r["windows"]
        assert r["backbone_passes"] == {"forward": 2 * w["val"] + w["test"], "forward_backward": 2 * w["train"]}
    n_windows = sum(ho[0]["windows"].values())
    assert [r["backbone_passes"]["forward"] for r in ho] == [n_windows] + [0] * 5  # one extraction for both heads
    would = sum(2 * (r["windows"]["train"] + r["windows"]["val"]) + r["windows"]["test"] for r in ho)
    assert p["backbone_passes_saved_by_cache"] == would - n_windows
    secs = sum(r["backbone_passes"]["forward"] / 100 + r["backbone_passes"]["forward_backward"] / 10 for r in full) \
        + n_windows / 50
    o = p["overhead_s"]  # Lightning outside the model, measured on a toy model: per cell + per epoch
    assert o["per_cell"] >= 0 and o["per_epoch"] >= 0
    secs += sum(o["per_cell"] + r["epochs"] * o["per_epoch"] for r in p["todo"])
    assert p["estimate_headline_device_hours"] == pytest.approx(secs / 3600)
    # the confound check the cv runs after the headline: the same 9 cells in the 4-40 Hz band
    (cc,) = p["confound"]
    assert cc["condition"] == "confound=band4-40" and cc["n_cells"] == 9 and cc["n_todo"] == 9
    assert cc["estimate_device_hours"] == pytest.approx(p["estimate_headline_device_hours"])  # same passes per window
    assert p["estimate_device_hours"] == pytest.approx(secs / 3600 + cc["estimate_device_hours"])
    path = _write(tmp_path / "p.yaml", cfg)
    assert main(["plan", "--config", path, "--bench", str(bench), "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "9 cells (0 already have rows" in out and "confound check confound=band4-40" in out
    # beside the subject count, the smallest Δ the 7 held-out subjects detect: 2.8016 · sd · sqrt(6/7) / sqrt(7)
    d = p["detectable"]
    assert d["n_subjects"] == 7 and d["delta"] == pytest.approx(2.801585 * d["sd_subject"] * np.sqrt(6 / 7) / np.sqrt(7))
    assert "7 held-out subjects: smallest paired Δ the subject-cluster bootstrap detects" in out
    assert f"{d['delta']:.3f}" in out
    off = run_plan({**cfg, "confound": False}, bench=str(bench), measure=False)
    o2 = off["overhead_s"]  # measured again by this plan: the same passes, its own Lightning overhead
    secs_off = secs - sum(o["per_cell"] + r["epochs"] * o["per_epoch"] for r in p["todo"]) \
        + sum(o2["per_cell"] + r["epochs"] * o2["per_epoch"] for r in off["todo"])
    assert off["confound"] == [] and off["estimate_device_hours"] == pytest.approx(secs_off / 3600)


def test_launcher_settings_are_checked_before_any_data(tmp_path, monkeypatch):
    from eegfm_bench.config import ConfigError
    import dataclasses

    from eegfm_bench.runs.launch.launcher import check_launcher
    from eegfm_bench.config.launch import SlurmConfig

    with pytest.raises(ConfigError, match=r"launcher.workers = 0; fix"):
        check_launcher({"kind": "local", "workers": 0, "cells_per_job": 1, "timeout_min": 10})
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    lc = {"kind": "slurm", "workers": 1, "cells_per_job": 1, "timeout_min": 10,
          "slurm": dataclasses.asdict(SlurmConfig(partition="gpu"))}
    with pytest.raises(ConfigError, match="no SLURM"):
        check_launcher(lc)
    with pytest.raises(ConfigError, match="partition"):
        check_launcher({**lc, "slurm": {**lc["slurm"], "partition": None}})


def test_a_nested_typo_names_the_nested_section(tmp_path):
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv.cells import load_config

    cfg = _cfg(tmp_path / "t", launcher={"kind": "slurm", "slurm": {"partiton": "gpu"}})
    with pytest.raises(ConfigError, match=r"launcher.slurm.partiton. Did you mean 'partition'.*Valid keys of "
                                          r"`launcher.slurm`"):
        load_config(cfg)


def _close(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], atol: float) -> None:
    """Same rows (keys, n_windows) and values within ``atol`` (workers run on 1 torch thread each)."""
    assert len(a) == len(b) > 0
    m = a.merge(b, on=keys, suffixes=("_s", "_l"), validate="one_to_one")
    assert len(m) == len(a)
    if "n_windows_s" in m:
        assert (m["n_windows_s"].fillna(-1) == m["n_windows_l"].fillna(-1)).all()
    v1, v2 = m["value_s"].astype(float), m["value_l"].astype(float)
    bad = ~((v1.isna() & v2.isna()) | ((v1 - v2).abs() <= atol))
    assert not bad.any(), m.loc[bad, keys + ["value_s", "value_l"]].to_string()


@requires_data
def test_probe_and_attribute_on_local_workers_give_the_sequential_rows(tmp_path):
    """``probe`` and ``attribute`` with ``--launcher local --workers 2``: one job per (model, fold) / (cell, fold),
    rows as part files, the parent's report and maps from what the workers wrote; the sequential run's rows."""
    from eegfm_bench.cli import main

    cv = _write(tmp_path / "cv.yaml", _cfg(tmp_path / "cv"))
    icfg = {"cv_dir": str(tmp_path / "cv"),
            "probe": {"poolings": ["mean"], "max_epochs": 2},
            "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 2,
                            "conservation_windows": 1, "randomisation_windows": 2, "batch_size": 2}}
    path = _write(tmp_path / "i.yaml", icfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", cv, "--no-progress"]) == 0
        for cmd in ("probe", "attribute"):
            assert main([cmd, "--config", path, "--out_dir", str(tmp_path / "seq"), "--no-progress"]) == 0
            assert main([cmd, "--config", path, "--out_dir", str(tmp_path / "loc"), "--launcher", "local",
                         "--workers", "2", "--no-progress"]) == 0
    keys = ["model", "regime", "head", "fold", "condition", "metric", "stage", "pooling"]
    seq, loc = (pd.read_csv(tmp_path / d / "probes" / "results.csv") for d in ("seq", "loc"))
    assert sorted(set(loc.fold.astype(int))) == [0, 1, 2]
    _close(seq, loc, keys, 1e-4)
    parts = list((tmp_path / "loc" / "probes" / "parts").glob("*.parquet"))
    assert len(parts) == 3 and len({p.name.split("-")[2] for p in parts}) == 2  # 3 folds written by 2 workers
    assert (tmp_path / "loc" / "probes" / "probes.md").read_text() == (tmp_path / "seq" / "probes" / "probes.md").read_text()
    keys = ["model", "regime", "head", "fold", "condition", "metric"]
    seq, loc = (pd.read_csv(tmp_path / d / "attribution" / "results.csv") for d in ("seq", "loc"))
    _close(seq, loc, keys, 1e-4)
    assert len(list((tmp_path / "loc" / "attribution" / "parts").glob("*.parquet"))) == 3
    assert (tmp_path / "loc" / "attribution" / "eegnet-full-flatten" / "clean" / "gxi" / "topomap.png").is_file()
    for k in range(3):  # the workers' per-fold maps are the ones the sequential run computes
        a, b = (np.load(tmp_path / d / "attribution" / "eegnet-full-flatten" / "clean" / "gxi" / f"fold{k}.npz")
                for d in ("seq", "loc"))
        np.testing.assert_array_equal(a["window"], b["window"])
        np.testing.assert_allclose(a["channel"], b["channel"], atol=1e-4)


@requires_data
def test_controls_scrambled_label_fits_on_local_workers(tmp_path):
    """``controls --launcher local --workers 2``: the scrambled-label adaptation fits (2 arms × 3 folds) run as 6
    units dealt to 2 worker jobs, the rest in the parent; the rows and the gates are the sequential run's; a rerun launches
    nothing."""
    from eegfm_bench.cli import main

    tiny = {"F1": 4, "D": 1, "kernel_length": 16}
    cfg = {"experiment": "lc", "task": "eegmat", "seed": 0,
           "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
           "features": {"families": ["simple"]}, "models": [], "identity": None,
           "permutation": {"n": 3, "families": "strongest"}, "bootstrap": {"n_boot": 100},
           "scrambled": [{"model": "eegnet", "regime": "full", "head": "flatten", "seeds": [0],
                          "backbone_kwargs": tiny, "trainer": {"max_epochs": 1, "patience": 1}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d, extra in (("seq", []), ("loc", ["--launcher", "local", "--workers", "2"])):
            path = _write(tmp_path / f"{d}.yaml", {**cfg, "out_dir": str(tmp_path / d)})
            assert main(["controls", "--config", path, "--no-progress", *extra]) == 0
    seq, loc = (pd.read_csv(tmp_path / d / "results.csv") for d in ("seq", "loc"))
    keys = ["model", "init", "regime", "head", "fold", "condition", "metric"]
    fits = loc[loc.condition.isin(["correct_labels", "scrambled_labels"]) & (loc.metric == "auroc_window")]
    assert len(fits) == 6
    drop = ["fit_seconds", "probe_seconds"]
    _close(seq[~seq.metric.isin(drop)], loc[~loc.metric.isin(drop)], keys, 1e-4)
    assert len(list((tmp_path / "loc" / "jobs").glob("*_result.pkl"))) == 2  # 6 fits dealt to 2 workers
    by_pid: dict = {}  # each fit trained once, by a worker (not the parent), 3 per worker
    for part in (tmp_path / "loc" / "parts").glob("*.parquet"):
        df = pd.read_parquet(part)
        df = df[df.condition.isin(["correct_labels", "scrambled_labels"]) & (df.metric == "auroc_window")]
        by_pid.setdefault(part.name.split("-")[2], []).extend(zip(df.condition, df.fold))
    fitted = [v for v in by_pid.values() if v]
    assert sorted(map(len, fitted)) == [3, 3] and len({f for v in fitted for f in v}) == 6
    assert str(os.getpid()) not in by_pid or not by_pid[str(os.getpid())]
    g1, g2 = (json.loads((tmp_path / d / "gates.json").read_text()) for d in ("seq", "loc"))
    assert [g["model"] for g in g1] == [g["model"] for g in g2]
    # a rerun finds every fit done: no new job
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["controls", "--config", str(tmp_path / "loc.yaml"), "--no-progress", "--launcher", "local",
                     "--workers", "2"]) == 0
    assert len(list((tmp_path / "loc" / "jobs").glob("*_result.pkl"))) == 2
