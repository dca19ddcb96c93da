"""A perturbation condition written outside the package, as a user would (docs/guide/protocols.md, "Writing a
perturbation condition"): spike artefacts at random times, channels, amplitudes and signs, drawn with
``rng.integers`` / ``rng.uniform`` / ``rng.normal``. Registered through the entry point group
``eegfm_bench.conditions`` (the tests write a dist-info that declares ``spikes = user_condition:Spikes``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eegfm_bench.perturb.conditions import Condition, PlotFamily

SPIKES = PlotFamily("Spike artefacts", "spikes per window", clean_level=0.0)
SPIKE_SAMPLES = 8


@dataclass(frozen=True)
class Spikes(Condition):
    """``spikes=<n>``: ``n`` rectangular spikes of 50-150 µV, 8 samples long, per window."""

    n: int

    @property
    def name(self) -> str:
        return f"spikes={self.n}"

    @property
    def display_name(self) -> str:
        return "spike artefacts (count)"

    @property
    def plot(self):
        return SPIKES, float(self.n)

    def apply(self, x, ch_names, rng, ctx):
        out = np.array(x, dtype=np.float64, copy=True)
        b, c, t = out.shape
        start = rng.integers(0, t - SPIKE_SAMPLES, size=(b, self.n))
        chan = rng.integers(0, c, size=(b, self.n))
        amp = rng.uniform(50.0, 150.0, size=(b, self.n)) * np.sign(rng.normal(0.0, 1.0, size=(b, self.n)))
        for i in range(b):
            for k in range(self.n):
                out[i, chan[i, k], start[i, k]:start[i, k] + SPIKE_SAMPLES] += amp[i, k]
        return out.astype(np.asarray(x).dtype), list(ch_names)

    @classmethod
    def parse(cls, head, value, text):
        return cls(int(value))
