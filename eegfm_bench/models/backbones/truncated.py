"""Depth truncation (paper 003 App. I.6): keep blocks ``0..k`` of a backbone and attach the configured head.

:func:`truncate_blocks` replaces the ``nn.ModuleList`` that holds an adapter's ``blocks`` with its first
``k + 1`` entries, whatever attribute path it lives at (LaBraM ``model.blocks``, CBraMod
``model.encoder.layers``, BIOT ``model.encoder.transformer.layers.layers``); everything after the blocks
(LaBraM's final LayerNorm, the pooling head) is kept, so the head sees block ``k``'s output through the
backbone's usual output path.

The package registers the truncated variants as backbones ``<name>_truncated`` (``labram_truncated``,
``cbramod_truncated``, ``biot_truncated``, ``reve_truncated``; :func:`make_truncated`) with one extra argument
``depth`` (index ``k`` of the last kept block; ``None`` keeps all). REVE's own architecture argument of that name
(the number of layers) is given as ``n_layers`` to ``reve_truncated``. They inherit the base adapter's preprocessing and channel
contract, keep its ``name`` (so checkpoints of the base backbone load), and drop the removed blocks' weights
from a pretrained checkpoint before the strict load (reported by the loader like LaBraM's temporal-embedding
cut). The depth sweep itself is :func:`eegfm_bench.runs.cv.truncation.run_depth_sweep`.

EEGNet's ``blocks`` are two dropout layers of one flat ``nn.Sequential`` (no block list to cut): it has no
truncated variant.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from eegfm_bench.models.base import BackboneAdapter


class TruncationError(ValueError):
    """A backbone without a block list, or a depth outside ``0..L−1``."""


def blocks_container(adapter: nn.Module) -> tuple[nn.Module, str, str, nn.ModuleList]:
    """Find the ``nn.ModuleList`` whose entries are exactly ``adapter.blocks`` (same objects, same order).

    Returns
    -------
    parent : nn.Module
    attr : str
        Attribute of ``parent`` holding the list.
    path : str
        Dotted path of the list relative to ``adapter`` (e.g. ``model.encoder.layers``).
    blocks : nn.ModuleList

    Raises
    ------
    TruncationError
        If no ModuleList holds the blocks (e.g. EEGNet).
    """
    blocks = list(adapter.blocks)
    for path, mod in adapter.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == len(blocks) and all(a is b for a, b in zip(mod, blocks)):
            parent_path, _, attr = path.rpartition(".")
            parent = adapter.get_submodule(parent_path) if parent_path else adapter
            return parent, attr, path, mod
    name = getattr(adapter, "name", type(adapter).__name__)
    raise TruncationError(f"{name}'s blocks are not held in one nn.ModuleList (e.g. EEGNet's blocks are dropout layers "
                          "of a flat Sequential), so it cannot be truncated; depth truncation applies to "
                          f"{sorted(TRUNCATABLE)}")


def truncate_blocks(adapter: nn.Module, depth: int) -> nn.Module:
    """Keep blocks ``0..depth`` of ``adapter`` (in place) and return it.

    Parameters
    ----------
    adapter : BackboneAdapter
    depth : int
        Index of the last kept block, ``0 ≤ depth ≤ L − 1`` (``L − 1`` keeps all).

    Raises
    ------
    TruncationError
        Depth out of range or no block list.
    """
    parent, attr, _, blocks = blocks_container(adapter)
    n = len(blocks)
    if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth < n:
        raise TruncationError(f"depth must be an int in 0..{n - 1} (index of the last kept block of {n}), got {depth!r}")
    setattr(parent, attr, nn.ModuleList(list(blocks)[: depth + 1]))
    return adapter


TRUNCATABLE = ("labram", "cbramod", "biot", "reve")


def make_truncated(base: type[BackboneAdapter]) -> type[BackboneAdapter]:
    class Truncated(base):  # type: ignore[misc, valid-type]
        derived_from = base.name
        __doc__ = (f"``{base.name}`` with blocks ``0..depth`` only (paper 003 App. I.6); see "
                   ":mod:`eegfm_bench.models.backbones.truncated`.")

        def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, depth: int | None = None,
                     **kwargs: Any):
            super().__init__(ch_names, n_times, n_outputs, **kwargs)
            _, _, self._blocks_path, full = blocks_container(self)
            self.full_depth = len(full)
            self.depth = self.full_depth - 1 if depth is None else depth
            self.arch_kwargs["depth"] = self.depth  # recorded in configs, checkpoints and cache keys
            if depth is not None:
                truncate_blocks(self, int(depth))

        def adapt_state_dict(self, state):
            """Drop the weights of blocks past ``depth`` from a full-depth checkpoint (reported), then the base's."""
            notes = []
            prefix = self._blocks_path.removeprefix("model.") + "."
            drop = [k for k in state if k.startswith(prefix) and int(k[len(prefix):].split(".")[0]) > self.depth]
            if drop:
                state = {k: v for k, v in state.items() if k not in set(drop)}
                kept = sorted({int(k[len(prefix):].split(".")[0]) for k in drop})
                notes.append(f"depth truncation: dropped blocks {kept[0]}..{kept[-1]} ({len(drop)} tensors) under "
                             f"{prefix!r}, keeping 0..{self.depth}")
            if hasattr(super(), "adapt_state_dict"):
                state, more = super().adapt_state_dict(state)
                notes += more
            return state, notes

    Truncated.__name__ = Truncated.__qualname__ = f"{base.__name__}Truncated"
    return Truncated
