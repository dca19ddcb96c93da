"""The audit's schemas: its declared settings (:class:`AuditConfig`, PhysioTRACE; every one enters the config hash) and
the audit command's own (:class:`AuditCommand`, ``eegfm-bench audit``).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from eegfm_bench.config import ConfigRecord, typed

RANDOM_MATCH_MODES = ("energy", "energy_any", "rank")
"""How the random subspaces of the verification are matched to the candidate's (:mod:`eegfm_bench.provenance.verify`)."""


@dataclass(frozen=True)
class AuditCommand(ConfigRecord):
    """Inputs and outputs of one audit.

    Args:
        embeddings: ``.npz`` with ``emb``, ``y``, ``provenance``, ``subject``, ``record``, ``split``.
        out_dir: where ``audit_<hash16>.json`` / ``.md`` go.
        paired: ``emb`` is long-format, one row per (window, view).
        views: view order of a paired npz.
    """

    embeddings: Optional[str] = None
    out_dir: Optional[str] = None
    paired: bool = False
    views: Optional[list[str]] = None


@dataclass(frozen=True)
class AuditConfig(ConfigRecord):
    """Declared settings of one audit (all enter the config hash), typed and frozen: ``eegfm-bench audit`` builds
    it from the config's top-level keys (:func:`eegfm_bench.runs.audit.load_audit_config`), the Python API from a
    mapping (:meth:`from_dict`).

    Attributes
    ----------
    name : str
        Label used in the report title.
    Cs : tuple of float
        Candidate inverse L2 strengths for the provenance probe and both heads (selected on validation).
    n_boot : int
        Cluster-bootstrap replicates per interval.
    level : float
        Interval coverage (0.95: the "lower 95 % bound" of the utility check is the 2.5 % quantile).
    seed : int
        Seed of every bootstrap and random draw.
    min_clusters : int
        Fewest held-out subjects the cluster bootstrap may run on.
    min_cell_subjects : int
        Fewest held-out subjects in every target × shortcut-indicator cell (observational data; a cell with
        fewer makes many bootstrap replicates impossible to reweight).
    induced_odds : float or dict
        Paired design only: the target–shortcut association the exposed head is fitted under and the
        "aligned" regime; an odds ratio or ``{"agreement": a}``. Observational audits use the training odds.
    shortcut_groups : list, optional
        Shortcut provenance groups (rotations). Default: every view (paired); for observational data, the
        group of a binary provenance whose training odds ratio is >= 1 (more than two groups: required).
    intermediate_exponents : tuple of float
        Extra regimes at odds ``aligned_odds ** e`` (reported, not in ``G``).
    extra_regimes : dict
        Extra named regimes: odds ratio or ``{"agreement": a}`` (reported, not in ``G``).
    epsilon : float
        Smallest ``G`` (AUROC units) that counts as reliance.
    rank : int, optional
        Rank of the removed subspace (default K − 1 views, or n_groups − 1 provenance groups).
    n_random : int
        Matched random subspaces (paper: 10; 100 for the ECG audits).
    random_match : str
        "energy" (default), "energy_any" or "rank"; see :func:`eegfm_bench.provenance.verify.random_subspaces`.
    utility_margin : float
        Declared margin (<= 0) for the lower bound of the utility change (AUROC units).
    """

    name: str = "audit"
    Cs: tuple = (0.01, 0.1, 1.0, 10.0)
    n_boot: int = 1000
    level: float = 0.95
    seed: int = 0
    min_clusters: int = 10
    min_cell_subjects: int = 2
    induced_odds: Any = 9.0
    shortcut_groups: Any = None
    intermediate_exponents: tuple = (0.5, -0.5)
    extra_regimes: dict = field(default_factory=dict)
    epsilon: float = 0.01
    rank: Any = None
    n_random: int = 10
    random_match: str = "energy"
    utility_margin: float = -0.02

    def __post_init__(self):  # the declared types, on a frozen record
        object.__setattr__(self, "Cs", tuple(float(c) for c in self.Cs))
        object.__setattr__(self, "intermediate_exponents", tuple(float(e) for e in self.intermediate_exponents))
        if self.shortcut_groups is not None:
            object.__setattr__(self, "shortcut_groups", list(self.shortcut_groups))
        if not self.Cs or min(self.Cs) <= 0:
            raise ValueError(f"Cs must be non-empty and positive, got {self.Cs}")
        if self.n_boot < 100:
            raise ValueError(f"n_boot = {self.n_boot} is too few for a percentile interval; fix: n_boot >= 100")
        if not 0.5 < self.level < 1:
            raise ValueError(f"level must be in (0.5, 1), got {self.level}")
        if self.min_clusters < 2:
            raise ValueError(f"min_clusters must be >= 2, got {self.min_clusters}")
        if self.min_cell_subjects < 1:
            raise ValueError(f"min_cell_subjects must be >= 1, got {self.min_cell_subjects}")
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.utility_margin > 0:
            raise ValueError(f"utility_margin is a tolerated loss and must be <= 0, got {self.utility_margin}")
        if self.n_random < 1:
            raise ValueError(f"n_random must be >= 1, got {self.n_random}")
        if self.random_match not in RANDOM_MATCH_MODES:
            raise ValueError(f"random_match {self.random_match!r} unknown; fix: use one of {RANDOM_MATCH_MODES}")
        clash = {"aligned", "independent", "reversed"} & set(self.extra_regimes)
        if clash:
            raise ValueError(f"extra_regimes may not redefine {sorted(clash)}; fix: rename them")

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "AuditConfig":
        """Build from a plain dict, rejecting unknown keys (the message lists the valid ones).

        Raises
        ------
        ValueError
            An unknown key, or a value :class:`AuditConfig` refuses.
        """
        d = dict(d or {})
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - valid)
        if unknown:
            raise ValueError(f"unknown audit config keys {unknown}; valid keys: {sorted(valid)}")
        return typed(cls, d)

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["Cs"] = list(self.Cs)
        out["intermediate_exponents"] = list(self.intermediate_exponents)
        return jsonable(out)


def jsonable(obj):
    """A JSON-ready copy of ``obj``: dict keys as strings, tuples and arrays as lists, numpy scalars as Python
    numbers."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.str_):
        return str(obj)
    return obj
