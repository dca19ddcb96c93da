"""Every command through the real single-node SLURM cluster (issue 26, item 2), no mocks:

* a cell with ``trainer: {accelerator: cpu, devices: 2, strategy: ddp}`` runs as one job of 2 SLURM tasks (``srun``,
  Lightning's SLURM environment, gloo); its 45 test windows (an odd number: the sampler pads one) are counted once
  and its test rows equal a one-device test of the same weights;
* ``sweep``, ``probe``, ``attribute`` and ``controls`` with a SLURM launcher give the sequential run's rows;
* two jobs that need the same frozen tokens read them from the cv's feature stage (extracted once, in 2 jobs).

The cluster is the session fixture ``slurm_cluster`` (``tests/slurm_cluster.py``); CI sets ``EEGFM_REQUIRE_SLURM=1``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_testutils import DATA, REPO, assert_bitwise_same_runs, requires_data

pytestmark = [pytest.mark.slurm, requires_data, pytest.mark.slow]

TINY_EEGNET = {"F1": 4, "D": 1, "kernel_length": 16}
TINY_LABRAM = {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}
CV = {"experiment": "slc", "task": "eegmmidb_mi", "seed": 0, "confound": False,
      "data": {"subjects": [1, 2, 3, 4, 5], "batch_size": 8},
      "split": {"scheme": "kfold", "k": 5, "seed": 0, "n_val_groups": 1, "folds": [0]},
      "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu", "deterministic": True},
      "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"], "backbone_kwargs": TINY_EEGNET},
               {"model": "labram", "regime": "head_only", "heads": ["mean"], "backbone_kwargs": TINY_LABRAM}]}


def _slurm(partition: str, **over) -> dict:
    s = {"partition": partition, "cpus_per_task": 1, "mem_gb": 2, "array_parallelism": 2}
    s.update(over)
    return {"kind": "slurm", "timeout_min": 20, "slurm": s}


def _cli(args: list[str], cache: Path, timeout: int = 900) -> str:
    env = {**os.environ, "EEGFM_DATA": str(DATA), "EEGFM_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}
    for k in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", *args, "--no-progress"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-4000:]}"
    return p.stdout


def _write(path: Path, cfg: dict) -> str:
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _rows(path: Path, keys: list[str]) -> pd.DataFrame:
    df = pd.read_csv(path)
    return df.sort_values(keys).reset_index(drop=True)


def _same(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], atol: float, what: str,
          skip: tuple = ("fit_seconds", "probe_seconds")) -> None:
    a, b = a[~a.metric.isin(skip)], b[~b.metric.isin(skip)]
    assert len(a) == len(b) > 0, (what, len(a), len(b))
    m = a.merge(b, on=keys, suffixes=("_s", "_l"), validate="one_to_one")
    assert len(m) == len(a), f"{what}: rows differ"
    v1, v2 = m["value_s"].astype(float), m["value_l"].astype(float)
    bad = ~((v1.isna() & v2.isna()) | ((v1 - v2).abs() <= atol))
    assert not bad.any(), f"{what}:\n{m.loc[bad, keys + ['value_s', 'value_l']].to_string()}"


def _logs(jobs: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(jobs.glob("*_log.*"))}


@pytest.fixture(scope="module")
def seq(tmp_path_factory):
    """The sequential cv every launched command is compared with (one device, this process's cache)."""
    root = tmp_path_factory.mktemp("slc")
    _cli(["cv", "--config", _write(root / "cv.yaml", {**CV, "out_dir": str(root / "cv")})], root / "cache")
    return root


def test_a_ddp_cell_runs_as_two_slurm_tasks_and_tests_every_window_once(slurm_cluster, seq, tmp_path):
    cfg = {**CV, "out_dir": str(tmp_path / "two"), "runs": CV["runs"][:1],
           "trainer": {**CV["trainer"], "devices": 2, "strategy": "ddp"},
           "launcher": _slurm(slurm_cluster["partition"])}
    printed = _cli(["cv", "--config", _write(tmp_path / "two.yaml", cfg)], seq / "cache")
    jobs = tmp_path / "two" / "jobs"
    script = next(jobs.glob("*_submission.sh")).read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "srun" in script, script
    logs = _logs(jobs)
    outs = [n for n in logs if n.endswith("_log.out")]
    assert len(outs) == 2, sorted(logs)  # one log per SLURM task: ranks 0 and 1
    text = "".join(logs.values())
    assert "global_rank=0(2)" in text and "global_rank=1(2)" in text, text[-3000:]  # srun's two tasks, one job
    df = pd.read_csv(tmp_path / "two" / "results.csv")
    acc = df[df.metric == "balanced_accuracy"]
    assert len(acc) == 1 and set(df["devices"]) == {2} and set(df["n_windows"]) == {45}, df
    pred = pd.read_csv(tmp_path / "two" / acc["predictions"].iloc[0])  # relative to the out_dir
    assert len(pred) == 45 and pred["index"].is_unique  # the sampler's padded window is counted once
    assert printed.count("| model | init | regime | head |") == 1
    # the same DDP cell started here (Lightning's launcher starts rank 1): the SLURM tasks' rows to the last bit
    here = {k: v for k, v in cfg.items() if k != "launcher"}
    _cli(["cv", "--config", _write(tmp_path / "here.yaml", {**here, "out_dir": str(tmp_path / "here")})], seq / "cache")
    assert_bitwise_same_runs(tmp_path / "two", tmp_path / "here")
    # the DDP test rows equal a one-device test of the same weights (the sweep's clean condition)
    sw = {"cv_out_dir": str(tmp_path / "two"), "reference": None, "conditions": ["clean"],
          "trainer": {"accelerator": "cpu", "devices": 1}}
    _cli(["sweep", "--config", _write(tmp_path / "sw.yaml", sw), "--out_dir", str(tmp_path / "sw")], seq / "cache")
    one = pd.read_csv(tmp_path / "sw" / "results.csv")
    one = one[(one.condition == "clean") & one.metric.isin(["balanced_accuracy", "auroc", "cohen_kappa"])]
    two = df[df.metric.isin(["balanced_accuracy", "auroc", "cohen_kappa"])]
    m = one.merge(two, on=["model", "regime", "head", "fold", "metric"], suffixes=("_one", "_two"))
    assert len(m) == 3 and (m.n_windows_one == 45).all()
    np.testing.assert_allclose(m.value_one, m.value_two, atol=1e-6)


def test_sweep_probe_attribute_and_controls_on_slurm_give_the_sequential_rows(slurm_cluster, seq, tmp_path):
    part = slurm_cluster["partition"]
    lc = _slurm(part)
    cache = seq / "cache"
    # sweep: one unit per (backbone group, fold) as array tasks
    sw = {"cv_out_dir": str(seq / "cv"), "reference": None,
          "conditions": ["clean", "white_snr=0dB", "dropout_p=0.3_zero"], "trainer": {"accelerator": "cpu"}}
    _cli(["sweep", "--config", _write(tmp_path / "sw_s.yaml", sw), "--out_dir", str(tmp_path / "sw_s")], cache)
    _cli(["sweep", "--config", _write(tmp_path / "sw_l.yaml", {**sw, "launcher": lc}), "--out_dir",
          str(tmp_path / "sw_l")], cache)
    keys = ["model", "regime", "head", "fold", "condition", "metric"]
    _same(_rows(tmp_path / "sw_s" / "results.csv", keys), _rows(tmp_path / "sw_l" / "results.csv", keys), keys,
          1e-4, "sweep")
    assert list((tmp_path / "sw_l" / "jobs").glob("*_submission.sh"))
    # probe and attribute: one job per (model, fold) / (cell, fold)
    icfg = {"cv_dir": str(seq / "cv"), "probe": {"poolings": ["mean"], "max_epochs": 2},
            "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 2,
                            "conservation_windows": 1, "randomisation_windows": 2, "batch_size": 2},
            "trainer": {"accelerator": "cpu"}}
    for cmd in ("probe", "attribute"):
        _cli([cmd, "--config", _write(tmp_path / "i_s.yaml", icfg), "--out_dir", str(tmp_path / "i_s")], cache)
        _cli([cmd, "--config", _write(tmp_path / "i_l.yaml", {**icfg, "launcher": lc}), "--out_dir",
              str(tmp_path / "i_l")], cache)
    pk = ["model", "regime", "head", "fold", "condition", "metric", "stage", "pooling"]
    _same(_rows(tmp_path / "i_s" / "probes" / "results.csv", pk),
          _rows(tmp_path / "i_l" / "probes" / "results.csv", pk), pk, 1e-4, "probes")
    _same(_rows(tmp_path / "i_s" / "attribution" / "results.csv", keys),
          _rows(tmp_path / "i_l" / "attribution" / "results.csv", keys), keys, 1e-4, "attribution")
    # controls: the scrambled-label adaptations (2 arms × 3 folds) as array tasks
    ctl = {"experiment": "slctl", "task": "eegmat", "seed": 0,
           "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
           "features": {"families": ["simple"]}, "models": [], "identity": None,
           "permutation": {"n": 3, "families": "strongest"}, "bootstrap": {"n_boot": 100},
           "trainer": {"accelerator": "cpu"},
           "scrambled": [{"model": "eegnet", "regime": "full", "head": "flatten", "seeds": [0],
                          "backbone_kwargs": TINY_EEGNET, "trainer": {"max_epochs": 1, "patience": 1}}]}
    _cli(["controls", "--config", _write(tmp_path / "c_s.yaml", {**ctl, "out_dir": str(tmp_path / "c_s")})], cache)
    _cli(["controls", "--config", _write(tmp_path / "c_l.yaml", {**ctl, "out_dir": str(tmp_path / "c_l"),
                                                                  "launcher": lc})], cache)
    ck = ["model", "init", "regime", "head", "fold", "condition", "metric"]
    a, b = _rows(tmp_path / "c_s" / "results.csv", ck), _rows(tmp_path / "c_l" / "results.csv", ck)
    _same(a, b, ck, 1e-4, "controls")
    fits = b[b.condition.isin(["correct_labels", "scrambled_labels"]) & (b.metric == "auroc_window")]
    assert len(fits) == 6 and list((tmp_path / "c_l" / "jobs").glob("*_submission.sh"))


def test_two_jobs_that_need_the_same_tokens_read_the_feature_stage_entry(slurm_cluster, seq, tmp_path):
    """Two head-only heads of one frozen LaBraM as two array tasks, on a cache without its tokens: the cv extracts
    them once, as a feature stage of its own before the cells (issue 35, item 3: 2 window ranges, one job each), and
    neither cell job runs a forward pass for them. (Two jobs that extract one entry at once, one waiting on the
    entry's lock, are tested in-process in tests/data/test_build_lock.py.)"""
    cfg = {**CV, "out_dir": str(tmp_path / "tok"),
           "runs": [{"model": "labram", "regime": "head_only", "heads": ["mean", "flatten"],
                     "backbone_kwargs": TINY_LABRAM}],
           "launcher": _slurm(slurm_cluster["partition"], array_parallelism=2)}
    cache = tmp_path / "cache"
    shutil_copy_windows(seq / "cache", cache)  # the windows, not the tokens
    printed = _cli(["cv", "--config", _write(tmp_path / "tok.yaml", cfg)], cache)
    assert "in 2 shard(s) of windows" in printed and "(launcher slurm)" in printed, printed[-3000:]
    assert len(list((tmp_path / "tok" / "features" / "jobs").glob("*_result.pkl"))) == 2  # the stage's two jobs
    logs = _logs(tmp_path / "tok" / "jobs")
    outs = {n: t for n, t in logs.items() if n.endswith("_log.out")}
    assert len(outs) == 2, sorted(logs)
    assert not [n for n, t in outs.items() if "features: labram tokens of" in t], outs  # no cell extracted
    (entry,) = [p for p in (cache / "features").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert json.loads((entry / "meta.json").read_text())["stage"]["shards"] == 2
    df = pd.read_csv(tmp_path / "tok" / "results.csv")
    assert sorted(df[df.metric == "balanced_accuracy"]["head"]) == ["flatten", "mean"]


def shutil_copy_windows(src: Path, dst: Path) -> None:
    """Copy a cache root's window sets (and digest memo), leaving out its features."""
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name in ("features", ".locks"):
            continue
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, dst / p.name)
