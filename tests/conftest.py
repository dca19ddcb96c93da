"""Shared test setup: offline, a session-wide window cache, the staged data root.

Real-data tests read ``$EEGFM_DATA`` (default ``../shared/data`` next to the repository) and are skipped
when it is absent. Nothing here touches the network: ``EEGFM_OFFLINE=1`` and ``HF_HUB_OFFLINE=1``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")
from eegfm_bench.runtime import tune_process  # noqa: E402  (before torch loads, as the CLI does)

tune_process()
os.environ["EEGFM_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")

import sys

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eegfm_testutils import DATA, HAVE_DATA, requires_data  # noqa: E402,F401

# Modules that bind ``load_windows`` at import: imported before any test patches ``eegfm_bench.data.windows`` (a
# first import under a test's monkeypatch would keep the fake for the rest of the session).
import eegfm_bench.data.datamodule  # noqa: E402,F401


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """One window/token cache for the whole session (so real-data tests share cached windows)."""
    if "EEGFM_CACHE" not in os.environ or os.environ.get("EEGFM_TEST_FRESH_CACHE"):
        os.environ["EEGFM_CACHE"] = str(tmp_path_factory.mktemp("eegfm_cache"))
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    yield


@pytest.fixture
def data_root() -> Path:
    if not HAVE_DATA:
        pytest.skip(f"staged EEG not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node SLURM cluster (``tests/slurm_cluster.py``), started once per session (or found running)
    and left running: another copy of the suite may share it.

    Skipped where SLURM's packages or root are missing, unless ``EEGFM_REQUIRE_SLURM=1`` (CI), which fails instead.
    """
    import slurm_cluster as sc

    why = sc.available()
    if why:
        if os.environ.get("EEGFM_REQUIRE_SLURM"):
            pytest.fail(f"EEGFM_REQUIRE_SLURM is set but no SLURM cluster can be started: {why}")
        pytest.skip(why)
    info = sc.start()
    yield info
    sc.stop(info)
