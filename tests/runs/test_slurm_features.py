"""``eegfm-bench features --launcher slurm`` on the real single-node cluster of the tests (issue 35, item 3): a
head-only backbone's tokens go out as one 2-task job array (one window range each), the launching process only
assembles, and the cache entry equals the sequential extraction's (same key, arrays bit for bit).

The cluster is started by the session fixture ``slurm_cluster`` (``tests/slurm_cluster.py``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eegfm_testutils import HANG_S, REPO, requires_data

pytestmark = [pytest.mark.slurm, requires_data]


def _cfg(path: Path, cache: Path) -> Path:
    c = {"experiment": "sf", "task": "eegmmidb_mi", "out_dir": str(path.with_suffix("")), "seed": 0,
         "confound": False,
         "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 4, "batch_size": 4, "cache_dir": str(cache)},
         "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
         "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu"},
         "runs": [{"model": "labram", "regime": "head_only", "heads": ["mean"],
                   "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]}
    path.write_text(yaml.safe_dump(c))
    return path


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "features", "--no-progress", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=HANG_S,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _entry(cache: Path) -> Path:
    (folder,) = [p for p in (cache / "features").iterdir() if (p / "COMPLETE").is_file()]
    return folder


def test_features_as_a_two_shard_job_array_give_the_sequential_entry(slurm_cluster, tmp_path):
    seq = _cli(["--config", str(_cfg(tmp_path / "seq.yaml", tmp_path / "cseq"))])
    assert seq.returncode == 0, seq.stderr[-2000:]
    r = _cli(["--config", str(_cfg(tmp_path / "sl.yaml", tmp_path / "csl")), "--launcher", "slurm", "--shards", "2",
              "--launcher.slurm.partition", slurm_cluster["partition"], "--launcher.slurm.cpus_per_task", "1",
              "--launcher.slurm.mem_gb", "2", "--launcher.timeout_min", "20"])
    printed = r.stdout + r.stderr
    assert r.returncode == 0, printed[-3000:]
    assert "labram tokens of 24 windows in 2 shard(s) of windows 0..11, 12..23 (launcher slurm)" in printed
    jobs = tmp_path / "sl" / "features" / "jobs"
    (script,) = jobs.glob("*_submission.sh")  # one sbatch: a 2-task array
    assert "#SBATCH --array=0-1%" in script.read_text()
    queue = json.loads((jobs / "queue.json").read_text())
    array_id = queue[0]["job_id"].split("_")[0]
    assert [q["job_id"] for q in queue] == [f"{array_id}_0", f"{array_id}_1"]
    a, b = _entry(tmp_path / "cseq"), _entry(tmp_path / "csl")
    assert a.name == b.name  # the same key
    names = sorted(f.name for f in a.glob("*.npy"))
    assert names == sorted(f.name for f in b.glob("*.npy")) and "tokens.npy" in names
    for f in names:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert json.loads((b / "meta.json").read_text())["stage"]["shards"] == 2
