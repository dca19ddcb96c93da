"""Random channel dropout with one mask per dataset and probability (paper 003 App. D.2).

Each channel is dropped independently with probability ``p`` (Bernoulli, so ``p`` is a per-channel
probability, not a fixed fraction). One mask is drawn per (dataset, p) and shared across trials, folds and
models: it is a deterministic function of ``(seed, dataset, p)`` and the channel names, never of the batch.

How the mask is drawn (``rule``):

* ``"paper"`` (the sweep's default): the authors' rule — one ``numpy.random.default_rng(seed).uniform`` draw of
  ``n_chans`` numbers in the dataset's channel order, a channel dropped when ``u <= p``; seed 0 for every dataset
  and p. It reproduces Table 5's PhysioNet 64-channel rows (Movement-PN, Motor-Imagery-PN, Eyes) exactly on
  EEGMMIDB in MNE's channel order. The mask depends on the channel order.
* ``"hashed"``: every channel gets one uniform number ``u`` in [0, 1) from a numpy Generator seeded with
  ``(seed, sha256(dataset | CHANNEL NAME))`` and is dropped when ``u < p``: the mask does not depend on the order
  of the channels, and datasets with the same name and montage (the EEGMMIDB tasks) share it.

Both give nested masks (the channels dropped at p = 0.1 are also dropped at 0.3 and 0.5), as Table 5's are.

Two handlings (App. D.2): ``"zero"`` sets the dropped channels to 0 and keeps the channel dimension;
``"removed"`` deletes them and returns the remaining channel names (only for models that accept a variable
channel set).

Channel names are standard 10-05 names matched case-insensitively; the old 10-20 names T3, T4, T5, T6 are
the same electrodes as T7, T8, P7, P8.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from eegfm_bench.perturb.arrays import to_numpy
from eegfm_bench.registry import UnknownNameError

DROPOUT_PROBS: tuple[float, ...] = (0.1, 0.3, 0.5)
"""Per-channel dropout probabilities of App. D.2."""

HANDLINGS: tuple[str, ...] = ("zero", "removed")
"""How dropped channels are handled: zero-padded (channel count kept) or removed."""

_OLD_1020 = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}


def channel_key(name: str) -> str:
    """Case-insensitive matching key of a channel name (upper case; T3/T4/T5/T6 → T7/T8/P7/P8)."""
    key = name.strip().upper()
    return _OLD_1020.get(key, key)


def channel_index(ch_names: Sequence[str]) -> dict[str, int]:
    """Map :func:`channel_key` → position in ``ch_names``.

    Raises
    ------
    ValueError
        If two channel names have the same key (e.g. ``'Cz'`` and ``'CZ'``, or ``'T3'`` and ``'T7'``).
    """
    out: dict[str, int] = {}
    for i, name in enumerate(ch_names):
        key = channel_key(name)
        if key in out:
            raise ValueError(
                f"channels {ch_names[out[key]]!r} and {name!r} name the same electrode; "
                "fix: drop one of them in preprocessing"
            )
        out[key] = i
    return out


def check_handling(handling: str) -> str:
    """Return ``handling`` if it is ``"zero"`` or ``"removed"``; raise :class:`UnknownNameError` otherwise."""
    if handling not in HANDLINGS:
        raise UnknownNameError(f"unknown channel handling {handling!r}. Valid handlings: {', '.join(HANDLINGS)}.")
    return handling


@dataclass(frozen=True)
class DropoutMask:
    """A dataset-level random dropout mask, recorded by channel name (App. D.2).

    Attributes
    ----------
    dataset : str
        Dataset name the mask belongs to.
    seed : int
        Perturbation seed.
    p : float
        Per-channel dropout probability.
    ch_names : tuple of str
        The montage, in the data's order.
    dropped : tuple of str
        Dropped channels, in montage order.
    """

    dataset: str
    seed: int
    p: float
    ch_names: tuple[str, ...]
    dropped: tuple[str, ...]

    @property
    def kept(self) -> tuple[str, ...]:
        """Channels that are not dropped, in montage order."""
        drop = set(self.dropped)
        return tuple(n for n in self.ch_names if n not in drop)

    @property
    def n_dropped(self) -> int:
        """Number of dropped channels."""
        return len(self.dropped)

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable record of the mask (for result rows and the run's provenance)."""
        return {"dataset": self.dataset, "seed": self.seed, "p": self.p, "n_chans": len(self.ch_names),
                "n_dropped": self.n_dropped, "dropped": list(self.dropped)}


def channel_uniforms(ch_names: Sequence[str], seed: int, dataset: str) -> np.ndarray:
    """One uniform number in [0, 1) per channel, a function of ``(seed, dataset, channel name)`` only.

    Parameters
    ----------
    ch_names : sequence of str
        Channel names (matched by :func:`channel_key`, so case does not matter).
    seed : int
        Perturbation seed.
    dataset : str
        Dataset name.

    Returns
    -------
    numpy.ndarray, shape (n_chans,)

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    ValueError
        If ``dataset`` is empty or two channel names name the same electrode.
    """
    _check_seed(seed, ch_names)
    if not dataset:
        raise ValueError("dataset name is empty; fix: pass the dataset's registry name, e.g. 'eegmmidb'")
    out = np.empty(len(ch_names))
    for i, name in enumerate(ch_names):
        digest = hashlib.sha256(f"{dataset}|{channel_key(name)}".encode()).digest()
        words = [int.from_bytes(digest[j:j + 4], "little") for j in range(0, 16, 4)]
        out[i] = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(seed) >> 32, *words]).random()
    return out


def paper_uniforms(ch_names: Sequence[str], seed: int, dataset: str = "") -> np.ndarray:
    """The uniforms of the paper's masks: one ``numpy.random.default_rng(seed).uniform(size=n_chans)`` draw, in the
    dataset's channel order (paper 003 App. D.2; the authors' corruption runs, seed 0 for every dataset and p).

    With seed 0 and EEGMMIDB's 64 channels in MNE's eegbci order this reproduces Table 5's PhysioNet rows exactly
    (tested). Unlike :func:`channel_uniforms` the mask depends on the channel order, not on the dataset name: every
    dataset with the same number of channels gets the same positions (the draw of a 19-channel montage is the first
    19 values of the 64-channel draw).

    Returns
    -------
    numpy.ndarray, shape (n_chans,)

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    ValueError
        If two channel names name the same electrode.
    """
    _check_seed(seed, ch_names)
    return np.random.default_rng(int(seed)).uniform(size=len(ch_names))


def _check_seed(seed, ch_names: Sequence[str]) -> None:
    """TypeError unless ``seed`` is an int; ValueError if two names are one electrode (:func:`channel_index`)."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    channel_index(ch_names)


def dropout_mask(ch_names: Sequence[str], p: float, seed: int, dataset: str, rule: str = "hashed") -> DropoutMask:
    """The dataset-level random channel dropout mask for probability ``p`` (paper 003 App. D.2).

    Parameters
    ----------
    ch_names : sequence of str
        The dataset's channel names, in the data's order.
    p : float
        Per-channel dropout probability, in (0, 1) (paper: 0.1, 0.3, 0.5).
    seed : int
        Perturbation seed: use one fixed seed for a whole sweep (not the per-run training seed) so that every
        fold and model sees the same mask.
    dataset : str
        Dataset name (the tasks of one recording set share it and therefore share the mask).
    rule : {"hashed", "paper"}
        How the uniforms are drawn: ``"hashed"`` per channel name (:func:`channel_uniforms`), ``"paper"`` as the
        paper's runs (:func:`paper_uniforms`).

    Returns
    -------
    DropoutMask

    Raises
    ------
    ValueError
        If ``p`` is not in (0, 1), a channel name is duplicated, the mask drops every channel, or ``rule`` is
        unknown.
    """
    p = float(p)
    if not (math.isfinite(p) and 0.0 < p < 1.0):
        raise ValueError(f"dropout probability must be in (0, 1), got {p}")
    names = tuple(ch_names)
    if rule == "hashed":
        u = channel_uniforms(names, seed, dataset)
        dropped = tuple(n for n, ui in zip(names, u) if ui < p)
    elif rule == "paper":
        u = paper_uniforms(names, seed, dataset)
        dropped = tuple(n for n, ui in zip(names, u) if ui <= p)  # the authors keep u > p
    else:
        raise ValueError(f"unknown dropout mask rule {rule!r}; valid: paper, hashed")
    if len(dropped) == len(names):
        raise ValueError(
            f"dropout p={p} with seed {seed} drops all {len(names)} channels of {dataset!r}; "
            "fix: random dropout is unsuitable for this montage (paper 003 omits the sleep datasets)"
        )
    return DropoutMask(dataset=dataset, seed=int(seed), p=p, ch_names=names, dropped=dropped)


def _drop_indices(ch_names: Sequence[str], drop: Sequence[str]) -> np.ndarray:
    index = channel_index(ch_names)
    missing = [n for n in drop if channel_key(n) not in index]
    if missing:
        raise ValueError(f"channels {missing} to drop are not in the montage {list(ch_names)}")
    idx = sorted({index[channel_key(n)] for n in drop})
    if len(idx) == len(ch_names):
        raise ValueError("dropping every channel leaves no signal; fix: drop fewer channels")
    return np.asarray(idx, dtype=int)


def zero_channels(x: Any, ch_names: Sequence[str], drop: Sequence[str]) -> tuple[Any, list[str]]:
    """Zero-pad channels: set the named channels to 0, keeping the channel dimension (App. D.2, D.3).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    drop : sequence of str
        Channels to zero (case-insensitive; each must be in ``ch_names``).

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans, n_times)
    ch_names_out : list of str
        Unchanged channel names.

    Raises
    ------
    ValueError
        If a name in ``drop`` is not in ``ch_names`` or ``drop`` covers every channel.
    """
    arr, restore = to_numpy(x, ch_names)
    out = arr.copy()
    if len(drop):
        out[:, _drop_indices(ch_names, drop)] = 0
    return restore(out), list(ch_names)


def remove_channels(x: Any, ch_names: Sequence[str], drop: Sequence[str]) -> tuple[Any, list[str]]:
    """Remove channels: delete the named channels and return the remaining names (App. D.2, D.3).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    drop : sequence of str
        Channels to remove (case-insensitive; each must be in ``ch_names``).

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans - n_removed, n_times)
    ch_names_out : list of str
        Kept channel names, in the original order.

    Raises
    ------
    ValueError
        If a name in ``drop`` is not in ``ch_names`` or ``drop`` covers every channel.
    """
    arr, restore = to_numpy(x, ch_names)
    gone = set(_drop_indices(ch_names, drop).tolist()) if len(drop) else set()
    keep = [i for i in range(len(ch_names)) if i not in gone]
    return restore(arr[:, keep].copy()), [ch_names[i] for i in keep]


def drop_channels(x: Any, ch_names: Sequence[str], drop: Sequence[str], handling: str) -> tuple[Any, list[str]]:
    """Zero-pad (``handling="zero"``) or remove (``handling="removed"``) the named channels.

    See :func:`zero_channels` and :func:`remove_channels` for shapes and errors.

    Raises
    ------
    UnknownNameError
        If ``handling`` is not ``"zero"`` or ``"removed"``.
    """
    if check_handling(handling) == "zero":
        return zero_channels(x, ch_names, drop)
    return remove_channels(x, ch_names, drop)


def random_dropout(x: Any, ch_names: Sequence[str], p: float, seed: int, dataset: str,
                   handling: str) -> tuple[Any, list[str], DropoutMask]:
    """Random channel dropout with the dataset-level mask (paper 003 App. D.2).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Windows, µV.
    ch_names : sequence of str
        Channel names of ``x``.
    p : float
        Per-channel dropout probability (paper: 0.1, 0.3, 0.5).
    seed : int
        Perturbation seed (fixed for the sweep).
    dataset : str
        Dataset name.
    handling : {"zero", "removed"}
        Zero-pad (shape kept) or remove the dropped channels.

    Returns
    -------
    x_out : same type as ``x``, shape (batch, n_chans, n_times) or (batch, n_kept, n_times)
    ch_names_out : list of str
    mask : DropoutMask
        The mask, to be recorded with the results.
    """
    mask = dropout_mask(ch_names, p, seed, dataset)
    x_out, names = drop_channels(x, ch_names, mask.dropped, handling)
    return x_out, names, mask
