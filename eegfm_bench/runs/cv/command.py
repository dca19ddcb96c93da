"""``eegfm-bench cv``: cross-validate models × heads × regimes on one task, then check the headline for confounds.

The command is two named steps:

1. the headline cells (:func:`eegfm_bench.runs.cv.loop.run_cells`: every model × regime × head × fold, resumable,
   launchable as jobs);
2. the confound check (:func:`eegfm_bench.runs.cv.confound.confound_check`), on by default for every event-locked task
   (the safe number is the default one): every cell retrained on the task's default variations, the
   headline beside the confound-checked score with a verdict in ``summary.md``; ``confound: off`` skips it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import StopRequested, check_stop
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.reports.cv import confound_side_by_side, write_summary
from eegfm_bench.runs.cv.cells import load_config
from eegfm_bench.runs.cv.loop import run_cells
from eegfm_bench.runs.cv.confound import confound_check
from eegfm_bench.runs.launch.ingest import run_ingest
from eegfm_bench.reports.page import refresh


def run_cv(config, *, args: Sequence[str] = (), progress: bool = True, force: bool = False,
           worker_cells: Sequence[str] | None = None, wait: bool = True):
    """Run a cv config: the headline cells, then (unless ``confound: off``) the confound check.

    Parameters
    ----------
    config : path or dict
    args : sequence of str
        Dotted overrides and more ``--config`` files.
    progress : bool
    force : bool
        Retrain every headline cell.
    worker_cells : sequence of str, optional
        A launcher's worker: only these headline cells (:func:`eegfm_bench.runs.cv.loop.run_cells`); the failures are
        returned.
    wait : bool
        When another process writes the same ``out_dir`` (:func:`eegfm_bench.locks.out_dir_lock`): wait for it
        (default), or raise :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``).

    Returns
    -------
    DataFrame
        The headline summary table; ``attrs["confound"]`` the confound table
        (:func:`~eegfm_bench.runs.cv.confound.compare` rows) and ``attrs["side_by_side"]`` the headline beside the
        confound-checked scores, when the check ran.

    Raises
    ------
    SplitMismatchError, FailedCellsError, ConfigError
        As :func:`~eegfm_bench.runs.cv.loop.run_cells`.
    OutDirBusyError
        ``wait=False`` and another process writes ``out_dir``.
    StopRequested
        SIGINT / SIGTERM (:mod:`eegfm_bench.interrupt`): the finished cells are kept.
    """
    if worker_cells is not None:  # a launcher's job: its parent holds the out_dir's lock
        return run_cells(config, args=args, progress=progress, force=force, worker_cells=worker_cells)
    cfg = load_config(config, args)
    with out_dir_lock(cfg.out_dir, "cv", wait=wait, enabled=is_global_zero()):
        return _headline_and_confound(cfg, progress=progress, force=force)


def _headline_and_confound(cfg, *, progress: bool, force: bool):
    """The two steps of :func:`run_cv` on its loaded config, under the out_dir's lock."""
    table = run_cells(cfg, progress=progress, force=force)
    if not cfg.confound.enabled:
        return table
    try:
        check_stop()  # a stop that arrived as the last cell ended: the headline is kept, the check not started
    except StopRequested as err:
        raise StopRequested(str(err), kept=f"every headline cell ({cfg.out_dir}); the confound check did not "
                                           "start") from None
    t_head = time.time()
    conf = confound_check(cfg, progress=progress)
    table.attrs["confound"] = conf
    if is_global_zero():
        out = Path(cfg.out_dir)
        atomic_write_text(out / "timing.json", json.dumps({"headline_s": t_head - table.attrs["t_start"],
                                                     "confound_s": time.time() - t_head}))
        write_summary(out / "summary.md", table, confound=conf, **table.attrs["summary"])
        table.attrs["side_by_side"] = confound_side_by_side(table, conf)
        refresh([out], quiet=not progress)
    return table


def ingest_from_config(config, overrides=(), progress: bool = True, shards: int | None = None) -> Path | None:
    """``eegfm-bench ingest --config <cv config>``: the cv's ingest stage alone
    (:func:`~eegfm_bench.runs.launch.ingest.run_ingest`): the config's task, data selection, every run's model and
    its ``launcher:`` section (``kind: local`` / ``slurm`` shards the reading,
    :func:`~eegfm_bench.runs.launch.ingest.sharded_fill`)."""
    cfg = load_config(config, overrides)
    d = cfg.data
    models = list(dict.fromkeys(r.model for r in cfg.runs))
    return run_ingest(cfg.task, models, data_root=d.data_root, cache_dir=d.cache_dir, subjects=d.subjects,
                      out_dir=cfg.out_dir, progress=progress, n_jobs=d.n_jobs, launcher=cfg.launcher, shards=shards)


__all__ = ["ingest_from_config", "run_cv"]
