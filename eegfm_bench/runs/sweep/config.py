"""The ``eegfm-bench sweep`` config: :class:`SweepConfig`, its parser and loader (what :mod:`eegfm_bench.runs.sweep.command`
runs and what the experiment page reads back from ``sweep.yaml``)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from eegfm_bench.config import ConfigError, load_typed
from eegfm_bench.runs.cv.cells import load_config as load_cv_config
from eegfm_bench.runs.launch.launcher import check_launcher
from eegfm_bench.trainer import check_trainer
from eegfm_bench.config.sweep import sweep_parser, SweepConfig




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
    cfg = load_typed(sweep_parser(), SweepConfig, source, args)  # a worker's SweepConfig is parsed and checked again
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


__all__ = ["load_sweep_config"]
