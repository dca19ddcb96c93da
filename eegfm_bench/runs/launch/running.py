"""What is running in a command's ``out_dir``, from its files alone: the ``running/<cell>.json`` marker a live cell
holds and the ``jobs/queue.json`` a SLURM launch leaves (read against ``squeue``).

The cv loop writes the markers (:func:`running_marker`), the launcher the queue file (:func:`write_queue`), and
``eegfm-bench status`` reads both (:func:`running_cells`). Standard library only, so that ``status`` stays light
(docs/guide/architecture.md, house rules): no submitit, torch or Lightning behind it.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

from eegfm_bench.atomic import atomic_write_text


def running_marker(out: Path, cid: str) -> Path:
    """Write ``<out>/running/<cell>.json`` (host, pid, start): what ``eegfm-bench status`` reports as running; the
    caller removes it when the cell ends (a killed process leaves it: status then checks the pid). Returns its path."""
    d = Path(out) / "running"
    p = d / (cid.replace("/", "__") + ".json")
    for _ in range(3):  # another worker may remove the (then empty) folder between the two steps
        d.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write_text(p, json.dumps({"cell": cid, "host": socket.gethostname(), "pid": os.getpid(),
                                             "start": time.time()}))
            break
        except FileNotFoundError:
            continue
    return p


def write_queue(out: Path, jobs: list, parts: list[list[str]]) -> Path:
    """``<out>/jobs/queue.json``: the SLURM job id of every unit (what ``status`` asks ``squeue`` about).

    ``jobs`` are submitit jobs (``job_id``, ``paths.stdout``), ``parts`` the cell ids each runs."""
    path = Path(out) / "jobs" / "queue.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{"job_id": str(j.job_id), "cells": list(p), "stdout": str(j.paths.stdout)} for j, p in zip(jobs, parts)]
    atomic_write_text(path, json.dumps(entries, indent=1))
    return path


def queue_states(job_ids: Sequence[str]) -> Optional[dict[str, str]]:
    """SLURM state of each job id still in the queue (``squeue -r``: one line per array task; ``PENDING``,
    ``RUNNING``, ``CONFIGURING``, ``COMPLETING``, ...); jobs that left the queue are absent. None without
    ``squeue``."""
    if not job_ids or shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    wanted = set(map(str, job_ids))
    states = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in wanted:
            states[parts[0]] = parts[1]
    return states


def queued_cells(out: Path) -> dict[str, str]:
    """Cells whose SLURM job is still in the queue (``<out>/jobs/queue.json`` read against ``squeue``):
    ``{cell id: "slurm job <id> <STATE>"}``; empty without a queue file or without ``squeue``."""
    path = Path(out) / "jobs" / "queue.json"
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())
    states = queue_states([e["job_id"] for e in entries]) or {}
    return {cid: f"slurm job {e['job_id']} {states[e['job_id']]}" for e in entries if e["job_id"] in states
            for cid in e["cells"]}


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_cells(out: Path) -> dict[str, str]:
    """``{cell id: where}`` of the cells of ``out`` that a queued or running SLURM job (:func:`queued_cells`) or a
    live process (a ``running/`` marker whose pid is alive, or written on another host) holds; ``where`` is
    ``"slurm job <id> <STATE>"`` or ``"<host>:<pid>"``."""
    running = queued_cells(out)
    markers = Path(out) / "running"
    for m in markers.glob("*.json") if markers.is_dir() else []:
        info = json.loads(m.read_text())
        if info["host"] != socket.gethostname() or pid_alive(int(info["pid"])):
            running[info["cell"]] = f"{info['host']}:{info['pid']}"
    return running


__all__ = ["pid_alive", "queue_states", "queued_cells", "running_cells", "running_marker", "write_queue"]
