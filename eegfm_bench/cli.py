"""``eegfm-bench`` command line: :func:`main` parses the command and hands it to its handler
(:mod:`eegfm_bench.commands`; the light ones, :data:`LIGHT_COMMANDS`, to :mod:`eegfm_bench.light_commands`).

``eegfm-bench --help`` lists every command with one line each (:data:`DESCRIPTION` above the list);
docs/guide/commands.md is the guide.
"""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

from eegfm_bench.atomic import disk_full_error
from eegfm_bench.errors import is_user_error
from eegfm_bench.interrupt import EXIT_STOPPED, StopRequested, stop_on_signals, stop_requested
from eegfm_bench.locks import locked_out_dirs
from eegfm_bench.quiet import install_filters
from eegfm_bench.runtime import tune_process

# The handlers (eegfm_bench.commands, and Lightning, torch, MNE behind them) are imported once the command line is
# parsed: `eegfm-bench --help` and a mistyped command answer without loading them, and the light commands
# (LIGHT_COMMANDS: eegfm_bench.light_commands) run without them.


def _quiet_third_party_warnings() -> None:
    """Hide deprecation chatter from dependencies (braindecode's montage names, Lightning's pytree) in CLI output:
    :data:`eegfm_bench.quiet.THIRD_PARTY_WARNINGS`, the list the Python API hides too."""
    install_filters()


def _is_user_error(err: BaseException) -> bool:
    """An error about the user's input (:func:`eegfm_bench.errors.is_user_error`): its message names the fix."""
    return is_user_error(err)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``eegfm-bench`` console script.

    Called without ``argv`` (the console script), an error about the user's input — a config key, a name, missing
    data, a channel contract; any exception class defined in ``eegfm_bench`` — is printed as one
    ``eegfm-bench <command>: <Error>: <message>`` block on stderr and the exit code is 2; set
    ``EEGFM_TRACEBACK=1`` for the full traceback. A full disk or quota (``ENOSPC`` / ``EDQUOT``), wherever it arose,
    is such an error too (:class:`~eegfm_bench.atomic.DiskFullError`: the folder, the bytes needed, the fix). The
    first SIGINT (Ctrl-C) or SIGTERM stops the command at its next safe point (:mod:`eegfm_bench.interrupt`): what
    is finished is kept, one line says what and the command that resumes, and the exit code is 130. Called with
    ``argv`` (from Python or tests) it raises.
    """
    # bitsandbytes (imported by peft) logs a CPU-kernel notice on every command; it is not about the user's run
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    tune_process()  # before torch loads: keep freed memory (eegfm_bench.runtime)
    if argv is not None:
        return _main(list(argv))
    argv = sys.argv[1:]
    with stop_on_signals():  # Ctrl-C / SIGTERM: stop at the next safe point, keep what is finished, exit 130
        try:
            code = _main(list(argv))
        except (KeyboardInterrupt, SystemExit) as err:  # SystemExit: Lightning's exit after an interrupted fit
            if stop_requested() is None and not isinstance(err, StopRequested):
                raise
            return _stopped(argv, getattr(err, "kept", None))
        except Exception as err:  # noqa: BLE001  (re-raised unless it is a user error)
            err = disk_full_error(err) or err  # ENOSPC / EDQUOT wherever it arose: the folder and the fix
            if not _is_user_error(err) or os.environ.get("EEGFM_TRACEBACK"):
                raise
            cmd = argv[0] if argv else ""
            msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
            print(f"eegfm-bench {cmd}: {type(err).__name__}: {msg}\n(EEGFM_TRACEBACK=1 shows the traceback)",
                  file=sys.stderr)
            return 2
        if stop_requested() is not None:  # the signal came after the command's last safe point
            return _stopped(argv, "everything: the command had finished")
        return code


def _stopped(argv: list[str], kept: str | None) -> int:
    """The one line of a stopped command (the signal, what was kept, the command that resumes) on stderr; returns
    :data:`~eegfm_bench.interrupt.EXIT_STOPPED` (130)."""
    if kept is None:
        dirs = locked_out_dirs()
        kept = (f"what had finished in {dirs[0]} (a rerun skips it)" if dirs else
                "every cache entry that had finished (entries are published whole; a rerun skips them)")
    cmd = argv[0] if argv else ""
    print(f"eegfm-bench {cmd}: stopped by {stop_requested() or 'SIGINT'}; kept {kept}; resume: "
          f"eegfm-bench {shlex.join(argv)}", file=sys.stderr, flush=True)
    return EXIT_STOPPED


DESCRIPTION = """Fine-tune and evaluate EEG foundation models: subject-grouped cross-validation (cv), test-time
perturbation sweeps, block-wise probes, attribution maps, negative controls and the provenance audit.

The commands with a typed config (cv, check, sweep, probe, attribute, controls, audit) take dotted overrides of
any key after --config (--trainer.devices 2 --data.batch_size 32), --keys (every key with its type and default)
and --print-config (the resolved config). `eegfm-bench <command> --help` shows a command's options; `eegfm-bench models` and `eegfm-bench tasks` list the backbones, heads and
tasks; docs/guide/commands.md is the guide."""

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

LIGHT_COMMANDS = ("status", "report", "plan")
"""Commands whose handler (:mod:`eegfm_bench.light_commands`) imports no deep-learning stack (``plan``: of a finished
run; any other plan is handed to :mod:`eegfm_bench.commands`)."""

NO_WAIT_HELP = ("refuse at once (one line, exit 2) when another eegfm-bench command is writing the same out_dir, "
                "instead of waiting for it (the out_dir's lock: <out_dir>/.eegfm-bench.lock)")


def _main(argv: list[str]) -> int:
    """Parse ``argv`` and run its command: the Lightning commands go to LightningCLI, the commands with a typed
    config to :func:`_config_command`, the others (``plan``, ``status``, ``report``, ...) to their handler."""
    _prepare_environment()
    if argv and argv[0] in ("fit", "validate", "test", "predict"):
        from eegfm_bench import commands  # reason: lazy start-up (Lightning, torch and MNE load only for a command)

        commands.lightning_cli(argv)
        return 0
    p = argparse.ArgumentParser(prog="eegfm-bench", description=DESCRIPTION,
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
    if a.cmd in LIGHT_COMMANDS:
        from eegfm_bench import light_commands  # reason: lazy start-up (the store's readers load only for a command)

        code = light_commands.HANDLERS[a.cmd](p, a, extra)
        if code is not None:  # None: this command needs the whole stack after all (a plan with cells to run)
            return code
    from eegfm_bench import commands  # reason: lazy start-up (Lightning, torch and MNE load only for a command)

    if a.cmd in commands.HANDLERS:
        return commands.HANDLERS[a.cmd](p, a, extra)
    return commands.config_command(p, a, extra)


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
        if name != "check":
            sp.add_argument("--no-wait", action="store_true", help=NO_WAIT_HELP)
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
                                    "together, on the same folds and seeds (runs/cv/confound.py); confound.md beside "
                                    "the headline.")
    cf.add_argument("--cv", required=True, help="the cv run's out_dir")
    cf.add_argument("--variations", nargs="+", help="offset, band, offset+band, frontal (default: the config's)")
    cf.add_argument("--offset-s", type=float, help="seconds after the cue (default 1)")
    cf.add_argument("--band", type=float, nargs=2, help="lo hi in Hz (default 4 40)")
    cf.add_argument("--no-progress", action="store_true")
    cf.add_argument("--no-wait", action="store_true", help=NO_WAIT_HELP)
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
    ``ingest``, ``features``, ``cache``."""
    mo = sub.add_parser("models", help="list backbones and heads (and the user models a cv config declares)")
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
    ing.add_argument("--n-jobs", "--data.n_jobs", dest="n_jobs", type=int, metavar="N",
                     help="recordings read at once, one process each (data.n_jobs; default: every core the job has, "
                          "-1 too; under a launcher: each job's CPUs); the windows do not depend on it")
    ing.add_argument("--launcher", choices=["none", "local", "slurm"],
                     help="read the recordings as jobs, one per shard: local worker processes or a SLURM job array "
                          "(= --launcher.kind; the other launcher.* settings as cv's, e.g. "
                          "--launcher.slurm.partition P); this process then only assembles the window sets")
    ing.add_argument("--workers", type=int, help="concurrent local workers (= --launcher.workers)")
    ing.add_argument("--shards", type=int, metavar="N",
                     help="jobs the missing recordings are split into, as disjoint ordered slices (default: one per "
                          "job slot: --workers, or launcher.slurm.array_parallelism)")
    ing.add_argument("--no-progress", action="store_true")
    fe = sub.add_parser("features", help="extract the frozen tokens of a cv config's head-only runs once, as a stage",
                        description="Cache the frozen backbone tokens every head-only (and LP-FT probing) cell of a "
                                    "cv config reads (runs/cv/feature_stage.py); with a launcher the windows are cut "
                                    "into --shards ranges, one job each, and this process assembles the entry. "
                                    "cv under a launcher runs this stage itself before its cells.")
    fe.add_argument("--config", action="append", required=True, help="a cv config (repeatable: later files override)")
    fe.add_argument("--launcher", choices=["none", "local", "slurm"],
                    help="extract as jobs, one per window range: local worker processes or a SLURM job array "
                         "(= --launcher.kind; the other launcher.* settings as cv's)")
    fe.add_argument("--workers", type=int, help="concurrent local workers (= --launcher.workers)")
    fe.add_argument("--shards", type=int, metavar="N",
                    help="jobs each backbone's windows are split into, as contiguous ranges on batch boundaries "
                         "(default: one per job slot: --workers, or launcher.slurm.array_parallelism)")
    fe.add_argument("--no-progress", action="store_true")
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


# ==================================================================================== commands with a config
if __name__ == "__main__":
    sys.exit(main())
