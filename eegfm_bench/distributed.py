"""Rank helpers for commands that run under Lightning's DDP (docs/guide/architecture.md, "Distributed correctness").

Every command runs as a *script* under ``strategy: ddp``: Lightning's launcher re-executes the command line once
per extra device (``LOCAL_RANK`` set in the children's environment), so the orchestration code runs on every
rank and must take the same decisions everywhere; only global rank 0 writes files (:func:`is_global_zero`).
Inside a loop, the per-window outputs of every rank are gathered (:func:`gather_objects`) and the
``DistributedSampler``'s padding is removed by window index (:func:`merge_by_index`), so each test or predict
window is counted exactly once, whatever the number of devices.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import torch.distributed as dist

_RANK_VARS = ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK")


def _dist():
    return dist if dist.is_available() and dist.is_initialized() else None


def world_size() -> int:
    """Processes in the current process group (1 when none is initialised)."""
    d = _dist()
    return d.get_world_size() if d is not None else 1


def global_rank() -> int:
    """This process's global rank: the process group's when initialised, else read from the launcher's
    environment (``RANK``, ``SLURM_PROCID``, ``LOCAL_RANK`` / ``NODE_RANK``), 0 in a plain single process.

    Before the first ``Trainer`` call of a DDP command, rank 0 has no group yet and its children already carry
    ``LOCAL_RANK`` (and, on other nodes, ``NODE_RANK``): a process is rank 0 only if every such variable is 0.
    """
    d = _dist()
    if d is not None:
        return int(d.get_rank())
    for var in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if os.environ.get(var):
            return int(os.environ[var])
    local, node = int(os.environ.get("LOCAL_RANK", 0) or 0), int(os.environ.get("NODE_RANK", 0) or 0)
    return local if node == 0 else node * 1_000_000 + local  # any non-zero value means "not rank 0"


def is_global_zero() -> bool:
    """True on the process that writes files (global rank 0)."""
    return global_rank() == 0


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    d = _dist()
    if d is not None:
        d.barrier()


def gather_objects(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (``[obj]`` without a process group).

    Uses ``torch.distributed.all_gather_object`` (gloo and NCCL), so the objects may differ in size across ranks
    (a ``DistributedSampler`` gives ranks one window more or less).
    """
    d = _dist()
    if d is None or d.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * d.get_world_size()
    d.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (``obj`` itself without a process group)."""
    d = _dist()
    if d is None or d.get_world_size() == 1:
        return obj
    box = [obj]
    d.broadcast_object_list(box, src=src)
    return box[0]


def merge_by_index(parts: Sequence[Mapping[str, np.ndarray]], key: str = "index") -> dict[str, np.ndarray]:
    """Concatenate per-rank (or per-batch) arrays and keep one row per window, sorted by ``key``.

    Parameters
    ----------
    parts : sequence of mapping str -> ndarray
        Each holds ``key`` (int, shape ``(n_i,)``) and arrays whose first axis has length ``n_i``.
    key : str
        The window index column.

    Returns
    -------
    dict str -> ndarray
        Rows with a unique ``key``, ascending. A window that several ranks predicted (the sampler's padding
        repeats the first windows on the last ranks) is kept once: the first occurrence.

    Raises
    ------
    ValueError
        If the parts hold different columns, or one column's length differs from its part's index.
    """
    parts = [p for p in parts if p and key in p and len(np.asarray(p[key]))]
    if not parts:
        return {}
    cols = set(parts[0])
    for p in parts:
        if set(p) != cols:
            raise ValueError(f"parts hold different columns: {sorted(cols)} vs {sorted(p)}")
        n = len(np.asarray(p[key]))
        bad = [c for c in p if len(np.asarray(p[c])) != n]
        if bad:
            raise ValueError(f"columns {bad} do not have one row per {key!r} ({n} rows)")
    out = {c: np.concatenate([np.asarray(p[c]) for p in parts]) for c in cols}
    _, first = np.unique(out[key], return_index=True)  # sorted by key; first occurrence of each
    return {c: v[first] for c, v in out.items()}


def gather_by_index(local: Mapping[str, np.ndarray], key: str = "index") -> dict[str, np.ndarray]:
    """:func:`gather_objects` then :func:`merge_by_index`: every rank's rows, each window once, on every rank."""
    return merge_by_index(gather_objects(dict(local)), key)
