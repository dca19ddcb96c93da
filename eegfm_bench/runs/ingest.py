"""``eegfm-bench ingest``: read a task through the ingestion checks, cache its windows and write the ingest report.

Run it on a new dataset (or a preset pointed at a local copy) before a cv run, to see what the checks found:
truncated or unreadable files, mixed sampling rates, flat / saturated / non-finite channels, channels renamed and
dropped, events per class, windows kept and rejected, subjects dropped — all in ``ingest_report.md`` / ``.json``::

    eegfm-bench ingest --task eegmmidb_mi --model eegnet --out results/ingest_mi
    eegfm-bench ingest --task my_study.yaml --model labram --subjects 1 2 3 --n-jobs 4
    eegfm-bench ingest --config configs/experiment/quickstart.yaml     # the task and every model of a cv config

The windows are cached exactly as ``cv`` reads them, so the cv run that follows reads no recording again.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from eegfm_bench.data.tasks import get_task
from eegfm_bench.data.windows import load_windows
from eegfm_bench.reports.ingest import write_ingest_reports
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.runs.cells import load_config


def run_ingest(task: Any, models: list[str], *, data_root=None, cache_dir=None, subjects=None,
               out_dir: str | Path | None = None, progress: bool = True, n_jobs: int | None = None) -> Path | None:
    """Build (or open) the task's windows under each model's preprocessing and write the combined ingest report.

    ``n_jobs`` recordings are read at once (``data.n_jobs``; default every core the job has:
    :func:`~eegfm_bench.data.windows.ingest_workers`); the windows and the reports do not depend on it.

    Returns
    -------
    Path or None
        ``<out_dir>/ingest_report.md`` (None without ``out_dir``; each window set's own report is in its cache
        folder, printed).
    """
    t = get_task(task)
    used: dict[str, tuple[list[str], Any]] = {}
    for m in models:
        ws = load_windows(t, BACKBONES.get(m).preprocessing, data_root=data_root, subjects=subjects,
                          cache_dir=cache_dir, progress=progress, n_jobs=n_jobs)
        used.setdefault(ws.meta["cache_key"], ([], ws))[0].append(m)
        print(f"{m}: {len(ws)} windows, {len(ws.ch_names)} channels at {ws.sfreq:g} Hz, classes "
              f"{dict(zip(ws.class_names, [int((ws.y == i).sum()) for i in range(len(ws.class_names))]))}; "
              f"report {ws.meta['ingest_report']}")
    if out_dir is None:
        return None
    return write_ingest_reports(out_dir, list(used.values()))


def ingest_from_config(config, overrides=(), progress: bool = True) -> Path | None:
    """``eegfm-bench ingest --config <cv config>``: the config's task, data selection and every run's model."""
    cfg = load_config(config, overrides)
    d = cfg.data
    models = list(dict.fromkeys(r.model for r in cfg.runs))
    return run_ingest(cfg.task, models, data_root=d.data_root, cache_dir=d.cache_dir, subjects=d.subjects,
                      out_dir=cfg.out_dir, progress=progress, n_jobs=d.n_jobs)
