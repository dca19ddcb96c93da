"""The confound check's section of a cv config (``confound:``; :mod:`eegfm_bench.runs.cv.confound`).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from eegfm_bench.config import ConfigRecord


FRONTAL = ["Fp1", "Fpz", "Fp2", "AF7", "AF3", "AFz", "AF4", "AF8", "F7", "F8", "FT7", "FT8"]
"""The prefrontal and lateral frontal electrodes of the ``frontal`` variation (10-05 names: Fp*, AF*, F7/F8,
FT7/FT8) — the electrodes nearest the eyes and the temporal muscles."""


@dataclass(frozen=True)
class ConfoundConfig(ConfigRecord):
    """The confound check of a cv (:mod:`eegfm_bench.runs.cv.confound`).

    Args:
        enabled: run it after the headline cells; null (default): on whenever the task has default variations
            (every event-locked task: :func:`~eegfm_bench.data.spec.default_confound_variations`); ``confound: off``
            (or ``false``) turns it off. ``eegfm-bench confound --cv <out_dir>`` runs it on a finished cv.
        variations: which of ``offset``, ``band``, ``offset+band``, ``frontal``; null: the task's defaults
            (``offset+band`` for event-locked windows; a preset may declare others, e.g. ``frontal`` for ERPs).
        offset_s: seconds after the cue where the offset windows start.
        keep_length: offset windows keep their length (end later) instead of keeping their end.
        band: the restricted band, Hz.
        frontal_channels: the electrodes the ``frontal`` variation removes.
        n_boot: bootstrap replicates of the paired interval.
    """

    enabled: Optional[bool] = None
    variations: Optional[list[str]] = None
    offset_s: float = 1.0
    keep_length: bool = False
    band: list[float] = field(default_factory=lambda: [4.0, 40.0])
    frontal_channels: list[str] = field(default_factory=lambda: list(FRONTAL))
    n_boot: int = 2000


def label(variation: str, cc: ConfoundConfig) -> str:
    """The ``condition`` of a variation's rows: ``confound=offset1s``, ``confound=band4-40``, ..."""
    parts = []
    for v in variation.split("+"):
        if v == "offset":
            parts.append(f"offset{cc.offset_s:g}s")
        elif v == "band":
            parts.append(f"band{cc.band[0]:g}-{cc.band[1]:g}")
        else:
            parts.append(v)
    return "confound=" + "+".join(parts)
