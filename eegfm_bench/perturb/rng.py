"""The noise source a perturbation condition receives: one numpy Generator per window (paper 003 App. D;
docs/guide/architecture.md, "Distributed correctness").

:class:`WindowRNG` is the one type of the ``rng`` argument of
:meth:`eegfm_bench.perturb.conditions.Condition.apply`. It holds one :class:`numpy.random.Generator` per window of
the batch, seeded with the perturbation seed, the condition string and the window's identity, so a window gets the
same draws whatever the batch size, the order, the DataLoader workers or the DDP ranks. Its draw methods take
numpy's arguments, with one rule: ``size`` starts with the batch size, and row ``i`` is drawn from window ``i``'s
Generator (``size[1:]`` values). A draw without ``size`` (one value for the whole batch) is refused: it would make
a window's perturbation depend on which windows share its batch. For anything else, ``rng[i]`` is window ``i``'s
Generator.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from eegfm_bench.errors import EEGFMError


class WindowRNGError(EEGFMError, ValueError):
    """A draw from a :class:`WindowRNG` without a per-window ``size`` (or with another batch size)."""


def check_seed(seed) -> int:
    """``seed`` as an int; raises ``TypeError`` for anything else (a bool included)."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return int(seed)


def condition_words(seed: int, condition: str) -> list[int]:
    """The seed words of one (perturbation seed, condition string): the seed's two 32-bit halves and the first
    16 bytes of the condition's sha256 as four little-endian words."""
    digest = hashlib.sha256(str(condition).encode()).digest()
    return [int(seed) & 0xFFFFFFFF, int(seed) >> 32, *[int.from_bytes(digest[j:j + 4], "little") for j in range(0, 16, 4)]]


class WindowRNG:
    """One numpy Generator per window of a batch, with Generator-like draws over the batch axis.

    Parameters
    ----------
    generators : sequence of numpy.random.Generator
        Window ``i``'s Generator at position ``i`` (batch order).

    Notes
    -----
    Draw methods (``standard_normal``, ``normal``, ``uniform``, ``integers``, ``random``, ``choice``) take numpy's
    arguments; ``size`` must be an int or tuple whose first entry is ``len(rng)``; the result has shape ``size``
    and its row ``i`` equals ``rng[i].<method>(..., size=size[1:])``. Distribution parameters (``loc``, ``low``,
    ...) are shared by all windows; for per-window parameters draw from ``rng[i]`` in a loop.

    Examples
    --------
    >>> rng = WindowRNG.for_windows(0, "my_cond=1", [11, 12, 13])
    >>> rng.uniform(-1.0, 1.0, size=(3, 4)).shape
    (3, 4)
    """

    def __init__(self, generators: Sequence[np.random.Generator]):
        self.gens = list(generators)
        for g in self.gens:
            if not isinstance(g, np.random.Generator):
                raise TypeError(f"WindowRNG holds numpy Generators, got {type(g).__name__}")

    @classmethod
    def for_windows(cls, seed: int, condition: str, uids: Sequence[int]) -> "WindowRNG":
        """The sweep's source: window ``i``'s Generator is seeded with (``seed``, ``condition``, ``uids[i]``).

        Parameters
        ----------
        seed : int
            Perturbation seed.
        condition : str
            Canonical condition string (:func:`eegfm_bench.perturb.conditions.format_condition`).
        uids : sequence of int (uint64)
            Window identities, batch order (:func:`eegfm_bench.perturb.dataset.window_uids`).
        """
        words = condition_words(seed, condition)
        return cls([np.random.default_rng([*words, int(u) & 0xFFFFFFFF, int(u) >> 32]) for u in np.asarray(uids)])

    @classmethod
    def from_seed(cls, seed: int, condition: str, n_windows: int) -> "WindowRNG":
        """A source for ``n_windows`` windows numbered 0 .. n−1 (direct calls outside a sweep, tests).

        Raises
        ------
        TypeError
            If ``seed`` is not an int.
        """
        return cls.for_windows(check_seed(seed), condition, np.arange(int(n_windows), dtype=np.uint64))

    def __len__(self) -> int:
        return len(self.gens)

    def __getitem__(self, i: int) -> np.random.Generator:
        return self.gens[i]

    def __iter__(self) -> Iterator[np.random.Generator]:
        return iter(self.gens)

    def _draw(self, method: str, size: Any, draw: Callable[[np.random.Generator, tuple], Any]) -> np.ndarray:
        if size is None:
            raise WindowRNGError(
                f"WindowRNG.{method} without size draws one value for the whole batch, so a window's perturbation "
                f"would depend on its batch; fix: pass size=(len(rng), ...) (row i from window i) or draw from rng[i]")
        shape = (int(size),) if np.isscalar(size) else tuple(int(s) for s in size)
        if not shape or shape[0] != len(self.gens):
            raise WindowRNGError(f"WindowRNG.{method}(size={shape}) for a batch of {len(self.gens)} windows; fix: the "
                                 f"first entry of size is the batch size, len(rng) = {len(self.gens)}")
        if not self.gens:
            return np.empty(shape, dtype=np.asarray(draw(np.random.default_rng(0), shape[1:])).dtype)
        return np.stack([draw(g, shape[1:]) for g in self.gens])

    def standard_normal(self, size, dtype=np.float64) -> np.ndarray:
        """Standard normal draws, shape ``size`` (``size[0] = len(self)``)."""
        return self._draw("standard_normal", size, lambda g, s: g.standard_normal(s, dtype=dtype))

    def normal(self, loc=0.0, scale=1.0, size=None) -> np.ndarray:
        """Normal draws (mean ``loc``, standard deviation ``scale``), shape ``size``."""
        return self._draw("normal", size, lambda g, s: g.normal(loc, scale, s))

    def uniform(self, low=0.0, high=1.0, size=None) -> np.ndarray:
        """Uniform draws on ``[low, high)``, shape ``size``."""
        return self._draw("uniform", size, lambda g, s: g.uniform(low, high, s))

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False) -> np.ndarray:
        """Integers on ``[low, high)`` (``[low, high]`` with ``endpoint``), shape ``size``."""
        return self._draw("integers", size, lambda g, s: g.integers(low, high, s, dtype=dtype, endpoint=endpoint))

    def random(self, size=None, dtype=np.float64) -> np.ndarray:
        """Uniform floats on ``[0, 1)``, shape ``size``."""
        return self._draw("random", size, lambda g, s: g.random(s, dtype=dtype))

    def choice(self, a, size=None, replace=True, p=None) -> np.ndarray:
        """Samples of ``a`` (numpy's :meth:`~numpy.random.Generator.choice`), shape ``size``."""
        return self._draw("choice", size, lambda g, s: g.choice(a, s, replace=replace, p=p))
