"""``eegfm-bench`` command line.

Subcommands
-----------
fit | validate | test   LightningCLI over :class:`FMClassifier` and :class:`EEGDataModule` (``--config`` YAML).
cv --config X.yaml      every fold × model × head × regime of one task; result rows + summary table.
models                  the registered backbones with their preprocessing and channel contracts.
tasks                   the registered tasks.
check --config X.yaml   one batch through every configured run before a long cv run.
"""
from __future__ import annotations

import argparse
import sys


def _lightning_cli(args: list[str]) -> None:
    import os

    os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
    from lightning.pytorch.cli import LightningCLI

    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.models.module import FMClassifier

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("model.backbone", "data.backbone")
            parser.link_arguments("data.ch_names", "model.ch_names", apply_on="instantiate")
            parser.link_arguments("data.n_times", "model.n_times", apply_on="instantiate")
            parser.link_arguments("data.n_classes", "model.n_classes", apply_on="instantiate")
            parser.link_arguments("data.class_weights", "model.class_weights", apply_on="instantiate")

    CLI(FMClassifier, EEGDataModule, args=args, save_config_kwargs={"overwrite": True})


def _print_models() -> None:
    import eegfm_bench.models.backbones  # noqa: F401
    from eegfm_bench.models.base import BACKBONES

    try:
        from eegfm_bench.models.catalogue import catalogue_table

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


def _print_tasks() -> None:
    from eegfm_bench.data.tasks import TASKS

    print("| task | dataset | classes | mains (Hz) | description |")
    print("|---|---|---|---|---|")
    for name in TASKS.names():
        t = TASKS.get(name)
        print(f"| {name} | {t.dataset} | {', '.join(t.class_names)} | {t.line_freq:g} | {t.description} |")


def _quiet_third_party_warnings() -> None:
    """Hide deprecation chatter from dependencies (braindecode's montage names, Lightning's pytree) in CLI output."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"braindecode\..*")
    warnings.filterwarnings("ignore", message=r".*Montage name 'standard_10(20|05)' is deprecated.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    warnings.filterwarnings("ignore", message=r".*inplace keyword in DataFrame.set_index.*")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``eegfm-bench`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _quiet_third_party_warnings()
    if argv and argv[0] in ("fit", "validate", "test", "predict"):
        _lightning_cli(argv)
        return 0
    p = argparse.ArgumentParser(prog="eegfm-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    cv = sub.add_parser("cv", help="cross-validate models × heads × regimes on one task")
    cv.add_argument("--config", required=True)
    cv.add_argument("--no-progress", action="store_true")
    sub.add_parser("models", help="list backbones")
    sub.add_parser("tasks", help="list tasks")
    ck = sub.add_parser("check", help="one batch through every run of a cv config")
    ck.add_argument("--config", required=True)
    for name in ("fit", "validate", "test"):
        sub.add_parser(name, help=f"LightningCLI {name} (see `eegfm-bench {name} --help`)")
    a = p.parse_args(argv)
    if a.cmd == "cv":
        from eegfm_bench.cv import run_cv
        from eegfm_bench.results import to_markdown

        table = run_cv(a.config, progress=not a.no_progress)
        print(to_markdown(table))
    elif a.cmd == "models":
        _print_models()
    elif a.cmd == "tasks":
        _print_tasks()
    elif a.cmd == "check":
        from eegfm_bench.cv import check_config

        check_config(a.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
