"""Scalp regions and region-based perturbations (paper 003 App. D.3, D.4, D.5).

The region lists of App. D.3 live in ``regions.yaml`` and the task → primary / control assignment of
Table 6 in ``task_regions.yaml`` (package data next to this module). A task is either one of this project's
task names (``eegmmidb_mi`` → motor imagery, ``eegmmidb_eyes`` → eyes open/closed, ``eegmat`` → working
memory) or a paper task type (``motor_imagery``, ``visual_p300``, ...).

A region resolves to the dataset's own channel names (matched case-insensitively; T3/T4/T5/T6 match
T7/T8/P7/P8). Electrodes the region lists but the dataset lacks are returned in
:attr:`RegionSelection.missing` and warned about with :class:`MissingElectrodesWarning`; a region with no
electrode in the dataset raises.

Perturbations, all on ``(batch, n_chans, n_times)`` windows:

- :func:`region_dropout` – zero-pad or remove the region's channels (App. D.3);
- :func:`region_noise` – add filtered white noise to the region's channels only, at an SNR computed over
  those channels (App. D.5; levels 5 and -3 dB);
- :func:`region_substitution` – replace the region's channels by filtered white noise scaled to the
  median RMS of the intact channels (App. D.4; used for attribution only).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from eegfm_bench.perturb.channels import channel_index, channel_key, drop_channels
from eegfm_bench.perturb.noise import FilterSpec, add_noise, substitute_with_noise
from eegfm_bench.registry import UnknownNameError

REGION_ROLES: tuple[str, ...] = ("primary", "control")
"""The two region sets of a task (Table 6)."""

REGION_NOISE_SNRS_DB: tuple[float, ...] = (5.0, -3.0)
"""SNR levels of region noise injection, dB (App. D.5)."""


class MissingElectrodesWarning(UserWarning):
    """A region lists electrodes that the dataset's montage lacks (they are reported, not perturbed)."""


def _load_yaml(name: str) -> Any:
    with resources.files("eegfm_bench.perturb").joinpath(name).open("r", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@lru_cache(maxsize=1)
def _tables() -> tuple[Mapping[str, tuple[str, ...]], Mapping[str, Mapping[str, tuple[str, ...]]], Mapping[str, str]]:
    reg = _load_yaml("regions.yaml")
    regions = {k: tuple(v) for k, v in reg["regions"].items()}
    derivations = {k: tuple(v) for k, v in reg["derivations"].items()}
    clash = set(regions) & set(derivations)
    if clash:
        raise ValueError(f"regions.yaml defines {sorted(clash)} twice")
    all_regions = {**regions, **derivations}
    tab = _load_yaml("task_regions.yaml")
    paper: dict[str, Mapping[str, tuple[str, ...]]] = {}
    for task, roles in tab["paper_tasks"].items():
        if set(roles) != set(REGION_ROLES):
            raise ValueError(f"task_regions.yaml: {task!r} must define exactly {REGION_ROLES}, got {sorted(roles)}")
        for role, names in roles.items():
            unknown = [n for n in names if n not in all_regions]
            if unknown:
                raise ValueError(f"task_regions.yaml: {task}.{role} names unknown regions {unknown}")
        paper[task] = MappingProxyType({r: tuple(roles[r]) for r in REGION_ROLES})
    task_map = dict(tab["tasks"])
    bad = {t: p for t, p in task_map.items() if p not in paper}
    if bad:
        raise ValueError(f"task_regions.yaml: tasks map to unknown paper tasks {bad}")
    return MappingProxyType(all_regions), MappingProxyType(paper), MappingProxyType(task_map)


def load_regions() -> Mapping[str, tuple[str, ...]]:
    """Region name → electrode names, from ``regions.yaml`` (App. D.3, plus Table 6's sleep derivations).

    Returns
    -------
    Mapping of str to tuple of str (read-only)
    """
    return _tables()[0]


def region_task_names() -> list[str]:
    """Valid ``task`` arguments: this project's task names, then the paper task types (Table 6)."""
    _, paper, task_map = _tables()
    return sorted(task_map) + sorted(paper)


_DECLARED: dict[str, str] = {}


def register_task_regions(task: str, paper_type: str) -> None:
    """Assign a declared task (``regions:`` in its YAML) to a paper 003 Table 6 task type.

    Raises
    ------
    UnknownNameError
        ``paper_type`` is not a Table 6 task type (the message lists them).
    """
    _, paper, task_map = _tables()
    if paper_type not in paper:
        raise UnknownNameError(f"task {task!r}: regions {paper_type!r} is not a paper 003 Table 6 task type. Valid: "
                               f"{', '.join(sorted(paper))}")
    if task in task_map and task_map[task] != paper_type:
        raise ValueError(f"task {task!r} is assigned to {task_map[task]!r} in task_regions.yaml, not {paper_type!r}; "
                         "fix: rename the declared task or drop its `regions:`")
    _DECLARED[task] = paper_type


def paper_task(task: str) -> str:
    """The Table 6 task type of ``task`` (a project task name or a paper task type).

    Raises
    ------
    UnknownNameError
        If ``task`` is neither; the message lists the valid names.
    """
    _, paper, task_map = _tables()
    if task in task_map:
        return task_map[task]
    if task in _DECLARED:
        return _DECLARED[task]
    if task in paper:
        return task
    raise UnknownNameError(
        f"no region assignment for task {task!r}. Valid tasks: {', '.join(region_task_names())}.\n"
        "fix: set `regions: <paper task type>` in the task's YAML, or add the task to "
        "eegfm_bench/perturb/task_regions.yaml (`tasks:` maps it to a paper task type)"
    )


def check_role(role: str) -> str:
    """Return ``role`` if it is ``"primary"`` or ``"control"``.

    Raises
    ------
    UnknownNameError
        Otherwise, listing the valid region roles.
    """
    if role not in REGION_ROLES:
        raise UnknownNameError(f"unknown region {role!r}. Valid regions: {', '.join(REGION_ROLES)}.")
    return role


def task_regions(task: str) -> dict[str, tuple[str, ...]]:
    """Primary and control region names of a task (paper 003 App. D.3, Table 6).

    Parameters
    ----------
    task : str
        Project task name or paper task type.

    Returns
    -------
    dict
        ``{"primary": (region, ...), "control": (region, ...)}``.

    Raises
    ------
    UnknownNameError
        If ``task`` has no assignment.
    """
    return dict(_tables()[1][paper_task(task)])


@dataclass(frozen=True)
class RegionSelection:
    """A task's primary or control region resolved against a dataset's montage.

    Attributes
    ----------
    task : str
        Task as given.
    role : str
        ``"primary"`` or ``"control"``.
    regions : tuple of str
        Region names (``regions.yaml``) that make up the set.
    channels : tuple of str
        The dataset's channel names in the set, in montage order (dataset spelling).
    indices : tuple of int
        Positions of ``channels`` in the montage.
    missing : tuple of str
        Electrodes the regions list that the dataset lacks (region spelling).
    """

    task: str
    role: str
    regions: tuple[str, ...]
    channels: tuple[str, ...]
    indices: tuple[int, ...]
    missing: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable record (for result rows and the run's provenance)."""
        return {"task": self.task, "role": self.role, "regions": list(self.regions),
                "channels": list(self.channels), "missing": list(self.missing)}


def resolve_region(task: str, role: str, ch_names: Sequence[str], *, warn: bool = True) -> RegionSelection:
    """Resolve a task's primary or control region to the dataset's channels (paper 003 App. D.3).

    Parameters
    ----------
    task : str
        Project task name (e.g. ``"eegmmidb_mi"``) or paper task type (e.g. ``"motor_imagery"``).
    role : {"primary", "control"}
        Which region set of Table 6.
    ch_names : sequence of str
        The dataset's channel names (standard 10-05 names, any case).
    warn : bool
        Emit :class:`MissingElectrodesWarning` when electrodes are missing (they are always returned in
        ``missing``).

    Returns
    -------
    RegionSelection

    Raises
    ------
    UnknownNameError
        If ``task`` or ``role`` is unknown (the message lists the valid ones).
    ValueError
        If none of the region's electrodes is in the montage, or two channels name the same electrode.
    """
    check_role(role)
    region_names = task_regions(task)[role]
    regions = load_regions()
    electrodes: list[str] = []
    seen: set[str] = set()
    for r in region_names:
        for e in regions[r]:
            if channel_key(e) not in seen:
                seen.add(channel_key(e))
                electrodes.append(e)
    index = channel_index(ch_names)
    present = sorted(index[channel_key(e)] for e in electrodes if channel_key(e) in index)
    missing = tuple(e for e in electrodes if channel_key(e) not in index)
    if not present:
        raise ValueError(
            f"the {role} region of task {task!r} ({', '.join(region_names)}) has none of its electrodes "
            f"{electrodes} in the montage {list(ch_names)}; fix: check the channel names or the task's "
            "assignment in eegfm_bench/perturb/task_regions.yaml"
        )
    if missing and warn:
        warnings.warn(
            f"{role} region of task {task!r}: {len(missing)} of {len(electrodes)} electrodes are not in this "
            f"{len(ch_names)}-channel montage and are not perturbed: {', '.join(missing)}",
            MissingElectrodesWarning,
            stacklevel=2,
        )
    return RegionSelection(task=task, role=role, regions=tuple(region_names),
                           channels=tuple(ch_names[i] for i in present), indices=tuple(present), missing=missing)


def region_dropout(x: Any, ch_names: Sequence[str], task: str, role: str,
                   handling: str) -> tuple[Any, list[str], RegionSelection]:
    """Zero-pad or remove a task's primary or control region (paper 003 App. D.3).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    task : str
        Project task name or paper task type.
    role : {"primary", "control"}
        Region set.
    handling : {"zero", "removed"}
        ``"zero"``: region channels set to 0, shape kept; ``"removed"``: region channels deleted.

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans, n_times) or (batch, n_chans - n_region, n_times)
    ch_names_out : list of str
    selection : RegionSelection
        The resolved region, including ``missing`` electrodes.

    Raises
    ------
    UnknownNameError
        Unknown task, role or handling.
    ValueError
        No region electrode in the montage, or the region covers every channel.
    """
    sel = resolve_region(task, role, ch_names)
    x_out, names = drop_channels(x, ch_names, sel.channels, handling)
    return x_out, names, sel


def region_noise(x: Any, ch_names: Sequence[str], task: str, role: str, snr_db: float, filt: FilterSpec,
                 rng: np.random.Generator | int, power: str = "montage") -> tuple[Any, list[str], RegionSelection]:
    """Inject filtered white noise into a region's channels only (paper 003 App. D.5).

    For every trial, the noise is scaled so that ``10 log10(P_s / P_n) = snr_db``, ``P_n`` the App. D.1 power of the
    noise over the region's channels and ``P_s`` the App. D.1 signal power over the whole montage
    (``power="montage"``, the default: the paper leaves the basis open; the authors' code uses the montage, so a
    region's noise level does not depend on how strong the task signal is in that region) or over the region's
    channels only (``power="region"``). All other channels are returned unchanged.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    task : str
        Project task name or paper task type.
    role : {"primary", "control"}
        Region set.
    snr_db : float
        Target SNR, dB (paper: 5 and -3).
    filt : FilterSpec
        The dataset's preprocessing filters, applied to the noise.
    rng : numpy.random.Generator or int
        Generator or explicit seed.
    power : {"montage", "region"}
        Channels of the signal power ``P_s``.

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans, n_times)
    ch_names_out : list of str
        Unchanged.
    selection : RegionSelection

    Raises
    ------
    ValueError
        Non-finite ``snr_db``, no region electrode in the montage, an unknown ``power``, or a trial with zero
        signal power.
    UnknownNameError
        Unknown task or role.
    """
    if power not in ("montage", "region"):
        raise ValueError(f"region noise power basis {power!r}; valid: montage, region")
    sel = resolve_region(task, role, ch_names)
    power_picks = None if power == "montage" else sel.indices
    return (add_noise(x, snr_db, "white", filt, rng, picks=sel.indices, power_picks=power_picks,
                      power_over_picks=power == "region"), list(ch_names), sel)


def region_substitution(x: Any, ch_names: Sequence[str], task: str, role: str, filt: FilterSpec,
                        rng: np.random.Generator | int) -> tuple[Any, list[str], RegionSelection]:
    """Replace a region's channels by filtered white noise at the intact channels' amplitude (App. D.4).

    Every region channel becomes filtered white noise with zero mean, unit variance, times the median RMS
    of the channels outside the region (per trial). Used for attribution, not for accuracy (App. D.4).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    task : str
        Project task name or paper task type.
    role : {"primary", "control"}
        Region set (the paper substitutes the primary region).
    filt : FilterSpec
        The dataset's preprocessing filters.
    rng : numpy.random.Generator or int
        Generator or explicit seed.

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans, n_times)
    ch_names_out : list of str
        Unchanged.
    selection : RegionSelection

    Raises
    ------
    ValueError
        No region electrode in the montage, the region covers every channel, or a trial's intact channels
        are flat.
    UnknownNameError
        Unknown task or role.
    """
    sel = resolve_region(task, role, ch_names)
    return substitute_with_noise(x, sel.indices, filt, rng), list(ch_names), sel
