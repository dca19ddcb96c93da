"""The probe and attribution commands' config (``eegfm-bench probe`` / ``attribute``; paper 003 §3.3-3.4).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from eegfm_bench.config import ConfigRecord, command_parser
from eegfm_bench.config.launch import LauncherConfig


@dataclass(frozen=True)
class SelectConfig(ConfigRecord):
    """Which cells of the cv run to analyse (null: all).

    Args:
        models: backbones.
        regimes: regimes.
        heads: heads.
        folds: folds.
    """

    models: Optional[list[str]] = None
    regimes: Optional[list[str]] = None
    heads: Optional[list[str]] = None
    folds: Optional[list[int]] = None


@dataclass(frozen=True)
class ProbeConfig(ConfigRecord):
    """Block-wise linear probes (paper 003 App. I.5).

    Args:
        poolings: ``mean`` and / or ``flatten`` (+ RMSNorm), or any pooling of a head that needs no learned parameters
        (:func:`eegfm_bench.models.heads.token_poolings`, e.g. ``max``).
        include_frozen: also probe the backbone before fine-tuning.
        max_epochs: at most this many epochs of Adam (cosine annealing).
        patience: early stopping on validation balanced accuracy.
        lr: Adam learning rate.
        batch_size: probe batch size.
        forward_batch_size: windows per backbone forward when filling the block cache.
        cache_dir: feature cache root (default: the cv run's ``data.cache_dir``, else ``$EEGFM_CACHE``).
        standardize_mean: z-score mean-pooled features with the training windows' statistics.
    """

    poolings: list[str] = field(default_factory=lambda: ["mean", "flatten"])
    include_frozen: bool = True
    max_epochs: int = 20
    patience: int = 5
    lr: float = 1e-3
    batch_size: int = 64
    forward_batch_size: int = 16
    cache_dir: Optional[str] = None
    standardize_mean: bool = True


@dataclass(frozen=True)
class AttentionConfig(ConfigRecord):
    """Per-block attention topomaps (paper 003 App. I.4).

    Args:
        enabled: compute them in ``eegfm-bench probe``.
        models: backbones (null: every selected model with softmax attention).
        max_windows_per_fold: first N test windows per fold.
        batch_size: windows per forward.
    """

    enabled: bool = True
    models: Optional[list[str]] = None
    max_windows_per_fold: Optional[int] = None
    batch_size: int = 16


@dataclass(frozen=True)
class AttributionConfig(ConfigRecord):
    """Gradient×Input and AttnLRP maps (paper 003 App. I.1-I.2).

    Args:
        methods: ``gxi``, ``attnlrp`` and / or ``gradcam``.
        lrp_fallback: null (a backbone without a patch map is an error) or ``gxi``.
        attention_rule: ``attnlrp`` (paper) or ``cp`` (CP-LRP).
        epsilon: ε of the ε-rule on Linear / Conv layers.
        conditions: condition strings (App. I.2).
        perturbation_seed: seed of the conditions' noise and masks.
        percentile: keep correct windows whose confidence exceeds this percentile (App. I.1).
        max_windows_per_fold: cap on selected windows per fold (highest confidence first).
        batch_size: windows per attribution batch.
        conservation_windows: windows per fold for the conservation check.
        randomisation_windows: windows per fold for the randomisation test (0 skips).
        seed: seed of the randomised copy.
        data_randomisation: also run Adebayo et al.'s data randomisation test: each cell and fold is retrained
            (the cv's recipe) on training labels permuted within the training subjects, and its maps are compared
            with the trained cell's on the same windows (one extra fit per cell and fold).
    """

    methods: list[str] = field(default_factory=lambda: ["gxi", "attnlrp"])
    lrp_fallback: Optional[str] = None
    attention_rule: str = "attnlrp"
    epsilon: float = 0.0
    conditions: list[str] = field(default_factory=lambda: ["clean"])
    perturbation_seed: int = 0
    percentile: float = 75.0
    max_windows_per_fold: Optional[int] = None
    batch_size: int = 8
    conservation_windows: int = 4
    randomisation_windows: int = 8
    seed: int = 0
    data_randomisation: bool = False


@dataclass(frozen=True)
class InterpretConfig(ConfigRecord):
    """``eegfm-bench probe`` / ``attribute``: analyses of a cv run's fold checkpoints (paper 003 §4, App. I).

    Args:
        experiment: name recorded in the rows (default: the cv run's).
        cv_dir: the cv run's out_dir.
        cv_config: the cv config file (its out_dir is used; its cell hashes must match the run's).
        out_dir: where probes/, attention/ and attribution/ go.
        select: which cells.
        probe: block-wise probes.
        attention: attention maps.
        attribution: attribution maps.
        launcher: where the units run (``none``: this process; ``local`` workers; ``slurm``): one unit is one
            (model, fold) for ``probe`` and one (cell, fold) for ``attribute``, see :mod:`eegfm_bench.runs.launch.launcher`.
        trainer: every ``lightning.Trainer`` argument plus ``loggers`` (every forward pass runs in a Trainer).
    """

    experiment: Optional[str] = None
    cv_dir: Optional[str] = None
    cv_config: Optional[str] = None
    out_dir: Optional[str] = None
    select: SelectConfig = field(default_factory=SelectConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    trainer: dict[str, Any] = field(default_factory=dict)


def interpret_parser(prog: str = "eegfm-bench probe", saved: bool = False):
    """The ``eegfm-bench probe`` / ``attribute`` parser (``--config`` files, dotted overrides, the Trainer
    arguments).

    ``saved=True``: the parser of a config the command saved beside its results, for
    :func:`~eegfm_bench.config.read_saved` (``status``, ``report``): its ``trainer:`` section is read as the mapping
    the file holds (every key already there), without importing Lightning to list and type the Trainer's arguments.
    """
    return command_parser(prog, InterpretConfig, description=InterpretConfig.__doc__, training=False,
                          trainer=not saved)
