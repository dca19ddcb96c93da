"""The handlers of the light commands: ``eegfm-bench status``, ``report`` and ``plan`` of a finished run.

A light command reads what a run left on disk (config.yaml, cells.json, splits.json, the result store's key columns)
and imports no deep-learning stack: neither torch, Lightning, MNE nor braindecode (docs/guide/architecture.md, house
rules; ``tests/spine/test_light_commands.py`` checks it). :mod:`eegfm_bench.cli` imports this module once the command
line is parsed, instead of :mod:`eegfm_bench.commands`; its handlers have the same signature,
``handler(parser, args, extra) -> exit code``, or None when the command needs the whole stack after all (``plan`` of
a run with cells left), which the CLI then runs through :mod:`eegfm_bench.commands`. What one handler alone needs
(the page's scipy.signal and matplotlib, the plan's scipy.stats) it imports when it runs, so that ``status`` reads
its files in under a second of CPU.
"""
from __future__ import annotations

import json

from eegfm_bench.config.launch import launcher_overrides
from eegfm_bench.reports.status import status_markdown
from eegfm_bench.results import ResultStore
from eegfm_bench.runs.cv.progress import cv_status
from eegfm_bench.runs.plan.text import plan_markdown


def _status(p, a, extra) -> int:
    """Every cell of a cv out_dir with its state and the command that resumes it (:func:`cv_status`)."""
    print(status_markdown(*cv_status(a.out_dir), unmerged=ResultStore(a.out_dir, write=False).unmerged()))
    return 0


def _report(p, a, extra) -> int:
    """One HTML + Markdown page of every result under the out_dirs (:func:`run_report`). The page reads what the
    commands saved (rows, JSON, figures they drew); a cv run saved before its ingest report recorded the class
    names has them resolved from its task, which loads MNE."""
    from eegfm_bench.reports.page import run_report  # reason: the page's readers (scipy.signal, matplotlib: 1.1 s of
    # imports here) load for `report` only, not for `status` or `plan`

    paths = run_report(a.out_dirs, a.out, title=a.title)
    print(f"report: {paths['html']}\nmarkdown: {paths['md']}")
    return 0


def _plan(p, a, extra) -> int | None:
    """The plan of a finished cv run, read from its files (:func:`finished_plan`); None for any other plan (cells
    left, a paper file, another config): :mod:`eegfm_bench.cli` then hands it to :mod:`eegfm_bench.commands`, which
    loads the whole stack."""
    from eegfm_bench.runs.plan.finished import finished_plan  # reason: its power analysis (scipy.stats: 1.3 s of
    # imports here) loads for `plan` only, not for `status`

    launch, note = launcher_overrides(a.launcher, a.workers)
    plan = finished_plan(a.config, [*extra, *launch])
    if plan is None:
        return None
    if note:
        print(note)
    print(json.dumps(plan, indent=1, default=str) if a.json else plan_markdown(plan))
    return 0


HANDLERS = {"status": _status, "report": _report, "plan": _plan}
"""The light commands, each ``handler(parser, args, extra)``."""


__all__ = ["HANDLERS"]
