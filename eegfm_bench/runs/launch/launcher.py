"""Cells as independent jobs through submitit: local worker processes or SLURM.

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
  dealt round-robin to the workers; a worker's process gets ``threads`` (default ``cpu_count // workers``) torch
  threads for what runs outside a cell (window loading, the units of the other commands);
* ``slurm`` — one job per ``cells_per_job`` cells as a SLURM job array (:class:`submitit.AutoExecutor`):
  ``partition``, ``account``, ``qos``, ``timeout_min``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``,
  ``array_parallelism``, ``setup`` (shell lines before the job, e.g. ``module load``), ``additional`` (any other
  sbatch option). Multi-GPU cells use Lightning's own SLURM support inside the job (``trainer.devices`` and
  ``gpus_per_node`` alike; ``tasks_per_node`` = devices). A preempted or timed-out job is requeued by submitit
  (:class:`CellJob` is ``Checkpointable``) and resumes: finished cells are skipped and an unfinished cell continues
  from its ``last.ckpt``.

Inside a cv cell the thread count is the config's ``intra_op_threads`` whatever the launcher
(:func:`eegfm_bench.trainer.fixed_numerics`), so every launcher gives the sequential run's rows to the last bit.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import typing
from pathlib import Path
from typing import Optional, Sequence

import psutil
import submitit
import torch
from submitit.core.utils import FailedJobError
# Outside submitit's public API, as it has none for these: rendering a job's sbatch script without submitting it
# (sbatch_preview) and a job-state watcher (QueueInfoWatcher, squeue without accounting storage). pyproject pins
# submitit's minor range; tests/runs/test_submitit_contract.py checks both against the installed release.
from submitit.slurm.slurm import SlurmInfoWatcher, _make_sbatch_string
from tqdm.auto import tqdm

from eegfm_bench.config import ConfigError, ConfigRecord, close_matches, closest_first, typed
from eegfm_bench.config.launch import LauncherConfig
from eegfm_bench.runs.launch.running import pid_alive, write_queue


LAUNCHER_KINDS = typing.get_args(typing.get_type_hints(LauncherConfig)["kind"])
"""The launchers ``launcher.kind`` names: ``none``, ``local``, ``slurm``."""


def as_launcher(lc) -> LauncherConfig:
    """A ``launcher:`` section as the typed, frozen :class:`LauncherConfig`: a mapping (a hand-written section, a
    test's, ``ingest --task``'s ``--launcher.<key>`` pairs) is typed, with the defaults for what it leaves out; its
    ``kind`` is checked before anything else reads it.

    Raises
    ------
    ConfigError
        A key that is not a launcher setting (its key path, e.g. ``launcher.slurm.partitoin``, and the valid keys,
        closest first), or a ``kind`` that is no launcher (the kinds, and the closest).
    """
    lc = lc if isinstance(lc, LauncherConfig) else typed(LauncherConfig, dict(lc), "launcher")
    if lc.kind not in LAUNCHER_KINDS:
        raise ConfigError(f"launcher.kind {lc.kind!r} is not a launcher.{close_matches(str(lc.kind), LAUNCHER_KINDS)} "
                          f"fix: --launcher.kind {' / '.join(closest_first(str(lc.kind), LAUNCHER_KINDS))}")
    return lc


def check_launcher(lc, where: str = "launcher", trainer: dict | None = None) -> None:
    """Validate a ``launcher:`` section before any data is read (``trainer``: the command's ``trainer:`` section,
    whose ``accelerator`` and ``devices`` size a SLURM job).

    Raises
    ------
    ConfigError
        A ``kind`` that is no launcher (:func:`as_launcher`); ``workers`` or ``cells_per_job`` below 1; ``slurm``
        without a partition, on a machine without SLURM, or requesting GPUs on a partition that has none.
    SlurmUnreachableError
        ``slurm``, and the controller does not answer ``sinfo`` (:func:`slurm_partitions`).
    """
    if not lc:
        return
    lc = as_launcher(lc)
    for k in ("workers", "cells_per_job", "timeout_min"):
        if int(getattr(lc, k)) < 1:
            raise ConfigError(f"{where}.{k} = {getattr(lc, k)}; fix: a whole number >= 1")
    if lc.kind == "slurm":
        if shutil.which("sbatch") is None:
            slurm_parameters(lc, gpus_on_partition=None)  # the partition
            raise ConfigError(f"{where}.kind: slurm, but this machine has no SLURM (sbatch is not on PATH); fix: "
                              "launch from a SLURM login node, or use --launcher local --workers N here")
        known = slurm_partitions(where)
        if known and lc.slurm.partition and lc.slurm.partition not in known:
            raise ConfigError(f"{where}.slurm.partition {lc.slurm.partition!r} is not a partition of this "
                              f"cluster; fix: one of {', '.join(known)} (sinfo lists them)")
        tr = trainer or {}
        devices = tr.get("devices", 1) if isinstance(tr.get("devices", 1), int) else 1
        slurm_parameters(lc, devices, str(tr.get("accelerator", "auto")))  # partition, GPUs the partition has


def slurm_partitions(where: str = "launcher") -> list[str]:
    """The partitions ``sinfo`` lists (empty when it cannot be asked).

    Raises
    ------
    SlurmUnreachableError
        ``sinfo`` answers that the SLURM controller cannot be reached (:func:`slurm_failure`): no job could be
        submitted, so the command stops before it reads any data.
    """
    if shutil.which("sinfo") is None:
        return []
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        cause, fix = slurm_failure(out.stderr)
        if cause == "controller":
            raise SlurmUnreachableError(f"{where}.kind: slurm, but the SLURM controller does not answer: "
                                        f"{' '.join(out.stderr.split())[:300]}; fix: {fix}")
        return []
    return sorted({p.strip().rstrip("*") for p in out.stdout.split() if p.strip()})


def slurm_conf_path() -> str:
    """The ``slurm.conf`` SLURM's commands read: ``SLURM_CONF``, else ``/etc/slurm/slurm.conf``."""
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"


def controller_hosts(conf: str | os.PathLike | None = None) -> list[str]:
    """The controller hosts a ``slurm.conf`` names (``SlurmctldHost`` / the older ``ControlMachine``; empty when
    the file cannot be read)."""
    try:
        text = Path(conf or slurm_conf_path()).read_text(errors="replace")
    except OSError:
        return []
    return re.findall(r"^\s*(?:SlurmctldHost|ControlMachine)\s*=\s*(\S+)", text, flags=re.M | re.I)


SLURM_FAILURES: list[tuple[str, str, str]] = [
    ("controller", r"unable to contact slurm controller|slurm_?ctld.*(?:down|not respond)|"
                   r"socket timed out on send/recv|zero bytes were transmitted or received|connection refused|"
                   r"could not establish a configuration source|unable to establish controller machine", ""),
    ("auth", r"invalid authentication credential|protocol authentication error|munge|auth/munge|"
             r"authentication failure",
     "SLURM refused this node's credentials: check that munged runs here (`munge -n | unmunge`) with the "
     "cluster's munge key, and that this node's clock is right"),
    ("partition", r"invalid partition name|invalid partition",
     "launcher.slurm.partition: one `sinfo -s` lists"),
    ("account", r"invalid account|account/partition combination",
     "launcher.slurm.account: one `sacctmgr show assoc user=$USER` lists for that partition"),
    ("qos", r"invalid qos",
     "launcher.slurm.qos: one `sacctmgr show assoc user=$USER format=qos` lists (or null)"),
    ("limit", r"maxsubmit|job limit|job violates accounting/qos policy|qosmax|assocmax|array size|maxarraysize",
     "COUNT"),
    ("time", r"time limit|requested time",
     "launcher.timeout_min within the partition's MaxTime (`sinfo -o '%P %l'`)"),
    ("memory", r"memory required by task is not available|memory specification",
     "launcher.slurm.mem_gb within the nodes' memory (`sinfo -o '%P %m'`)"),
    ("resources", r"requested node configuration is not available|invalid generic resource|gres|"
                  r"more processors requested than permitted|cpu count",
     "launcher.slurm cpus_per_task / gpus_per_node / mem_gb / additional within what the partition's nodes have "
     "(`sinfo -o '%P %c %m %G'`)"),
]
"""(cause, pattern of SLURM's message, fix) in the order tried; the controller's fix names the ``slurm.conf`` read
and its controller host (:func:`slurm_failure`), a limit's the job count (``COUNT``: the caller's)."""


def slurm_failure(message: str) -> tuple[str, str]:
    """What an ``sbatch`` / ``squeue`` / ``sinfo`` error message means, as ``(cause, fix)``.

    ``cause`` is one of :data:`SLURM_FAILURES`' (``controller``: slurmctld cannot be reached; ``auth``,
    ``partition``, ``account``, ``qos``, ``limit``, ``time``, ``memory``, ``resources``) or ``other``; ``fix`` is the
    line a user acts on (``COUNT`` for ``limit``: the caller names its job count).

    Examples
    --------
    >>> slurm_failure("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
    ...               "(connect failure)")[0]
    'controller'
    """
    text = " ".join(str(message).split()).lower()
    for cause, pattern, fix in SLURM_FAILURES:
        if re.search(pattern, text):
            if cause == "controller":
                hosts = controller_hosts()
                fix = (f"check that the SLURM controller answers (`scontrol ping`; slurmctld down? ask the cluster's "
                       f"admins), that the slurm.conf read ({slurm_conf_path()}: "
                       f"{'SLURM_CONF' if os.environ.get('SLURM_CONF') else 'SLURM_CONF unset'}) is your cluster's, "
                       f"and that its controller host ({', '.join(hosts) or 'SlurmctldHost, not found in it'}) is reachable from "
                       "this node; then rerun")
            return cause, fix
    return "other", ("check launcher.slurm (partition, account, qos, mem_gb, cpus_per_task, gpus_per_node) against "
                     "`sinfo` / `sacctmgr show assoc`")


def partition_gpus(partition: str) -> Optional[int]:
    """GPUs per node of a SLURM partition from ``sinfo`` (``Gres`` ``gpu:N`` or ``gpu:<type>:N``; the most any of
    its nodes has); 0 for a CPU-only partition, None when ``sinfo`` cannot tell (not installed, no such
    partition, an error)."""
    if shutil.which("sinfo") is None:
        return None
    try:
        out = subprocess.run(["sinfo", "-h", "-p", str(partition), "-o", "%G"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    counts = [int(m.group(1)) for line in out.stdout.split() for m in [re.search(r"gpu(?::[^:,(]+)?:(\d+)", line)]
              if m]
    return max(counts) if counts else 0


def slurm_parameters(lc, devices: int = 1, accelerator: str = "auto", *,
                     gpus_on_partition: Optional[int] = -1) -> dict:
    """submitit ``update_parameters`` keywords of a ``launcher:`` section (``slurm_*`` names).

    ``devices`` and ``accelerator`` are the trainer's: ``tasks_per_node = devices`` and, unless set,
    ``gpus_per_node = devices`` for a GPU accelerator, 0 for ``accelerator: cpu``, and for ``accelerator: auto``
    what the partition has (``gpus_on_partition``; default: asked of ``sinfo`` by :func:`partition_gpus`):
    ``devices`` GPUs on a GPU partition, none on a CPU-only one.

    Raises
    ------
    ConfigError
        If no partition is given, ``gpus_per_node`` is below ``devices`` on a GPU accelerator, or a GPU is
        requested (``accelerator: gpu`` / ``cuda`` or ``gpus_per_node`` > 0) on a partition whose nodes have none.
    """
    lc = as_launcher(lc)
    s = lc.slurm
    if not s.partition:
        raise ConfigError("launcher.slurm.partition is not set; fix: the partition your jobs go to (sinfo lists them)")
    devices = max(1, int(devices))
    cpu = str(accelerator) == "cpu"
    if gpus_on_partition == -1:
        gpus_on_partition = partition_gpus(s.partition) if str(accelerator) != "cpu" else None
    gpus = s.gpus_per_node
    if gpus is None:
        no_gpu_here = gpus_on_partition == 0
        gpus = 0 if cpu or (str(accelerator) == "auto" and no_gpu_here) else devices
    gpus = int(gpus)
    if gpus > 0 and gpus_on_partition == 0:
        raise ConfigError(f"launcher.slurm.partition {s.partition!r} has no GPUs (sinfo shows no gpu gres) but "
                          f"the jobs would request {gpus} (trainer.accelerator: {accelerator}); fix: "
                          "trainer.accelerator: cpu (or auto), or a GPU partition")
    on_cpu = cpu or (str(accelerator) == "auto" and gpus == 0 and gpus_on_partition == 0)  # auto on a CPU partition
    if not on_cpu and gpus < devices:
        raise ConfigError(f"launcher.slurm.gpus_per_node = {gpus} but trainer.devices = {devices}: Lightning would "
                          f"start {devices} tasks on {gpus} GPU(s); fix: gpus_per_node: {devices} (or null, which "
                          "follows devices)")
    p = {"slurm_partition": s.partition, "timeout_min": int(lc.timeout_min),
         "gpus_per_node": gpus, "tasks_per_node": devices,
         "cpus_per_task": int(s.cpus_per_task), "mem_gb": int(s.mem_gb),
         "slurm_array_parallelism": int(s.array_parallelism), "name": "eegfm-bench"}
    if s.account:
        p["slurm_account"] = s.account
    if s.qos:
        p["slurm_qos"] = s.qos
    if s.setup:
        p["slurm_setup"] = list(s.setup)
    if s.additional:
        p["slurm_additional_parameters"] = dict(s.additional)
    return p


def sbatch_preview(lc, folder: str | os.PathLike, devices: int = 1, n_jobs: int = 1,
                   accelerator: str = "auto") -> str:
    """The sbatch script submitit would write for one job of this launcher (for docs, tests and ``plan``)."""
    p = slurm_parameters(lc, devices, accelerator)
    kw = {"partition": p["slurm_partition"], "time": p["timeout_min"], "gpus_per_node": p["gpus_per_node"],
          "ntasks_per_node": p["tasks_per_node"], "cpus_per_task": p["cpus_per_task"], "mem": f"{p['mem_gb']}GB",
          "array_parallelism": p["slurm_array_parallelism"], "job_name": p["name"],
          "account": p.get("slurm_account"), "qos": p.get("slurm_qos"), "setup": p.get("slurm_setup"),
          "additional_parameters": p.get("slurm_additional_parameters"), "map_count": int(n_jobs)}
    return _make_sbatch_string(command="python -m submitit.core._submit <folder>", folder=str(folder), **kw)


def make_executor(lc, folder: str | os.PathLike, devices: int = 1, accelerator: str = "auto"):
    """A submitit executor for a ``launcher:`` section: :class:`submitit.LocalExecutor` (``local``) or a SLURM
    :class:`submitit.AutoExecutor` with :func:`slurm_parameters` (``slurm``); job pickles and logs in ``folder``.

    Raises
    ------
    ConfigError
        For ``kind: none`` or an unknown kind, or (``slurm``) no partition.
    """
    lc = as_launcher(lc)
    if lc.kind == "local":
        ex = submitit.LocalExecutor(folder=str(folder))
        ex.update_parameters(timeout_min=int(lc.timeout_min))
        return ex
    if lc.kind == "slurm":
        ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        ex.update_parameters(**slurm_parameters(lc, devices, accelerator))
        return ex
    raise ConfigError(f"launcher.kind {lc.kind!r}; fix: none, local or slurm")


def chunks(cells: Sequence[str], lc) -> list[list[str]]:
    """Cells of each job: local workers round-robin, SLURM ``cells_per_job`` consecutive cells."""
    lc = as_launcher(lc)
    if lc.kind == "local":
        n = max(1, min(int(lc.workers), len(cells)))
        return [list(cells[i::n]) for i in range(n) if cells[i::n]]
    k = max(1, int(lc.cells_per_job))
    return [list(cells[i:i + k]) for i in range(0, len(cells), k)]


_Base = submitit.helpers.Checkpointable


WORKER_ENTRY = {
    "cv": ("eegfm_bench.runs.cv.command", "run_cv", "worker_cells"),
    "sweep": ("eegfm_bench.runs.sweep.command", "run_sweep", "worker_units"),
    "probe": ("eegfm_bench.runs.interpret.probe", "run_probes", "worker_units"),
    "attribute": ("eegfm_bench.runs.interpret.attribute", "run_attribution", "worker_units"),
    "controls": ("eegfm_bench.runs.controls.command", "run_controls", "worker_units"),
    "ingest": ("eegfm_bench.runs.launch.ingest", "ingest_shard", "worker_units"),
    "features": ("eegfm_bench.runs.cv.feature_stage", "feature_shard", "worker_units"),
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
        if parent is not None:  # a local worker stops when the command that launched it is gone
            _watch_parent(parent)
        torch.set_num_threads(max(1, int(threads)))
        if kind not in WORKER_ENTRY:
            raise ValueError(f"unknown job kind {kind!r}; valid: {sorted(WORKER_ENTRY)}")

        module, func, kwarg = WORKER_ENTRY[kind]
        return getattr(importlib.import_module(module), func)(cfg, progress=False, **{kwarg: list(cell_ids)})

    def checkpoint(self, cfg: dict, cell_ids: list[str], threads: int, kind: str = "cv", parent: int | None = None):
        return submitit.helpers.DelayedSubmission(self, cfg, cell_ids, threads, kind, parent)


def _watch_parent(pid: int, every_s: float = 2.0) -> None:
    """End this process (a local worker) once process ``pid`` (the launching command) has exited: a killed command
    must not leave workers training and writing behind it. Its finished cells' rows are already in parts."""
    def loop():
        while True:
            time.sleep(every_s)
            if not pid_alive(pid) or os.getppid() == 1:
                os._exit(3)

    threading.Thread(target=loop, daemon=True, name="eegfm-parent-watch").start()


class SubmissionError(ConfigError):
    """SLURM refused a job array (a job limit, a bad partition or account, an impossible request, a controller that
    cannot be reached); nothing runs. The fix follows the cause (:func:`slurm_failure`)."""


class SlurmUnreachableError(SubmissionError):
    """The SLURM controller (slurmctld) does not answer this node: nothing can be submitted or watched; the message
    names ``scontrol ping``, the ``slurm.conf`` read and its controller host."""


def submit_jobs(ex, lc, calls: list[tuple], stage: str = "") -> list:
    """Submit one job per ``(fn, *args)`` of ``calls``: local workers one by one; SLURM as **one** job array
    (one ``sbatch``, ``--array=0-(n-1)%array_parallelism``), so a refusal refuses the whole array before any job
    runs.

    Raises
    ------
    SubmissionError
        When ``sbatch`` refuses the array (its message, and the fix; ``stage`` names a stage of its own, e.g. the
    ingest stage, whose job count ``--shards`` sets).
    """
    if as_launcher(lc).kind != "slurm":
        return [ex.submit(*c) for c in calls]

    try:  # submitit prints sbatch's stderr before raising: it goes into the one-line error instead
        with contextlib.redirect_stderr(io.StringIO()), ex.batch():
            jobs = [ex.submit(*c) for c in calls]
    except FailedJobError as err:
        msg = " ".join(str(err).split())[:400]
        count = ("fewer --shards" if stage else
                 "lower cells_per_job's job count under your job limit (launcher.cells_per_job packs more cells per job)")
        cause, fix = slurm_failure(str(err))
        fix = {"limit": f"{count} (your job limit: `sacctmgr show assoc user=$USER format=maxsubmit,grpsubmit`)",
               "other": f"{fix}, or {count}"}.get(cause, fix)
        error = SlurmUnreachableError if cause == "controller" else SubmissionError
        raise error(f"sbatch refused the {stage + ' ' if stage else ''}job array of {len(calls)} job(s): {msg}; "
                    f"fix: {fix}; no job was started") from None
    return jobs


@contextlib.contextmanager
def sigint_ignored_by_children(active: bool = True):
    """Start local workers (submitit's controller processes, and the job processes they start) with SIGINT ignored:
    a terminal's Ctrl-C goes to the whole foreground process group, and a worker that took it would print
    ``KeyboardInterrupt`` tracebacks (submitit's controller writes to this terminal). The command alone takes the
    signal (:mod:`eegfm_bench.interrupt`) and stops its workers itself (:func:`stop_local_workers`). The ignored
    disposition is inherited across ``exec`` (Python installs its ``KeyboardInterrupt`` handler only over
    ``SIG_DFL``); this process's own handler is back once the workers are started."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_local_workers(folder: str | os.PathLike) -> int:
    """Kill the local workers this process started for the jobs of ``folder`` (submitit's controllers of
    ``python -m submitit.local._local <folder>`` and every process under them) and wait until they are gone; returns
    how many processes were stopped.

    A worker's finished cells are already in the result store (part files published whole) and an unfinished cell's
    ``last.ckpt`` is written whole or not at all (:class:`~eegfm_bench.trainer.VerifiedCheckpointIO`), so a kill
    loses only the unfinished cell's current epoch; a rerun resumes it.
    """
    procs = []
    for child in psutil.Process().children():
        try:
            cmd = child.cmdline()
            if "submitit.local._local" in cmd and Path(cmd[-1]).resolve() == Path(folder).resolve():
                procs += child.children(recursive=True) + [child]
        except psutil.Error:  # already gone
            continue
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=60)
    return len(procs)


_ACCOUNTING_NOTED = False



class QueueInfoWatcher(SlurmInfoWatcher):
    """submitit's job-state watcher reading ``squeue`` instead of ``sacct`` (a cluster without accounting storage).

    A job in the queue has its queue state (``PENDING``, ``RUNNING``, ...); a job that has left the queue is
    ``COMPLETED`` for submitit, which then reads its result file (absent: the job failed, and submitit's error
    carries the job's stderr)."""

    def _make_command(self):
        to_check = {x.split("_")[0] for x in self._registered - self._finished}
        if not to_check:
            return None
        return ["squeue", "-h", "-r", "-o", "%i|%T|%N", "-j", ",".join(sorted(to_check))]

    def update(self) -> None:
        """One ``squeue`` call; a failed call (``-j`` with ids no longer known is an error) means they left."""
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=60)
            text = out.stdout if out.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            return
        if out.returncode != 0 and slurm_failure(out.stderr)[0] in ("controller", "auth"):
            # squeue could not ask: the jobs' states are unknown, not ended (a controller restart must not fail them)
            if not getattr(self, "_unreachable_said", False):
                tqdm.write(f"launcher slurm: squeue cannot reach the controller ({' '.join(out.stderr.split())[:200]}); "
                           f"waiting for it: {slurm_failure(out.stderr)[1]}")
                self._unreachable_said = True
            self._last_status_check = time.time()
            return
        self._unreachable_said = False
        present = self.read_info("JobID|State|NodeList\n" + text)
        self._info_dict.update(present)
        if time.time() - self._start_time > 5:  # a job registered a moment ago may not be in squeue's view yet
            for jid in self._registered - self._finished:
                if jid not in present:  # left the queue: finished, one way or the other
                    self._info_dict[jid] = {"JobID": jid, "State": "COMPLETED", "NodeList": ""}
        self._last_status_check = time.time()


def quiet_submitit_without_accounting(progress: bool = True) -> None:
    """Without accounting storage (no ``slurmdbd``), ``sacct`` fails and submitit warns on every poll ("Bypassing
    sacct error ..."): say once that job states come from the queue and the jobs' result files, and drop the
    repeats."""
    global _ACCOUNTING_NOTED
    if _ACCOUNTING_NOTED or shutil.which("sacct") is None:
        return
    try:
        ok = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        return

    class _NoSacct(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "Bypassing sacct error" not in record.getMessage()

    logging.getLogger("submitit").addFilter(_NoSacct())

    submitit.SlurmJob.watcher = QueueInfoWatcher(delay_s=60)  # every SlurmJob of this process asks squeue
    _ACCOUNTING_NOTED = True
    if progress:
        print("launcher slurm: this cluster has no accounting storage (sacct fails): job states come from squeue and "
              "the jobs' result files")


def run_jobs(lc, cfg: ConfigRecord, cell_ids: list[str], out: Path, *, devices: int | None = None,
             progress: bool = True, kind: str = "cv", collect: dict | None = None, stage: str = "") -> list[dict]:
    """Submit the cells as jobs, wait for every job, and return the failures (one dict per failed cell).

    A job that dies (killed, out of memory) is recorded as a failure of each of its cells that has no rows; the
    job's log path is in the message. A worker may return ``{"failures": [...], <name>: [...]}`` instead of a
    list of failures: the other lists are concatenated over jobs into ``collect[<name>]`` (e.g. the config
    hashes of the rows the probe workers wrote, which the parent's report selects by). ``devices`` (default: the
    config's ``trainer.devices``) and ``trainer.accelerator`` size each SLURM job (:func:`slurm_parameters`);
    ``stage`` names a stage of its own in a refusal (:func:`submit_jobs`).
    """
    tr = cfg.trainer or {}  # every command's typed config (cv, sweep, probe / attribute, controls) has the section
    if devices is None:
        devices = tr.get("devices", 1) if isinstance(tr.get("devices", 1), int) else 1
    lc = as_launcher(lc)
    folder = Path(lc.folder or out / "jobs")
    folder.mkdir(parents=True, exist_ok=True)
    ex = make_executor(lc, folder, devices, str(tr.get("accelerator", "auto")))
    parts = chunks(cell_ids, lc)
    threads = (int(lc.threads) if lc.threads else max(1, (os.cpu_count() or 1) // max(1, len(parts)))) \
        if lc.kind == "local" else int(lc.slurm.cpus_per_task)
    parent = os.getpid() if lc.kind == "local" else None
    with sigint_ignored_by_children(lc.kind == "local"):
        jobs = submit_jobs(ex, lc, [(CellJob(), cfg, p, threads, kind, parent) for p in parts], stage)
    if lc.kind == "slurm":
        write_queue(out, jobs, parts)
        quiet_submitit_without_accounting(progress)
    if progress:
        tqdm.write(f"launcher {lc.kind}: {len(cell_ids)} cells in {len(jobs)} jobs "
                   f"({', '.join(str(j.job_id) for j in jobs)}); logs under {folder}")
    try:
        return _wait(jobs, parts, progress, collect)
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM (eegfm_bench.interrupt): the local workers stop with this command
        if lc.kind == "local":
            stop_local_workers(folder)
        raise


def _wait(jobs: list, parts: list[list[str]], progress: bool, collect: dict | None) -> list[dict]:
    """Wait for every job (:func:`run_jobs`); its failures, one dict per failed cell."""
    failures = []
    for job, p in tqdm(list(zip(jobs, parts)), desc="jobs", disable=not progress, unit="job"):
        try:
            res = job.results()[0]  # a multi-task (srun DDP) job: rank 0's; the other ranks write nothing
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


__all__ = ["CellJob", "LAUNCHER_KINDS", "SLURM_FAILURES", "SlurmUnreachableError", "SubmissionError", "chunks",
           "controller_hosts", "make_executor", "partition_gpus", "run_jobs", "sbatch_preview", "sigint_ignored_by_children",
           "slurm_conf_path", "slurm_failure", "slurm_parameters", "stop_local_workers", "submit_jobs"]
