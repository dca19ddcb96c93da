"""Config of ``eegfm-bench probe`` / ``eegfm-bench attribute`` (one YAML serves both).

Schema (defaults in :data:`DEFAULTS`; see ``configs/experiment/interpret_demo.yaml``)::

    cv_dir: results/x/cv          # out_dir of a finished `eegfm-bench cv` run (its fold checkpoints are analysed)
    out_dir: results/x            # probes/, attention/, attribution/ are written below it
    device: cpu                   # or auto (CUDA when visible), cuda, cuda:N
    select:    {models, regimes, heads, folds}          # null = every cell of the cv run
    probe:     {poolings, include_frozen, max_epochs, patience, lr, batch_size, forward_batch_size, cache_dir,
                standardize_mean}       # standardize_mean: z-score mean-pooled features (see probes.fit_probe)
    attention: {enabled, models, max_windows_per_fold, batch_size}
    attribution:
      methods: [gxi, attnlrp]     # Gradient×Input (captum) and AttnLRP (lxt patch maps)
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
"""
from __future__ import annotations

from pathlib import Path

import yaml

from eegfm_bench.config import ConfigError, merge_config, resolve_device

DEFAULTS: dict = {
    "experiment": None,
    "cv_dir": None,
    "out_dir": None,
    "device": "cpu",
    "select": {"models": None, "regimes": None, "heads": None, "folds": None},
    "probe": {"poolings": ["mean", "flatten"], "include_frozen": True, "max_epochs": 20, "patience": 5, "lr": 1e-3,
              "batch_size": 64, "forward_batch_size": 16, "cache_dir": None, "standardize_mean": True},
    "attention": {"enabled": True, "models": None, "max_windows_per_fold": None, "batch_size": 16},
    "attribution": {"methods": ["gxi", "attnlrp"], "lrp_fallback": None, "attention_rule": "attnlrp",
                    "epsilon": 0.0, "conditions": ["clean"], "perturbation_seed": 0, "percentile": 75.0,
                    "max_windows_per_fold": None, "batch_size": 8, "conservation_windows": 4,
                    "randomisation_windows": 8, "seed": 0},
}


class InterpretConfigError(ConfigError):
    """An interpret config with an unknown key or an invalid value (names the valid ones)."""




def load_interpret_config(path_or_dict) -> dict:
    """Read, fill defaults and validate an interpret config.

    Raises
    ------
    InterpretConfigError
        Unknown keys, missing ``cv_dir`` / ``out_dir``, unknown pooling / method / attention rule / fallback,
        an unparsable condition string, or a device torch does not know (``auto`` picks CUDA when visible).
    """
    from eegfm_bench.interpret.lrp import ATTENTION_RULES, ATTRIBUTION_METHODS
    from eegfm_bench.interpret.probes import POOLINGS
    from eegfm_bench.perturb.conditions import parse_condition

    raw = path_or_dict if isinstance(path_or_dict, dict) else yaml.safe_load(Path(path_or_dict).read_text())
    cfg = merge_config(DEFAULTS, raw or {}, "", InterpretConfigError)
    for key in ("cv_dir", "out_dir"):
        if not cfg[key]:
            raise InterpretConfigError(f"`{key}` is required (cv_dir: the out_dir of an `eegfm-bench cv` run; "
                                       "out_dir: where the analyses go)")
    for p in cfg["probe"]["poolings"]:
        if p not in POOLINGS:
            raise InterpretConfigError(f"probe.poolings: unknown pooling {p!r}; valid: {POOLINGS}")
    a = cfg["attribution"]
    for m in a["methods"]:
        if m not in ATTRIBUTION_METHODS:
            raise InterpretConfigError(f"attribution.methods: unknown method {m!r}; valid: {ATTRIBUTION_METHODS}")
    if a["lrp_fallback"] not in (None, "gxi"):
        raise InterpretConfigError(f"attribution.lrp_fallback must be null or 'gxi', got {a['lrp_fallback']!r}")
    if a["attention_rule"] not in ATTENTION_RULES:
        raise InterpretConfigError(f"attribution.attention_rule must be one of {ATTENTION_RULES}")
    if not 0 <= float(a["percentile"]) < 100:
        raise InterpretConfigError(f"attribution.percentile must be in [0, 100), got {a['percentile']}")
    for c in a["conditions"]:
        parse_condition(c)
    cfg["device"] = resolve_device(cfg["device"], InterpretConfigError)
    return cfg
