"""Shared test constants (imported by test modules; conftest.py files are not importable reliably)."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

HANG_S = 3600
"""The subprocess guard of a whole command run by a test (and the suite's ``--timeout``): a guard against a hang,
not a deadline. It is many times a command's idle time, because CI may run the suite beside other work; at stop 40
two copies of the suite beside five other jobs on 2 cores took the full documentation build past a 900 s guard."""

REPO = Path(__file__).resolve().parents[1]
_default = REPO.parent / "shared" / "data"
if not os.environ.get("EEGFM_DATA") and _default.is_dir():
    os.environ["EEGFM_DATA"] = str(_default)
DATA = Path(os.environ.get("EEGFM_DATA", _default))
HAVE_DATA = (DATA / "eegmmidb").is_dir()

requires_data = pytest.mark.skipif(not HAVE_DATA, reason=f"staged EEG not found at {DATA} (set EEGFM_DATA)")


def cli_env() -> dict:
    """The environment of an ``eegfm-bench`` subprocess in a test: the staged data (an absolute path, so a subprocess
    run from another folder finds it when ``EEGFM_DATA`` is relative, as in CI), one OpenMP thread, offline, this
    checkout first on the path, and no launcher / DDP variables of the pytest process."""
    env = {**os.environ, "EEGFM_DATA": str(DATA.resolve()), "OMP_NUM_THREADS": "1", "EEGFM_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for k in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", "EEGFM_TRACEBACK"):
        env.pop(k, None)
    return env


def stored_rows(out: Path) -> pd.DataFrame:
    """A run's rows as stored (``results.parquet``), without the columns that name its own folder (``checkpoint``,
    ``predictions``) and without the wall-time metric, in a fixed order."""
    df = pd.read_parquet(Path(out) / "results.parquet")
    df = df[df.metric != "fit_seconds"].drop(columns=["checkpoint", "predictions"])
    return df.sort_values(["model", "regime", "head", "fold", "condition", "metric"]).reset_index(drop=True)


def assert_bitwise_same_runs(a: Path, b: Path) -> None:
    """Two cv runs hold the same rows to the last bit (every column, ``value`` compared with ``==``, no tolerance)
    and byte-for-byte equal prediction files."""
    pa, pb = sorted((Path(a) / "predictions").glob("*.csv")), sorted((Path(b) / "predictions").glob("*.csv"))
    assert pa and [p.name for p in pa] == [p.name for p in pb]
    for x, y in zip(pa, pb):  # the numbers first: a probability 1e-7 off changes the file
        assert x.read_bytes() == y.read_bytes(), f"{x.name}: the predicted probabilities differ"
    ra, rb = stored_rows(a), stored_rows(b)
    va, vb = ra.value.to_numpy(), rb.value.to_numpy()
    assert len(va) == len(vb) and ((va == vb) | (pd.isna(va) & pd.isna(vb))).all()
    pd.testing.assert_frame_equal(ra, rb, check_exact=True)


def cfg_near_threshold(out: Path, **over) -> dict:
    """A tiny cv (issue 33's run): EEGNet on 6 EEGMMIDB subjects, folds 0 and 1 of 3, one epoch. Fold 1 holds a
    test window a few 1e-6 from p = 0.5, where another thread count's rounding (1e-7 to 1e-5 on a probability here)
    can move it to the other class: the fold the launcher tests compare bit for bit."""
    cfg = {"experiment": "det", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 16, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]}
    cfg.update(over)
    return cfg


def install_plugin(site: Path, package: str, code: str, group: str, name: str, target: str) -> None:
    """Write a real installed distribution under ``site`` (a folder to put on ``PYTHONPATH``): the package
    ``package`` (its ``__init__.py`` is ``code``) and a ``dist-info`` whose ``entry_points.txt`` declares
    ``name = package:target`` in the entry-point group ``group`` (what ``pip install`` of a plug-in leaves)."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(code)
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    dist = package.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {package}:{target}\n")
