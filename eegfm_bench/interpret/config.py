"""Config of ``eegfm-bench probe`` / ``eegfm-bench attribute`` (one YAML serves both; typed, jsonargparse).

Schema (see ``configs/experiment/interpret_quickstart.yaml``)::

    cv_dir: results/x/cv          # out_dir of a finished `eegfm-bench cv` run (its current fold checkpoints)
    cv_config: null               # ... or the cv config (must match the run's config hashes); not both
    out_dir: results/x            # probes/, attention/, attribution/ are written below it
    select:    {models, regimes, heads, folds}          # null = every cell of the cv run
    probe:     {poolings, include_frozen, max_epochs, patience, lr, batch_size, forward_batch_size, cache_dir,
                standardize_mean}       # standardize_mean: z-score mean-pooled features (see probes.fit_probe)
    attention: {enabled, models, max_windows_per_fold, batch_size}
    attribution:
      methods: [gxi, attnlrp]     # Gradient×Input (captum), AttnLRP (lxt patch maps), gradcam (pytorch-grad-cam)
      lrp_fallback: null          # null: a backbone without a patch map is an error; gxi: compute G×I instead
      attention_rule: attnlrp     # attnlrp (paper) or cp (CP-LRP)
      epsilon: 0.0                # ε of the ε-rule on Linear/Conv (0: the ε → 0 limit = plain gradient)
      conditions: [clean]         # condition strings (eegfm_bench.perturb.conditions), App. I.2
      perturbation_seed: 0
      percentile: 75              # keep correct windows whose confidence exceeds this percentile (App. I.1)
      max_windows_per_fold: null  # cap on selected windows per fold (highest confidence first); null = all
      batch_size: 8
      conservation_windows: 4     # windows per fold for the conservation check (biases zeroed)
      randomisation_windows: 8    # windows per fold for the model-parameter randomisation test; 0 = skip
    trainer: {accelerator: auto, devices: 1, precision: 32-true, loggers: [csv]}   # every forward pass

Every forward pass (block outputs, attention maps, predictions for the App. I.1 selection, attributions) runs in
a ``lightning.Trainer`` built from ``trainer:`` (``device:`` of earlier versions is ``trainer.accelerator``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from eegfm_bench.config import ConfigError, ConfigRecord


class InterpretConfigError(ConfigError):
    """An interpret config with an unknown key or an invalid value (names the valid ones)."""


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
        poolings: ``mean`` and / or ``flatten`` (+ RMSNorm).
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
