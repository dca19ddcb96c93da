"""The confound check's settings (:class:`ConfoundConfig`), resolved against a task and checked before any data is
read; the check itself (retraining every cell on other windows) is :mod:`eegfm_bench.runs.cv.confound`."""
from __future__ import annotations

from dataclasses import asdict

from eegfm_bench.config import ConfigError
from eegfm_bench.config.task import TaskSpec
from eegfm_bench.data.spec import default_confound_variations
from eegfm_bench.config.confound import ConfoundConfig

VARIATIONS = ("offset", "band", "offset+band", "frontal")


ALL_ON_REQUEST = ["offset", "band", "offset+band"]
"""What ``eegfm-bench confound --cv`` runs for a task without default variations (nothing declared, fixed windows
excepted): each of offset and band alone and together."""


def resolve_confound(cc, task_spec: TaskSpec) -> dict:
    """The confound section with ``enabled`` and ``variations`` resolved against the task (safe by
    default): ``confound: off`` / ``false`` → disabled; ``enabled: null`` → on when the task has default variations;
    ``variations: null`` → the task's defaults (:func:`~eegfm_bench.data.spec.default_confound_variations`)."""
    base = asdict(ConfoundConfig())
    if cc is False or cc is None:
        out = {**base, "enabled": False}
    elif cc is True:
        out = {**base, "enabled": True}
    else:
        out = {**base, **dict(cc)}
    defaults = default_confound_variations(task_spec)
    if out["variations"] is None:
        out["variations"] = defaults if defaults or out["enabled"] is not True else \
            [v for v in ALL_ON_REQUEST if "offset" not in v or task_spec.windows.mode == "events"]
    if out["enabled"] is None:
        out["enabled"] = bool(out["variations"])
    return out


def check_confound(cc: ConfoundConfig | None, task_spec: TaskSpec) -> None:
    """Refuse a confound section that cannot apply, before any data is read.

    Raises
    ------
    ConfigError
        An unknown variation, an offset <= 0, a band that is not ``[lo, hi]`` with ``0 <= lo < hi``, or a task
        whose windows are not locked to events (``windows.mode: events``).
    """
    if cc is None or not cc.enabled:
        return
    bad = [v for v in cc.variations if v not in VARIATIONS]
    if bad or not cc.variations:
        raise ConfigError(f"confound.variations {cc.variations}: fix: a non-empty list of {list(VARIATIONS)}")
    if not float(cc.offset_s) > 0:
        raise ConfigError(f"confound.offset_s = {cc.offset_s}; fix: seconds > 0 after the cue (default 1)")
    b = cc.band
    if len(b) != 2 or not 0 <= float(b[0]) < float(b[1]):
        raise ConfigError(f"confound.band {b}; fix: [lo, hi] in Hz with 0 <= lo < hi (default [4, 40])")
    mode = task_spec.windows.mode
    if mode != "events" and any("offset" in v for v in cc.variations):
        raise ConfigError(f"confound: the offset variation starts windows after the cue, but the task's windows are "
                          f"not locked to events (windows.mode: {mode}); fix: variations without offset (band, frontal) "
                          "or confound.enabled: false for this task")
