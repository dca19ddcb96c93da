"""``eegfm-bench ingest``: read a task through the ingestion checks, cache its windows and write the ingest report.

Run it on a new dataset (or a preset pointed at a local copy) before a cv run, to see what the checks found:
truncated or unreadable files, mixed sampling rates, flat / saturated / non-finite channels, channels renamed and
dropped, events per class, windows kept and rejected, subjects dropped — all in ``ingest_report.md`` / ``.json``::

    eegfm-bench ingest --task eegmmidb_mi --model eegnet --out results/ingest_mi
    eegfm-bench ingest --task my_study.yaml --model labram --subjects 1 2 3 --n-jobs 4
    eegfm-bench ingest --config configs/experiment/quickstart.yaml     # the task and every model of a cv config
    eegfm-bench ingest --task tuab --model labram --launcher slurm --launcher.slurm.partition cpu --shards 20
    eegfm-bench ingest --task eegmmidb_mi --launcher local --workers 2

The windows are cached exactly as ``cv`` reads them, so the cv run that follows reads no recording again.

With a launcher (``local`` or ``slurm``, :mod:`eegfm_bench.runs.launch.launcher`, the same machinery and options as
``cv``'s) the recordings whose per-recording cache entry is missing are cut into ``shards`` disjoint, ordered
slices; each slice is one job (a SLURM array task, or a local worker process) that reads and preprocesses its
recordings (``data.n_jobs`` at once: default the job's CPUs) into their entries, and nothing else. When every job has
ended, this process assembles each window set from the entries (:func:`~eegfm_bench.data.windows.load_windows` with
``build_missing=False``: reads no recording; a missing entry is an error naming it). The files equal a serial
ingest's byte for byte; a rerun builds only the entries still missing.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from eegfm_bench.data.cache import default_cache_dir
from eegfm_bench.data.qc import IngestError, RecordingQC, capture_warnings
from eegfm_bench.data.tasks import get_task
from eegfm_bench.data.windows import (WindowPreprocessing, fill_entries, load_windows, missing_entries,
                                      recording_fingerprints, resolve_preprocessing)
from eegfm_bench.reports.ingest import write_ingest_reports
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.runs.launch.launcher import as_launcher, check_launcher, run_jobs


class ShardError(IngestError):
    """A shard of a sharded ingest failed or left recordings without their entry: the message names the shard, its
    recordings and its log; a rerun builds only what is still missing."""


@dataclass(frozen=True)
class IngestShards:
    """What the jobs of a sharded ingest run (pickled into each job): the recordings of every shard, with their
    fingerprints, and where to write.

    Attributes
    ----------
    task : DeclaredTask
    preps : list of Preprocessing
        The resolved preprocessings the entries are built under.
    src, recs, fps
        The task's source, every recording it lists and their fingerprints (computed once, by the launching process).
    shards : list of list of int
        Indices into ``recs``, one list per job (disjoint, ordered).
    cache_dir : str
        The cache root.
    n_jobs : int
        Recordings read at once inside a job.
    trainer : dict
        Sizes the jobs (:func:`~eegfm_bench.runs.launch.launcher.run_jobs`): CPU only, one task.
    """

    task: Any
    preps: list
    src: Any
    recs: list
    fps: list
    shards: list[list[int]]
    cache_dir: str
    n_jobs: int = 1
    trainer: dict = field(default_factory=lambda: {"accelerator": "cpu", "devices": 1})


def ingest_shard(cfg: IngestShards, progress: bool = False, worker_units: list[str] = ()) -> dict:
    """A job of a sharded ingest: build the per-recording entries of the shards ``worker_units`` (ids into
    ``cfg.shards``) and nothing else (:func:`~eegfm_bench.data.windows.fill_entries`).

    Returns
    -------
    dict
        ``{"failures": [...], "read": [n per shard]}``: a failed shard's dict names its recordings and the error.
    """
    failures, read = [], []
    for sid in worker_units:
        idx = cfg.shards[int(sid)]
        recs, fps = [cfg.recs[i] for i in idx], [cfg.fps[i] for i in idx]
        try:
            read.append(fill_entries(cfg.task, cfg.preps, cfg.src, recs, fps, Path(cfg.cache_dir), progress=progress,
                                     n_jobs=cfg.n_jobs))
        except Exception as err:  # noqa: BLE001  (reported by the launching process, with the shard's recordings)
            failures.append({"cell": str(sid), "condition": "(ingest shard)", "error": f"{type(err).__name__}: {err}",
                             "traceback": traceback.format_exc()})
    return {"failures": failures, "read": read}


def shard_slices(n_items: int, shards: int) -> list[list[int]]:
    """``range(n_items)`` cut into ``min(shards, n_items)`` disjoint, ordered, contiguous slices whose sizes differ
    by at most one (the first ones the larger)."""
    n = max(1, min(int(shards), n_items))
    return [a.tolist() for a in np.array_split(np.arange(n_items), n) if len(a)]


def shards_note(asked: int, given: int, got: int, what: str, explicit: bool = True) -> str:
    """The line saying that fewer jobs than asked run (empty when ``got >= asked``): ``--shards 8 reduced to 3:
    only 3 recordings lack their entry``; ``explicit`` False: the count came from the launcher (one per job slot)."""
    if got >= asked:
        return ""
    return (f"{'--shards' if explicit else 'shards (one per job slot)'} {asked} reduced to {got}: only {given} {what}")


def default_shards(lc) -> int:
    """Shards when none is given: one per job slot (local ``workers``; SLURM ``array_parallelism``)."""
    lc = as_launcher(lc)
    return int(lc.workers) if lc.kind == "local" else int(lc.slurm.array_parallelism)


def sharded_fill(task: Any, preps: list, launcher, *, data_root=None, cache_dir=None, subjects=None,
                 shards: int | None = None, n_jobs: int | None = None, out_dir: str | Path | None = None,
                 progress: bool = True, notes: list | None = None) -> int:
    """Build the per-recording entries the window sets of ``preps`` need as jobs of ``launcher`` (pass 1 of the
    build on the cluster), one CPU job per shard of the missing recordings; wait for them.

    Parameters
    ----------
    task : str, dict, path or DeclaredTask
    preps : list of Preprocessing or WindowPreprocessing
        What the entries are built under (a model's declared preprocessing is resolved for the task as
        :func:`~eegfm_bench.data.windows.load_windows` does; one read per recording for all).
    launcher : LauncherConfig or mapping
        ``kind`` ``local`` or ``slurm`` (:mod:`eegfm_bench.runs.launch.launcher`).
    shards : int, optional
        Jobs (default :func:`default_shards`), never more than the missing recordings.
    n_jobs : int, optional
        Recordings read at once inside a job (default: a local worker's ``threads`` / the job's ``cpus_per_task``).
    out_dir : path, optional
        Where the jobs' pickles and logs go (``<out_dir>/jobs``; default ``<cache>/.jobs/ingest-<task>/jobs``).
    notes : list, optional
        Receives the lines the ingest report adds (printed too): ``--shards 8 reduced to 3: only 3 recordings lack
        their entry``.

    Returns
    -------
    int
        The number of shards run (0: every entry was cached).

    Raises
    ------
    ShardError
        A shard that failed (its recordings, the error, its log), or recordings still without their entry once
        every job has ended.
    ConfigError
        An invalid launcher (:func:`~eegfm_bench.runs.launch.launcher.check_launcher`).
    """
    lc = as_launcher(launcher)
    lc = replace(lc, slurm=replace(lc.slurm, gpus_per_node=0))  # reading EEG needs no GPU, whatever the cells do
    check_launcher(lc, "launcher", trainer={"accelerator": "cpu", "devices": 1})
    t = get_task(task)
    preps = list(dict.fromkeys(p.prep if isinstance(p, WindowPreprocessing) else resolve_preprocessing(t, p).prep
                               for p in preps))
    src = t.source(data_root)
    with capture_warnings(RecordingQC(recording="", subject="")):
        recs = src.recordings(subjects)
    cdir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    fps = recording_fingerprints(src, recs, cdir)
    missing = missing_entries(t, preps, recs, fps, cdir)
    if not missing:
        if progress:
            tqdm.write(f"ingest: every recording's entry is cached ({len(recs)}); assembling here")
        return 0
    asked = int(shards or default_shards(lc))
    slices = [[missing[i] for i in s] for s in shard_slices(len(missing), asked)]
    n = len(slices)
    note = shards_note(asked, len(missing), n, f"recording(s) lack their entry (of {len(recs)})", bool(shards))
    if note:
        print(f"ingest: {note}", flush=True)
        if notes is not None:
            notes.append(note)
    # local: at most ``workers`` processes at once, each taking every workers-th shard (``--shards`` above
    # ``--workers`` means more, smaller shards, not more processes); SLURM: one array task per shard
    slots = min(n, int(lc.workers)) if lc.kind == "local" else n
    if n_jobs is None or int(n_jobs) == -1:
        n_jobs = (int(lc.threads) if lc.threads else max(1, (os.cpu_count() or 1) // slots)) if lc.kind == "local" \
            else int(lc.slurm.cpus_per_task)
    cfg = IngestShards(t, preps, src, list(recs), list(fps), slices, str(cdir), int(n_jobs))
    out = Path(out_dir) if out_dir else cdir / ".jobs" / f"ingest-{t.name}"  # a dot folder: not a cache entry
    print(f"ingest: {len(missing)} of {len(recs)} recordings lack their entry: {n} shard(s) of "
          f"{min(map(len, slices))}-{max(map(len, slices))} recordings, {n_jobs} read at once per job "
          f"(launcher {lc.kind}{f', {slots} worker(s)' if lc.kind == 'local' else ''})", flush=True)
    lc = replace(lc, workers=slots, cells_per_job=1)  # one shard per job
    failures = run_jobs(lc, cfg, [str(i) for i in range(n)], out, devices=1, progress=progress, kind="ingest",
                        stage="ingest stage's")
    left = set(missing_entries(t, preps, recs, fps, cdir))
    problems = []
    for f in failures:
        sid = int(f["cell"])
        names = [recs[i].recording for i in slices[sid] if i in left]
        error = f["error"].splitlines()[0][:400]
        problems.append(f"shard {sid} failed ({len(names)} recording(s) without their entry: "
                        f"{', '.join(names[:10])}{' ...' if len(names) > 10 else ''}): {error}")
    failed = {int(f["cell"]) for f in failures}
    for sid, s in enumerate(slices):
        names = [recs[i].recording for i in s if i in left]
        if names and sid not in failed:
            problems.append(f"shard {sid} ended without building the entries of {', '.join(names)}")
    if problems:
        raise ShardError("; ".join(problems) + f" (job logs under {lc.folder or out / 'jobs'}); fix: see the error, "
                         "then rerun the same command: it builds only the recordings still missing")
    return n


def run_ingest(task: Any, models: list[str], *, data_root=None, cache_dir=None, subjects=None,
               out_dir: str | Path | None = None, progress: bool = True, n_jobs: int | None = None,
               launcher=None, shards: int | None = None) -> Path | None:
    """Build (or open) the task's windows under each model's preprocessing and write the combined ingest report.

    ``n_jobs`` recordings are read at once (``data.n_jobs``; default every core the job has:
    :func:`~eegfm_bench.data.windows.ingest_workers`); the windows and the reports do not depend on it. With a
    ``launcher`` of kind ``local`` or ``slurm`` the recordings are read by ``shards`` jobs (:func:`sharded_fill`)
    and this process only assembles the window sets from their entries.

    Returns
    -------
    Path or None
        ``<out_dir>/ingest_report.md`` (None without ``out_dir``; each window set's own report is in its cache
        folder, printed).

    Raises
    ------
    ShardError
        A failed shard (:func:`sharded_fill`).
    MissingEntryError
        After the shards, an entry missing at assembly (named).
    """
    t = get_task(task)
    sharded = launcher is not None and as_launcher(launcher).kind != "none"
    used: dict[str, tuple[list[str], Any]] = {}
    notes: list[str] = []
    if sharded:
        sharded_fill(t, [BACKBONES.get(m).preprocessing for m in models], launcher, data_root=data_root,
                     cache_dir=cache_dir, subjects=subjects, shards=shards, n_jobs=n_jobs, out_dir=out_dir,
                     progress=progress, notes=notes)
    for m in models:
        ws = load_windows(t, BACKBONES.get(m).preprocessing, data_root=data_root, subjects=subjects,
                          cache_dir=cache_dir, progress=progress, n_jobs=n_jobs, build_missing=not sharded)
        used.setdefault(ws.meta["cache_key"], ([], ws))[0].append(m)
        print(f"{m}: {len(ws)} windows, {len(ws.ch_names)} channels at {ws.sfreq:g} Hz, classes "
              f"{dict(zip(ws.class_names, [int((ws.y == i).sum()) for i in range(len(ws.class_names))]))}; "
              f"report {ws.meta['ingest_report']}")
    if out_dir is None:
        return None
    return write_ingest_reports(out_dir, list(used.values()), notes=notes)
