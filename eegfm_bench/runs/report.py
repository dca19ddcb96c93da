"""The experiment page (:mod:`eegfm_bench.reports.page`) as the commands write it: every config a result folder
saved is read back through its own command's parser into that command's typed config
(:func:`~eegfm_bench.config.read_saved`) before the page reads a setting from it.

The page lives on the reports floor, below the commands whose schemas it reads; these functions hand it the
readers (:data:`SAVED_CONFIGS`), so the page reads typed configs without importing the commands.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from eegfm_bench.config import read_saved
from eegfm_bench.reports import page
from eegfm_bench.reports.page import report_root  # noqa: F401  (the commands import it from here with refresh)
from eegfm_bench.runs.cells import CVConfig, cv_parser
from eegfm_bench.runs.controls_config import ControlsConfig, controls_parser
from eegfm_bench.runs.interpret_config import InterpretConfig, interpret_parser
from eegfm_bench.runs.sweep_config import SweepConfig, sweep_parser

SAVED_CONFIGS = {
    "cv": lambda path: read_saved(cv_parser(), path, CVConfig),
    "sweep": lambda path: read_saved(sweep_parser(), path, SweepConfig),
    "interpret": lambda path: read_saved(interpret_parser(), path, InterpretConfig),
    "controls": lambda path: read_saved(controls_parser(), path, ControlsConfig),
}
"""The reader of each command's saved config (a path in, the typed config out), by the page's folder kind."""


def write_page(dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None,
               title: str | None = None) -> dict[str, Path]:
    """Write ``report.html`` and ``report.md`` for the results under ``dirs`` (into ``out``, default the first).

    The page gathers what the commands wrote under the folders (a cv run, its sweeps, probes, attribution, negative
    controls, provenance audits; see :mod:`eegfm_bench.reports.page`), each folder's saved config read as its
    command's typed config.

    Parameters
    ----------
    dirs : sequence of path
        Result folders (a command's ``out_dir``); folders below them are found too.
    out : path, optional
        Where the page goes (default: the first folder).
    title : str, optional
        The page's title (default: the experiments' names).

    Returns
    -------
    dict
        ``html``, ``md`` and ``assets`` (the folder of the page's own figures) paths.

    Raises
    ------
    NotAResultFolderError
        A folder that does not exist, or nothing to report under the folders (names what the commands write).
    ConfigError
        A saved config that does not read as its command's config of this version (one line naming the fix).
    """
    return page.write_page(dirs, out, title, configs=SAVED_CONFIGS)


def refresh(dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None, *,
            quiet: bool = False) -> Path | None:
    """:func:`write_page` at the end of a command: a failure is reported in one line (the command's own results
    are already written) and returns None."""
    return page.refresh(dirs, out, quiet=quiet, configs=SAVED_CONFIGS)


__all__ = ["write_page", "refresh", "report_root", "SAVED_CONFIGS"]
