"""One feature cache for frozen-backbone tokens and block outputs, filled by ``Trainer.predict``.

Head-only training (tokens), the block-wise probes (every block's output), the attention maps' inputs and the
controls' and provenance demo's embeddings all read frozen-backbone representations. They are computed once per
(backbone weights, data, preprocessing, precision) by :func:`extract_features`: a ``lightning.Trainer`` runs
``predict`` over the windows with :class:`FeatureExtractor` (the backbone's ``tokens`` plus forward hooks on its
``blocks``) and :class:`FeatureWriter` stores every window's arrays by window index into memory-mapped ``.npy``
files of one cache entry. So feature extraction inherits devices, DDP and precision from the command's
``trainer:`` section like every other forward pass.

**Cache entry** ``<cache>/features/<backbone>-<key>/``: ``<part>.npy`` (one row per window, in the order of
``rows``), ``rows.npy`` (WindowSet row indices), ``meta.json`` and ``COMPLETE``. ``key`` hashes the backbone
name and architecture, the sha256 of its weights (:func:`state_hash`: the same weights give the same entry
whichever checkpoint file they came from), the window set's cache key, the rows' identities
(recording, window index), the channel names, the requested parts, the storage dtypes (the tokens' dtype when it
is not float32: a float16 entry is never opened for float32 tokens), the Trainer precision and :data:`CACHE_VERSION`. An entry is written to ``<entry>.partial-<writer>`` and renamed when complete, so an interrupted run
never leaves a half entry that looks finished.

**Parts**: ``tokens`` — ``tokens(x, ch_names)`` ``(n, n_tokens, d_model)``, stored float32, or float16 with
``dtype="float16"`` (the cv's ``data.feature_dtype``: half the disk; readers cast each batch back to float32, and a
value beyond float16's range is refused, never stored as ``inf``); ``blocks`` — for every block
``i`` the output reshaped by the adapter's ``block_to_tokens`` to ``(n, n_tokens_b, d_b)``, stored as
``block_tokens_XX`` (float16; only with ``store_block_tokens``) and its mean over tokens ``block_mean_XX``
``(n, d_b)`` (float32, pooled before the cast).

**DDP**: each rank predicts a share of the windows (Lightning's unrepeated sampler for predict); on one device the
writer fills the entry's memmaps directly; on several, every rank writes its batches to its own chunk files and
rank 0 assembles the entry by window index (duplicates dropped), so the entry is identical on 1 or N devices.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from eegfm_bench.data.cache import BuildLock, mark_used
from eegfm_bench.data.datamodule import WindowDataset
from eegfm_bench.data.windows import WindowSet, publish_entry, default_cache_dir
from eegfm_bench.distributed import barrier, broadcast_object, is_global_zero, world_size
from eegfm_bench.errors import EEGFMError
from eegfm_bench.models.heads import pool_tokens
from eegfm_bench.models.user import hashable_user_spec
from eegfm_bench.trainer import build_trainer, pad_to_ranks, predict_gathered

CACHE_VERSION = 3
PARTS = ("tokens", "blocks")
TOKEN_DTYPES = ("float32", "float16")
"""Storage dtypes of the cached ``tokens`` (``data.feature_dtype``)."""


class FeatureCacheError(RuntimeError):
    """A feature cache entry is missing a part, or the extraction's hooks did not fire."""


class FeatureDtypeError(FeatureCacheError, EEGFMError):
    """Tokens that do not fit the requested storage dtype (float16's largest finite value is 65504): refused
    rather than stored as ``inf``; the message names the setting to change."""


def state_hash(module: nn.Module) -> str:
    """sha256 (16 hex) of a module's ``state_dict`` (names, dtypes, shapes and values).

    Identifies the *weights* features were computed with, whatever the checkpoint file they came from.
    """
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        t = t.reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def rows_hash(ws: WindowSet, rows: np.ndarray) -> str:
    """sha256 of the identities ``(recording, window_index)`` of ``ws``'s rows ``rows``."""
    rec = np.asarray(ws.recording)[rows].astype(str)
    wi = np.asarray(ws.window_index)[rows].astype(np.int64)
    return hashlib.sha256(rec.tobytes() + wi.tobytes()).hexdigest()


def feature_key(adapter: nn.Module, ws: WindowSet, rows: np.ndarray, parts: Sequence[str], *,
                store_block_tokens: bool = True, precision: Any = "32-true", weights: str | None = None,
                dtype: str = "float32") -> str:
    """sha256 (16 hex) of everything that changes a cache entry (see the module docstring); a user model's
    declaration and source file (:func:`~eegfm_bench.models.user.hashable_user_spec`) too. ``dtype`` (the tokens'
    storage dtype) is hashed when it is not float32, so float32 entries keep the keys they had before the setting
    existed."""
    user = getattr(adapter, "user_spec", None)
    if user is not None:
        user = {"user": hashable_user_spec(user)}
    blob = json.dumps({**(user or {}), "backbone": getattr(adapter, "name", type(adapter).__name__),
                       "arch": getattr(adapter, "arch_kwargs", {}), "weights": weights or state_hash(adapter),
                       "ws": ws.meta.get("cache_key"), "rows": rows_hash(ws, rows), "ch_names": list(ws.ch_names),
                       "parts": sorted(parts), "block_tokens": bool(store_block_tokens) and "blocks" in parts,
                       "precision": str(precision), "version": CACHE_VERSION,
                       **({"tokens_dtype": str(dtype)} if str(dtype) != "float32" else {})}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ============================================================================================ the module
def block_to_tokens_fn(adapter: nn.Module):
    """The adapter's ``block_to_tokens`` (hooked block output → ``(batch, n_tokens_b, d_b)``).

    Raises
    ------
    TypeError
        If the adapter has none.
    """
    fn = getattr(adapter, "block_to_tokens", None)
    if fn is None:
        raise TypeError(f"{type(adapter).__name__} has no block_to_tokens(out); fix: implement it in the adapter "
                        "(reshape a hooked block output to (batch, n_tokens, d))")
    return fn


class FeatureExtractor(L.LightningModule):
    """``predict_step``: a frozen backbone's tokens and / or every block's output for a batch of windows.

    Parameters
    ----------
    backbone : BackboneAdapter
        Used as is (put in eval mode by the predict loop); its weights are not changed.
    ch_names : list of str
        Channel names of the windows.
    parts : sequence of {"tokens", "blocks"}
    store_block_tokens : bool
        With ``blocks``: also return every block's tokens, not only their mean.

    Batches are the DataModule's dicts (``x`` ``(batch, n_chans, n_times)``, ``index`` ``(batch,)``); the step
    returns ``{"index", "tokens", "block_mean_XX", "block_tokens_XX"}`` (float32 tensors).

    Raises
    ------
    FeatureCacheError
        If a block's hook did not fire during ``tokens`` (a block not on the tokens path).
    """

    def __init__(self, backbone: nn.Module, ch_names: Sequence[str], parts: Sequence[str] = ("tokens",),
                 store_block_tokens: bool = True):
        super().__init__()
        bad = [p for p in parts if p not in PARTS]
        if bad or not parts:
            raise ValueError(f"unknown feature parts {bad or list(parts)}; valid: {PARTS}")
        self.backbone = backbone
        self.ch_names = list(ch_names)
        self.parts = tuple(parts)
        self.store_block_tokens = bool(store_block_tokens)
        self._captured: dict[int, torch.Tensor] = {}
        self._handles: list = []

    @property
    def n_blocks(self) -> int:
        return len(list(self.backbone.blocks))

    def on_predict_start(self) -> None:
        if "blocks" in self.parts:
            to_tokens = block_to_tokens_fn(self.backbone)

            def hook(i):
                def fn(_m, _inp, out):
                    self._captured[i] = to_tokens(out[0] if isinstance(out, tuple) else out)
                return fn

            self._handles = [b.register_forward_hook(hook(i)) for i, b in enumerate(self.backbone.blocks)]

    def on_predict_end(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        self._captured.clear()
        tokens = self.backbone.tokens(batch["x"], self.ch_names)
        out = {"index": batch["index"]}
        if "tokens" in self.parts:
            out["tokens"] = tokens.float()
        if "blocks" in self.parts:
            n = self.n_blocks
            if len(self._captured) != n:
                raise FeatureCacheError(f"{getattr(self.backbone, 'name', '?')}: hooks fired for blocks "
                                        f"{sorted(self._captured)} of {n}; every block must lie on the tokens() path")
            for i in range(n):
                t = self._captured[i].float()
                out[f"block_mean_{i:02d}"] = t.mean(1)
                if self.store_block_tokens:
                    out[f"block_tokens_{i:02d}"] = t
        return out


# ============================================================================================ the writer
def _dtype_for(part: str, tokens_dtype: str = "float32") -> np.dtype:
    if part == "tokens":
        return np.dtype(tokens_dtype)
    return np.dtype(np.float16) if part.startswith("block_tokens_") else np.dtype(np.float32)


def _cast(part: str, v: np.ndarray, tokens_dtype: str) -> np.ndarray:
    """``v`` in ``part``'s storage dtype; tokens that overflow a float16 store are refused."""
    with np.errstate(over="ignore"):  # an overflow is refused below, with the fix
        out = v.astype(_dtype_for(part, tokens_dtype))
    if part == "tokens" and out.dtype != v.dtype and not np.array_equal(np.isfinite(out), np.isfinite(v)):
        raise FeatureDtypeError(f"tokens up to {float(np.nanmax(np.abs(v))):.4g} do not fit {out.dtype} (largest "
                                f"{float(np.finfo(out.dtype).max):.4g}); fix: data.feature_dtype: float32")
    return out


class FeatureWriter(BasePredictionWriter):
    """Writes every predicted batch's arrays into one cache entry, by window index (rank-aware).

    Parameters
    ----------
    folder : path
        The entry's final folder; writing happens in ``<folder>.partial-<token>`` (one per writer) and rank 0 renames it at the end.
    rows : ndarray of int, shape (n,)
        Sorted WindowSet row indices the entry holds (row ``k`` of every array is window ``rows[k]``).
    meta : dict
        Recorded in ``meta.json``; its ``tokens_dtype`` (default float32) is the tokens' storage dtype.
    """

    def __init__(self, folder: str | os.PathLike, rows: np.ndarray, meta: dict):
        super().__init__(write_interval="batch")
        self.folder = Path(folder)
        self.partial = self.folder.with_name(self.folder.name + ".partial")
        self.rows = np.asarray(rows, dtype=np.int64)
        self.meta = dict(meta)
        self.tokens_dtype = str(self.meta.get("tokens_dtype", "float32"))
        self._arrays: dict[str, np.ndarray] = {}
        self._written = np.zeros(len(self.rows), dtype=bool)
        self._chunks = 0

    def _pos(self, index: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.rows, index)
        if (pos >= len(self.rows)).any() or (self.rows[np.minimum(pos, len(self.rows) - 1)] != index).any():
            raise FeatureCacheError("the predict loop returned windows outside the entry's rows")
        return pos

    def on_predict_start(self, trainer, pl_module) -> None:
        # a partial folder of this writer's own (rank 0's token, broadcast): two jobs building the same entry at
        # once never write into one folder
        token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if world_size() > 1:
            token = trainer.strategy.broadcast(token, src=0)
        self.partial = self.folder.with_name(f"{self.folder.name}.partial-{token}")
        if is_global_zero():
            self.partial.mkdir(parents=True)
        barrier()
        self._arrays, self._chunks, self._t0 = {}, 0, time.time()
        self._written[:] = False

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx,
                           dataloader_idx=0) -> None:
        arrays = {k: v.detach().cpu().numpy() for k, v in prediction.items()}
        index = arrays.pop("index").astype(np.int64)
        if world_size() == 1:
            pos = self._pos(index)
            for k, v in arrays.items():
                if k not in self._arrays:
                    self._arrays[k] = np.lib.format.open_memmap(self.partial / f"{k}.npy", mode="w+",
                                                                dtype=_dtype_for(k, self.tokens_dtype),
                                                                shape=(len(self.rows),) + v.shape[1:])
                self._arrays[k][pos] = _cast(k, v, self.tokens_dtype)
            self._written[pos] = True
        else:
            d = self.partial / f"rank{trainer.global_rank}"
            d.mkdir(parents=True, exist_ok=True)
            np.save(d / f"index_{self._chunks:06d}.npy", index)
            for k, v in arrays.items():
                np.save(d / f"{k}_{self._chunks:06d}.npy", _cast(k, v, self.tokens_dtype))
            self._chunks += 1

    def on_predict_epoch_end(self, trainer, pl_module) -> None:
        if world_size() > 1:
            barrier()
            if is_global_zero():
                self._assemble()
        if is_global_zero():
            for a in self._arrays.values():
                a.flush()
            missing = int((~self._written).sum())
            if missing:
                raise FeatureCacheError(f"{missing} of {len(self.rows)} windows were not predicted; the entry "
                                        f"{self.folder} is left incomplete")
            self._arrays = {}
            np.save(self.partial / "rows.npy", self.rows)
            meta = {**self.meta, "n_rows": int(len(self.rows)), "seconds": round(time.time() - self._t0, 2),
                    "world_size": world_size()}
            (self.partial / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
            (self.partial / "COMPLETE").write_text("ok\n")
            publish_entry(self.partial, self.folder)  # an entry another job completed meanwhile is kept
        barrier()

    def _assemble(self) -> None:
        """Rank 0: copy every rank's chunks into the entry's memmaps by window index (first copy kept)."""
        for rank_dir in sorted(self.partial.glob("rank*")):
            for idx_file in sorted(rank_dir.glob("index_*.npy")):
                n = idx_file.stem.split("_")[-1]
                index = np.load(idx_file)
                pos = self._pos(index)
                new = ~self._written[pos]
                for f in rank_dir.glob(f"*_{n}.npy"):
                    k = f.stem[: -len(n) - 1]
                    if k == "index":
                        continue
                    v = np.load(f)
                    if k not in self._arrays:
                        self._arrays[k] = np.lib.format.open_memmap(self.partial / f"{k}.npy", mode="w+",
                                                                    dtype=_dtype_for(k, self.tokens_dtype),
                                                                    shape=(len(self.rows),) + v.shape[1:])
                    self._arrays[k][pos[new]] = v[new]
                self._written[pos] = True
            shutil.rmtree(rank_dir)


# ============================================================================================ the cache entry
@dataclass
class FeatureStore:
    """One cache entry: arrays aligned with ``rows`` of a WindowSet.

    Attributes
    ----------
    folder : Path
    rows : ndarray of int, shape (n,)
        WindowSet row indices; row ``k`` of every array belongs to window ``rows[k]``.
    meta : dict
        Backbone, weights hash, parts, shapes, seconds spent.
    from_cache : bool
        True when the entry existed (this call ran no forward pass).
    """

    folder: Path
    rows: np.ndarray
    meta: dict
    from_cache: bool

    @property
    def n_blocks(self) -> int:
        return int(self.meta.get("n_blocks", 0))

    def array(self, part: str) -> np.ndarray:
        """A memory-mapped array (``tokens``, ``block_mean_XX``, ``block_tokens_XX``).

        Raises
        ------
        FeatureCacheError
            If the entry lacks it (names the setting that stores it).
        """
        path = self.folder / f"{part}.npy"
        if not path.is_file():
            hint = ("store_block_tokens=True (flatten probes)" if part.startswith("block_tokens")
                    else "parts=('tokens',)" if part == "tokens" else "parts=('blocks',)")
            raise FeatureCacheError(f"{path} not found: the entry was computed without it; fix: recompute with {hint}")
        return np.load(path, mmap_mode="r")

    def positions(self, ws_rows: np.ndarray) -> np.ndarray:
        """Positions in this entry's arrays of WindowSet rows ``ws_rows``.

        Raises
        ------
        FeatureCacheError
            If a row is not in the entry.
        """
        ws_rows = np.asarray(ws_rows, dtype=np.int64)
        pos = np.searchsorted(self.rows, ws_rows)
        if (pos >= len(self.rows)).any() or (self.rows[np.minimum(pos, len(self.rows) - 1)] != ws_rows).any():
            raise FeatureCacheError(f"windows {ws_rows[:5].tolist()}... are not in the cache entry {self.folder}")
        return pos

    def tokens(self, block: int | None = None) -> np.ndarray:
        """``(n, n_tokens, d)``: the backbone's tokens (``block=None``; float32, or float16 in an entry extracted with
        ``dtype="float16"``: a reader casts what it takes to float32) or block ``block``'s (float16)."""
        if block is None:
            return self.array("tokens")
        self._check(block)
        return self.array(f"block_tokens_{block:02d}")

    def mean(self, block: int) -> np.ndarray:
        """``(n, d_b)`` float32 mean over tokens of ``block``'s output."""
        self._check(block)
        return np.asarray(self.array(f"block_mean_{block:02d}"))

    def features(self, block: int, pooling: str, idx: np.ndarray | None = None) -> np.ndarray:
        """Probe input of ``block`` for WindowSet rows ``idx`` (all when ``None``), float32: ``(n, d_b)`` (``mean``,
        ``max``), ``(n, n_tokens_b · d_b)`` (``flatten``); any pooling of
        :func:`eegfm_bench.models.heads.token_poolings` (all but ``mean`` read the stored block tokens).

        Raises
        ------
        ValueError
            An unknown pooling."""
        pos = None if idx is None else self.positions(idx)
        if pooling == "mean":  # the cached mean over tokens
            x = self.mean(block)
            return x if pos is None else x[pos]
        t = self.tokens(block)
        t = t if pos is None else t[pos]
        return np.asarray(pool_tokens(np.asarray(t, dtype=np.float32), pooling), dtype=np.float32)

    def _check(self, block: int) -> None:
        if not 0 <= block < self.n_blocks:
            raise IndexError(f"block {block} out of range 0..{self.n_blocks - 1}")


def open_entry(folder: Path, from_cache: bool = True) -> FeatureStore:
    """The complete feature cache entry in ``folder`` as a :class:`FeatureStore` (its arrays memory-mapped, not
    read): ``rows.npy`` (the WindowSet rows, ``(n,)`` int) and ``meta.json``; ``from_cache`` says whether this run
    found it (True) or has just written it (False), for the run's report.

    Raises
    ------
    FileNotFoundError
        ``folder`` lacks ``meta.json`` or ``rows.npy`` (not an entry; a complete one has ``COMPLETE`` as well).
    """
    meta = json.loads((folder / "meta.json").read_text())
    return FeatureStore(folder, np.load(folder / "rows.npy"), meta, from_cache)


@dataclass(frozen=True)
class FeatureEntry:
    """Where and under which key a backbone's features on windows of a WindowSet are cached (no array read).

    Attributes
    ----------
    folder : Path
        ``<cache>/features/<backbone>-<key>``.
    name, weights : str
        The backbone's name and :func:`state_hash`.
    rows : ndarray of int, shape (n,)
        Sorted, unique WindowSet rows the entry holds.
    parts : tuple of str
    trainer : dict
        The Trainer section the forward passes run under (its precision is part of the key).
    store_block_tokens : bool
    meta : dict
        What ``meta.json`` records (before the extraction's own fields).
    """

    folder: Path
    name: str
    weights: str
    rows: np.ndarray
    parts: tuple
    trainer: dict
    store_block_tokens: bool
    meta: dict

    @property
    def stage(self) -> Path:
        """The feature stage's working folder ``<entry>.partial-stage`` (its shards' chunks; an unfinished build
        for ``eegfm-bench cache``)."""
        return self.folder.with_name(f"{self.folder.name}.partial-stage")


def feature_entry(adapter: nn.Module, ws: WindowSet, *, parts: Sequence[str] = ("tokens",),
                  trainer: dict | None = None, rows: np.ndarray | None = None, store_block_tokens: bool = True,
                  cache_dir: str | os.PathLike | None = None, weights: str | None = None,
                  dtype: str = "float32") -> FeatureEntry:
    """The cache entry :func:`extract_features` reads or writes for these arguments (same meaning); nothing is
    computed but the weights hash.

    Raises
    ------
    TypeError
        ``blocks`` requested from an adapter without ``block_to_tokens``.
    ValueError
        ``dtype`` not one of :data:`TOKEN_DTYPES`.
    """
    if str(dtype) not in TOKEN_DTYPES:
        raise ValueError(f"feature dtype {dtype!r}; valid: {TOKEN_DTYPES}")
    tr = dict(trainer or {"accelerator": "auto", "devices": 1, "precision": "32-true"})
    rows = np.arange(len(ws), dtype=np.int64) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    if "blocks" in parts:
        block_to_tokens_fn(adapter)
    name = getattr(adapter, "name", type(adapter).__name__)
    w = weights or state_hash(adapter)
    key = feature_key(adapter, ws, rows, parts, store_block_tokens=store_block_tokens,
                      precision=tr.get("precision", "32-true"), weights=w, dtype=dtype)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    n_blocks = len(list(adapter.blocks)) if "blocks" in parts else 0
    meta = {"backbone": name, "arch": getattr(adapter, "arch_kwargs", {}), "weights": w, "parts": list(parts),
            "n_blocks": n_blocks, "store_block_tokens": bool(store_block_tokens), "ws_cache_key": ws.meta.get("cache_key"),
            "ch_names": list(ws.ch_names), "precision": str(tr.get("precision", "32-true")), "version": CACHE_VERSION,
            "tokens_dtype": str(dtype)}
    return FeatureEntry(root / "features" / f"{name}-{key}", name, w, rows, tuple(parts), tr, bool(store_block_tokens),
                        meta)


def extract_features(adapter: nn.Module, ws: WindowSet, *, parts: Sequence[str] = ("tokens",),
                     trainer: dict | None = None, rows: np.ndarray | None = None, batch_size: int = 32,
                     store_block_tokens: bool = True, cache_dir: str | os.PathLike | None = None,
                     weights: str | None = None, progress: bool = False, num_workers: int = 0,
                     dtype: str = "float32") -> FeatureStore:
    """A frozen backbone's features on windows of ``ws``, from the cache or computed by ``Trainer.predict``.

    Parameters
    ----------
    adapter : BackboneAdapter
        The backbone (its weights hash is part of the key); not modified.
    ws : WindowSet
        Windows ``(n_windows, n_chans, n_times)`` in the backbone's unit.
    parts : sequence of {"tokens", "blocks"}
    trainer : dict, optional
        The command's ``trainer:`` section (devices, strategy, precision); default: one CPU/GPU device, fp32.
    rows : ndarray of int, optional
        WindowSet rows to compute (default: all).
    batch_size : int
        Windows per forward pass (per device).
    store_block_tokens : bool
        Store every block's tokens (float16) too; needed by flatten probes.
    cache_dir : path, optional
        Cache root (default ``$EEGFM_CACHE``); entries go to ``<root>/features/``.
    weights : str, optional
        Precomputed :func:`state_hash` of the adapter.
    dtype : {"float32", "float16"}
        Storage dtype of ``tokens`` (part of the key): float16 halves the entry's tokens on disk; readers cast them
        back to float32 batch by batch.

    Returns
    -------
    FeatureStore

    Raises
    ------
    FeatureCacheError
        A block hook that did not fire; windows not predicted.
    FeatureDtypeError
        Tokens beyond float16's range with ``dtype="float16"``.
    TypeError
        ``blocks`` requested from an adapter without ``block_to_tokens``.
    """
    entry = feature_entry(adapter, ws, parts=parts, trainer=trainer, rows=rows, store_block_tokens=store_block_tokens,
                          cache_dir=cache_dir, weights=weights, dtype=dtype)
    folder = entry.folder
    # one builder per entry across jobs: rank 0 holds the entry's lock while its ranks build; a job that finds the
    # lock taken waits, then opens what the holder published
    lock = BuildLock(folder, f"the {entry.name} features {folder.name}") \
        if is_global_zero() and not (folder / "COMPLETE").is_file() else None
    if lock is not None:
        lock.acquire()
    try:
        done = broadcast_object((folder / "COMPLETE").is_file())
        if done:
            if is_global_zero():
                mark_used(folder)
            return open_entry(folder)
        t0 = time.time()
        _predict_into(adapter, ws, entry, folder, entry.rows, entry.meta, batch_size, progress, num_workers)
        if is_global_zero():
            tqdm.write(f"features: {entry.name} {'+'.join(parts)} of {len(entry.rows)} windows extracted in "
                       f"{time.time() - t0:.1f} s (cached: {folder})")
        return open_entry(folder, from_cache=False)
    finally:
        if lock is not None:
            lock.release()


def _predict_into(adapter, ws, entry: FeatureEntry, folder: Path, rows: np.ndarray, meta: dict, batch_size: int,
                  progress: bool, num_workers: int) -> None:
    """``Trainer.predict`` of windows ``rows`` of ``ws`` into a :class:`FeatureWriter` entry at ``folder`` (the
    cache entry itself, or one shard's chunk of a feature stage)."""
    tr = entry.trainer
    writer = FeatureWriter(folder, rows, meta)
    module = FeatureExtractor(adapter, ws.ch_names, entry.parts, entry.store_block_tokens)
    was_training = adapter.training
    t = build_trainer({**tr, "enable_progress_bar": bool(progress) and is_global_zero()}, callbacks=[writer],
                      loggers=False)
    loader = DataLoader(pad_to_ranks(WindowDataset(ws, rows), tr), batch_size=batch_size, shuffle=False,
                        num_workers=num_workers)
    t.predict(module, dataloaders=loader, return_predictions=False)
    adapter.train(was_training)
    adapter.to("cpu")


# ============================================================================================ the feature stage
class FeatureShardError(FeatureCacheError, EEGFMError):
    """A shard of a feature stage left its window range without a finished chunk (or with another range's rows):
    the message names the shard and the range; a rerun extracts only the shards still missing."""


def window_ranges(n_rows: int, shards: int, batch_size: int) -> list[tuple[int, int]]:
    """Positions ``0..n_rows`` of an entry cut into at most ``shards`` contiguous, ordered ranges ``[start, stop)``
    that begin on a multiple of ``batch_size``.

    Every range then holds exactly the batches a sequential :func:`extract_features` forms at those positions, so
    each window's features are computed in the same batch (bit-identical entries).
    """
    starts = np.arange(0, n_rows, max(1, int(batch_size)))
    n = max(1, min(int(shards), len(starts)))
    cut = [int(a[0]) for a in np.array_split(starts, n) if len(a)]
    return [(a, b) for a, b in zip(cut, cut[1:] + [int(n_rows)])]


def stage_plan(entry: FeatureEntry, shards: int, batch_size: int) -> list[tuple[int, int]]:
    """The window ranges of ``entry``'s feature stage: those of an earlier, unfinished stage of the same entry
    and batch size (``<stage>/plan.json``: a resumed stage keeps its finished chunks whatever ``shards`` is now),
    else :func:`window_ranges`, recorded."""
    path = entry.stage / "plan.json"
    if path.is_file():
        plan = json.loads(path.read_text())
        if plan.get("batch_size") == int(batch_size) and plan.get("n_rows") == len(entry.rows):
            return [tuple(r) for r in plan["ranges"]]
    ranges = window_ranges(len(entry.rows), shards, batch_size)
    entry.stage.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"plan.json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"batch_size": int(batch_size), "n_rows": len(entry.rows), "ranges": ranges}))
    os.replace(tmp, path)
    return ranges


def shard_chunk(entry: FeatureEntry, shard: int) -> Path:
    """Shard ``shard``'s chunk folder (a small entry: its range's ``<part>.npy``, ``rows.npy``, ``COMPLETE``)."""
    return entry.stage / f"shard_{int(shard):05d}"


def chunk_done(entry: FeatureEntry, shard: int, start: int, stop: int) -> bool:
    """Whether shard ``shard`` has a finished chunk of exactly rows ``entry.rows[start:stop]``: its ``COMPLETE``
    marker (written after every array was flushed; the chunk is renamed into place only then, so a killed
    shard's half-written chunk is never taken as done) and its ``rows.npy``."""
    c = shard_chunk(entry, shard)
    if not (c / "COMPLETE").is_file():
        return False
    return np.array_equal(np.load(c / "rows.npy"), entry.rows[start:stop])


def extract_shard(adapter: nn.Module, ws: WindowSet, entry: FeatureEntry, shard: int, start: int, stop: int, *,
                  batch_size: int = 32, progress: bool = False, num_workers: int = 0) -> Path:
    """One job of a feature stage: the features of positions ``[start, stop)`` of ``entry`` into shard
    ``shard``'s chunk (nothing when it is already finished).

    Parameters
    ----------
    adapter, ws
        As :func:`extract_features`; ``adapter``'s weights must be those ``entry`` was keyed with.
    entry : FeatureEntry
        :func:`feature_entry` of the same arguments as the stage's.
    shard, start, stop : int
        The shard and its range of positions in ``entry.rows`` (``start`` a multiple of ``batch_size``:
        :func:`window_ranges`).
    batch_size : int
        The stage's, the same as a sequential extraction's.

    Returns
    -------
    Path
        The chunk folder.

    Raises
    ------
    FeatureCacheError
        ``adapter``'s weights differ from the entry's; windows not predicted.
    """
    if state_hash(adapter) != entry.weights:
        raise FeatureCacheError(f"shard {shard}: the backbone's weights hash differs from the entry's "
                                f"{entry.weights} ({entry.folder.name}); the stage must rebuild the same backbone")
    chunk = shard_chunk(entry, shard)
    if not chunk_done(entry, shard, start, stop):
        if chunk.exists() and is_global_zero():  # another range's chunk: never kept in place of this one
            shutil.rmtree(chunk, ignore_errors=True)
        _predict_into(adapter, ws, entry, chunk, entry.rows[start:stop], {**entry.meta, "shard": int(shard),
                      "range": [int(start), int(stop)]}, batch_size, progress, num_workers)
    return chunk


def assemble_stage(entry: FeatureEntry, ranges: Sequence[tuple[int, int]], *, block_rows: int = 4096,
                   record: dict | None = None) -> FeatureStore:
    """The feature stage's cheap last step: the cache entry from its shards' chunks, then ``COMPLETE``.

    ``record`` (how the stage ran: the shards asked for, those reused from an earlier run, ...) is the entry's
    ``meta.json``'s ``stage_run``, beside its ``stage`` (``shards`` and ``ranges``).

    Each chunk is copied into the entry's memmaps at its range, ``block_rows`` rows at a time (memory bounded by
    one block, whatever the corpus); the arrays equal a sequential :func:`extract_features`'s bit for bit. The
    entry is written in ``<entry>.partial-<writer>`` and renamed; the stage folder is then removed. An entry that
    is already complete (a second command running the same stage, whose first finisher assembled it and removed
    the chunks) is returned as it is.

    Raises
    ------
    FeatureShardError
        A shard without a finished chunk of exactly its range (named, with its windows), or ranges that do not
        cover the entry's rows once each in order.
    """
    if (entry.folder / "COMPLETE").is_file():  # another process running the same stage published it meanwhile
        shutil.rmtree(entry.stage, ignore_errors=True)
        return open_entry(entry.folder)
    cover = [p for r in ranges for p in range(*r)]
    if cover != list(range(len(entry.rows))):
        raise FeatureShardError(f"the stage's ranges {list(ranges)} do not cover the {len(entry.rows)} windows of "
                                f"{entry.folder.name} once each, in order; fix: remove {entry.stage} and rerun")
    missing = [(k, a, b) for k, (a, b) in enumerate(ranges) if not chunk_done(entry, k, a, b)]
    if missing:
        raise FeatureShardError("; ".join(f"shard {k} has no finished chunk of windows {a}..{b - 1}" for k, a, b in missing)
                                + f" ({entry.name} features {entry.folder.name}); fix: rerun the same command: it "
                                "extracts only the shards still missing")
    partial = entry.folder.with_name(f"{entry.folder.name}.partial-{socket.gethostname()}-{os.getpid()}-"
                                     f"{uuid.uuid4().hex[:8]}")
    partial.mkdir(parents=True)
    seconds, arrays = 0.0, {}
    for k, (a, b) in enumerate(ranges):
        chunk = shard_chunk(entry, k)
        seconds += float(json.loads((chunk / "meta.json").read_text()).get("seconds", 0.0))
        for f in sorted(chunk.glob("*.npy")):
            if f.name == "rows.npy":
                continue
            src = np.load(f, mmap_mode="r")
            if len(src) != b - a:
                raise FeatureShardError(f"shard {k}: {f.name} holds {len(src)} windows, its range {a}..{b - 1} "
                                        f"{b - a}; fix: remove {chunk} and rerun the same command")
            if f.stem not in arrays:
                arrays[f.stem] = np.lib.format.open_memmap(partial / f.name, mode="w+", dtype=src.dtype,
                                                           shape=(len(entry.rows),) + src.shape[1:])
            for i in range(0, b - a, block_rows):
                arrays[f.stem][a + i:a + min(b - a, i + block_rows)] = src[i:i + block_rows]
    for arr in arrays.values():
        arr.flush()
    arrays.clear()
    np.save(partial / "rows.npy", entry.rows)
    meta = {**entry.meta, "n_rows": int(len(entry.rows)), "seconds": round(seconds, 2), "world_size": 1,
            "stage": {"shards": len(ranges), "ranges": [list(r) for r in ranges]},
            **({"stage_run": record} if record else {})}
    (partial / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    (partial / "COMPLETE").write_text("ok\n")
    publish_entry(partial, entry.folder)  # an entry another process completed meanwhile is kept
    shutil.rmtree(entry.stage, ignore_errors=True)
    return open_entry(entry.folder, from_cache=False)


class PooledOutputs(L.LightningModule):
    """``predict_step``: a classifier's mean-pooled tokens (the embedding its mean head reads) and its logits.

    Parameters
    ----------
    model : FMClassifier
    ch_names : list of str, optional
        Channel names of the windows (default: the model's).

    The step returns ``{"index", "embedding" (batch, d_model), "logits" (batch, n_classes)}``.
    """

    def __init__(self, model: nn.Module, ch_names: Sequence[str] | None = None):
        super().__init__()
        self.model = model
        self.ch_names = list(ch_names) if ch_names is not None else list(model.ch_names)

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        tokens = self.model.backbone.tokens(batch["x"], self.ch_names)
        return {"index": batch["index"], "embedding": tokens.float().mean(1), "logits": self.model.head(tokens).float()}


def pooled_outputs(model: nn.Module, dataset, *, trainer: dict | None = None, batch_size: int = 64) -> dict:
    """Embeddings and logits of every window of ``dataset`` (:class:`PooledOutputs` in ``Trainer.predict``).

    Returns
    -------
    dict
        ``index`` ``(n,)``, ``embedding`` ``(n, d_model)``, ``logits`` ``(n, n_classes)``, sorted by window index,
        each window once under any number of devices.
    """
    return predict_gathered(PooledOutputs(model), dataset, trainer, batch_size=batch_size)
