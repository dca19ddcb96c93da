"""A paper as one command: its member configs (``configs/paper/<paper>.yaml``), planned, checked and run in order.

A **paper file** lists the paper's members, each an existing command over its own config files (stacked like
repeated ``--config``), plus dotted ``args``::

    paper: 003_ff03e98ea40aec06.txt          # the seed text the configs transcribe
    title: ...
    throughput: throughput_cpu.json          # the plan's default throughput table (next to the paper file)
    members:
      - {name: eyes_cv, command: cv, config: [003/cv.yaml, 003/runs_main.yaml, 003/tasks/eyes.yaml]}
      - {name: eyes_sweep, command: sweep, config: [003/sweep.yaml], after: [eyes_cv],
         args: [--cv_out_dir, results/paper003/eyes/cv, --out_dir, results/paper003/eyes/sweep]}
    datasets:                                # sizes for `plan` when a dataset has no local copy
      eegmmidb_eyes: {n_chans: 64, subjects: 109, windows: 3270, source: ...}
    not_runnable:                            # what the paper used that cannot run here, and why
      - {what: NeuroRVQ, why: ...}

Commands: ``cv``, ``sweep``, ``probe``, ``attribute``, ``controls`` (``eegfm-bench <command>``), ``truncation``
(``python -m eegfm_bench.runs.cv.truncation``, one config file) and ``provenance`` (``scripts/provenance_demo.py``, one
config file). Member config paths are relative to the paper file. Three entry points read a paper file:

* ``eegfm-bench plan --config <paper>`` — every member's cells, jobs and device-hours (:mod:`eegfm_bench.runs.plan.command`);
* ``eegfm-bench check --config <paper>`` — :func:`check_paper`: one batch of every member whose data are on disk,
  the others listed with the reason, missing weights named with where to put them;
* ``python -m eegfm_bench.runs.plan.paper --config <paper> [--launcher slurm] [--workers N]`` — :func:`run_paper`: every
  member in order, each as its own process (a rerun skips what every command already finished).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Sequence

import yaml

from eegfm_bench.config import ConfigError, close_matches, command_parser, load_typed, typed
from eegfm_bench.data.sources import DataNotFoundError
from eegfm_bench.data.tasks import DeclaredTask, get_task
from eegfm_bench.models.checkpoints import CheckpointError, resolve
from eegfm_bench.config.audit import AuditConfig
from eegfm_bench.runs.cv.cells import run_check, load_config
from eegfm_bench.runs.controls.config import load_config as load_controls
from eegfm_bench.runs.interpret.config import load_interpret_config
from eegfm_bench.runs.sweep.config import load_sweep_config
from eegfm_bench.runs.cv.truncation import depth_configs
from eegfm_bench.config.paper import PaperMember, PaperConfig
from eegfm_bench.config.paper import ProvenanceData, ProvenanceSplit, ProvenanceEncoder, ProvenanceRunConfig

COMMANDS = ("cv", "sweep", "probe", "attribute", "controls", "truncation", "provenance")
"""Member commands; the first five are ``eegfm-bench`` commands with a ``launcher:`` section."""

LAUNCHED = ("cv", "sweep", "probe", "attribute", "controls")
"""Members whose units run through ``--launcher`` / ``--workers``; the other two run in one process."""


def paper_parser():
    return command_parser("eegfm-bench paper", PaperConfig, trainer=False, description=PaperConfig.__doc__)


def is_paper_config(path) -> bool:
    """Whether ``path`` is a paper file (a YAML mapping with ``paper:`` and ``members:``), not a command's config."""
    p = Path(str(path))
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        return False
    raw = yaml.safe_load(p.read_text()) or {}
    return isinstance(raw, dict) and "members" in raw and "paper" in raw


def load_paper(path, members: Sequence[str] | None = None) -> PaperConfig:
    """Read a paper file: member config paths resolved next to it, names, commands and ``after`` checked.

    Parameters
    ----------
    path : str or Path
    members : sequence of str, optional
        Keep only these members (in the file's order).

    Returns
    -------
    PaperConfig
        The typed paper file, frozen; ``members[i].config`` are paths a process started in the working directory opens,
        ``throughput`` likewise (or None); ``path`` is the paper file.

    Raises
    ------
    ConfigError
        Unknown keys, a missing config file, a repeated name, ``after`` naming a later or unknown member, ``args``
        on a truncation / provenance member, an unknown member in ``members``.
    """
    cfg = load_typed(paper_parser(), PaperConfig, str(path))
    base = Path(str(path)).parent
    seen: list[str] = []
    resolved: list[PaperMember] = []
    for m in cfg.members:
        where = f"{path}: member {m.name!r}"
        if m.name in seen:
            raise ConfigError(f"{where} is listed twice; fix: give every member its own name")
        for a in m.after:
            if a not in seen:
                raise ConfigError(f"{where}: after {a!r} is not an earlier member; fix: list {a!r} before it")
        if m.command in ("truncation", "provenance") and (m.args or len(m.config) != 1):
            raise ConfigError(f"{where}: a {m.command} member takes one config file and no args; fix: put the "
                              "settings in that file")
        paths = [str(base / c) for c in m.config]
        for c in paths:
            if not Path(c).is_file():
                raise ConfigError(f"{where}: config {c} does not exist; fix: the paths are relative to {base}")
        resolved.append(replace(m, config=paths))
        seen.append(m.name)
    if members:
        bad = [n for n in members if n not in seen]
        if bad:
            raise ConfigError(f"{path}: no member {bad[0]!r}.{close_matches(bad[0], seen)} Members: {', '.join(seen)}")
        resolved = [m for m in resolved if m.name in set(members)]
    return replace(cfg, members=resolved, path=str(path),
                   throughput=str(base / cfg.throughput) if cfg.throughput else None)


def member_overrides(member: PaperMember, launcher_args: Sequence[str] = ()) -> list[str]:
    """The member's dotted overrides as a command's ``args``: its further config files, its ``args``, then the
    launcher's (``--launcher.kind slurm``) where the command has a launcher."""
    more = [x for c in member.config[1:] for x in ("--config", c)]
    return more + list(member.args) + (list(launcher_args) if member.command in LAUNCHED else [])


def load_provenance_config(path: str | os.PathLike) -> ProvenanceRunConfig:
    """A provenance member's file, typed (every section and key checked, defaults as the script's).

    Raises
    ------
    ConfigError
        A missing section or key, an unknown key (with close matches), an audit setting
        :class:`~eegfm_bench.config.audit.AuditConfig` refuses.
    """
    raw = yaml.safe_load(Path(path).read_text()) or {}
    fix = "see configs/experiment/provenance_eegmat.yaml"
    missing = sorted({"task", "out_dir", "data", "split", "encoder", "audit"} - set(raw))
    if missing:
        raise ConfigError(f"{path}: missing sections {missing}; fix: {fix}")
    for key, schema in (("", ProvenanceRunConfig), ("data", ProvenanceData), ("split", ProvenanceSplit),
                        ("encoder", ProvenanceEncoder)):
        values = raw[key] if key else raw
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: `{key}` is not a mapping; fix: {fix}")
        names = {f.name for f in fields(schema)}
        need = sorted(f.name for f in fields(schema) if f.default is MISSING and f.default_factory is MISSING)
        where = f"{key}." if key else ""
        extra = sorted(set(values) - names)
        if extra:
            raise ConfigError(f"{path}: unknown key {where}{extra[0]}.{close_matches(extra[0], names)} fix: correct "
                              "or remove it")
        for k in need:
            if k not in values:
                raise ConfigError(f"{path}: {where}{k} is required; fix: {fix}")
    try:
        audit = AuditConfig.from_dict(raw["audit"])
    except ValueError as err:
        raise ConfigError(f"{path}: audit: {err}") from None
    cfg = typed(ProvenanceRunConfig, {**raw, "audit": audit})
    return replace(cfg, resolved_task=get_task(cfg.task))  # the member's one resolution of its task


def member_config(member: PaperMember, launcher_args: Sequence[str] = ()):
    """A member's resolved config, read by its command's own loader (no data read, no result folder needed).

    Returns
    -------
    CVConfig, SweepConfig, InterpretConfig or ControlsConfig (typed, frozen); a list of (depth, CVConfig)
        for a truncation member; a :class:`ProvenanceRunConfig` for a provenance member (its script reads the file).

    Raises
    ------
    ConfigError
        From the command's loader.
    """
    src, over = member.config[0], member_overrides(member, launcher_args)
    cmd = member.command
    if cmd == "cv":
        return load_config(src, over)
    if cmd == "sweep":
        return load_sweep_config(src, over)
    if cmd in ("probe", "attribute"):
        return load_interpret_config(src, over)
    if cmd == "controls":
        return load_controls(src, over)
    if cmd == "truncation":
        return [(k, load_config(c)) for k, c in depth_configs(src)]
    return load_provenance_config(src)


def member_argv(member: PaperMember, launcher_args: Sequence[str] = ()) -> list[str]:
    """The command line that runs a member in its own process (``launcher_args``: ``--launcher X --workers N``).

    Raises
    ------
    ConfigError
        A provenance member where ``scripts/provenance_demo.py`` is not next to the package (an installed wheel).
    """
    cmd, first = member.command, member.config[0]
    if cmd == "truncation":
        return [sys.executable, "-m", "eegfm_bench.runs.cv.truncation", "--config", first]
    if cmd == "provenance":
        script = Path(__file__).resolve().parents[2] / "scripts" / "provenance_demo.py"
        if not script.is_file():
            raise ConfigError(f"member {member.name!r}: {script} not found; fix: run from a source checkout of "
                              "eegfm_bench (the provenance runner lives in scripts/)")
        return [sys.executable, str(script), "--config", first]
    more = [x for c in member.config[1:] for x in ("--config", c)]
    return [sys.executable, "-m", "eegfm_bench.cli", cmd, "--config", first, *more, *member.args, *launcher_args]


def member_task(member: PaperMember, cfg, paper: PaperConfig):
    """The task a member reads (the :class:`~eegfm_bench.data.ingest.DeclaredTask` its loader resolved): its own,
    or (sweep / probe / attribute) that of the member it comes ``after``; None when neither."""
    if member.command in ("cv", "controls", "provenance"):
        return cfg.resolved_task
    if member.command == "truncation":
        return cfg[0][1].resolved_task
    byname = {m.name: m for m in paper.members}
    for a in member.after:
        if a in byname and byname[a].command == "cv":
            return member_config(byname[a]).resolved_task
    return None


# ------------------------------------------------------------------------------------------------------ check
def local_copy(task: DeclaredTask, data_root=None) -> str | None:
    """Whether a task's recordings are on disk: ``None`` when its first recording reads, else the reason (one line).

    Offline (``EEGFM_OFFLINE=1``) nothing is downloaded; a MOABB dataset counts as present only when its files are.
    ``task``: a resolved task (a member config's ``resolved_task``).
    """
    try:
        recs = task.recordings(data_root)
        if not recs:
            return f"no recordings of task {task.name} under the data root"
        task.source(data_root).read(recs[0])
    except (DataNotFoundError, OSError) as err:
        return str(err).strip().splitlines()[0][:240]
    return None


def local_subjects(task: DeclaredTask, data_root=None) -> int:
    """Subjects of a task's local copy (from its recordings' list; nothing is read)."""
    return len({r.subject for r in task.recordings(data_root)})


def missing_weights(ids: Sequence[str]) -> list[str]:
    """One line per pretrained id whose weights are not on disk: where to put the file and where to get it."""
    out = []
    for pid in dict.fromkeys(i for i in ids if i):
        try:
            resolve(pid, allow_hub=False)
        except CheckpointError as err:
            lines = [s.strip() for s in str(err).splitlines() if s.strip()]
            path = next((s for s in lines if s.startswith("/") or s.startswith("checkpoints")), None)
            out.append(f"weights {pid}: missing; put {path} (from https://huggingface.co/{pid}; checkpoints/README.md)"
                       if path else f"weights {pid}: {lines[0]}")
    return out


def _check_cv(cfg, say) -> None:
    """One batch of every run of a cv config (a typed :class:`~eegfm_bench.config.cv.CVConfig`) whose weights are on
    disk (the others are named, not checked), on the local copy: a k-fold split with more folds than the copy has
    subjects is checked with one fold per subject."""
    n = local_subjects(cfg.resolved_task)
    sp = cfg.split
    if sp.scheme == "kfold" and sp.group_by == "subject" and int(sp.k) > n >= 2:
        say(f"the local copy has {n} subjects: checked with k = {n} (the run keeps k = {sp.k})")
        cfg = replace(cfg, split=replace(sp, k=n))
    gaps = missing_weights([r.pretrained for r in cfg.runs])
    for line in gaps:
        say(line)
    have = [r for r in cfg.runs if not missing_weights([r.pretrained])]
    if not have:
        say("no run to check: every run needs missing weights")
        return
    run_check(replace(cfg, runs=have))


def _check_member(member: PaperMember, paper: PaperConfig, say, seen: dict) -> str:
    """Check one member; returns ``ok``, ``no local copy`` or ``config only``. ``seen`` caches each task's
    :func:`local_copy` (a MOABB dataset's offline probe alone takes its index client's retries: tens of seconds)."""
    cfg = member_config(member)
    task = member_task(member, cfg, paper)
    key = json.dumps(task.spec.to_dict() if task is not None else None, sort_keys=True, default=str)
    if task is not None and key not in seen:
        seen[key] = local_copy(task)
    why = seen.get(key)
    if why is not None:
        say(f"no local copy of its data: {why}")
        return "no local copy"
    cmd = member.command
    if cmd == "cv":
        _check_cv(cfg, say)
    elif cmd == "truncation":
        for k, c in cfg:
            say(f"depth {k}:")
            _check_cv(c, say)
    elif cmd == "controls":
        for line in missing_weights([m.pretrained for m in cfg.models]):
            say(line)
        say("config valid; the controls' encoders and data are those of a cv check (controls have no one-batch mode)")
        return "config only"
    else:
        say(f"config valid; it reads the results of {', '.join(member.after) or 'its own run'} (run them first)")
        return "config only"
    return "ok"


def check_paper(path, members: Sequence[str] | None = None) -> dict[str, str]:
    """``eegfm-bench check --config <paper file>``: every member on the data on disk (offline).

    A cv or truncation member runs one training and one validation batch of every run whose weights are present
    (:func:`~eegfm_bench.runs.cv.cells.run_check`); the others are validated (keys, values, conditions). Members
    whose dataset has no local copy are listed with the reason; missing weights are named with where to put them.
    ``EEGFM_OFFLINE`` and ``HF_HUB_OFFLINE`` default to 1 here: a check downloads nothing.

    Returns
    -------
    dict
        Member name → ``ok``, ``config only``, ``no local copy`` or ``failed: <error>``.

    Raises
    ------
    ConfigError
        From the paper file.
    """
    os.environ.setdefault("EEGFM_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    paper = load_paper(path, members)
    print(f"# check: {paper.title} ({len(paper.members)} members)")
    out: dict[str, str] = {}
    seen: dict = {}
    for m in paper.members:
        print(f"\n## {m.name} ({m.command})")

        def say(line: str) -> None:
            print(f"- {line}")

        try:
            out[m.name] = _check_member(m, paper, say, seen)
        except Exception as err:  # noqa: BLE001  (one member's failure is reported; the others are still checked)
            out[m.name] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
            say(out[m.name])
    print("\n| member | check |\n|---|---|")
    for k, v in out.items():
        print(f"| {k} | {v} |")
    for g in paper.not_runnable:
        print(f"- not runnable here: {g.what}: {g.why}")
    return out


# -------------------------------------------------------------------------------------------------------- run
def run_paper(path, launcher_args: Sequence[str] = (), members: Sequence[str] | None = None,
              dry_run: bool = False) -> int:
    """Run every member of a paper in order, each as its own process; stop at the first that fails.

    Each command skips what it already finished (config hashes), so rerunning after a failure or an interruption
    resumes where it stopped. ``launcher_args`` (``--launcher slurm --workers 8``) go to every member with a
    launcher; truncation and provenance members run in this machine's process.

    Returns
    -------
    int
        0, or the exit code of the first member that failed.
    """
    paper = load_paper(path, members)
    for m in paper.members:
        argv = member_argv(m, launcher_args if m.command in LAUNCHED else ())
        print(f"# {m.name}: {' '.join(argv[1:] if argv[1] == '-m' else argv)}", flush=True)
        if dry_run:
            continue
        rc = subprocess.call(argv)
        if rc != 0:
            print(f"member {m.name} failed (exit {rc}); fix it and rerun: finished members are skipped",
                  file=sys.stderr)
            return rc
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eegfm_bench.runs.plan.paper",
                                description="Run a paper's members in order (configs/paper/<paper>.yaml).")
    p.add_argument("--config", required=True, help="the paper file")
    p.add_argument("--members", nargs="+", help="only these members")
    p.add_argument("--launcher", choices=["none", "local", "slurm"], help="launcher of every member that has one")
    p.add_argument("--workers", type=int, help="local workers (with --launcher local)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = p.parse_args(argv)
    launch = (["--launcher", a.launcher] if a.launcher else []) + (["--workers", str(a.workers)] if a.workers else [])
    return run_paper(a.config, launch, a.members, a.dry_run)


__all__ = ["load_paper", "is_paper_config", "member_config", "member_argv",
           "member_overrides", "check_paper", "run_paper", "local_copy", "missing_weights", "COMMANDS", "LAUNCHED"]

if __name__ == "__main__":
    sys.exit(main())
