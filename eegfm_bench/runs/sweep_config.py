"""The ``eegfm-bench sweep`` config: :class:`SweepConfig`, its parser and loader (what :mod:`eegfm_bench.runs.sweep`
runs and what the experiment page reads back from ``sweep.yaml``)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from eegfm_bench.config import ConfigError, ConfigRecord, command_parser, parse_config, typed
from eegfm_bench.runs.cells import load_config as load_cv_config
from eegfm_bench.runs.launch import LauncherConfig, check_launcher
from eegfm_bench.trainer import check_trainer


@dataclass(frozen=True)
class SweepConfig(ConfigRecord):
    """``eegfm-bench sweep``: test-time perturbations (paper 003 App. D) on a cv run's fold checkpoints.

    Args:
        cv_out_dir: the cv run's out_dir.
        cv_config: the cv config file (its out_dir is used; its cell hashes must match the run's).
        out_dir: where the sweep's rows and report go (default ``<cv out_dir>/sweep``).
        conditions: condition strings (default: every App. D condition of the task).
        seed: perturbation seed (dropout masks and noise), fixed for the sweep.
        reference: model of the ∗/∇ marks; null for none.
        folds: subset of the cv folds.
        models: subset of the cv models.
        batch_size: windows per batch and device.
        num_workers: DataLoader worker processes (perturbation runs in them).
        save_predictions: write per-window probabilities per condition.
        alpha: family-wise level of the marks (Holm across models).
        corruption_order: ``before_reference`` (default): the corruption is applied to the signal before the
            model's reference step and the common average is recomputed over the channels present (zero-padded
            channels zeroed after it); ``after_reference``: the referenced windows are corrupted (the old order,
            under which a removed channel is recoverable from the survivors).
        region_snr: region noise SNR against the whole montage's signal power (``montage``, default, as the
            authors' code) or the region's (``region``); App. D.5 leaves it open.
        mask: random dropout masks: ``paper`` (drawn as the paper's runs, reproducing Table 5's PhysioNet rows) or
            ``hashed`` (one hash per channel name: independent of the channel order).
        launcher: where the (backbone group × fold) units run: ``none`` (this process), ``local`` workers or
            ``slurm`` (:mod:`eegfm_bench.runs.launch`); not part of any config hash.
        trainer: every ``lightning.Trainer`` argument plus ``loggers`` (``precision: null``: each cell's training
            precision).
    """

    cv_out_dir: Optional[str] = None
    cv_config: Optional[str] = None
    out_dir: Optional[str] = None
    conditions: Optional[list[str]] = None
    seed: int = 0
    reference: Optional[str] = "eegnet"
    folds: Optional[list[int]] = None
    models: Optional[list[str]] = None
    batch_size: int = 64
    num_workers: int = 0
    save_predictions: bool = True
    alpha: float = 0.05
    corruption_order: Literal["before_reference", "after_reference"] = "before_reference"
    region_snr: Literal["montage", "region"] = "montage"
    mask: Literal["paper", "hashed"] = "paper"
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    trainer: dict[str, Any] = field(default_factory=dict)


def sweep_parser():
    return command_parser("eegfm-bench sweep", SweepConfig, trainer={"precision": None, "devices": 1}, training=False,
                          description=SweepConfig.__doc__)


def load_sweep_config(source, args: Sequence[str] = ()) -> SweepConfig:
    """Read (YAML path, mapping or :class:`SweepConfig`, plus dotted overrides), fill defaults, validate and return
    a sweep config typed and frozen, before any data or model is touched: with ``cv_config`` its ``out_dir`` is the
    ``cv_out_dir``; ``out_dir`` defaults to ``<cv out_dir>/sweep``. :func:`plan_sweep` then resolves the cv run.

    Raises
    ------
    ConfigError
        Unknown keys (close matches), neither or both of ``cv_out_dir`` / ``cv_config``, an invalid value, trainer
        or launcher settings this machine cannot honour.
    """
    if isinstance(source, SweepConfig):  # e.g. a launcher's worker: parsed and checked again
        source = source.to_dict()
    cfg = typed(SweepConfig, parse_config(sweep_parser(), source, args))
    if (cfg.cv_out_dir is None) == (cfg.cv_config is None):
        raise ConfigError("set exactly one of `cv_out_dir` (the cv run's out_dir) and `cv_config` (its config "
                          "YAML); fix: e.g. `cv_out_dir: results/tiny`")
    for k, value, lo in (("batch_size", cfg.batch_size, 1), ("num_workers", cfg.num_workers, 0)):
        if value < lo:
            raise ConfigError(f"{k} must be an int ≥ {lo}, got {value!r}")
    if not 0 < cfg.alpha < 1:
        raise ConfigError(f"alpha must be in (0, 1), got {cfg.alpha!r}")
    check_trainer(cfg.trainer, "trainer")
    check_launcher(cfg.launcher, trainer=cfg.trainer)
    if cfg.cv_config is not None:
        cfg = replace(cfg, cv_out_dir=load_cv_config(cfg.cv_config).out_dir)
    return replace(cfg, out_dir=str(cfg.out_dir or Path(cfg.cv_out_dir) / "sweep"))


__all__ = ["SweepConfig", "sweep_parser", "load_sweep_config"]
