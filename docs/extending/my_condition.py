"""A perturbation condition: ``flat=<k>`` sets ``k`` randomly chosen channels of every window to a flat line
(their mean), as a disconnected electrode whose amplifier holds its last value would."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eegfm_bench.perturb.conditions import CONDITION_KINDS, Condition, PlotFamily

FLAT = PlotFamily("Flat channels", "flat channels per window", clean_level=0.0)


@CONDITION_KINDS.register("flat")
@dataclass(frozen=True)
class FlatChannels(Condition):
    """``flat=<k>``: ``k`` channels per window, drawn from the window's own generator, replaced by their mean."""

    k: int

    @property
    def name(self) -> str:  # the string in result rows; parse(name) gives the condition back
        return f"flat={self.k}"

    @property
    def display_name(self) -> str:  # the page's table for this perturbation type
        return "flat channels (count)"

    @property
    def plot(self):  # its panel and level in the degradation curves
        return FLAT, float(self.k)

    def apply(self, x, ch_names, rng, ctx):
        out = np.array(x, dtype=np.float64, copy=True)  # (batch, n_chans, n_times), µV
        b, c, _ = out.shape
        # one draw per window: row i from window i's generator, so a window's perturbation ignores its batch
        order = np.argsort(rng.random(size=(b, c)), axis=1)[:, : self.k]
        for i in range(b):
            out[i, order[i]] = out[i, order[i]].mean(axis=-1, keepdims=True)
        return out.astype(np.asarray(x).dtype), list(ch_names)

    @classmethod
    def parse(cls, head: str, value: str | None, text: str) -> "FlatChannels":
        return cls(int(value))
