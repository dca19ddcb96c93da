"""The SLURM launcher against a real single-node cluster (issue 26), no mocks: the cells of a cv go out as one job
array whose script is the preview, ``array_parallelism`` is honoured, the rows equal the sequential run's,
``status`` reads the queue, refusals are one line before any job runs, no GPU is requested on a CPU partition,
and neither submitit's sacct warning nor Lightning's srun notice reaches the user.

The cluster is started by the session fixture ``slurm_cluster`` (``tests/slurm_cluster.py``); CI sets
``EEGFM_REQUIRE_SLURM=1`` so that these tests fail instead of skipping where it cannot start.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from eegfm_testutils import HANG_S, REPO, assert_bitwise_same_runs, cfg_near_threshold, requires_data

pytestmark = [pytest.mark.slurm, requires_data]


def _cfg(out: Path, *, launcher: dict | None = None, **over) -> dict:
    cfg = {"experiment": "sl", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 4, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    if launcher is not None:
        cfg["launcher"] = launcher
    cfg.update(over)
    return cfg


def _slurm(partition: str, **over) -> dict:
    s = {"partition": partition, "cpus_per_task": 1, "mem_gb": 2, "array_parallelism": 1}
    s.update(over)
    return {"kind": "slurm", "timeout_min": 20, "slurm": s}


def _cli(args: list[str], cwd: Path = REPO, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eegfm_bench.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _squeue(under: Path) -> str:
    """The queue's jobs whose batch script lies under ``under`` (this test's jobs: another suite may share the
    cluster), one ``<id> <state>`` line each."""
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T %o"], capture_output=True, text=True).stdout
    return "".join(" ".join(line.split()[:2]) + "\n" for line in out.splitlines() if str(under) in line)


def test_cv_cells_go_out_as_one_throttled_job_array_and_give_the_sequential_rows(slurm_cluster, tmp_path):
    from eegfm_bench.runs.launch.launcher import sbatch_preview
    from eegfm_bench.runs.cv.progress import cv_status

    part = slurm_cluster["partition"]
    seq_cfg, sl_cfg = tmp_path / "seq.yaml", tmp_path / "sl.yaml"
    seq_cfg.write_text(yaml.safe_dump(_cfg(tmp_path / "seq")))
    sl_cfg.write_text(yaml.safe_dump(_cfg(tmp_path / "sl", launcher=_slurm(part))))
    assert _cli(["cv", "--config", str(seq_cfg), "--no-progress"]).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(sl_cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    seen, busy_cmds = set(), []
    while proc.poll() is None:  # status while the jobs run: queue states, and never a resume for a queued cell
        if (tmp_path / "sl" / "jobs" / "queue.json").is_file():
            rows, cmd = cv_status(tmp_path / "sl")
            states = {r["state"] for r in rows}
            seen |= states
            if states & {"pending", "running"}:
                busy_cmds.append(cmd)
        time.sleep(0.5)
    printed = proc.stdout.read()
    assert proc.returncode == 0, printed[-3000:]
    assert {"pending", "running"} <= seen, seen  # array_parallelism 1: one task runs while the other waits
    assert busy_cmds and all(c.startswith("wait:") for c in busy_cmds), set(busy_cmds)
    # one sbatch: one submission script, an array of 3 tasks throttled to 1, the preview's script
    scripts = sorted((tmp_path / "sl" / "jobs").glob("*_submission.sh"))
    assert len(scripts) == 1, scripts
    queue = json.loads((tmp_path / "sl" / "jobs" / "queue.json").read_text())
    array_id = queue[0]["job_id"].split("_")[0]
    assert [q["job_id"] for q in queue] == [f"{array_id}_{i}" for i in range(3)]
    submitted = scripts[0].read_text()
    assert "#SBATCH --array=0-2%1" in submitted and "#SBATCH --gpus-per-node=0" in submitted
    lc = yaml.safe_load(sl_cfg.read_text())["launcher"]
    from eegfm_bench.runs.cv.cells import load_config

    preview = sbatch_preview(load_config(str(sl_cfg)).launcher, tmp_path / "sl" / "jobs", n_jobs=3)
    sb = lambda text: sorted(line for line in text.splitlines() if line.startswith("#SBATCH"))  # noqa: E731
    assert sb(submitted) == sb(preview), (sb(submitted), sb(preview), lc)
    # the rows of the sequential run to the last bit: a job of one CPU computes each cell with its intra_op_threads
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "sl")
    # no noise: no per-poll sacct warning, no srun notice, one line about the missing accounting storage
    logs = printed + "".join(p.read_text() for p in (tmp_path / "sl" / "jobs").glob("*_log.*"))
    assert "Bypassing sacct error" not in logs and "accounting storage is disabled" not in logs
    assert "`srun` command is available" not in logs
    assert printed.count("no accounting storage") == 1
    assert [r["state"] for r in cv_status(tmp_path / "sl")[0]] == ["done"] * 3
    assert not _squeue(tmp_path).strip()


def test_refusals_are_one_line_before_any_job_runs(slurm_cluster, tmp_path):
    part = slurm_cluster["partition"]
    bad = tmp_path / "bad_partition.yaml"  # a partition the cluster does not have: refused before any data
    bad.write_text(yaml.safe_dump(_cfg(tmp_path / "bp", launcher=_slurm("no_such_partition"))))
    r = _cli(["cv", "--config", str(bad), "--no-progress"])
    assert r.returncode == 2 and "is not a partition of this cluster; fix: one of debug" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "bp" / "cells.json").exists()
    big = tmp_path / "too_big.yaml"  # what only sbatch can refuse (more memory than any node): one line, no job
    big.write_text(yaml.safe_dump(_cfg(tmp_path / "big", launcher=_slurm(part, mem_gb=100000))))
    r = _cli(["cv", "--config", str(big), "--no-progress"])
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.strip() and "Warning" not in line
             and not line.startswith(" ") and "EEGFM_TRACEBACK" not in line]
    # a cold window cache: the ingest stage's array (issue 35) is the first refused, before any cell
    assert len(lines) == 1 and re.match(r"eegfm-bench cv: SubmissionError: sbatch refused the (job array of 3 job\(s\)"
                                        r"|ingest stage's job array of \d+ job\(s\))", lines[0]) \
        and "no job was started" in lines[0], lines
    assert "Traceback" not in r.stderr and not _squeue(tmp_path).strip()
    gpu = tmp_path / "gpu.yaml"  # a GPU asked of a CPU-only partition: refused before any data is read
    gpu.write_text(yaml.safe_dump(_cfg(tmp_path / "g", launcher=_slurm(part, gpus_per_node=1))))
    r = _cli(["cv", "--config", str(gpu), "--no-progress"])
    assert r.returncode == 2 and "has no GPUs" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "g" / "cells.json").exists()  # nothing was read or written


def test_accelerator_auto_requests_what_the_partition_has(slurm_cluster):
    from eegfm_bench.runs.launch.launcher import partition_gpus, slurm_parameters

    part = slurm_cluster["partition"]
    assert partition_gpus(part) == 0
    lc = _slurm(part)
    assert slurm_parameters(lc, 1, "auto")["gpus_per_node"] == 0
    assert slurm_parameters(lc, 1, "auto", gpus_on_partition=4)["gpus_per_node"] == 1  # a GPU partition
    with pytest.raises(Exception, match="has no GPUs"):
        slurm_parameters(lc, 1, "gpu")


def _make_eligible_now(job_id: str, timeout_s: float = 60) -> None:
    """SLURM holds a requeued job for about 2 min (``Reason=BeginTime``); let it start at once."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        info = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
        if "JobState=PENDING" in info:
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
            return
        time.sleep(0.3)


def test_a_preempted_or_timed_out_job_resumes_from_its_last_checkpoint(slurm_cluster, tmp_path):
    """Two cells as two array tasks, each interrupted once it has written ``last.ckpt``: task 0 gets SIGUSR2 (what
    SLURM sends before the time limit or on preemption; submitit checkpoints and requeues it), task 1 is requeued
    by ``scontrol requeue`` (preempted by the scheduler). Both resume from ``last.ckpt`` and give the rows of an
    uninterrupted run."""
    over = {"data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 15, "batch_size": 16},
            "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
            "trainer": {"max_epochs": 8, "patience": 8}}
    seq_cfg, sl_cfg = tmp_path / "seq.yaml", tmp_path / "sl.yaml"
    seq_cfg.write_text(yaml.safe_dump(_cfg(tmp_path / "seq", **over)))
    # one core per job: each cell computes with its intra_op_threads all the same (8 epochs: drift would show)
    sl_cfg.write_text(yaml.safe_dump(_cfg(tmp_path / "sl", launcher=_slurm(slurm_cluster["partition"]), **over)))
    assert _cli(["cv", "--config", str(seq_cfg), "--no-progress"]).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(sl_cfg), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    interrupted = {}
    while proc.poll() is None and len(interrupted) < 2:
        queue = tmp_path / "sl" / "jobs" / "queue.json"
        for k in (0, 1):
            if k in interrupted or not queue.is_file():
                continue
            if list((tmp_path / "sl" / "checkpoints").glob(f"*/fold{k}/last.ckpt")):
                job = next(q["job_id"] for q in json.loads(queue.read_text()) if f"/fold{k}/" in q["cells"][0])
                cmd = ["scancel", "--signal=USR2", job] if k == 0 else ["scontrol", "requeue", job]
                assert subprocess.run(cmd, capture_output=True).returncode == 0
                interrupted[k] = job
        time.sleep(0.2)
    assert len(interrupted) == 2, "a cell finished before it could be interrupted"
    for job in interrupted.values():
        _make_eligible_now(job)
    printed = proc.communicate(timeout=HANG_S)[0]
    assert proc.returncode == 0, printed[-3000:]
    for k, job in interrupted.items():
        log = (tmp_path / "sl" / "jobs" / f"{job}_0_log.out").read_text() + \
            (tmp_path / "sl" / "jobs" / f"{job}_0_log.err").read_text()
        assert log.count("Starting with JobEnvironment") == 2, log[-2000:]  # it ran twice
        assert f"fold {k}: resuming from" in log and "last.ckpt" in log, log[-2000:]
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "sl")  # the uninterrupted run's rows, to the last bit


def test_the_near_threshold_fold_through_slurm_equals_the_sequential_run_bitwise(slurm_cluster, tmp_path):
    """Issue 33: the sequential run in a process of 3 threads, the SLURM jobs on one CPU each; every cell computes
    with ``intra_op_threads`` (2), so the fold with a window at p = 0.5 gives the same rows and predictions."""
    seq_cfg, sl_cfg = tmp_path / "seq.yaml", tmp_path / "sl.yaml"
    seq_cfg.write_text(yaml.safe_dump(cfg_near_threshold(tmp_path / "seq")))
    sl_cfg.write_text(yaml.safe_dump(cfg_near_threshold(tmp_path / "sl", launcher=_slurm(slurm_cluster["partition"],
                                                                                        array_parallelism=2))))
    r = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(seq_cfg), "--no-progress"],
                       capture_output=True, text=True, cwd=REPO, timeout=HANG_S,
                       env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "3"})
    assert r.returncode == 0, r.stderr[-3000:]
    r = _cli(["cv", "--config", str(sl_cfg), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "sl")
    rows = pd.read_parquet(tmp_path / "sl" / "results.parquet")
    assert set(rows.intra_op_threads) == {2} and set(rows.fold.astype(str)) == {"0", "1"}  # folds are text in the store
    fold1 = pd.read_csv(next((tmp_path / "sl" / "predictions").glob("*-fold1.csv")))
    assert (fold1.p1 - 0.5).abs().min() < 1e-4  # the pinned fold: a window at the threshold
