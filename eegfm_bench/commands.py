"""The ``eegfm-bench`` commands' handlers: what each subcommand runs and prints, once :mod:`eegfm_bench.cli` has
parsed its command line.

:mod:`eegfm_bench.cli` imports this module only after parsing (its one lazy import), so that ``eegfm-bench --help``
and a mistyped command answer without loading Lightning, torch, MNE and the command modules behind them; here every
import is at the top. Each handler is ``handler(parser, args, extra) -> exit code``: :data:`HANDLERS` for the
commands without a typed config, :func:`config_command` for those of :data:`eegfm_bench.cli.COMMANDS`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import yaml
from lightning.pytorch.cli import LightningCLI

from eegfm_bench.config import ConfigError, parse_config, plain_help, typed
from eegfm_bench.data.cache import run_cache
from eegfm_bench.data.datamodule import EEGDataModule
from eegfm_bench.data.tasks import tasks_table
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interpret.lrp import adapter_lrp_problem
from eegfm_bench.models.catalogue import catalogue_table, heads_table
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.models.user import user_model_config, check_user_model
from eegfm_bench.config.user_model import UserModelConfig
from eegfm_bench.reports.cv import to_markdown
from eegfm_bench.reports.robustness import write_robustness_report
from eegfm_bench.reports.sweep import table_markdown
from eegfm_bench.runs.interpret.attribute import run_attribution
from eegfm_bench.runs.audit import run_audit, audit_parser, load_audit_config
from eegfm_bench.runs.cv.cells import run_check, load_config
from eegfm_bench.config.cv import cv_parser
from eegfm_bench.config.launch import launcher_overrides
from eegfm_bench.runs.cv.confound import run_confound
from eegfm_bench.reports.confound import VERDICT_LEGEND
from eegfm_bench.runs.controls.command import run_controls
from eegfm_bench.config.controls import controls_parser
from eegfm_bench.runs.cv.command import ingest_from_config, run_cv
from eegfm_bench.runs.launch.ingest import run_ingest
from eegfm_bench.config.interpret import interpret_parser
from eegfm_bench.runs.plan.paper import check_paper, is_paper_config
from eegfm_bench.runs.plan.command import run_plan
from eegfm_bench.runs.plan.text import plan_markdown
from eegfm_bench.runs.plan.paper_plan import plan_paper, plan_paper_markdown
from eegfm_bench.runs.interpret.probe import run_probes
from eegfm_bench.reports.page import refresh
from eegfm_bench.runs.sweep.command import run_sweep
from eegfm_bench.config.sweep import sweep_parser
from eegfm_bench.runs.cv.feature_stage import features_from_config


def lightning_cli(args: list[str]) -> None:
    os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")


    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("model.backbone", "data.backbone")
            parser.link_arguments("data.ch_names", "model.ch_names", apply_on="instantiate")
            parser.link_arguments("data.n_times", "model.n_times", apply_on="instantiate")
            parser.link_arguments("data.n_classes", "model.n_classes", apply_on="instantiate")
            parser.link_arguments("data.class_weights", "model.class_weights", apply_on="instantiate")

    CLI(FMClassifier, EEGDataModule, args=args, save_config_kwargs={"overwrite": True})


def _print_models() -> None:
    print(catalogue_table())
    print("\nHeads (a run's `heads:`; plug-ins through the `eegfm_bench.heads` entry point, docs/guide/extending.md):\n")
    print(heads_table())


def _print_user_models(configs: list[str], extra: list[str]) -> None:
    """The user models of a cv config: declaration and the dry run's shapes (eegfm_bench.models.user)."""
    cfg = load_config(configs[0], [x for c in configs[1:] for x in ("--config", c)] + list(extra))
    print("| user model | class_path | tokens | blocks | channels | sfreq (Hz) | window (s) | unit | n_tokens × d_model "
          "(19 ch) | blocks found | parameters | LoRA targets | pretrained | attribution |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for name, spec in (cfg.user_models or {}).items():
        info = check_user_model(name, spec, checks={"attnlrp": adapter_lrp_problem})
        attr = "G×I, AttnLRP" if info["attnlrp"] == "ok" else "G×I (no AttnLRP, see below)"
        if info["attnlrp"] != "ok":
            notes.append(f"- {name}: AttnLRP cannot run: {info['attnlrp']}")
        um = typed(UserModelConfig, user_model_config(dict(spec), name))
        print(f"| {name} | {um.class_path} | {um.tokens} | {um.blocks or '—'} | "
              f"{um.channels.kind}{' (variable)' if um.channels.variable else ''} | {um.sfreq:g} | "
              f"{um.window_s:g} | {um.unit} | {info['n_tokens']} × {info['d_model']} | "
              f"{info['n_blocks']} | {info['n_params']:,} | {', '.join(um.lora_targets) or '—'} | "
              f"{um.pretrained.path if um.pretrained else 'no (init=random)'} | {attr} |")
    if notes:
        print("\n" + "\n".join(notes))
    if not cfg.user_models:
        print(f"(no user_models in {configs[0]})")


def parsers() -> dict:
    """Command → its typed config parser (for ``--keys`` and ``--print-config``)."""
    return {"cv": cv_parser, "check": cv_parser, "sweep": sweep_parser, "probe": lambda: interpret_parser("eegfm-bench probe"),
            "attribute": lambda: interpret_parser("eegfm-bench attribute"), "controls": controls_parser,
            "audit": audit_parser}


# ============================================================================= commands without a typed config
def _confound(p, a, extra) -> int:
    """The confound variations of a finished cv run (its config.yaml), with the command line's overrides."""
    run_confound(a.cv, variations=a.variations, offset_s=a.offset_s, band=a.band, progress=not a.no_progress,
                  wait=not a.no_wait)
    return 0


def _models(p, a, extra) -> int:
    if a.config:
        _print_user_models(a.config, extra)
    else:
        _print_models()
    return 0


def _tasks(p, a, extra) -> int:
    """The registered tasks (:func:`~eegfm_bench.data.tasks.tasks_table`; the braindecode presets' options are
    checked against braindecode's dataset classes, which loads torch)."""
    print(tasks_table())
    return 0


def _cache(p, a, extra) -> int:
    return run_cache(a.cache_dir, prune=a.prune, older_than_days=a.older_than, partial_hours=a.partial_hours,
                      yes=a.yes)


def _robustness(p, a, extra) -> int:
    path = write_robustness_report(a.sweeps, a.out, reference=None if a.reference == "none" else a.reference,
                                   alpha=a.alpha, conditions=a.conditions or None)
    print(path.read_text())
    print(f"written: {path}")
    return 0


def _launcher_overrides(p, extra: list[str]) -> dict:
    """``--launcher.<key> VALUE`` pairs (``ingest --task``, which has no config) as a ``launcher:`` mapping; each
    value read as YAML (``--launcher.slurm.cpus_per_task 4``)."""
    out: dict = {}
    it = iter(extra)
    for k in it:
        v = next(it, None)
        if not k.startswith("--launcher.") or v is None:
            p.error(f"unrecognized arguments: {' '.join(extra)} (ingest --task takes --launcher.<key> VALUE pairs)")
        *path, last = k[len("--launcher."):].split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(v)
    return out


def _ingest(p, a, extra) -> int:
    if bool(a.config) == bool(a.task):
        p.error("ingest: give --task <name or YAML> (with --model) or --config <cv config>, one of the two")
    if a.shards is not None and a.shards < 1:
        raise ConfigError(f"--shards {a.shards}; fix: a number of jobs >= 1")
    if a.config:
        overrides = [x for c in a.config[1:] for x in ("--config", c)] + extra + _launcher_args(a)
        if a.n_jobs is not None:
            overrides += ["--data.n_jobs", str(a.n_jobs)]
        path = ingest_from_config(a.config[0], overrides, progress=not a.no_progress, shards=a.shards)
    else:
        lc = _launcher_overrides(p, extra)
        args = _launcher_args(a)
        for k, v in zip(args[::2], args[1::2]):
            lc[k.split(".")[-1]] = yaml.safe_load(v)
        path = run_ingest(a.task, a.model or ["eegnet"], data_root=a.data_root, cache_dir=a.cache_dir,
                          subjects=a.subjects, out_dir=a.out, progress=not a.no_progress, n_jobs=a.n_jobs,
                          launcher=lc or None, shards=a.shards)
    if path is not None:
        print(f"ingest report: {path}")
    return 0


def _features(p, a, extra) -> int:
    """``features --config``: the feature stage of a cv config (:mod:`eegfm_bench.runs.cv.feature_stage`)."""
    if a.shards is not None and a.shards < 1:
        raise ConfigError(f"--shards {a.shards}; fix: a number of jobs >= 1")
    overrides = [x for c in a.config[1:] for x in ("--config", c)] + extra + _launcher_args(a)
    features_from_config(a.config[0], overrides, progress=not a.no_progress, shards=a.shards)
    return 0


def _plan(p, a, extra) -> int:
    """A cv config's plan, or every member's of a paper file (configs/paper/), with cv's launcher options."""

    if is_paper_config(a.config[0]):  # a paper: every member planned (runs/plan/paper_plan.py)
        plan = plan_paper(a.config[0], list(extra) + _launcher_args(a), bench=a.bench, measure=not a.no_measure,
                          members=a.members)
        print(json.dumps(plan, indent=1, default=str) if a.json else plan_paper_markdown(plan))
        return 0
    more = [x for c in a.config[1:] for x in ("--config", c)]
    plan = run_plan(a.config[0], more + list(extra) + _launcher_args(a), bench=a.bench, measure=not a.no_measure)
    print(json.dumps(plan, indent=1, default=str) if a.json else plan_markdown(plan))
    return 0


HANDLERS = {"plan": _plan, "confound": _confound, "models": _models, "tasks": _tasks,
             "ingest": _ingest, "features": _features, "cache": _cache, "robustness": _robustness}
"""The commands without a typed config, each ``handler(parser, args, extra)``."""


def config_command(p, a, extra) -> int:
    """A command of :data:`COMMANDS`: ``--keys``, ``--print-config``, or the run itself (:func:`_run`)."""
    if extra and any(not x.startswith("--") for x in extra[:1]):
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if a.keys:
        print(plain_help(parsers()[a.cmd]()))
        return 0
    if not a.config:
        p.error(f"{a.cmd}: --config is required (see configs/experiment/; --keys lists every key)")
    source, overrides = a.config[0], [x for c in a.config[1:] for x in ("--config", c)] + extra
    if a.print_config:

        print(yaml.safe_dump(parse_config(parsers()[a.cmd](), source, overrides), sort_keys=False, allow_unicode=True))
        return 0
    return _run(a, source, overrides)


def _launcher_args(a) -> list[str]:
    """``--launcher X --workers N`` as the dotted overrides of the config's ``launcher:`` section
    (:func:`~eegfm_bench.config.launch.launcher_overrides`), printing its note on ``--workers`` alone.

    Raises
    ------
    ConfigError
        ``--workers`` below 1.
    """
    args, note = launcher_overrides(getattr(a, "launcher", None), getattr(a, "workers", None))
    if note:
        print(note)
    return args


def _run(a, source, overrides) -> int:
    """Run a command of :data:`COMMANDS` on its config and print its result (rank 0 only)."""
    runner = {"cv": _run_cv, "check": _run_check, "sweep": _run_sweep, "probe": _run_probe,
              "attribute": _run_attribute, "controls": _run_controls, "audit": _run_audit}[a.cmd]
    return runner(a, source, overrides, progress=not a.no_progress) or 0


def _run_cv(a, source, overrides, *, progress: bool) -> None:
    table = run_cv(source, args=list(overrides) + _launcher_args(a), progress=progress, force=a.force,
                   wait=not a.no_wait)
    if is_global_zero():
        print(to_markdown(table))
        side = table.attrs.get("side_by_side")
        if side is not None and not side.empty:
            conf = table.attrs["confound"]
            print("\nheadline and confound-checked balanced accuracy (the task's default confound variations; "
                  "confound: off turns them off):\n")
            print(to_markdown(side))
            print("\n" + VERDICT_LEGEND.format(chance=f"{conf['chance'].iloc[0]:.3f}"))


def _run_check(a, source, overrides, *, progress: bool) -> int:
    if is_paper_config(source):  # a paper file: every member on the staged data (runs/plan/paper.py)
        return 1 if any(v.startswith("failed") for v in check_paper(source).values()) else 0
    run_check(source, overrides, progress=progress)
    return 0


def _run_sweep(a, source, overrides, *, progress: bool) -> None:

    table = run_sweep(source, args=list(overrides) + _launcher_args(a), progress=progress, wait=not a.no_wait)
    if is_global_zero():
        print(table_markdown(table, pd.DataFrame(table.attrs["marks"])) if not table.empty else "(no results)")
        print(f"report: {table.attrs['report']}")


def _run_probe(a, source, overrides, *, progress: bool) -> None:
    out = run_probes(source, args=list(overrides) + _launcher_args(a), progress=progress, wait=not a.no_wait)
    if is_global_zero():
        for k, v in out.items():
            print(f"{k}: {v}")


def _run_attribute(a, source, overrides, *, progress: bool) -> None:
    out = run_attribution(source, args=list(overrides) + _launcher_args(a), progress=progress, wait=not a.no_wait)
    if is_global_zero():
        print(out.pop("checks").read_text())
        out.pop("checks_table")
        for k, v in out.items():
            print(f"{k}: {v}")


def _run_controls(a, source, overrides, *, progress: bool) -> None:
    out = run_controls(source, args=list(overrides) + _launcher_args(a), progress=progress, wait=not a.no_wait)
    if is_global_zero():
        print(Path(out["gates_md"]).read_text())
        for k in ("gates_json", "gates_md", "report_md", "report_json", "results"):
            print(f"{k}: {out[k]}")


def _run_audit(a, source, overrides, *, progress: bool) -> None:
    cmd, _ = load_audit_config(source, overrides)
    rep = run_audit(source, overrides, wait=not a.no_wait)
    print(rep.to_markdown())
    stem = Path(cmd.out_dir) / f"audit_{rep.config_hash[:16]}"
    print(f"{'resumed (not recomputed)' if rep.resumed else 'wrote'}: {stem}.json, {stem}.md")
    refresh([cmd.out_dir])
