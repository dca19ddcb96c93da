"""Distributed correctness on CPU (gloo): every command through ``strategy: ddp`` on 2 devices gives the rows of 1.

The commands run as subprocesses (``python -m eegfm_bench.cli``), as users run them: Lightning's DDP launcher
re-executes the command line once per extra device. Real staged EEG (EEGMMIDB, 5 subjects, fold 0: one test subject
of 45 windows, an odd number, so the ``DistributedSampler`` pads one window that must not be counted twice). Each
run has its own feature cache, so the 2-device runs compute their tokens, block outputs, attention and attributions
through DDP ``Trainer.predict`` themselves.
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

from eegfm_testutils import DATA, requires_data

pytestmark = [requires_data, pytest.mark.slow]

CV = {"experiment": "ddp", "task": "eegmmidb_mi", "seed": 0, "confound": False,
      "data": {"subjects": [1, 2, 3, 4, 5], "batch_size": 8},
      "split": {"scheme": "kfold", "k": 5, "seed": 0, "n_val_groups": 1, "folds": [0]},
      "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu", "deterministic": True},
      "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}},
               {"model": "labram", "regime": "head_only", "heads": ["mean", "flatten"],
                "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]}
DDP = ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"]


def _run(args: list[str], cache: Path, timeout: int = 600) -> str:
    env = {**os.environ, "EEGFM_DATA": str(DATA), "EEGFM_CACHE": str(cache), "OMP_NUM_THREADS": "1",
           "EEGFM_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore"}
    for k in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", *args, "--no-progress"], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    cfgs = {}
    for name in ("one", "two"):
        cfg = {**CV, "out_dir": str(root / f"cv_{name}")}
        cfgs[name] = root / f"cv_{name}.yaml"
        cfgs[name].write_text(yaml.safe_dump(cfg))
    out1 = _run(["cv", "--config", str(cfgs["one"])], root / "cache1")
    out2 = _run(["cv", "--config", str(cfgs["two"]), *DDP], root / "cache2")
    return {"root": root, "stdout": (out1, out2)}


def _rows(path: Path, cols=("model", "regime", "head", "fold", "condition", "metric")) -> pd.DataFrame:
    df = pd.read_csv(path)
    return df.sort_values(list(cols)).reset_index(drop=True)


def test_cv_on_two_devices_tests_every_window_exactly_once_and_writes_once(runs):
    root = runs["root"]
    split = json.loads((root / "cv_two" / "splits.json").read_text())
    assert len(split["folds"][0]["test"]) == 1
    df = _rows(root / "cv_two" / "results.csv")
    assert set(df["n_windows"]) == {45} and set(df["devices"]) == {2}
    for path in df["predictions"].unique():
        p = pd.read_csv(root / "cv_two" / path)  # relative to the out_dir
        assert len(p) == 45 and p["index"].is_unique and set(p["subject"]) == set(split["folds"][0]["test"])
    # one copy of every output: one summary printed, one checkpoint per cell, one logger version per cell
    assert runs["stdout"][1].count("| model | init | regime | head |") == 1
    assert len(list((root / "cv_two" / "checkpoints").rglob("*.ckpt"))) == 3
    assert len(list((root / "cv_two" / "logs").rglob("metrics.csv"))) == 3
    assert len(list((root / "cv_two" / "predictions").glob("*.csv"))) == 3
    assert not list((root / "cv_two").rglob("*.tmp")) and not list((root / "cache2").rglob("*.partial*"))


def _compare(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], what: str) -> None:
    assert len(a) == len(b) and len(a) > 0, what
    m = a.merge(b, on=keys, suffixes=("_1", "_2"), validate="one_to_one")
    assert len(m) == len(a), f"{what}: rows differ"
    assert (m["n_windows_1"] == m["n_windows_2"]).all(), f"{what}: n_windows differ"
    v1, v2 = m["value_1"].astype(float), m["value_2"].astype(float)
    both_nan = v1.isna() & v2.isna()
    assert (both_nan | ((v1 - v2).abs() <= 1e-6)).all(), f"{what}:\n{m[~both_nan & ((v1 - v2).abs() > 1e-6)]}"


def test_sweep_on_two_devices_gives_the_rows_of_one(runs):
    root = runs["root"]
    sw = {"cv_out_dir": str(root / "cv_one"), "reference": None,
          "conditions": ["clean", "white_snr=-5dB", "pink_snr=0dB", "dropout_p=0.3_zero", "dropout_p=0.3_removed"],
          "trainer": {"accelerator": "cpu"}}
    (root / "sweep.yaml").write_text(yaml.safe_dump(sw))
    _run(["sweep", "--config", str(root / "sweep.yaml"), "--out_dir", str(root / "sweep_one"), "--batch_size", "16"],
         root / "cache1")
    _run(["sweep", "--config", str(root / "sweep.yaml"), "--out_dir", str(root / "sweep_two"), "--batch_size", "5",
          *DDP], root / "cache_sweep2")
    keys = ["model", "regime", "head", "fold", "condition", "metric"]
    a, b = _rows(root / "sweep_one" / "results.csv"), _rows(root / "sweep_two" / "results.csv")
    _compare(a, b, keys, "sweep")
    ok = a[a.metric == "balanced_accuracy"]
    assert set(ok["n_windows"]) == {45} and len(ok) == 3 * 4 + 1  # removal: LaBraM mean only
    # the clean condition is the test of the saved cv checkpoint: it equals the cv's own rows
    cv = _rows(root / "cv_one" / "results.csv")
    cv = cv[cv.metric.isin(["balanced_accuracy", "auroc", "cohen_kappa"])]
    clean = b[b.condition == "clean"].merge(cv, on=["model", "regime", "head", "fold", "metric"])
    assert len(clean) == 9 and np.allclose(clean["value_x"], clean["value_y"], atol=1e-6)
    # each window's probabilities are the same on 1 and 2 devices
    for f in (root / "sweep_one" / "predictions").rglob("*.csv"):
        p1, p2 = pd.read_csv(f), pd.read_csv(root / "sweep_two" / f.relative_to(root / "sweep_one"))
        assert len(p1) == len(p2) == 45 and p2["index"].is_unique
        np.testing.assert_allclose(p1[["p0", "p1"]].to_numpy(), p2[["p0", "p1"]].to_numpy(), atol=1e-6)


def test_probe_and_attribute_on_two_devices_give_the_rows_of_one(runs):
    root = runs["root"]
    icfg = {"cv_dir": str(root / "cv_one"),
            "probe": {"poolings": ["mean", "flatten"], "max_epochs": 3, "forward_batch_size": 7},
            "attention": {"max_windows_per_fold": 11},
            "attribution": {"methods": ["gxi", "attnlrp"], "percentile": 0, "max_windows_per_fold": 3,
                            "conservation_windows": 2, "randomisation_windows": 2, "batch_size": 2},
            "trainer": {"accelerator": "cpu"}}
    (root / "interp.yaml").write_text(yaml.safe_dump(icfg))
    for cmd in ("probe", "attribute"):
        _run([cmd, "--config", str(root / "interp.yaml"), "--out_dir", str(root / "interp_one")], root / "cache1")
        _run([cmd, "--config", str(root / "interp.yaml"), "--out_dir", str(root / "interp_two"), *DDP],
             root / f"cache_{cmd}2")
    keys = ["model", "regime", "head", "fold", "condition", "metric", "stage", "pooling"]
    _compare(_rows(root / "interp_one" / "probes" / "results.csv", keys),
             _rows(root / "interp_two" / "probes" / "results.csv", keys), keys, "probes")
    z1, z2 = (np.load(root / d / "attention" / "labram.npz") for d in ("interp_one", "interp_two"))
    np.testing.assert_allclose(z1["frozen"], z2["frozen"], atol=1e-6)
    keys = ["model", "regime", "head", "fold", "condition", "metric"]
    a = _rows(root / "interp_one" / "attribution" / "results.csv", keys)
    b = _rows(root / "interp_two" / "attribution" / "results.csv", keys)
    _compare(a, b, keys, "attribution")
    assert {"gxi:n_selected", "attnlrp:conservation_closure"} <= set(a.metric)
    for cell in ("eegnet-full-flatten", "labram-head_only-mean"):
        m1, m2 = (np.load(root / d / "attribution" / cell / "clean" / "gxi" / "fold0.npz")
                  for d in ("interp_one", "interp_two"))
        np.testing.assert_array_equal(m1["window"], m2["window"])
        np.testing.assert_allclose(m1["channel"], m2["channel"], atol=1e-4)
    # fewer selected windows than ranks: the predict pass still runs on both ranks, the window is counted once
    _run(["attribute", "--config", str(root / "interp.yaml"), "--out_dir", str(root / "interp_one_window"),
          "--attribution.max_windows_per_fold", "1", "--attribution.methods", "[gxi]", "--select.models", "[eegnet]",
          *DDP], root / "cache_attr1")
    one = pd.read_csv(root / "interp_one_window" / "attribution" / "results.csv")
    assert one[one.metric == "gxi:n_selected"]["value"].tolist() == [1.0]
