"""Tasks: a registered name (a preset YAML), a YAML file, or a mapping declared in any config.

The presets live in ``eegfm_bench/data/presets/<name>.yaml`` (also reachable as ``configs/data/``), one
:class:`~eegfm_bench.config.task.TaskSpec` each: the three tasks on the staged data (``eegmmidb_mi``,
``eegmmidb_eyes``, ``eegmat``) and the papers' datasets (TUAB, CHB-MIT, Sleep-EDF, ds004504, CAUEEG, NMT, Siena,
HGD, KU MI / ERP, PhysioNet MI / movement, digit span, Sleep-HMC). ``eegfm-bench tasks`` lists them.

``task:`` may be

* a preset name: ``task: eegmmidb_mi``;
* a preset with overrides: ``task: {preset: tuab, root: /data/tuh_abnormal}`` (sections merged key by key);
* a YAML file holding a task mapping: ``task: my_study.yaml``;
* a full mapping (:mod:`eegfm_bench.data.spec`).
"""
from __future__ import annotations

import copy
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from eegfm_bench.config import ConfigError, close_matches, read_yaml
from eegfm_bench.data.ingest import DeclaredTask
from eegfm_bench.data.sources import DataNotFoundError, Recording, RecordingReadError, resolve_data_root
from eegfm_bench.data.sources.eegmmidb import eegmmidb_dir, eegmmidb_file
from eegfm_bench.registry import UnknownNameError

PRESET_DIR = Path(__file__).with_name("presets")

__all__ = ["get_task", "task_name", "preset_names", "tasks_table", "preset_spec", "PRESET_DIR", "DeclaredTask", "DataNotFoundError",
           "RecordingReadError", "Recording", "resolve_data_root"]


def preset_names() -> list[str]:
    """Names of the presets (``eegfm_bench/data/presets/*.yaml``), sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_spec(name: str) -> dict:
    """The task mapping of preset ``name``.

    Raises
    ------
    UnknownNameError
        ``name`` is no preset; the message lists them and the closest matches.
    """
    path = PRESET_DIR / f"{name}.yaml"
    if name.endswith((".yaml", ".yml")):
        raise ConfigError(f"task file {name} not found (looked in the working directory {Path.cwd()} and next to the "
                          "config that names it); fix: give the path of the task YAML")
    if not path.is_file():
        raise UnknownNameError(f"unknown task {name!r}.{close_matches(name, preset_names())} Registered tasks (presets): "
                               f"{', '.join(preset_names())}.\nfix: use one of them, a YAML file with a task mapping, "
                               "or declare the task as a mapping (`task: {name: ..., source: files, ...}`)")
    raw = yaml.safe_load(path.read_text())
    if raw.get("name") != name:
        raise ConfigError(f"preset {path}: name {raw.get('name')!r} differs from the file name {name!r}")
    return raw


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("events", "map", "rename", "ratios"):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def resolve_task_spec(task: Any, where: str = "task") -> dict:
    """The task mapping ``task`` stands for (a preset name, a YAML path, a mapping with an optional ``preset``):
    the input of :func:`~eegfm_bench.data.spec.parse_task_spec`, a preset's settings merged with the overrides key
    by key (a :class:`~eegfm_bench.data.ingest.DeclaredTask`: its resolved spec's mapping). Not validated; the
    typed task is ``get_task(task).spec``."""
    if isinstance(task, DeclaredTask):
        return task.spec.to_dict()
    if isinstance(task, (str, Path)):
        t = str(task)
        if t.endswith((".yaml", ".yml")) and Path(t).expanduser().is_file():
            raw = read_yaml(Path(t).expanduser())
            return resolve_task_spec(raw, where) if isinstance(raw, dict) else raw
        return preset_spec(t)
    if isinstance(task, dict):
        if "preset" in task:
            over = {k: v for k, v in task.items() if k != "preset"}
            return _merge(preset_spec(str(task["preset"])), over)
        return task
    raise ConfigError(f"{where} must be a task name, a YAML file or a mapping, got a {type(task).__name__}")


@lru_cache(maxsize=64)
def _declared(blob: str, where: str) -> DeclaredTask:
    return DeclaredTask.from_spec(json.loads(blob), where)


def get_task(task: Any, where: str = "task") -> DeclaredTask:
    """The :class:`~eegfm_bench.data.ingest.DeclaredTask` of a task name, YAML path or mapping (validated).

    Raises
    ------
    UnknownNameError
        An unknown preset name (with close matches).
    ConfigError
        An invalid mapping (unknown keys with close matches, wrong types, classes that do not add up).
    """
    if isinstance(task, DeclaredTask):
        return task
    raw = resolve_task_spec(task, where)
    return _declared(json.dumps(raw, sort_keys=True, default=str), where)


def resolve_task_path(task: Any, base: str | os.PathLike | None) -> Any:
    """A task given as a relative YAML path, found next to the config that names it when not in the working dir."""
    if isinstance(task, str) and task.endswith((".yaml", ".yml")) and base is not None:
        p = Path(task).expanduser()
        if not p.is_absolute() and not p.is_file() and (Path(base) / p).is_file():
            return str(Path(base) / p)
    return task


def task_name(task: Any) -> str:
    """The name a task is recorded under in result rows (a preset's name, or the mapping's ``name``)."""
    return get_task(task).name


def tasks_table(root: str | os.PathLike | None = None) -> str:
    """Every registered task (:func:`preset_names`) as one Markdown table, with a line above it: task, source,
    classes, windows (event-locked with their onset offset in s, or fixed with their stride), mains frequency (Hz),
    whether the data look present under the data root ``root`` (default :func:`resolve_data_root`; nothing is read)
    and the description. What ``eegfm-bench tasks`` prints."""
    root = resolve_data_root() if root is None else Path(root)
    lines = [f"Registered tasks: the presets in {PRESET_DIR} (also configs/data/). `local copy` looks for each "
             f"preset's root under the data root {root}; point `task: {{preset: <name>, root: /path}}` elsewhere.", "",
             "| task | source | classes | windows | mains (Hz) | local copy | description |",
             "|---|---|---|---|---|---|---|"]
    for name in preset_names():
        t = get_task(name)
        s, w = t.spec, t.spec.windows
        win = (f"events, {w.tmin:g} s from onset" if w.mode == "events" else
               "fixed" + (f", stride {w.stride_s:g} s" if w.stride_s else ""))
        if s.window_s:
            win += f", {s.window_s:g} s"
        lines.append(f"| {name} | {s.source} | {', '.join(t.class_names) or '(from the dataset)'} | {win} | "
                     f"{'–' if t.line_freq is None else f'{t.line_freq:g}'} | {_local_copy(t, root)} | "
                     f"{t.description} |")
    return "\n".join(lines)


def _local_copy(t: DeclaredTask, root: Path) -> str:
    """Whether a task's data look present locally, without reading them (yes / no / what is missing)."""
    s = t.spec
    if s.source == "moabb":
        return "MOABB's own folder (MNE_DATA); not checked"
    where = Path(s.root or ".")
    where = where if where.is_absolute() else root / where
    if not where.exists():
        return "no"
    if s.source == "eegmmidb":
        base = eegmmidb_dir(where)
        runs = [int(r) for r in s.options.runs]
        subs = sorted(int(p.name[1:]) for p in (base / "MNE-eegbci-data/files/eegmmidb/1.0.0").glob("S[0-9][0-9][0-9]"))
        full = [x for x in subs if all(eegmmidb_file(base, x, r).is_file() for r in runs)]
        return f"yes ({len(full)} subjects with runs {runs})" if full else f"no subject has runs {runs}"
    return "yes"
