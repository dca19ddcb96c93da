"""The ``eegfm-bench probe`` / ``attribute`` config (:class:`InterpretConfig`): the analyses' sections
(:mod:`eegfm_bench.interpret.config`) plus the cv run they read and where their units run; parsed and checked
before any data or model is touched."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from eegfm_bench.config import ConfigError, load_typed
from eegfm_bench.interpret.config import InterpretConfigError
from eegfm_bench.interpret.lrp import ATTENTION_RULES, ATTRIBUTION_METHODS
from eegfm_bench.models.heads import check_token_pooling
from eegfm_bench.perturb.conditions import parse_condition
from eegfm_bench.runs.cv.cells import load_config as load_cv_config
from eegfm_bench.runs.launch.launcher import check_launcher
from eegfm_bench.trainer import check_trainer
from eegfm_bench.config.interpret import interpret_parser, InterpretConfig




def load_interpret_config(source, args: Sequence[str] = ()) -> InterpretConfig:
    """Read (YAML path, mapping or :class:`InterpretConfig`, plus dotted overrides), fill defaults, validate and
    return an interpret config typed and frozen (before any data or model is touched); with ``cv_config`` its
    ``out_dir`` is the ``cv_dir``.

    Raises
    ------
    InterpretConfigError
        Unknown keys (with close matches), missing ``cv_dir`` / ``out_dir``, unknown pooling / method / attention
        rule / fallback, an unparsable condition string, trainer settings this machine cannot honour.
    """
    try:  # a worker's InterpretConfig is parsed and checked again
        cfg = load_typed(interpret_parser(), InterpretConfig, source, args)
    except ConfigError as err:
        raise InterpretConfigError(str(err)) from None
    if cfg.cv_config is not None:
        if cfg.cv_dir is not None:
            raise InterpretConfigError("set one of `cv_dir` and `cv_config`, not both")
        cfg = replace(cfg, cv_dir=load_cv_config(cfg.cv_config).out_dir)
    _check_interpret(cfg)
    return cfg


def _check_interpret(cfg: InterpretConfig) -> None:
    """The checks of a typed interpret config that need no data: the folders, the probe poolings, the attribution
    methods / fallback / rule / percentile / conditions, the trainer and the launcher.

    Raises
    ------
    InterpretConfigError
    """
    for key, value in (("cv_dir", cfg.cv_dir), ("out_dir", cfg.out_dir)):
        if not value:
            raise InterpretConfigError(f"`{key}` is required (cv_dir: the out_dir of an `eegfm-bench cv` run; "
                                       "out_dir: where the analyses go)")
    for p in cfg.probe.poolings:
        try:
            check_token_pooling(p)
        except ValueError as err:
            raise InterpretConfigError(f"probe.poolings: {err}") from None
    a = cfg.attribution
    for m in a.methods:
        if m not in ATTRIBUTION_METHODS:
            raise InterpretConfigError(f"attribution.methods: unknown method {m!r}; valid: {ATTRIBUTION_METHODS}")
    if a.lrp_fallback not in (None, "gxi"):
        raise InterpretConfigError(f"attribution.lrp_fallback must be null or 'gxi', got {a.lrp_fallback!r}")
    if a.attention_rule not in ATTENTION_RULES:
        raise InterpretConfigError(f"attribution.attention_rule must be one of {ATTENTION_RULES}")
    if not 0 <= float(a.percentile) < 100:
        raise InterpretConfigError(f"attribution.percentile must be in [0, 100), got {a.percentile}")
    for c in a.conditions:
        parse_condition(c)
    try:
        check_trainer(cfg.trainer, "trainer")
        check_launcher(cfg.launcher, trainer=cfg.trainer)
    except ConfigError as err:
        raise InterpretConfigError(str(err)) from None


def worker_config(cfg: InterpretConfig) -> InterpretConfig:
    """The config a launcher's worker runs: no launcher of its own, and the ``cv_dir`` the parent resolved and
    verified (``cv_config`` dropped: loading both set is refused)."""
    return replace(cfg, launcher=replace(cfg.launcher, kind="none"), cv_config=None)


__all__ = ["load_interpret_config", "worker_config"]
