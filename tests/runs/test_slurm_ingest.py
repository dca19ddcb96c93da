"""``eegfm-bench ingest --launcher slurm`` on the real single-node cluster of the tests (issue 35, item 2): the
recordings go out as one 2-task job array (one shard each), the launching process only assembles, and the window set
equals the sequential ingest's byte for byte.

The cluster is started by the session fixture ``slurm_cluster`` (``tests/slurm_cluster.py``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eegfm_bench.data.windows import open_window_set

from eegfm_testutils import HANG_S, REPO, requires_data

pytestmark = [pytest.mark.slurm, requires_data]

FILES = ("index.npz", "labels.npz", "meta.json", "ingest_report.json", "ingest_report.md")


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "ingest", "--task", "eegmmidb_mi",
                           "--subjects", "1", "2", "--no-progress", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=HANG_S, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _window_set(cache: Path) -> Path:
    (folder,) = [p for p in cache.glob("eegmmidb_mi-*") if (p / "COMPLETE").is_file()]
    return folder


def test_ingest_as_a_two_shard_job_array_gives_the_sequential_files(slurm_cluster, tmp_path):
    seq = _cli(["--cache-dir", str(tmp_path / "seq"), "--n-jobs", "1"])
    assert seq.returncode == 0, seq.stderr[-2000:]
    r = _cli(["--cache-dir", str(tmp_path / "sl"), "--out", str(tmp_path / "out"), "--launcher", "slurm",
              "--shards", "2", "--launcher.slurm.partition", slurm_cluster["partition"],
              "--launcher.slurm.cpus_per_task", "1", "--launcher.slurm.mem_gb", "2", "--launcher.timeout_min", "20"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "6 of 6 recordings lack their entry: 2 shard(s) of 3-3 recordings, 1 read at once per job" in r.stdout
    assert "windows of 6/6 recordings from the per-recording cache" in r.stdout + r.stderr  # nothing read here
    jobs = tmp_path / "out" / "jobs"
    (script,) = jobs.glob("*_submission.sh")  # one sbatch: a 2-task array
    assert "#SBATCH --array=0-1%" in script.read_text() and "#SBATCH --gpus-per-node=0" in script.read_text()
    queue = json.loads((jobs / "queue.json").read_text())
    array_id = queue[0]["job_id"].split("_")[0]
    assert [q["job_id"] for q in queue] == [f"{array_id}_0", f"{array_id}_1"]
    a, b = _window_set(tmp_path / "seq"), _window_set(tmp_path / "sl")
    for f in FILES:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert np.asarray(open_window_set(a).X).tobytes() == np.asarray(open_window_set(b).X).tobytes()  # the windows
    again = _cli(["--cache-dir", str(tmp_path / "sl"), "--launcher", "slurm",
                  "--launcher.slurm.partition", slurm_cluster["partition"]])
    assert again.returncode == 0 and "lack their entry" not in again.stdout, again.stdout  # nothing to shard


def test_cv_under_slurm_reads_the_recordings_in_an_ingest_array_before_the_cells(slurm_cluster, tmp_path):
    """A cold cache: the cv's launching process submits the ingest stage as its own CPU array (one job per shard),
    then the cells; it reads no recording itself, and the rows equal the sequential run's to the last bit."""
    import yaml

    from eegfm_testutils import assert_bitwise_same_runs

    def cfg(out: Path, cache: Path, launcher: dict | None = None) -> Path:
        c = {"experiment": "si", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
             "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 4, "batch_size": 16, "cache_dir": str(cache)},
             "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
             "trainer": {"max_epochs": 1, "patience": 1},
             "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                       "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
        if launcher:
            c["launcher"] = launcher
        path = out.with_suffix(".yaml")
        path.write_text(yaml.safe_dump(c))
        return path

    def cv(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(path)],
                              capture_output=True, text=True, cwd=REPO, timeout=HANG_S,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})

    seq = cv(cfg(tmp_path / "seq", tmp_path / "cache_seq"))
    assert seq.returncode == 0, seq.stderr[-2000:]
    slurm = {"kind": "slurm", "timeout_min": 20, "slurm": {"partition": slurm_cluster["partition"],
                                                           "cpus_per_task": 1, "mem_gb": 2, "array_parallelism": 2}}
    r = cv(cfg(tmp_path / "sl", tmp_path / "cache_sl", slurm))
    printed = r.stdout + r.stderr
    assert r.returncode == 0, printed[-3000:]
    assert "ingest: 9 of 9 recordings lack their entry: 2 shard(s) of 4-5 recordings" in printed, printed[-3000:]
    assert "windows of 9/9 recordings from the per-recording cache" in printed  # the launching process read none
    (script,) = (tmp_path / "sl" / "ingest" / "jobs").glob("*_submission.sh")
    assert "#SBATCH --array=0-1%2" in script.read_text() and "#SBATCH --gpus-per-node=0" in script.read_text()
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "sl")
