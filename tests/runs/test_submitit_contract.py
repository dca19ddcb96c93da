"""The parts of submitit that :mod:`eegfm_bench.runs.launch` uses beyond its public API, pinned (issue 36 item 8).

submitit has no public way to render a job's sbatch script without submitting it (``sbatch_preview``, shown by
``plan`` and the docs, calls ``submitit.slurm.slurm._make_sbatch_string``) nor to read job states from ``squeue``
on a cluster without accounting storage (``QueueInfoWatcher`` subclasses ``submitit.slurm.slurm.SlurmInfoWatcher``
and is set as ``submitit.SlurmJob.watcher``). pyproject pins submitit to a minor range; these tests, which need no
cluster, fail naming what changed when a submitit release breaks what the code relies on:

* the preview's ``#SBATCH`` lines are those submitit writes when it submits the same launcher (through the public
  ``AutoExecutor.submit``, to a stand-in ``sbatch`` on ``PATH``);
* the watcher's states come from ``squeue``: a queued job has its queue state, a job gone from the queue is done.
"""
from __future__ import annotations

import re
import subprocess
import time
from importlib.metadata import version
from pathlib import Path

import submitit
from submitit.slurm.slurm import SlurmInfoWatcher

from eegfm_bench.runs.launch.launcher import QueueInfoWatcher, make_executor, sbatch_preview, submit_jobs

REPO = Path(__file__).resolve().parents[2]
FIX = "fix: adapt eegfm_bench.runs.launch (sbatch_preview / QueueInfoWatcher) to it, or keep the pinned range"

LAUNCHER = {"kind": "slurm", "cells_per_job": 1, "timeout_min": 30,
            "slurm": {"partition": "debug", "account": "proj", "qos": "high", "gpus_per_node": 0, "cpus_per_task": 2,
                      "mem_gb": 3, "array_parallelism": 2, "setup": ["module load x"],
                      "additional": {"constraint": "c1"}}}


def test_the_installed_submitit_is_in_the_pinned_range():
    pin = re.search(r'"submitit>=([\d.]+),<([\d.]+)"', (REPO / "pyproject.toml").read_text())
    assert pin, "pyproject.toml pins submitit as `submitit>=A,<B` (launch.py uses parts outside its public API)"
    low, high = (tuple(int(x) for x in v.split(".")) for v in pin.groups())
    got = tuple(int(x) for x in re.findall(r"\d+", version("submitit"))[:3])
    assert low <= got < high, f"submitit {version('submitit')} is outside the pinned >={pin[1]},<{pin[2]}; {FIX}"


def _sb(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("#SBATCH"))


def test_the_preview_is_the_script_submitit_submits(tmp_path, monkeypatch):
    """Three jobs submitted as one array through the executor a run uses; ``sbatch`` is a stand-in that records
    nothing and answers as sbatch does."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "sbatch").write_text("#!/bin/sh\necho 'Submitted batch job 4242'\n")
    (bin_ / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{__import__('os').environ['PATH']}")
    folder = tmp_path / "jobs"
    ex = make_executor(LAUNCHER, folder, devices=1, accelerator="cpu")
    jobs = submit_jobs(ex, LAUNCHER, [(print, i) for i in range(3)])
    assert [j.job_id for j in jobs] == ["4242_0", "4242_1", "4242_2"], f"submitit's job ids changed; {FIX}"
    scripts = sorted(folder.glob("*_submission.sh"))
    assert len(scripts) == 1, f"submitit no longer writes one <id>_submission.sh per array ({scripts}); {FIX}"
    submitted = _sb(scripts[0].read_text())
    preview = _sb(sbatch_preview(LAUNCHER, folder, n_jobs=3, accelerator="cpu"))
    assert submitted == preview, f"sbatch_preview differs from what submitit submits: {set(submitted) ^ set(preview)}; {FIX}"
    assert "#SBATCH --array=0-2%2" in preview and "#SBATCH --constraint=c1" in preview


def test_the_queue_watcher_reads_states_from_squeue(monkeypatch):
    assert isinstance(submitit.SlurmJob.watcher, SlurmInfoWatcher), f"SlurmJob.watcher is no SlurmInfoWatcher; {FIX}"
    queue = {"text": "4242_0|RUNNING|node1\n4242_1|PENDING|\n"}
    calls = []

    def squeue(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=queue["text"], stderr="")

    monkeypatch.setattr(subprocess, "run", squeue)
    w = QueueInfoWatcher(delay_s=0)
    for jid in ("4242_0", "4242_1"):
        w.register_job(jid)
    assert w.get_state("4242_0", mode="force") == "RUNNING", f"submitit's watcher no longer reads its update(); {FIX}"
    assert w.get_state("4242_1", mode="cache") == "PENDING" and not w.is_done("4242_0", mode="cache")
    assert calls[-1][:5] == ["squeue", "-h", "-r", "-o", "%i|%T|%N"] and calls[-1][-1] == "4242"
    queue["text"] = "4242_1|RUNNING|node1\n"  # 4242_0 left the queue; registered long enough ago to be trusted
    w._start_time = time.time() - 10  # the attribute submitit's InfoWatcher sets in register_job / clear()
    w.update()  # what get_info calls when a poll is due (InfoWatcher.update_if_long_enough)
    assert w.get_state("4242_0", mode="cache") == "COMPLETED" and w.is_done("4242_0", mode="cache"), FIX
    assert w.get_state("4242_1", mode="cache") == "RUNNING" and not w.is_done("4242_1", mode="cache")
