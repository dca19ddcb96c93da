"""``eegfm-bench plan`` of a finished cv run, without the deep-learning stack.

A run is *finished* for its config when its ``out_dir`` holds ``config.yaml``, ``cells.json`` and ``splits.json``,
the config given to ``plan`` resolves to that ``config.yaml`` (every section but ``launcher``, which changes no
cell), every cell has rows of its config hash (:class:`~eegfm_bench.runs.cv.progress.CellProgress`, as ``status``
reads it) and so has every confound variation the run resolved. The plan of such a run then needs no windows, no
model and no throughput: it is read from those files, and ``plan`` imports neither torch, Lightning, MNE nor
braindecode (docs/guide/architecture.md, house rules; ``tests/spine/test_light_commands.py`` checks it).

Whatever is not surely finished — another config, a cell left, a task given as a relative path, a setting the run's
file holds differently — is answered ``None`` here, and ``plan`` goes the whole way
(:func:`~eegfm_bench.runs.plan.command.run_plan`): this module never decides that something must run.

What a light read cannot see: the run's resolution of the settings a config leaves to the task (``confound``'s
``enabled`` / ``variations`` when the config leaves them null) is taken from its ``config.yaml``, and a data file
changed since the run is seen by ``eegfm-bench cv`` (the cells' hashes hold the window cache's key), as by ``status``.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from eegfm_bench.config import (TRAINER_DEFAULTS, TRAINER_EXTRAS, TRAINER_SKIP, ConfigError, load_typed,
                                normalise_trainer, read_saved)
from eegfm_bench.config.confound import ConfoundConfig, label
from eegfm_bench.config.cv import CVConfig, cv_parser
from eegfm_bench.runs.cv.progress import CellProgress
from eegfm_bench.stats import SUBJECT_SD_PILOT, min_detectable_delta

RUN_FILES = ("config.yaml", "cells.json", "splits.json")
"""What a cv ``out_dir`` holds once its cells were enumerated (:mod:`eegfm_bench.runs.cv.output`)."""


@functools.lru_cache(maxsize=1)
def lightning_trainer_defaults() -> dict | None:
    """The keyword defaults of ``lightning.Trainer.__init__``, read from Lightning's source with :mod:`ast`
    (importing Lightning costs about 9 s of CPU here), or None when the source is not found or a default is not a
    literal (the caller then takes the whole way)."""
    spec = importlib.util.find_spec("lightning")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "pytorch" / "trainer" / "trainer.py"
    try:
        tree = ast.parse(path.read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        return {a.arg: ast.literal_eval(d) for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults)
                if d is not None}
    except (OSError, SyntaxError, StopIteration, ValueError):
        return None


def trainer_section(given: dict | None) -> dict | None:
    """A ``trainer:`` section with every default filled as ``eegfm-bench cv`` fills it (Lightning's own defaults,
    then :data:`~eegfm_bench.config.TRAINER_DEFAULTS` and :data:`~eegfm_bench.config.TRAINER_EXTRAS`), without
    importing Lightning; None when Lightning's defaults cannot be read."""
    lightning = lightning_trainer_defaults()
    if lightning is None:
        return None
    base = {k: v for k, v in lightning.items() if k not in TRAINER_SKIP}
    return normalise_trainer({**base, **TRAINER_EXTRAS, **TRAINER_DEFAULTS, **(given or {})})


def _confound_as_run(given: ConfoundConfig | bool, saved: ConfoundConfig) -> ConfoundConfig:
    """The given ``confound`` section with what the run resolved from its task where the given one leaves it to
    the task (``enabled`` / ``variations`` null)."""
    if isinstance(given, bool):  # confound: off / on
        given = replace(ConfoundConfig(), enabled=given)
    return replace(given, enabled=saved.enabled if given.enabled is None else given.enabled,
                   variations=saved.variations if given.variations is None else given.variations)


def finished_plan(configs: Sequence[str], args: Sequence[str] = ()) -> dict | None:
    """The plan of a finished cv run (module docstring), in the form of
    :func:`~eegfm_bench.runs.plan.command.run_plan` with ``"finished": True``, or None when the run is not surely
    finished for this config.

    Parameters
    ----------
    configs : sequence of str
        The ``--config`` files (later ones override earlier ones).
    args : sequence of str
        Dotted overrides, with the launcher's (:func:`~eegfm_bench.config.launch.launcher_overrides`).

    Returns
    -------
    dict or None
        ``n_cells`` / ``n_done`` (equal), ``todo`` (empty), ``heads`` (``model/regime/head`` → config hash, from
        ``cells.json``), ``detectable`` (the held-out subjects of the configured folds, from ``splits.json``, and the
        smallest paired Δ they detect), ``confound`` (each variation's cells, all done), zero estimates.
    """
    parser = cv_parser(saved=True)  # the trainer section as a mapping: Lightning is not imported to type it
    try:
        given = load_typed(parser, CVConfig, configs[0], [*(x for c in configs[1:] for x in ("--config", c)), *args])
        out = Path(given.out_dir)
        if not all((out / f).is_file() for f in RUN_FILES) or (out / "gates.json").is_file():
            return None
        saved = read_saved(parser, out / "config.yaml", CVConfig)
    except ConfigError:  # a paper file, a key of another version, a trainer key typed on the command line, ...
        return None
    trainer = trainer_section(given.trainer)
    if trainer is None or not isinstance(saved.confound, ConfoundConfig):
        return None
    # as the cv resolves it (the trainer's defaults, the confound as the run resolved it), the launcher aside
    as_run = replace(given, trainer=trainer, confound=_confound_as_run(given.confound, saved.confound),
                     launcher=saved.launcher)
    if as_run != saved:
        return None
    head = CellProgress.of_out_dir(out)
    if head.todo():
        return None
    cc = saved.confound
    confound = []
    for v in (cc.variations or []) if cc.enabled else []:
        vout = out / "confound" / v.replace("+", "_")
        if not all((vout / f).is_file() for f in RUN_FILES):
            return None
        part = CellProgress.of_out_dir(vout)
        if part.todo():
            return None
        confound.append({"condition": label(v, cc), "out_dir": str(vout), "n_cells": len(part.cells), "n_todo": 0,
                         "n_jobs": 0, "parallel": 1, "estimate_device_hours": 0.0})
    return {"config": saved.experiment, "out_dir": str(out), "n_cells": len(head.cells),
            "n_done": len(head.cells), "todo": [], "launcher": given.launcher.kind, "n_jobs": 0,
            "parallel": 1, "backbone_passes_saved_by_cache": 0, "throughput": {}, "overhead_s": None,
            "estimate_device_hours": 0.0, "estimate_device_hours_range": [0.0, 0.0], "estimate_wall_hours": 0.0,
            "estimate_headline_device_hours": 0.0, "confound": confound,
            "heads": {f"{c['model']}/{c['regime']}/{c['head']}": c["config_hash"]
                      for c in json.loads((out / "cells.json").read_text())},
            "detectable": _detectable(out, saved), "stages": None, "startup": None, "estimate_command_wall_s": None,
            "ingested_by_plan": [], "finished": True}


def _detectable(out: Path, saved: CVConfig) -> dict:
    """The held-out subjects of the configured folds (``splits.json``) and the smallest paired Δ they detect, as
    :func:`~eegfm_bench.runs.plan.command.detectable_delta` computes it from the split it makes."""
    folds = json.loads((out / "splits.json").read_text())["folds"]
    wanted = saved.split.folds
    n = len({str(s) for f in folds if wanted is None or f["fold"] in wanted for s in f["test"]})
    return {"n_subjects": n, "sd_subject": SUBJECT_SD_PILOT, "level": 0.95, "power": 0.8,
            "delta": min_detectable_delta(n, SUBJECT_SD_PILOT) if n >= 2 else None}


__all__ = ["finished_plan"]
