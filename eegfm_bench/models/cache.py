"""Token cache: frozen-backbone representations computed once per (checkpoint, data, preprocessing).

Head-only training and every analysis of frozen features read this cache instead of repeating the
backbone forward (DESIGN.md "Adaptation").
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from eegfm_bench.data.windows import WindowSet, default_cache_dir


def token_cache_key(backbone: str, init: str, arch: dict, ws: WindowSet) -> str:
    """sha256 (16 hex) of (backbone, init tag, architecture kwargs, window-set cache key, window rows)."""
    rows = hashlib.sha256(np.asarray(ws.recording).astype(str).tobytes() + np.asarray(ws.window_index).tobytes()).hexdigest()
    blob = json.dumps({"backbone": backbone, "init": init, "arch": arch, "ws": ws.meta.get("cache_key"), "rows": rows},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@torch.no_grad()
def compute_tokens(adapter: torch.nn.Module, ws: WindowSet, *, init: str, cache_dir: str | os.PathLike | None = None,
                   batch_size: int = 32, device: str | torch.device = "cpu", progress: bool = True) -> np.ndarray:
    """Tokens of every window, cached on disk as a memory-mapped ``.npy``.

    Parameters
    ----------
    adapter : BackboneAdapter
        Frozen backbone (put in eval mode here).
    ws : WindowSet
        Windows ``(n_windows, n_chans, n_times)`` in the backbone's unit.
    init : str
        The init tag (``random`` / ``pretrained:<id>@<sha>``) — part of the cache key.

    Returns
    -------
    ndarray, shape (n_windows, n_tokens, d_model), float32 (memory-mapped)
    """
    name = getattr(adapter, "name", type(adapter).__name__)
    key = token_cache_key(name, init, getattr(adapter, "arch_kwargs", {}), ws)
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    path = folder / "tokens" / f"{name}-{key}.npy"
    if path.is_file():
        return np.load(path, mmap_mode="r")
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = adapter.training
    adapter.eval().to(device)
    out = None
    tmp = path.with_name(path.name + ".tmp.npy")
    for start in tqdm(range(0, len(ws), batch_size), desc=f"caching {name} tokens", disable=not progress, unit="batch"):
        x = torch.from_numpy(np.asarray(ws.X[start:start + batch_size], dtype=np.float32)).to(device)
        t = adapter.tokens(x, ws.ch_names).float().cpu().numpy()
        if out is None:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(ws),) + t.shape[1:])
        out[start:start + len(t)] = t
    out.flush()
    del out
    os.replace(tmp, path)
    adapter.train(was_training)
    return np.load(path, mmap_mode="r")
