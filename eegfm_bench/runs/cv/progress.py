"""Where each cell of a cv stands — one object for ``cv`` (which cells to train), ``plan`` (which cells it would
train) and ``eegfm-bench status`` (done / running / pending / failed / missing, and the command that resumes).

A cell is *done* when the result store holds its clean test row under its current config hash
(:func:`~eegfm_bench.results.done_cells`); *running* when a live process holds its ``running/`` marker or its SLURM
job runs, *pending* when its job waits in the queue (``jobs/queue.json`` read against ``squeue``); *failed* when
``failures.json`` names it; else *missing*.

Light (docs/guide/architecture.md, house rules): it reads files and the result store's key columns only, and imports
no deep-learning stack — the cv's cells reach it from :mod:`eegfm_bench.runs.cv.cells`, never the reverse.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from eegfm_bench.config import read_saved
from eegfm_bench.config.cv import CVConfig, cv_parser
from eegfm_bench.errors import NotAResultFolderError
from eegfm_bench.results import Cell, CellKey, ResultStore, done_cells
from eegfm_bench.runs.launch.running import running_cells


@dataclass(frozen=True)
class CellRef(CellKey):
    """A cell named by its key alone (what ``cells.json`` and ``splits.json`` give ``status``)."""

    model: str
    regime: str
    head: str
    fold: int
    chash: str


class CellProgress:
    """The cells of one cv config and where each stands (module docstring).

    Parameters
    ----------
    out : path
        The cv's ``out_dir``.
    experiment : str
    cells : sequence of Cell or CellRef
        Every cell of the current config.
    store : ResultStore, optional
        The open store (default: opened read-only).
    """

    def __init__(self, out, experiment: str, cells: Sequence[Cell | CellRef], store: ResultStore | None = None):
        self.out, self.experiment, self.cells = Path(out), str(experiment), list(cells)
        self.store = store if store is not None else ResultStore(self.out, write=False)
        self._done: set | None = None

    @classmethod
    def of_cells(cls, out, experiment: str, cells: Sequence[Cell], store: ResultStore | None = None) -> "CellProgress":
        """The progress of enumerated cells (:func:`~eegfm_bench.runs.cv.cells.enumerate_cells`: cv and plan)."""
        return cls(out, experiment, cells, store)

    @classmethod
    def of_out_dir(cls, out) -> "CellProgress":
        """The progress of a cv ``out_dir`` from its files (``config.yaml``, ``cells.json``, ``splits.json``),
        without reading any data (``eegfm-bench status``).

        Raises
        ------
        NotAResultFolderError
            ``out`` lacks one of those files (not a cv output folder, or the run never started).
        ConfigError
            Its ``config.yaml`` does not read as a cv config of this version (one line naming the fix).
        """
        out = Path(out)
        if (out / "gates.json").is_file():  # its cells.json lists the controls' units, not cv cells
            raise NotAResultFolderError(f"{out} is a controls out_dir (gates.json), not a cv output folder; fix: "
                                        "point status at a cv out_dir (the controls report is controls_report.md)")
        for f in ("cells.json", "splits.json", "config.yaml"):
            if not (out / f).is_file():
                raise NotAResultFolderError(f"{out} has no {f}: not a cv output folder (or the run never started); "
                                            "fix: point status at a cv out_dir")
        cfg = read_saved(cv_parser(saved=True), out / "config.yaml", CVConfig)
        n_folds = len(json.loads((out / "splits.json").read_text())["folds"])
        folds = cfg.split.folds or list(range(n_folds))
        cells = [CellRef(c["model"], c["regime"], c["head"], int(k), str(c["config_hash"]))
                 for c in json.loads((out / "cells.json").read_text()) for k in folds]
        return cls(out, cfg.experiment, cells)

    def done(self) -> set[tuple[str, str, str, str, str]]:
        """Keys of the cells with rows of their config hash (the store is read once)."""
        if self._done is None:
            self._done = done_cells(self.store, self.experiment)
        return self._done

    def todo(self, force: bool = False) -> list:
        """The cells a run must train: those without rows (every cell with ``force``), in order."""
        return list(self.cells) if force else [c for c in self.cells if c.key not in self.done()]

    def running(self) -> dict[str, str]:
        """``{cell id: where}`` of cells that a live process or a queued / running SLURM job holds."""
        return running_cells(self.out)

    def failed(self) -> dict[tuple, str]:
        """``{cell key: error}`` from ``failures.json``."""
        path = self.out / "failures.json"
        if not path.is_file():
            return {}
        return {(f["model"], f["regime"], f["head"], str(f["fold"]), f["config_hash"]): f["error"]
                for f in json.loads(path.read_text())}

    def states(self) -> list[dict]:
        """One ``{"cell", "state", "detail"}`` per cell: done / running / pending / failed / missing."""
        done, failed, running = self.done(), self.failed(), self.running()
        rows = []
        for c in self.cells:
            where = running.get(c.id, "")
            if c.key in done:
                state = "done"
            elif c.id in running:
                state = "pending" if where.startswith("slurm job") and "PENDING" in where else "running"
            else:
                state = "failed" if c.key in failed else "missing"
            rows.append({"cell": c.id, "state": state, "detail": where or failed.get(c.key, "")})
        return rows

    def resume_command(self, rows: list[dict]) -> str:
        """What to run next: wait while cells run or wait in the queue (resuming then would train them twice),
        else the cv on the run's own ``config.yaml`` when a cell is left or rows are unmerged, else nothing."""
        cmd = f"eegfm-bench cv --config {self.out / 'config.yaml'}"
        busy = [r for r in rows if r["state"] in ("running", "pending")]
        if busy:
            return (f"wait: {len(busy)} cell(s) are running or queued (or kill their processes / scancel their jobs) "
                    f"before resuming with {cmd}")
        left = [r for r in rows if r["state"] in ("failed", "missing")]
        return cmd if left or self.store.unmerged() else ""


def cv_status(out_dir: str | os.PathLike) -> tuple[list[dict], str]:
    """Every cell of a cv ``out_dir``'s current config with its state (:meth:`CellProgress.states`) and the command
    that resumes it (:meth:`CellProgress.resume_command`; config.yaml keeps the run's launcher section, so the
    resume runs the way the run did).

    Raises
    ------
    NotAResultFolderError
        If ``out_dir`` holds no ``cells.json`` / ``splits.json`` / ``config.yaml``.
    ConfigError
        Its ``config.yaml`` does not read as a cv config of this version (one line naming the fix).
    """
    progress = CellProgress.of_out_dir(out_dir)
    rows = progress.states()
    return rows, progress.resume_command(rows)


__all__ = ["CellProgress", "CellRef", "cv_status"]
