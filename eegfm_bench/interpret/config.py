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


from eegfm_bench.config import ConfigError


class InterpretConfigError(ConfigError):
    """An interpret config with an unknown key or an invalid value (names the valid ones)."""


