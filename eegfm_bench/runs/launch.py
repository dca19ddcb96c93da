"""Cells as independent jobs through submitit: local worker processes or SLURM (project issue 13).

A command's parent process decides the cells to run exactly as a sequential run does (the window cache, the
split, ``cells.json`` are built and written first), cuts them into jobs and submits every job to a submitit
executor; each job runs its cells with the same code as the sequential loop (``run_cv(..., worker_cells=...)``)
and appends its rows to the result store as part files (``ResultStore(merge=False)``: writers never rewrite a
shared file, :mod:`eegfm_bench.results`); when every job has ended the parent merges ``results.csv`` /
``.parquet``, writes ``failures.json`` and the summary. A rerun runs only the cells without rows of their current
config hash, so a killed or failed job loses nothing already written.

Launchers (the ``launcher:`` section of a cv config, or ``--launcher`` / ``--workers`` on the command line):

* ``none`` — the sequential loop in this process (default);
* ``local`` — ``workers`` concurrent processes on this machine (:class:`submitit.LocalExecutor`); the cells are
  dealt round-robin to the workers and every worker gets ``cpu_count // workers`` torch threads;
* ``slurm`` — one job per ``cells_per_job`` cells as a SLURM job array (:class:`submitit.AutoExecutor`):
  ``partition``, ``account``, ``qos``, ``timeout_min``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``,
  ``array_parallelism``, ``setup`` (shell lines before the job, e.g. ``module load``), ``additional`` (any other
  sbatch option). Multi-GPU cells use Lightning's own SLURM support inside the job (``trainer.devices`` and
  ``gpus_per_node`` alike; ``tasks_per_node`` = devices). A preempted or timed-out job is requeued by submitit
  (:class:`CellJob` is ``Checkpointable``) and resumes: finished cells are skipped and an unfinished cell continues
  from its ``last.ckpt``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from eegfm_bench.config import ConfigError
from eegfm_bench.errors import NotAResultFolderError


@dataclass
class SlurmConfig:
    """sbatch settings of the ``slurm`` launcher.

    Args:
        partition: ``--partition``.
        account: ``--account``.
        qos: ``--qos``.
        gpus_per_node: GPUs per job. null (default): the trainer's ``devices`` (one task per GPU, as Lightning's
            SLURM DDP runs), or 0 with ``accelerator: cpu``; fewer GPUs than ``devices`` is refused.
        cpus_per_task: CPU cores per task.
        mem_gb: memory per node in GB.
        array_parallelism: jobs of the array running at once.
        setup: shell lines run before the job (``module load cuda``, ``source .venv/bin/activate``).
        additional: any other sbatch option (``{constraint: h100}``).
    """

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpus_per_node: Optional[int] = None
    cpus_per_task: int = 8
    mem_gb: int = 64
    array_parallelism: int = 64
    setup: list[str] = field(default_factory=list)
    additional: dict[str, Any] = field(default_factory=dict)


@dataclass
class LauncherConfig:
    """Where the cells run.

    Args:
        kind: ``none`` (sequential, this process), ``local`` (worker processes) or ``slurm``.
        workers: concurrent local workers.
        cells_per_job: cells per SLURM job (local workers take every ``workers``-th cell).
        folder: submitit's folder for job pickles and logs (default ``<out_dir>/jobs``).
        timeout_min: wall time per job in minutes.
        threads: torch intra-op threads per local worker (default: CPU cores // workers). Float sums split over
            another thread count round differently: with 2 workers × 1 thread the quickstart's AUROC differed
            from the sequential 2-thread run by up to 2.2e-4 (balanced accuracy identical); set it to the
            sequential run's thread count for bit-identical rows at the cost of oversubscription.
        slurm: sbatch settings.
    """

    kind: Literal["none", "local", "slurm"] = "none"
    workers: int = 2
    cells_per_job: int = 1
    folder: Optional[str] = None
    timeout_min: int = 240
    threads: Optional[int] = None
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


def check_launcher(lc: dict | None, where: str = "launcher") -> None:
    """Validate a ``launcher:`` section before any data is read.

    Raises
    ------
    ConfigError
        ``workers`` or ``cells_per_job`` below 1; ``slurm`` without a partition or on a machine without SLURM.
    """
    import shutil

    if not lc:
        return
    for k in ("workers", "cells_per_job", "timeout_min"):
        if int(lc.get(k, 1)) < 1:
            raise ConfigError(f"{where}.{k} = {lc.get(k)}; fix: a whole number >= 1")
    if lc.get("kind") == "slurm":
        slurm_parameters(lc)  # the partition
        if shutil.which("sbatch") is None:
            raise ConfigError(f"{where}.kind: slurm, but this machine has no SLURM (sbatch is not on PATH); fix: "
                              "launch from a SLURM login node, or use --launcher local --workers N here")


def slurm_parameters(lc: dict, devices: int = 1, accelerator: str = "auto") -> dict:
    """submitit ``update_parameters`` keywords of a ``launcher:`` section (``slurm_*`` names).

    ``devices`` and ``accelerator`` are the trainer's: ``tasks_per_node = devices`` and, unless set,
    ``gpus_per_node = devices`` (0 for ``accelerator: cpu``).

    Raises
    ------
    ConfigError
        If no partition is given, or ``gpus_per_node`` is below ``devices`` on a GPU accelerator.
    """
    s = lc["slurm"]
    if not s.get("partition"):
        raise ConfigError("launcher.slurm.partition is not set; fix: the partition your jobs go to (sinfo lists them)")
    devices = max(1, int(devices))
    cpu = str(accelerator) == "cpu"
    gpus = s.get("gpus_per_node")
    gpus = (0 if cpu else devices) if gpus is None else int(gpus)
    if not cpu and gpus < devices:
        raise ConfigError(f"launcher.slurm.gpus_per_node = {gpus} but trainer.devices = {devices}: Lightning would "
                          f"start {devices} tasks on {gpus} GPU(s); fix: gpus_per_node: {devices} (or null, which "
                          "follows devices)")
    p = {"slurm_partition": s["partition"], "timeout_min": int(lc["timeout_min"]),
         "gpus_per_node": gpus, "tasks_per_node": devices,
         "cpus_per_task": int(s["cpus_per_task"]), "mem_gb": int(s["mem_gb"]),
         "slurm_array_parallelism": int(s["array_parallelism"]), "name": "eegfm-bench"}
    if s.get("account"):
        p["slurm_account"] = s["account"]
    if s.get("qos"):
        p["slurm_qos"] = s["qos"]
    if s.get("setup"):
        p["slurm_setup"] = list(s["setup"])
    if s.get("additional"):
        p["slurm_additional_parameters"] = dict(s["additional"])
    return p


def sbatch_preview(lc: dict, folder: str | os.PathLike, devices: int = 1, n_jobs: int = 1,
                   accelerator: str = "auto") -> str:
    """The sbatch script submitit would write for one job of this launcher (for docs, tests and ``plan``)."""
    from submitit.slurm.slurm import _make_sbatch_string

    p = slurm_parameters(lc, devices, accelerator)
    kw = {"partition": p["slurm_partition"], "time": p["timeout_min"], "gpus_per_node": p["gpus_per_node"],
          "ntasks_per_node": p["tasks_per_node"], "cpus_per_task": p["cpus_per_task"], "mem": f"{p['mem_gb']}GB",
          "array_parallelism": p["slurm_array_parallelism"], "job_name": p["name"],
          "account": p.get("slurm_account"), "qos": p.get("slurm_qos"), "setup": p.get("slurm_setup"),
          "additional_parameters": p.get("slurm_additional_parameters"), "map_count": int(n_jobs)}
    return _make_sbatch_string(command="python -m submitit.core._submit <folder>", folder=str(folder), **kw)


def make_executor(lc: dict, folder: str | os.PathLike, devices: int = 1, accelerator: str = "auto"):
    """A submitit executor for a ``launcher:`` section: :class:`submitit.LocalExecutor` (``local``) or a SLURM
    :class:`submitit.AutoExecutor` with :func:`slurm_parameters` (``slurm``); job pickles and logs in ``folder``.

    Raises
    ------
    ConfigError
        For ``kind: none`` or an unknown kind, or (``slurm``) no partition.
    """
    import submitit

    if lc["kind"] == "local":
        ex = submitit.LocalExecutor(folder=str(folder))
        ex.update_parameters(timeout_min=int(lc["timeout_min"]))
        return ex
    if lc["kind"] == "slurm":
        ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        ex.update_parameters(**slurm_parameters(lc, devices, accelerator))
        return ex
    raise ConfigError(f"launcher.kind {lc['kind']!r}; fix: none, local or slurm")


def chunks(cells: Sequence[str], lc: dict) -> list[list[str]]:
    """Cells of each job: local workers round-robin, SLURM ``cells_per_job`` consecutive cells."""
    if lc["kind"] == "local":
        n = max(1, min(int(lc["workers"]), len(cells)))
        return [list(cells[i::n]) for i in range(n) if cells[i::n]]
    k = max(1, int(lc["cells_per_job"]))
    return [list(cells[i:i + k]) for i in range(0, len(cells), k)]


try:
    import submitit as _submitit

    _Base = _submitit.helpers.Checkpointable
except ImportError:  # pragma: no cover - submitit is a dependency
    _Base = object


WORKER_ENTRY = {
    "cv": ("eegfm_bench.runs.cv", "run_cv", "worker_cells"),
    "sweep": ("eegfm_bench.runs.sweep", "sweep_main", "worker_units"),
    "probe": ("eegfm_bench.runs.probe", "run_probes", "worker_units"),
    "attribute": ("eegfm_bench.runs.attribute", "run_attribution", "worker_units"),
    "controls": ("eegfm_bench.runs.controls", "controls_main", "worker_units"),
}
"""Job kind -> (module, function, keyword): the function runs only the named units of a resolved config as a
worker (rows as part files, no merge, no report) and returns its failures (one dict per failed unit)."""


class CellJob(_Base):
    """One job: run ``cell_ids`` (units of one command's config, :data:`WORKER_ENTRY`) in this process (a worker:
    rows as part files, no merge).

    ``checkpoint`` (called by submitit on preemption / timeout) requeues the same job; the rerun skips the cells
    that have rows and resumes an unfinished one from its ``last.ckpt``.
    """

    def __call__(self, cfg: dict, cell_ids: list[str], threads: int, kind: str = "cv",
                 parent: int | None = None) -> list[dict]:
        import torch

        if parent is not None:  # a local worker stops when the command that launched it is gone
            _watch_parent(parent)
        torch.set_num_threads(max(1, int(threads)))
        if kind not in WORKER_ENTRY:
            raise ValueError(f"unknown job kind {kind!r}; valid: {sorted(WORKER_ENTRY)}")
        import importlib

        module, func, kwarg = WORKER_ENTRY[kind]
        return getattr(importlib.import_module(module), func)(cfg, progress=False, **{kwarg: list(cell_ids)})

    def checkpoint(self, cfg: dict, cell_ids: list[str], threads: int, kind: str = "cv", parent: int | None = None):
        import submitit

        return submitit.helpers.DelayedSubmission(self, cfg, cell_ids, threads, kind, parent)


def _watch_parent(pid: int, every_s: float = 2.0) -> None:
    """End this process (a local worker) once process ``pid`` (the launching command) has exited: a killed command
    must not leave workers training and writing behind it. Its finished cells' rows are already in parts."""
    import threading

    def loop():
        while True:
            time.sleep(every_s)
            if not _pid_alive(pid) or os.getppid() == 1:
                os._exit(3)

    threading.Thread(target=loop, daemon=True, name="eegfm-parent-watch").start()


def run_jobs(lc: dict, cfg: dict, cell_ids: list[str], out: Path, *, devices: int | None = None,
             progress: bool = True, kind: str = "cv", collect: dict | None = None) -> list[dict]:
    """Submit the cells as jobs, wait for every job, and return the failures (one dict per failed cell).

    A job that dies (killed, out of memory) is recorded as a failure of each of its cells that has no rows; the
    job's log path is in the message. A worker may return ``{"failures": [...], <name>: [...]}`` instead of a
    list of failures: the other lists are concatenated over jobs into ``collect[<name>]`` (e.g. the config
    hashes of the rows the probe workers wrote, which the parent's report selects by). ``devices`` (default: the
    config's ``trainer.devices``) and ``trainer.accelerator`` size each SLURM job (:func:`slurm_parameters`).
    """
    from tqdm.auto import tqdm

    tr = cfg.get("trainer") or {}
    if devices is None:
        devices = tr.get("devices", 1) if isinstance(tr.get("devices", 1), int) else 1
    folder = Path(lc.get("folder") or out / "jobs")
    folder.mkdir(parents=True, exist_ok=True)
    ex = make_executor(lc, folder, devices, str(tr.get("accelerator", "auto")))
    parts = chunks(cell_ids, lc)
    threads = (int(lc["threads"]) if lc.get("threads") else max(1, (os.cpu_count() or 1) // max(1, len(parts)))) \
        if lc["kind"] == "local" else int(lc["slurm"]["cpus_per_task"])
    parent = os.getpid() if lc["kind"] == "local" else None
    jobs = [ex.submit(CellJob(), cfg, p, threads, kind, parent) for p in parts]
    if progress:
        tqdm.write(f"launcher {lc['kind']}: {len(cell_ids)} cells in {len(jobs)} jobs "
                   f"({', '.join(str(j.job_id) for j in jobs)}); logs under {folder}")
    failures = []
    for job, p in tqdm(list(zip(jobs, parts)), desc="jobs", disable=not progress, unit="job"):
        try:
            res = job.result()
            if isinstance(res, dict):
                for name, values in res.items():
                    if name != "failures" and collect is not None:
                        collect.setdefault(name, []).extend(values)
                res = res.get("failures", [])
            failures += res
        except Exception as err:  # the job itself died: its cells without rows are failures
            for cid in p:
                failures.append({"cell": cid, "condition": "(job)", "error": f"job {job.job_id} ended: {type(err).__name__}: "
                                 f"{str(err).splitlines()[0][:300] if str(err) else ''} (log: {job.paths.stderr})",
                                 "traceback": str(err)})
    return failures


__all__ = ["LauncherConfig", "SlurmConfig", "CellJob", "chunks", "make_executor", "run_jobs", "sbatch_preview",
           "slurm_parameters"]


def cv_status(out_dir: str | os.PathLike) -> tuple[list[dict], str]:
    """Every cell of a cv ``out_dir``'s current config: ``done`` (rows of its config hash), ``running`` (a live
    process holds its marker), ``failed`` (in ``failures.json``) or ``missing``; and the command that resumes it.

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` holds no ``cells.json`` / ``splits.json`` (not a cv output folder, or never started).
    """
    import json
    import socket

    from eegfm_bench.results import ResultStore

    out = Path(out_dir)
    for f in ("cells.json", "splits.json", "config.yaml"):
        if not (out / f).is_file():
            raise NotAResultFolderError(f"{out} has no {f}: not a cv output folder (or the run never started); fix: "
                                    "point status at a cv out_dir")
    import yaml

    cfg = yaml.safe_load((out / "config.yaml").read_text())
    n_folds = len(json.loads((out / "splits.json").read_text())["folds"])
    folds = cfg["split"].get("folds") or list(range(n_folds))
    from eegfm_bench.results import done_cells

    done = done_cells(ResultStore(out, write=False), cfg["experiment"])
    failed = {}
    if (out / "failures.json").is_file():
        for f in json.loads((out / "failures.json").read_text()):
            failed[(f["model"], f["regime"], f["head"], str(f["fold"]), f["config_hash"])] = f["error"]
    running = {}
    for m in (out / "running").glob("*.json") if (out / "running").is_dir() else []:
        info = json.loads(m.read_text())
        alive = info["host"] != socket.gethostname() or _pid_alive(int(info["pid"]))
        if alive:
            running[info["cell"]] = f"{info['host']}:{info['pid']}"
    rows = []
    for c in json.loads((out / "cells.json").read_text()):
        for k in folds:
            key = (c["model"], c["regime"], c["head"], str(k), str(c["config_hash"]))
            cid = f"{c['model']}/{c['regime']}/{c['head']}/fold{k}/{c['config_hash']}"
            state = "done" if key in done else "running" if cid in running else "failed" if key in failed else \
                "missing"
            rows.append({"cell": cid, "state": state, "detail": running.get(cid) or failed.get(key, "")})
    todo = [r for r in rows if r["state"] in ("failed", "missing")]
    busy = [r for r in rows if r["state"] == "running"]
    if busy:  # resuming now would train the running cells a second time
        cmd = (f"wait: {len(busy)} cell(s) are running (or kill their processes) before resuming with "
               f"eegfm-bench cv --config {out / 'config.yaml'}")
    else:  # config.yaml keeps the run's launcher section: the resume runs the way the run did
        cmd = f"eegfm-bench cv --config {out / 'config.yaml'}" if todo or ResultStore(out, write=False).unmerged() \
            else ""
    return rows, cmd


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status_markdown(rows: list[dict], cmd: str, unmerged: bool = False) -> str:
    """The ``eegfm-bench status`` text: counts per state, one table row per cell, the resume (or wait) line.

    ``rows`` and ``cmd`` are :func:`cv_status`'s; ``unmerged``: :meth:`ResultStore.unmerged` of the folder.
    """
    from collections import Counter

    n = Counter(r["state"] for r in rows)
    lines = [f"{len(rows)} cells: " + ", ".join(f"{n[s]} {s}" for s in ("done", "running", "failed", "missing"))
             + ("; results.csv is older than the newest rows (a rerun merges them)" if unmerged else ""), "",
             "| cell | state | detail |", "|---|---|---|"]
    lines += [f"| {r['cell']} | {r['state']} | {r['detail'].splitlines()[0][:120] if r['detail'] else ''} |"
              for r in rows]
    lines += ["", (cmd if cmd.startswith("wait") else f"resume: {cmd}") if cmd else "nothing to resume"]
    return "\n".join(lines)
