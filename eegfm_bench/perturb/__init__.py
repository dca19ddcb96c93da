"""Test-time perturbations of paper 003 App. D, as pure functions on ``(batch, n_chans, n_times)`` windows.

- :mod:`~eegfm_bench.perturb.noise` – white / pink noise at a target SNR, noise substitution (App. D.1, D.4)
- :mod:`~eegfm_bench.perturb.channels` – random channel dropout with one mask per dataset and p (App. D.2)
- :mod:`~eegfm_bench.perturb.regions` – region lists, task assignments, region dropout / noise /
  substitution (App. D.3–D.5)
- :mod:`~eegfm_bench.perturb.conditions` – condition strings of result rows and the default sweep
- :mod:`~eegfm_bench.perturb.rng` – :class:`WindowRNG`, the per-window noise source every condition receives

Inputs are numpy arrays or torch tensors; outputs have the input's type, dtype and device.
"""
from eegfm_bench.perturb.channels import DropoutMask, dropout_mask, drop_channels, random_dropout
from eegfm_bench.perturb.conditions import (
    CONDITION_GRAMMAR,
    CONDITION_KINDS,
    Condition,
    PerturbContext,
    PlotFamily,
    condition_rng,
    default_conditions,
    format_condition,
    parse_condition,
)
from eegfm_bench.perturb.noise import FilterSpec, add_noise, signal_power, snr_db, substitute_with_noise
from eegfm_bench.perturb.regions import (
    MissingElectrodesWarning,
    RegionSelection,
    region_dropout,
    region_noise,
    region_substitution,
    resolve_region,
    task_regions,
)
from eegfm_bench.perturb.rng import WindowRNG, WindowRNGError

__all__ = [
    "CONDITION_GRAMMAR", "CONDITION_KINDS", "Condition", "PlotFamily", "WindowRNG", "WindowRNGError", "DropoutMask", "FilterSpec", "MissingElectrodesWarning", "PerturbContext",
    "RegionSelection", "add_noise", "condition_rng", "default_conditions", "drop_channels", "dropout_mask",
    "format_condition", "parse_condition", "random_dropout", "region_dropout", "region_noise",
    "region_substitution", "resolve_region", "signal_power", "snr_db", "substitute_with_noise", "task_regions",
]
