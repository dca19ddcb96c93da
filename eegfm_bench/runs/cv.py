"""``eegfm-bench cv``: cross-validate models × heads × regimes on one task, then check the headline for confounds.

The command is two named steps:

1. the headline cells (:func:`eegfm_bench.runs.cv_loop.run_cells`: every model × regime × head × fold, resumable,
   launchable as jobs);
2. the confound check (:func:`eegfm_bench.runs.confound.run_confound`), on by default for every event-locked task
   (the safe number is the default one): every cell retrained on the task's default variations, the
   headline beside the confound-checked score with a verdict in ``summary.md``; ``confound: off`` skips it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from eegfm_bench.distributed import is_global_zero
from eegfm_bench.reports.cv import confound_side_by_side, write_summary
from eegfm_bench.runs.cv_loop import run_cells
from eegfm_bench.runs.confound import run_confound
from eegfm_bench.runs.report import refresh


def run_cv(config, *, args: Sequence[str] = (), progress: bool = True, force: bool = False,
           worker_cells: Sequence[str] | None = None):
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
        A launcher's worker: only these headline cells (:func:`eegfm_bench.runs.cv_loop.run_cells`); the failures are
        returned.

    Returns
    -------
    DataFrame
        The headline summary table; ``attrs["confound"]`` the confound table (:func:`~eegfm_bench.runs.confound.
        compare` rows) and ``attrs["side_by_side"]`` the headline beside the confound-checked scores, when the
        check ran.

    Raises
    ------
    SplitMismatchError, FailedCellsError, ConfigError
        As :func:`~eegfm_bench.runs.cv_loop.run_cells`.
    """
    table = run_cells(config, args=args, progress=progress, force=force, worker_cells=worker_cells)
    if worker_cells is not None:
        return table
    cfg = table.attrs["config"]
    if not cfg.confound.enabled:
        return table
    t_head = time.time()
    conf = run_confound(cfg, progress=progress)
    table.attrs["confound"] = conf
    if is_global_zero():
        out = Path(cfg.out_dir)
        (out / "timing.json").write_text(json.dumps({"headline_s": t_head - table.attrs["t_start"],
                                                     "confound_s": time.time() - t_head}))
        write_summary(out / "summary.md", table, confound=conf, **table.attrs["summary"])
        table.attrs["side_by_side"] = confound_side_by_side(table, conf)
        refresh([out], quiet=not progress)
    return table


__all__ = ["run_cv"]
