"""``eegfm-bench`` command line.

Subcommands
-----------
fit | validate | test   LightningCLI over :class:`FMClassifier` and :class:`EEGDataModule` (``--config`` YAML).
cv --config X.yaml      every fold × model × head × regime of one task; result rows + summary table.
                        Every command with --config takes dotted overrides (``--trainer.devices 2``), ``--keys``
                        (every key, type and default) and ``--print-config`` (the resolved config).
models                  the registered backbones with their preprocessing and channel contracts.
tasks                   the registered tasks.
check --config X.yaml   one batch through every configured run before a long cv run.
sweep --config X.yaml   test-time perturbations (paper 003 App. D) on every per-fold checkpoint of a cv run.
controls --config X.yaml  negative controls of paper 001 (comparators, random init, permutation, identity, gates).
audit --config X.yaml   PhysioTRACE provenance audit (paper 000) over an embeddings npz; resumable.
probe --config X.yaml   block-wise linear probes + per-block attention topomaps on a cv run's checkpoints (App. I.4-I.5).
attribute --config X.yaml  Gradient×Input / AttnLRP topomaps + sanity checks on a cv run's checkpoints (App. I.1-I.2).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from eegfm_bench.config import ConfigError, parse_config
from eegfm_bench.errors import is_user_error

# The command modules (and Lightning, numpy, pandas, yaml behind them) are imported inside the handlers below, each
# marked `# reason: lazy start-up`: `eegfm-bench --help` and a mistyped command answer without loading them.


def _lightning_cli(args: list[str]) -> None:
    os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
    from lightning.pytorch.cli import LightningCLI  # reason: lazy start-up (Lightning is heavy)

    from eegfm_bench.data.datamodule import EEGDataModule  # reason: lazy start-up
    from eegfm_bench.models.module import FMClassifier  # reason: lazy start-up

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("model.backbone", "data.backbone")
            parser.link_arguments("data.ch_names", "model.ch_names", apply_on="instantiate")
            parser.link_arguments("data.n_times", "model.n_times", apply_on="instantiate")
            parser.link_arguments("data.n_classes", "model.n_classes", apply_on="instantiate")
            parser.link_arguments("data.class_weights", "model.class_weights", apply_on="instantiate")

    CLI(FMClassifier, EEGDataModule, args=args, save_config_kwargs={"overwrite": True})


def _print_models() -> None:
    from eegfm_bench.models.backbones import BACKBONES  # reason: lazy start-up

    try:
        from eegfm_bench.models.catalogue import catalogue_table  # reason: lazy start-up; the table without it

        print(catalogue_table())
        return
    except ImportError:
        pass
    print("| model | sfreq (Hz) | band (Hz) | unit | window (s) | FM | source |")
    print("|---|---|---|---|---|---|---|")
    for name in BACKBONES.names():
        cls = BACKBONES.get(name)
        p = cls.preprocessing
        print(f"| {name} | {p.sfreq:g} | {p.l_freq}–{p.h_freq} | {p.unit} | {p.window_s:g} | "
              f"{'yes' if cls.is_foundation_model else 'no (supervised baseline)'} | {p.source} |")


def _print_user_models(configs: list[str], extra: list[str]) -> None:
    """The user models of a cv config: declaration and the dry run's shapes (eegfm_bench.models.user)."""
    from eegfm_bench.interpret.lrp import adapter_lrp_problem  # reason: lazy start-up
    from eegfm_bench.models.user import check_user_model  # reason: lazy start-up
    from eegfm_bench.runs.cells import load_config  # reason: lazy start-up

    cfg = load_config(configs[0], [x for c in configs[1:] for x in ("--config", c)] + list(extra))
    print("| user model | class_path | tokens | blocks | channels | sfreq (Hz) | window (s) | unit | n_tokens × d_model "
          "(19 ch) | blocks found | parameters | LoRA targets | pretrained | attribution |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for name, spec in (cfg.get("user_models") or {}).items():
        info = check_user_model(name, spec, checks={"attnlrp": adapter_lrp_problem})
        attr = "G×I, AttnLRP" if info["attnlrp"] == "ok" else "G×I (no AttnLRP, see below)"
        if info["attnlrp"] != "ok":
            notes.append(f"- {name}: AttnLRP cannot run: {info['attnlrp']}")
        ch = spec.get("channels") or {}
        pre = spec.get("pretrained") or {}
        print(f"| {name} | {spec['class_path']} | {spec.get('tokens', 'output')} | {spec.get('blocks') or '—'} | "
              f"{ch.get('kind', 'any')}{' (variable)' if ch.get('variable') else ''} | {spec.get('sfreq', 128.0):g} | "
              f"{spec.get('window_s', 4.0):g} | {spec.get('unit', 'µV')} | {info['n_tokens']} × {info['d_model']} | "
              f"{info['n_blocks']} | {info['n_params']:,} | {', '.join(spec.get('lora_targets') or []) or '—'} | "
              f"{pre.get('path', 'no (init=random)')} | {attr} |")
    if notes:
        print("\n" + "\n".join(notes))
    if not cfg.get("user_models"):
        print(f"(no user_models in {configs[0]})")


def _print_tasks() -> None:
    from eegfm_bench.data.sources import resolve_data_root  # reason: lazy start-up
    from eegfm_bench.data.tasks import PRESET_DIR, get_task, preset_names  # reason: lazy start-up

    root = resolve_data_root()
    print(f"Registered tasks: the presets in {PRESET_DIR} (also configs/data/). `local copy` looks for each "
          f"preset's root under the data root {root}; point `task: {{preset: <name>, root: /path}}` elsewhere.\n")
    print("| task | source | classes | windows | mains (Hz) | local copy | description |")
    print("|---|---|---|---|---|---|---|")
    for name in preset_names():
        t = get_task(name)
        s, w = t.spec, t.spec["windows"]
        win = (f"events, {w['tmin']:g} s from onset" if w["mode"] == "events" else
               "fixed" + (f", stride {w['stride_s']:g} s" if w["stride_s"] else ""))
        if s.get("window_s"):
            win += f", {s['window_s']:g} s"
        print(f"| {name} | {s['source']} | {', '.join(t.class_names) or '(from the dataset)'} | {win} | "
              f"{'–' if t.line_freq is None else f'{t.line_freq:g}'} | {_local_copy(t, root)} | {t.description} |")


def _local_copy(t, root: Path) -> str:
    """Whether a task's data look present locally, without reading them (yes / no / what is missing)."""
    s = t.spec
    if s["source"] == "moabb":
        return "MOABB's own folder (MNE_DATA); not checked"
    where = Path(s["root"] or ".")
    where = where if where.is_absolute() else root / where
    if not where.exists():
        return "no"
    if s["source"] == "eegmmidb":
        from eegfm_bench.data.sources.eegmmidb import eegmmidb_dir, eegmmidb_file  # reason: lazy start-up

        base = eegmmidb_dir(where)
        runs = [int(r) for r in s["eegmmidb"]["runs"]]
        subs = sorted(int(p.name[1:]) for p in (base / "MNE-eegbci-data/files/eegmmidb/1.0.0").glob("S[0-9][0-9][0-9]"))
        full = [x for x in subs if all(eegmmidb_file(base, x, r).is_file() for r in runs)]
        return f"yes ({len(full)} subjects with runs {runs})" if full else f"no subject has runs {runs}"
    return "yes"


def _quiet_third_party_warnings() -> None:
    """Hide deprecation chatter from dependencies (braindecode's montage names, Lightning's pytree) in CLI output."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"braindecode\..*")
    warnings.filterwarnings("ignore", message=r".*Montage name 'standard_10(20|05)' is deprecated.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    warnings.filterwarnings("ignore", message=r".*inplace keyword in DataFrame.set_index.*")


def _is_user_error(err: BaseException) -> bool:
    """An error about the user's input (:func:`eegfm_bench.errors.is_user_error`): its message names the fix."""
    return is_user_error(err)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``eegfm-bench`` console script.

    Called without ``argv`` (the console script), an error about the user's input — a config key, a name, missing
    data, a channel contract; any exception class defined in ``eegfm_bench`` — is printed as one
    ``eegfm-bench <command>: <Error>: <message>`` block on stderr and the exit code is 2; set
    ``EEGFM_TRACEBACK=1`` for the full traceback. Called with ``argv`` (from Python or tests) it raises.
    """
    # bitsandbytes (imported by peft) logs a CPU-kernel notice on every command; it is not about the user's run
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    if argv is not None:
        return _main(list(argv))
    argv = sys.argv[1:]
    try:
        return _main(list(argv))
    except Exception as err:  # noqa: BLE001  (re-raised unless it is a user error)
        if not _is_user_error(err) or os.environ.get("EEGFM_TRACEBACK"):
            raise
        cmd = argv[0] if argv else ""
        msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        print(f"eegfm-bench {cmd}: {type(err).__name__}: {msg}\n(EEGFM_TRACEBACK=1 shows the traceback)",
              file=sys.stderr)
        return 2


def _parsers() -> dict:
    """Command → its typed config parser (for ``--keys`` and ``--print-config``)."""
    from eegfm_bench.runs.interpret_config import interpret_parser  # reason: lazy start-up
    from eegfm_bench.runs.audit import audit_parser  # reason: lazy start-up
    from eegfm_bench.runs.controls import controls_parser  # reason: lazy start-up
    from eegfm_bench.runs.cells import cv_parser  # reason: lazy start-up
    from eegfm_bench.runs.sweep import sweep_parser  # reason: lazy start-up

    return {"cv": cv_parser, "check": cv_parser, "sweep": sweep_parser, "probe": lambda: interpret_parser("eegfm-bench probe"),
            "attribute": lambda: interpret_parser("eegfm-bench attribute"), "controls": controls_parser,
            "audit": audit_parser}


COMMANDS = {
    "cv": "cross-validate models × heads × regimes on one task",
    "check": "one batch through every run of a cv config (a Trainer with fast_dev_run=1)",
    "sweep": "test-time perturbation sweep over a cv run's checkpoints (paper 003 App. D)",
    "probe": "block-wise probes and attention maps over a cv run's checkpoints (paper 003 App. I.4-I.5)",
    "attribute": "attribution topomaps over a cv run's checkpoints (paper 003 App. I.1-I.2)",
    "controls": "negative-control suite and four-gate report of one task (paper 001)",
    "audit": "PhysioTRACE provenance audit over an embeddings npz (paper 000), resumable",
}
"""Commands with a typed config: ``--config`` files (repeatable) plus dotted overrides of any key."""

OVERRIDES_HELP = ("Any config key can be set on the command line after --config: --trainer.devices 2 "
                  "--trainer.strategy ddp --trainer.precision bf16-mixed --data.batch_size 32 ... ; --keys lists every "
                  "key with its type and default, --print-config prints the resolved config.")


def _main(argv: list[str]) -> int:
    """Parse ``argv`` and run its command: the Lightning commands go to LightningCLI, the commands with a typed
    config to :func:`_config_command`, the others (``plan``, ``status``, ``report``, ...) to their handler."""
    _prepare_environment()
    if argv and argv[0] in ("fit", "validate", "test", "predict"):
        _lightning_cli(argv)
        return 0
    p = argparse.ArgumentParser(prog="eegfm-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_config_commands(sub)
    pl = sub.add_parser("plan", help="a cv config's (or a paper's, configs/paper/) cells, jobs, cached backbone "
                                      "passes and device-hours, before it runs")
    pl.add_argument("--config", action="append", required=True, help="a cv config, or a paper file (configs/paper/)")
    pl.add_argument("--bench", help="throughput table: scripts/bench_backbones.py --out FILE's .json")
    pl.add_argument("--no-measure", action="store_true", help="do not measure missing models' throughput here")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.add_argument("--launcher", choices=["none", "local", "slurm"], help="plan the jobs of this launcher (as cv's)")
    pl.add_argument("--workers", type=int, help="plan this many local workers (as cv's --workers)")
    pl.add_argument("--members", nargs="+", help="a paper file's members to plan (default: all)")
    _add_result_commands(sub)
    _add_tool_commands(sub)
    for name in ("fit", "validate", "test"):
        sub.add_parser(name, help=f"LightningCLI {name} (see `eegfm-bench {name} --help`)")
    a, extra = p.parse_known_args(argv)
    if a.cmd in _HANDLERS:
        return _HANDLERS[a.cmd](p, a, extra)
    return _config_command(p, a, extra)


def _prepare_environment() -> None:
    """Quiet third-party warnings; make a relative ``EEGFM_DATA`` absolute."""
    _quiet_third_party_warnings()
    if os.environ.get("EEGFM_DATA") and not Path(os.environ["EEGFM_DATA"]).expanduser().is_absolute():
        # made absolute once, against the working directory, so workers and jobs started elsewhere read the same root
        os.environ["EEGFM_DATA"] = os.path.abspath(Path(os.environ["EEGFM_DATA"]).expanduser())


# ============================================================================================== the parsers
def _add_config_commands(sub) -> None:
    """The commands with a typed config (:data:`COMMANDS`): ``--config`` (repeatable), ``--keys``,
    ``--print-config``, and the launcher options of those that run cells."""
    for name, what in COMMANDS.items():
        sp = sub.add_parser(name, help=what, description=f"{what}. {OVERRIDES_HELP}")
        sp.add_argument("--config", action="append", help="YAML config (repeatable: later files override earlier)")
        sp.add_argument("--keys", action="store_true", help="list every config key (type, default) and exit")
        sp.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
        sp.add_argument("--no-progress", action="store_true")
        if name == "cv":
            sp.add_argument("--force", action="store_true", help="retrain cells whose rows exist for the current config")
        if name in ("cv", "sweep", "probe", "attribute", "controls"):
            sp.add_argument("--launcher", choices=["none", "local", "slurm"],
                            help="run the cells as jobs: local worker processes or SLURM (= --launcher.kind)")
            sp.add_argument("--workers", type=int, help="concurrent local workers (= --launcher.workers)")


def _add_result_commands(sub) -> None:
    """The commands over finished runs: ``status``, ``confound``, ``report``."""
    st = sub.add_parser("status", help="cells of a cv out_dir: done / running / failed / missing, and the resume command")
    st.add_argument("out_dir")
    cf = sub.add_parser("confound", help="the confound check of a finished cv: offset / band / frontal variations",
                        description="Rerun every cell of a cv run (its config.yaml) with the windows starting after "
                                    "the cue-evoked response and in a restricted band, each variation separately and "
                                    "together, on the same folds and seeds (runs/confound.py); confound.md beside "
                                    "the headline.")
    cf.add_argument("--cv", required=True, help="the cv run's out_dir")
    cf.add_argument("--variations", nargs="+", help="offset, band, offset+band, frontal (default: the config's)")
    cf.add_argument("--offset-s", type=float, help="seconds after the cue (default 1)")
    cf.add_argument("--band", type=float, nargs=2, help="lo hi in Hz (default 4 40)")
    cf.add_argument("--no-progress", action="store_true")
    rp = sub.add_parser("report", help="one HTML + Markdown page of every result under the given out_dirs",
                        description="Write report.html (self-contained: figures embedded, sortable tables) and "
                                    "report.md for the cv runs, sweeps, probes, attribution, controls and audits found "
                                    "in the folders given and below them (reports/page.py). Every command refreshes "
                                    "its experiment's page when it finishes.")
    rp.add_argument("out_dirs", nargs="+", help="out_dirs of eegfm-bench commands (the first receives the page)")
    rp.add_argument("--out", help="write the page here instead of the first out_dir")
    rp.add_argument("--title", help="the page's title")


def _add_tool_commands(sub) -> None:
    """The other commands, in their ``--help`` order: ``models``, ``tasks``, ``robustness`` (over several sweeps),
    ``ingest``, ``cache``."""
    mo = sub.add_parser("models", help="list backbones (and the user models a cv config declares)")
    mo.add_argument("--config", action="append", help="a cv config: also list its user_models (dry run of each)")
    mo.add_argument("--no-progress", action="store_true", help="accepted for symmetry with the other commands")
    sub.add_parser("tasks", help="list tasks (the presets)")
    rob = sub.add_parser("robustness", help="paper 003 Tables 10-17 + Figure 2 over the sweeps of several tasks",
                         description="Combine the sweeps of several tasks into one table per perturbation type and "
                                     "level (per-benchmark Δ, an equally weighted Average, Wilcoxon/Holm marks) and the "
                                     "degradation curves (reports/robustness.py).")
    rob.add_argument("sweeps", nargs="+", help="sweep out_dirs, one per task")
    rob.add_argument("--out", required=True, help="where robustness.md / .csv / .png go")
    rob.add_argument("--reference", default="eegnet", help="model of the ∗/∇ marks ('none' for no marks)")
    rob.add_argument("--alpha", type=float, default=0.05)
    rob.add_argument("--conditions", nargs="*", help="only these condition strings (default: every condition)")
    ing = sub.add_parser("ingest", help="read a task through the ingestion checks and write its ingest report",
                         description="Cache a task's windows under each model's preprocessing and write "
                                     "ingest_report.md / .json (what was kept, dropped, renamed, rejected, and why).")
    ing.add_argument("--config", action="append", help="a cv config: its task, data selection and every run's model")
    ing.add_argument("--task", help="a registered task, a task YAML file (instead of --config)")
    ing.add_argument("--model", action="append", help="the model(s) whose preprocessing to apply (default: eegnet)")
    ing.add_argument("--subjects", nargs="+", help="a subset of subjects")
    ing.add_argument("--data-root", help="the data root (default: EEGFM_DATA)")
    ing.add_argument("--cache-dir", help="the window cache (default: EEGFM_CACHE)")
    ing.add_argument("--out", help="write ingest_report.md / .json here (with --config: the config's out_dir)")
    ing.add_argument("--no-progress", action="store_true")
    ca = sub.add_parser("cache", help="list the window / feature cache entries; --prune removes unread ones",
                        description="Entries are keyed by content, so those of old configs or edited files are never "
                                    "served again; they stay on disk until pruned. Pruning goes by when an entry was "
                                    "last read (its LAST_USED file). Without --yes a prune only lists what it would "
                                    "delete.")
    ca.add_argument("--cache-dir", help="the cache root (default: EEGFM_CACHE or ~/.cache/eegfm_bench)")
    ca.add_argument("--prune", action="store_true", help="list (with --yes: delete) unread and unfinished entries")
    ca.add_argument("--older-than", type=float, default=30.0, metavar="DAYS",
                    help="prune entries not read for DAYS days (default 30)")
    ca.add_argument("--partial-hours", type=float, default=24.0, metavar="H",
                    help="prune unfinished builds untouched for H hours (default 24)")
    ca.add_argument("--yes", action="store_true", help="delete (without it a prune is a dry run)")


# ============================================================================= commands without a typed config
def _status(p, a, extra) -> int:
    from eegfm_bench.results import ResultStore  # reason: lazy start-up
    from eegfm_bench.reports.status import status_markdown  # reason: lazy start-up
    from eegfm_bench.runs.progress import cv_status  # reason: lazy start-up

    print(status_markdown(*cv_status(a.out_dir), unmerged=ResultStore(a.out_dir, write=False).unmerged()))
    return 0


def _confound(p, a, extra) -> int:
    """The confound variations of a finished cv run (its config.yaml), with the command line's overrides."""
    from eegfm_bench.runs.confound import confound_main  # reason: lazy start-up

    confound_main(a.cv, variations=a.variations, offset_s=a.offset_s, band=a.band, progress=not a.no_progress)
    return 0


def _report(p, a, extra) -> int:
    from eegfm_bench.reports.page import write_page  # reason: lazy start-up

    paths = write_page(a.out_dirs, a.out, title=a.title)
    print(f"report: {paths['html']}\nmarkdown: {paths['md']}")
    return 0


def _models(p, a, extra) -> int:
    if a.config:
        _print_user_models(a.config, extra)
    else:
        _print_models()
    return 0


def _tasks(p, a, extra) -> int:
    _print_tasks()
    return 0


def _cache(p, a, extra) -> int:
    from eegfm_bench.data.cache import cache_main  # reason: lazy start-up

    return cache_main(a.cache_dir, prune=a.prune, older_than_days=a.older_than, partial_hours=a.partial_hours,
                      yes=a.yes)


def _robustness(p, a, extra) -> int:
    from eegfm_bench.reports.robustness import write_robustness_report  # reason: lazy start-up

    path = write_robustness_report(a.sweeps, a.out, reference=None if a.reference == "none" else a.reference,
                                   alpha=a.alpha, conditions=a.conditions or None)
    print(path.read_text())
    print(f"written: {path}")
    return 0


def _ingest(p, a, extra) -> int:
    from eegfm_bench.runs.ingest import ingest_from_config, run_ingest  # reason: lazy start-up

    if bool(a.config) == bool(a.task):
        p.error("ingest: give --task <name or YAML> (with --model) or --config <cv config>, one of the two")
    if a.config:
        overrides = [x for c in a.config[1:] for x in ("--config", c)] + extra
        path = ingest_from_config(a.config[0], overrides, progress=not a.no_progress)
    else:
        if extra:
            p.error(f"unrecognized arguments: {' '.join(extra)}")
        path = run_ingest(a.task, a.model or ["eegnet"], data_root=a.data_root, cache_dir=a.cache_dir,
                          subjects=a.subjects, out_dir=a.out, progress=not a.no_progress)
    if path is not None:
        print(f"ingest report: {path}")
    return 0


def _plan(p, a, extra) -> int:
    """A cv config's plan, or every member's of a paper file (configs/paper/), with cv's launcher options."""
    import json  # reason: lazy start-up

    from eegfm_bench.runs.paper import is_paper_config  # reason: lazy start-up
    from eegfm_bench.runs.plan import plan_cv, plan_markdown  # reason: lazy start-up
    from eegfm_bench.runs.plan_paper import plan_paper, plan_paper_markdown  # reason: lazy start-up

    if is_paper_config(a.config[0]):  # a paper: every member planned (runs/plan_paper.py)
        plan = plan_paper(a.config[0], list(extra) + _launcher_args(a), bench=a.bench, measure=not a.no_measure,
                          members=a.members)
        print(json.dumps(plan, indent=1, default=str) if a.json else plan_paper_markdown(plan))
        return 0
    more = [x for c in a.config[1:] for x in ("--config", c)]
    plan = plan_cv(a.config[0], more + list(extra) + _launcher_args(a), bench=a.bench, measure=not a.no_measure)
    print(json.dumps(plan, indent=1, default=str) if a.json else plan_markdown(plan))
    return 0


_HANDLERS = {"plan": _plan, "status": _status, "confound": _confound, "report": _report, "models": _models, "tasks": _tasks,
             "ingest": _ingest, "cache": _cache, "robustness": _robustness}
"""The commands without a typed config, each ``handler(parser, args, extra)``."""


# ==================================================================================== commands with a config
def _config_command(p, a, extra) -> int:
    """A command of :data:`COMMANDS`: ``--keys``, ``--print-config``, or the run itself (:func:`_run`)."""
    if extra and any(not x.startswith("--") for x in extra[:1]):
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if a.keys:
        print(_parsers()[a.cmd]().format_help())
        return 0
    if not a.config:
        p.error(f"{a.cmd}: --config is required (see configs/experiment/; --keys lists every key)")
    source, overrides = a.config[0], [x for c in a.config[1:] for x in ("--config", c)] + extra
    if a.print_config:
        import yaml  # reason: lazy start-up

        print(yaml.safe_dump(parse_config(_parsers()[a.cmd](), source, overrides), sort_keys=False, allow_unicode=True))
        return 0
    return _run(a, source, overrides)


def _launcher_args(a) -> list[str]:
    """``--launcher X --workers N`` as the dotted overrides of the config's ``launcher:`` section (``--workers``
    alone means ``--launcher local``).

    Raises
    ------
    ConfigError
        ``--workers`` below 1.
    """
    launcher, workers = getattr(a, "launcher", None), getattr(a, "workers", None)
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}; fix: a number of worker processes >= 1")
    if workers is not None and launcher is None:
        print(f"--workers {workers} without --launcher: running the cells on {workers} local workers "
              "(--launcher local)")
        launcher = "local"
    return ((["--launcher.kind", launcher] if launcher else [])
            + (["--launcher.workers", str(workers)] if workers is not None else []))


def _run(a, source, overrides) -> int:
    """Run a command of :data:`COMMANDS` on its config and print its result (rank 0 only)."""
    runner = {"cv": _run_cv, "check": _run_check, "sweep": _run_sweep, "probe": _run_probe,
              "attribute": _run_attribute, "controls": _run_controls, "audit": _run_audit}[a.cmd]
    return runner(a, source, overrides, progress=not a.no_progress) or 0


def _run_cv(a, source, overrides, *, progress: bool) -> None:
    from eegfm_bench.distributed import is_global_zero  # reason: lazy start-up
    from eegfm_bench.reports.cv import to_markdown  # reason: lazy start-up
    from eegfm_bench.runs.confound import VERDICT_LEGEND  # reason: lazy start-up
    from eegfm_bench.runs.cv import run_cv  # reason: lazy start-up

    table = run_cv(source, args=list(overrides) + _launcher_args(a), progress=progress, force=a.force)
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
    from eegfm_bench.runs.cells import check_config  # reason: lazy start-up
    from eegfm_bench.runs.paper import check_paper, is_paper_config  # reason: lazy start-up

    if is_paper_config(source):  # a paper file: every member on the staged data (runs/paper.py)
        return 1 if any(v.startswith("failed") for v in check_paper(source).values()) else 0
    check_config(source, overrides)
    return 0


def _run_sweep(a, source, overrides, *, progress: bool) -> None:
    import pandas as pd  # reason: lazy start-up

    from eegfm_bench.distributed import is_global_zero  # reason: lazy start-up
    from eegfm_bench.reports.sweep import table_markdown  # reason: lazy start-up
    from eegfm_bench.runs.sweep import sweep_main  # reason: lazy start-up

    table = sweep_main(source, args=list(overrides) + _launcher_args(a), progress=progress)
    if is_global_zero():
        print(table_markdown(table, pd.DataFrame(table.attrs["marks"])) if not table.empty else "(no results)")
        print(f"report: {table.attrs['report']}")


def _run_probe(a, source, overrides, *, progress: bool) -> None:
    from eegfm_bench.distributed import is_global_zero  # reason: lazy start-up
    from eegfm_bench.runs.probe import run_probes  # reason: lazy start-up

    out = run_probes(source, args=list(overrides) + _launcher_args(a), progress=progress)
    if is_global_zero():
        for k, v in out.items():
            print(f"{k}: {v}")


def _run_attribute(a, source, overrides, *, progress: bool) -> None:
    from eegfm_bench.distributed import is_global_zero  # reason: lazy start-up
    from eegfm_bench.runs.attribute import run_attribution  # reason: lazy start-up

    out = run_attribution(source, args=list(overrides) + _launcher_args(a), progress=progress)
    if is_global_zero():
        print(out.pop("checks").read_text())
        out.pop("checks_table")
        for k, v in out.items():
            print(f"{k}: {v}")


def _run_controls(a, source, overrides, *, progress: bool) -> None:
    from eegfm_bench.distributed import is_global_zero  # reason: lazy start-up
    from eegfm_bench.runs.controls import controls_main  # reason: lazy start-up

    out = controls_main(source, args=list(overrides) + _launcher_args(a), progress=progress)
    if is_global_zero():
        print(Path(out["gates_md"]).read_text())
        for k in ("gates_json", "gates_md", "report_md", "report_json", "results"):
            print(f"{k}: {out[k]}")


def _run_audit(a, source, overrides, *, progress: bool) -> None:
    from eegfm_bench.reports.page import refresh  # reason: lazy start-up
    from eegfm_bench.runs.audit import audit_main, audit_parser  # reason: lazy start-up

    cfg = parse_config(audit_parser(), source, overrides)
    rep = audit_main(source, overrides)
    print(rep.to_markdown())
    stem = Path(cfg["out_dir"]) / f"audit_{rep.config_hash[:16]}"
    print(f"{'resumed (not recomputed)' if rep.resumed else 'wrote'}: {stem}.json, {stem}.md")
    refresh([cfg["out_dir"]])


if __name__ == "__main__":
    sys.exit(main())
