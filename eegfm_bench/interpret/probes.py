"""Block-output cache and block-wise linear probes (paper 003 §4.4, App. I.5).

**Cache.** Forward hooks on the adapter's ``blocks`` capture every block's output (reshaped by the adapter's
``block_to_tokens`` to ``(batch, n_tokens_b, d_b)``) for every window, once per (backbone weights, data,
preprocessing) hash, and store it on disk: per block a float16 memmap of the tokens
``(n_windows, n_tokens_b, d_b)`` (for flatten probes) and a float32 array of their mean over tokens
``(n_windows, d_b)`` (for mean probes, pooled from the float32 outputs before the cast). A second request with
the same hash opens the files and runs no backbone forward (DESIGN.md "Adaptation": analyses of frozen
features read a cache).

**Probes.** One probe per block, fitted per fold from the cache: a single linear layer from the pooled block
output to the classes, Adam, at most 20 epochs, cosine annealing of the learning rate over those epochs,
early stopping with patience 5 on the fold's validation subjects (the best validation epoch is restored), then
balanced accuracy on the fold's test subjects. Two poolings (App. I.5):

* ``mean`` — the mean over tokens, ``(batch, d)`` (z-scored with the training windows' statistics by default:
  ``standardize_mean``, a conditioning step not in App. I.5; see :func:`fit_probe`);
* ``flatten`` — all tokens concatenated, ``(batch, n_tokens·d)``, then RMSNorm (no learnable gain, so the
  probe stays one linear layer), then the linear layer.

Blocks are indexed ``0 … L−1`` (0 = first block output); relative depth is ``i / (L−1)``. Results are
reported as balanced accuracy mean ± std over folds per block, for the backbone before fine-tuning
(``stage = frozen``: pretrained or random-init weights) and after (``stage = fine-tuned``: the fold's
checkpoint of a ``full`` / ``lora`` run), as a Markdown table and a curve plot.

Entry points: :class:`BlockProbe` (Lightning callback, after fit) and :func:`run_probes`
(``eegfm-bench probe --config ...`` over a cv run's fold checkpoints).
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from eegfm_bench.data.windows import WindowSet, default_cache_dir

log = logging.getLogger(__name__)

POOLINGS = ("mean", "flatten")
CACHE_VERSION = 1
STAGES = ("frozen", "fine-tuned")


class ProbeConfigError(ValueError):
    """Invalid probe settings (unknown pooling, sizes)."""


# ============================================================================================ cache
def state_hash(module: nn.Module) -> str:
    """sha256 (16 hex) of a module's ``state_dict`` (names, dtypes, shapes and values).

    Identifies the *weights* a block cache was computed with, whatever the checkpoint file they came from.
    """
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        t = t.reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def block_cache_key(adapter: nn.Module, ws: WindowSet, weights: str | None = None) -> str:
    """sha256 (16 hex) of (backbone, architecture, weights hash, window-set cache key, window rows, version)."""
    rows = hashlib.sha256(np.asarray(ws.recording).astype(str).tobytes()
                          + np.asarray(ws.window_index).tobytes()).hexdigest()
    blob = json.dumps({"backbone": getattr(adapter, "name", type(adapter).__name__),
                       "arch": getattr(adapter, "arch_kwargs", {}), "weights": weights or state_hash(adapter),
                       "ws": ws.meta.get("cache_key"), "rows": rows, "ch_names": list(ws.ch_names),
                       "version": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class BlockOutputs:
    """Cached block outputs of one backbone on one window set.

    Attributes
    ----------
    folder : Path
        ``<cache>/blocks/<backbone>-<key>/`` with ``tokens_XX.npy`` (float16, ``(n_windows, n_tokens_b, d_b)``),
        ``mean_XX.npy`` (float32, ``(n_windows, d_b)``) and ``meta.json``.
    n_blocks : int
    from_cache : bool
        True when the files existed (no backbone forward was run by this call).
    meta : dict
        Backbone, weights hash, shapes, window-set key, seconds spent computing.
    """

    folder: Path
    n_blocks: int
    from_cache: bool
    meta: dict

    def tokens(self, block: int) -> np.ndarray:
        """Memory-mapped ``(n_windows, n_tokens_b, d_b)`` float16 outputs of ``block``."""
        self._check(block)
        path = self.folder / f"tokens_{block:02d}.npy"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: this cache was written with store_tokens=False; fix: "
                                    "recompute with store_tokens=True for flatten probes")
        return np.load(path, mmap_mode="r")

    def mean(self, block: int) -> np.ndarray:
        """``(n_windows, d_b)`` float32 mean over tokens of ``block``'s output."""
        self._check(block)
        return np.load(self.folder / f"mean_{block:02d}.npy")

    def features(self, block: int, pooling: str, idx: np.ndarray | None = None) -> np.ndarray:
        """Probe input for ``pooling``: ``(n, d_b)`` (mean) or ``(n, n_tokens_b · d_b)`` float32 (flatten)."""
        check_pooling(pooling)
        if pooling == "mean":
            x = self.mean(block)
            return x if idx is None else x[idx]
        t = self.tokens(block)
        t = t if idx is None else t[np.asarray(idx)]
        return np.asarray(t, dtype=np.float32).reshape(len(t), -1)

    def _check(self, block: int) -> None:
        if not 0 <= block < self.n_blocks:
            raise IndexError(f"block {block} out of range 0..{self.n_blocks - 1}")


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ProbeConfigError(f"unknown probe pooling {pooling!r}; valid: {POOLINGS} (paper 003 App. I.5)")
    return pooling


def _block_to_tokens(adapter: nn.Module):
    fn = getattr(adapter, "block_to_tokens", None)
    if fn is None:
        raise TypeError(f"{type(adapter).__name__} has no block_to_tokens(out); fix: implement it in the adapter "
                        "(reshape a hooked block output to (batch, n_tokens, d))")
    return fn


@torch.no_grad()
def compute_block_outputs(adapter: nn.Module, ws: WindowSet, *, cache_dir: str | os.PathLike | None = None,
                          batch_size: int = 16, device: str | torch.device = "cpu", store_tokens: bool = True,
                          weights: str | None = None, progress: bool = False) -> BlockOutputs:
    """Every block's output on every window of ``ws``, computed once and cached on disk.

    Parameters
    ----------
    adapter : BackboneAdapter
        Backbone whose ``blocks`` are hooked (run in eval mode; its train/eval mode is restored).
    ws : WindowSet
        Windows ``(n_windows, n_chans, n_times)`` in the backbone's unit.
    cache_dir : path, optional
        Cache root (default ``$EEGFM_CACHE`` or ``~/.cache/eegfm_bench``); files go to ``<root>/blocks/``.
    batch_size : int
        Windows per forward pass.
    store_tokens : bool
        Also store the float16 token outputs (needed by flatten probes; large: LaBraM on 64 channels × 4 s is
        256 × 200 values per window and block).
    weights : str, optional
        Precomputed :func:`state_hash` of the adapter.

    Returns
    -------
    BlockOutputs

    Raises
    ------
    TypeError
        If the adapter has no ``block_to_tokens``.
    RuntimeError
        If a hook did not fire for every block (a block not on the ``tokens`` path).
    """
    name = getattr(adapter, "name", type(adapter).__name__)
    key = block_cache_key(adapter, ws, weights)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = root / "blocks" / f"{name}-{key}"
    if (folder / "COMPLETE").is_file():
        meta = json.loads((folder / "meta.json").read_text())
        if store_tokens and not meta.get("store_tokens"):
            shutil.rmtree(folder)  # recompute with the tokens this caller needs
        else:
            return BlockOutputs(folder, int(meta["n_blocks"]), True, meta)
    to_tokens = _block_to_tokens(adapter)
    blocks = list(adapter.blocks)
    captured: dict[int, torch.Tensor] = {}

    def hook(i):
        def fn(_m, _inp, out):
            captured[i] = to_tokens(out[0] if isinstance(out, tuple) else out)
        return fn

    handles = [b.register_forward_hook(hook(i)) for i, b in enumerate(blocks)]
    was_training = adapter.training
    adapter.eval().to(device)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp", dir=folder.parent))
    t0 = time.time()
    tok_mm: list = [None] * len(blocks)
    means: list = [None] * len(blocks)
    try:
        from tqdm.auto import tqdm

        for start in tqdm(range(0, len(ws), batch_size), desc=f"caching {name} block outputs", disable=not progress,
                          unit="batch"):
            captured.clear()
            x = torch.from_numpy(np.array(ws.X[start:start + batch_size], dtype=np.float32)).to(device)
            adapter.tokens(x, list(ws.ch_names))
            if len(captured) != len(blocks):
                raise RuntimeError(f"{name}: hooks fired for blocks {sorted(captured)} of {len(blocks)}; every block "
                                   "must lie on the tokens() path")
            for i in range(len(blocks)):
                out = captured[i].float().cpu()
                if means[i] is None:
                    means[i] = np.zeros((len(ws), out.shape[-1]), dtype=np.float32)
                    if store_tokens:
                        tok_mm[i] = np.lib.format.open_memmap(tmp / f"tokens_{i:02d}.npy", mode="w+",
                                                              dtype=np.float16, shape=(len(ws),) + tuple(out.shape[1:]))
                means[i][start:start + len(out)] = out.mean(1).numpy()
                if store_tokens:
                    tok_mm[i][start:start + len(out)] = out.numpy().astype(np.float16)
        shapes = []
        for i in range(len(blocks)):
            np.save(tmp / f"mean_{i:02d}.npy", means[i])
            if store_tokens:
                shapes.append(list(tok_mm[i].shape[1:]))
                tok_mm[i].flush()
        tok_mm = [None] * len(blocks)
        meta = {"backbone": name, "arch": getattr(adapter, "arch_kwargs", {}), "weights": weights or state_hash(adapter),
                "n_blocks": len(blocks), "n_windows": len(ws), "token_shapes": shapes, "store_tokens": store_tokens,
                "ws_cache_key": ws.meta.get("cache_key"), "ch_names": list(ws.ch_names), "dtype_tokens": "float16",
                "seconds": round(time.time() - t0, 2), "version": CACHE_VERSION}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        (tmp / "COMPLETE").write_text("ok\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        for h in handles:
            h.remove()
        adapter.train(was_training)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return BlockOutputs(folder, len(blocks), False, meta)


# ============================================================================================ probes
class LinearProbe(nn.Module):
    """One linear layer on a pooled block output (App. I.5).

    Parameters
    ----------
    in_features : int
        ``d`` (mean pooling) or ``n_tokens · d`` (flatten pooling).
    n_classes : int
    pooling : {"mean", "flatten"}
        ``flatten`` applies RMSNorm without a learnable gain before the linear layer.
    """

    def __init__(self, in_features: int, n_classes: int, pooling: str):
        super().__init__()
        self.pooling = check_pooling(pooling)
        self.norm = nn.RMSNorm(in_features, elementwise_affine=False) if pooling == "flatten" else nn.Identity()
        self.linear = nn.Linear(in_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in_features)`` → logits ``(batch, n_classes)``."""
        return self.linear(self.norm(x))


def balanced_accuracy(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """Mean recall over the classes present in ``y`` (scikit-learn's ``balanced_accuracy_score``)."""
    rec = [float(np.mean(pred[y == c] == c)) for c in range(n_classes) if np.any(y == c)]
    return float(np.mean(rec))


@dataclass
class ProbeFit:
    """Outcome of one probe fit: test balanced accuracy, best validation balanced accuracy, epochs run."""

    test_bacc: float
    val_bacc: float
    epochs: int
    best_epoch: int


def fit_probe(X_train: np.ndarray, y_train: np.ndarray, X_val: np.ndarray, y_val: np.ndarray, X_test: np.ndarray,
              y_test: np.ndarray, pooling: str, n_classes: int, *, max_epochs: int = 20, patience: int = 5,
              lr: float = 1e-3, batch_size: int = 64, seed: int = 0, class_weighted: bool = True,
              standardize_mean: bool = True) -> ProbeFit:
    """Fit one linear probe (App. I.5) and score it on the test windows.

    Parameters
    ----------
    X_train, X_val, X_test : ndarray, shape (n, in_features), float32
        Pooled block outputs (:meth:`BlockOutputs.features`).
    y_train, y_val, y_test : ndarray of int, shape (n,)
    pooling : {"mean", "flatten"}
    n_classes : int
    max_epochs : int
        At most this many epochs (paper: 20); the learning rate follows a cosine from ``lr`` to 0 over them.
    patience : int
        Early stopping on validation balanced accuracy (paper: 5 epochs); the best epoch's weights are kept.
    lr : float
        Adam learning rate.
    class_weighted : bool
        Inverse-frequency class weights in the cross-entropy (as the cv training of imbalanced tasks).
    standardize_mean : bool
        For mean pooling, z-score each feature with the training windows' mean and std before the linear
        layer (an affine map, so the probe stays linear). Not in App. I.5, which normalises only the flattened
        input (RMSNorm); without it, block means with a small spread (EEGNet: std ≈ 0.05) cannot be separated
        within 20 epochs of Adam at lr 1e-3 on small folds and the probe predicts one class (balanced accuracy
        exactly 0.5). ``False`` gives the literal protocol.

    Returns
    -------
    ProbeFit
    """
    if max_epochs < 1 or patience < 1:
        raise ProbeConfigError(f"max_epochs and patience must be ≥ 1, got {max_epochs}, {patience}")
    if pooling == "mean" and standardize_mean:
        mu, sd = X_train.mean(0), X_train.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        X_train, X_val, X_test = ((X - mu) / sd for X in (X_train, X_val, X_test))
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = LinearProbe(X_train.shape[1], n_classes, pooling)
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_epochs)
    xt, yt = torch.from_numpy(np.ascontiguousarray(X_train, dtype=np.float32)), torch.from_numpy(y_train.astype(np.int64))
    xv = torch.from_numpy(np.ascontiguousarray(X_val, dtype=np.float32))
    weight = None
    if class_weighted:
        counts = np.bincount(y_train, minlength=n_classes).astype(float)
        w = np.where(counts > 0, counts.sum() / (n_classes * np.maximum(counts, 1)), 0.0)
        weight = torch.tensor(w, dtype=torch.float32)
    loss_fn = nn.CrossEntropyLoss(weight=weight)
    best, best_state, best_epoch, bad, epoch = -1.0, None, 0, 0, 0
    for epoch in range(1, max_epochs + 1):
        probe.train()
        perm = torch.randperm(len(xt), generator=gen)
        for s in range(0, len(xt), batch_size):
            b = perm[s:s + batch_size]
            opt.zero_grad()
            loss_fn(probe(xt[b]), yt[b]).backward()
            opt.step()
        sched.step()
        probe.eval()
        with torch.no_grad():
            val = balanced_accuracy(y_val, probe(xv).argmax(1).numpy(), n_classes)
        if val > best:
            best, best_state, best_epoch, bad = val, copy.deepcopy(probe.state_dict()), epoch, 0
        else:
            bad += 1
            if bad >= patience:
                break
    probe.load_state_dict(best_state)
    probe.eval()
    with torch.no_grad():
        pred = probe(torch.from_numpy(np.ascontiguousarray(X_test, dtype=np.float32))).argmax(1).numpy()
    return ProbeFit(balanced_accuracy(y_test, pred, n_classes), best, epoch, best_epoch)


def probe_blocks(outputs: BlockOutputs, y: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray,
                 test_idx: np.ndarray, n_classes: int, poolings: Sequence[str] = POOLINGS, **fit_kwargs) -> list[dict]:
    """Fit a probe per block and pooling on one fold, reading only the cache.

    Returns
    -------
    list of dict
        One per (block, pooling): ``block``, ``relative_depth`` (``i / (L−1)``; 0 for a single block),
        ``pooling``, ``bacc`` (test), ``val_bacc``, ``epochs``, ``best_epoch``, ``n_test``.
    """
    L = outputs.n_blocks
    rows = []
    for pooling in poolings:
        check_pooling(pooling)
        for i in range(L):
            X = {k: outputs.features(i, pooling, ix) for k, ix in (("tr", train_idx), ("va", val_idx), ("te", test_idx))}
            fit = fit_probe(X["tr"], y[train_idx], X["va"], y[val_idx], X["te"], y[test_idx], pooling, n_classes,
                            **fit_kwargs)
            rows.append({"block": i, "relative_depth": i / (L - 1) if L > 1 else 0.0, "pooling": pooling,
                         "bacc": fit.test_bacc, "val_bacc": fit.val_bacc, "epochs": fit.epochs,
                         "best_epoch": fit.best_epoch, "n_test": int(len(test_idx))})
    return rows


# ============================================================================================ tables and plots
def probe_table(df) -> "pandas.DataFrame":
    """Balanced accuracy mean ± std over folds per (model, stage, pooling, block).

    Parameters
    ----------
    df : DataFrame
        Probe result rows (columns ``model``, ``stage``, ``pooling``, ``block``, ``relative_depth``, ``fold``,
        ``value``, optional ``source_head``).

    Returns
    -------
    DataFrame
        Columns ``model, curve, stage, pooling, block, relative_depth, mean, std, n_folds``; ``curve`` is
        ``frozen`` or ``fine-tuned (<cv head> head)`` (one fine-tuned backbone per head trained in the cv run).
    """
    import pandas as pd

    df = df.copy()
    if "source_head" not in df.columns:
        df["source_head"] = ""
    df["source_head"] = df["source_head"].fillna("").astype(str)
    df.loc[df["stage"] == "frozen", "source_head"] = ""  # one frozen backbone whatever head was trained on it
    df["curve"] = [s if not h else f"{s} ({h} head)" for s, h in zip(df["stage"], df["source_head"])]
    keys = ["model", "curve", "stage", "pooling", "block", "relative_depth"]
    g = df.groupby(keys, dropna=False)["value"]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n_folds": g.count()}).reset_index()
    return out.sort_values(keys).reset_index(drop=True)


def probe_markdown(table) -> str:
    """Markdown: one row per block, one column per (curve, pooling), cells ``mean ± std``."""
    lines = []
    for model, sub in table.groupby("model"):
        cols = sorted({(r.curve, r.pooling) for r in sub.itertuples()}, key=lambda c: (c[0] != "frozen", c[0], c[1]))
        lines.append(f"### {model}: block-wise linear probes, balanced accuracy mean ± std over folds "
                     f"(n folds = {int(sub['n_folds'].max())})\n")
        lines.append("| block | rel. depth | " + " | ".join(f"{s} / {p}" for s, p in cols) + " |")
        lines.append("|---|---|" + "---|" * len(cols))
        for b, rows in sub.groupby("block"):
            cells = []
            for s, p in cols:
                r = rows[(rows["curve"] == s) & (rows["pooling"] == p)]
                cells.append("–" if r.empty else f"{r['mean'].iloc[0]:.3f} ± {0 if np.isnan(r['std'].iloc[0]) else r['std'].iloc[0]:.3f}")
            lines.append(f"| {b} | {rows['relative_depth'].iloc[0]:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot_probe_curves(table, path: str | Path, chance: float | None = None, title: str | None = None) -> Path:
    """Balanced accuracy vs relative depth, one line per (curve, pooling), ±std band; one panel per model.

    Returns
    -------
    Path
        The PNG written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(table["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 3.8), squeeze=False)
    styles = {"frozen": "--", "fine-tuned": "-"}
    colors = {"mean": "tab:blue", "flatten": "tab:orange"}
    for ax, model in zip(axes[0], models):
        sub = table[table["model"] == model]
        for (curve, stage, pooling), rows in sub.groupby(["curve", "stage", "pooling"]):
            rows = rows.sort_values("relative_depth")
            x, m, s = rows["relative_depth"].to_numpy(), rows["mean"].to_numpy(), np.nan_to_num(rows["std"].to_numpy())
            ax.plot(x, m, styles.get(stage, ":"), marker="o", ms=3, color=colors.get(pooling), label=f"{curve}, {pooling}")
            ax.fill_between(x, m - s, m + s, color=colors.get(pooling), alpha=0.15)
        if chance is not None:
            ax.axhline(chance, color="grey", lw=0.8, ls=":", label="chance")
        L = int(sub["block"].max()) + 1
        ax.set_xlabel(f"relative depth i/(L−1), L = {L}")
        ax.set_ylabel("balanced accuracy (test folds)")
        ax.set_title(model)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


# ============================================================================================ result rows
def _rows(base: dict, fits: list[dict], stage: str, source_head: str, checkpoint: str, extra: dict) -> list[dict]:
    out = []
    for f in fits:
        head = f"probe_{f['pooling']}" + ("" if stage == "frozen" else f"@{source_head}")
        out.append({**base, "regime": "frozen" if stage == "frozen" else base["regime"], "head": head,
                    "metric": f"probe_bacc_block{f['block']:02d}", "value": f["bacc"], "n_windows": f["n_test"],
                    "stage": stage, "pooling": f["pooling"], "block": f["block"],
                    "relative_depth": f["relative_depth"], "val_bacc": f["val_bacc"], "probe_epochs": f["epochs"],
                    "source_head": source_head, "checkpoint": checkpoint, **extra})
    return out


def write_report(store_dir: str | Path, chance: float | None = None, title: str | None = None) -> dict[str, Path]:
    """Table (``probes.md``, ``probe_table.csv``) and curves (``probe_curves.png``) from the stored probe rows."""
    from eegfm_bench.results import ResultStore

    store = ResultStore(store_dir)
    df = store.load()
    df = df[df["metric"].astype(str).str.startswith("probe_bacc_block")]
    if df.empty:
        raise RuntimeError(f"no probe rows in {store.csv}")
    table = probe_table(df)
    out = Path(store_dir)
    table.to_csv(out / "probe_table.csv", index=False)
    (out / "probes.md").write_text((f"# {title}\n\n" if title else "") + probe_markdown(table))
    png = plot_probe_curves(table, out / "probe_curves.png", chance=chance, title=title)
    return {"table": out / "probes.md", "csv": out / "probe_table.csv", "plot": png}


# ============================================================================================ callback
try:
    import lightning as L

    _CallbackBase = L.Callback
except ImportError:  # pragma: no cover
    _CallbackBase = object


class BlockProbe(_CallbackBase):
    """Lightning callback: block-wise probes of the backbone before and after ``fit`` (App. I.5).

    After ``fit`` (on the best checkpoint when a ``ModelCheckpoint`` recorded one, else on the final weights),
    block outputs of every window of the DataModule's :class:`WindowSet` are cached (once per weights hash)
    for the backbone as it was before fitting (``stage = frozen``) and, unless the regime is ``head_only``
    (identical weights), as fine-tuned; one probe per block and pooling is fitted on the DataModule's fold
    (train / val / test subjects) and the rows, table and curves are written to ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Where ``results.csv``, ``probes.md``, ``probe_table.csv`` and ``probe_curves.png`` go.
    poolings : sequence of {"mean", "flatten"}
    experiment : str
        The ``experiment`` column of the rows.
    cache_dir : path, optional
        Block-cache root (default ``$EEGFM_CACHE``).
    include_frozen : bool
        Also probe the backbone as it was before fitting.
    batch_size : int
        Windows per backbone forward while caching.
    probe_kwargs : dict, optional
        Passed to :func:`fit_probe` (``max_epochs``, ``patience``, ``lr``, ``batch_size``).

    Notes
    -----
    The model must be an :class:`~eegfm_bench.models.module.FMClassifier` (``backbone``, ``regime``, ``init``)
    and the DataModule an :class:`~eegfm_bench.data.datamodule.EEGDataModule` (``ws``, ``fold``, indices).
    """

    def __init__(self, out_dir: str | Path, poolings: Sequence[str] = POOLINGS, experiment: str = "probe",
                 cache_dir: str | Path | None = None, include_frozen: bool = True, batch_size: int = 16,
                 probe_kwargs: dict | None = None):
        super().__init__()
        self.out_dir = Path(out_dir)
        self.poolings = [check_pooling(p) for p in poolings]
        self.experiment = experiment
        self.cache_dir = cache_dir
        self.include_frozen = include_frozen
        self.batch_size = batch_size
        self.probe_kwargs = dict(probe_kwargs or {})
        self._frozen_backbone: nn.Module | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.include_frozen:
            self._frozen_backbone = copy.deepcopy(pl_module.backbone).cpu().eval()

    def on_fit_end(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        from eegfm_bench.interpret.runs import best_fitted

        model, best = best_fitted(trainer, pl_module)
        run_fold_probes(model, dm.ws, dm.train_idx, dm.val_idx, dm.test_idx, fold=int(dm.fold),
                        out_dir=self.out_dir, experiment=self.experiment, task=str(dm.hparams.task),
                        model_name=str(pl_module.hparams.backbone), source_head=str(pl_module.hparams.head),
                        frozen_backbone=self._frozen_backbone if self.include_frozen else None,
                        poolings=self.poolings, cache_dir=self.cache_dir, batch_size=self.batch_size,
                        probe_kwargs=self.probe_kwargs, checkpoint=str(best))
        write_report(self.out_dir, chance=1.0 / len(dm.ws.class_names), title=f"{self.experiment}: block-wise probes")


def run_fold_probes(model, ws: WindowSet, train_idx, val_idx, test_idx, *, fold: int, out_dir: str | Path,
                    experiment: str, task: str, model_name: str, source_head: str,
                    frozen_backbone: nn.Module | None, poolings: Sequence[str] = POOLINGS,
                    cache_dir: str | Path | None = None, batch_size: int = 16, probe_kwargs: dict | None = None,
                    checkpoint: str = "", seed: int = 0, device: str = "cpu", done: set | None = None) -> list[dict]:
    """Probe one fold: the trained backbone (unless head-only) and the frozen one; append rows to ``out_dir``.

    ``done`` (a set shared across calls) holds ``(model_name, fold, stage, weights hash)`` of the probes already
    fitted: a backbone seen before on the same fold is not probed again (e.g. one frozen random-init LaBraM
    under both the ``mean`` and ``flatten`` heads of a head-only cv run), so every (fold, backbone) counts once.

    Returns
    -------
    list of dict
        The result rows written (DESIGN.md "Result row" plus ``stage``, ``pooling``, ``block``,
        ``relative_depth``, ``val_bacc``, ``source_head``, ``checkpoint``, ``weights``, ``block_cache``).
    """
    from eegfm_bench.results import ResultStore, code_version, config_hash

    probe_kwargs = dict(probe_kwargs or {})
    n_classes = len(ws.class_names)
    regime = str(model.hparams.regime)
    stages = []
    if frozen_backbone is not None:
        stages.append(("frozen", frozen_backbone))
    if regime != "head_only":
        stages.append(("fine-tuned", model.backbone))
    elif frozen_backbone is None:
        stages.append(("frozen", model.backbone))  # head-only: the fitted model's backbone is the frozen one
    subjects = np.asarray(ws.subject)[test_idx]
    base = {"experiment": experiment, "task": task, "model": model_name, "init": str(model.init), "regime": regime,
            "fold": int(fold), "seed": int(seed), "condition": "clean", "n_subjects": int(np.unique(subjects).size),
            "fold_unit": "subject", "code_version": code_version()}
    rows: list[dict] = []
    seen: dict[str, BlockOutputs] = {}
    for stage, backbone in stages:
        w = state_hash(backbone)
        if done is not None:
            if (model_name, int(fold), stage, w) in done:
                continue
            done.add((model_name, int(fold), stage, w))
        outs = seen.get(w) or compute_block_outputs(backbone, ws, cache_dir=cache_dir, batch_size=batch_size,
                                                    store_tokens="flatten" in poolings, weights=w, device=device)
        seen[w] = outs
        fits = probe_blocks(outs, np.asarray(ws.y), train_idx, val_idx, test_idx, n_classes, poolings,
                            seed=seed + fold, **probe_kwargs)
        chash = config_hash({"probe": probe_kwargs, "poolings": list(poolings), "weights": w})
        rows += _rows({**base, "config_hash": chash}, fits, stage, source_head, checkpoint,
                      {"weights": w, "block_cache": str(outs.folder)})
    ResultStore(out_dir).append(rows)
    return rows


# ============================================================================================ CLI
def run_probes(config, *, progress: bool = True) -> dict[str, Path]:
    """``eegfm-bench probe``: block-wise probes (and attention topomaps) on a cv run's fold checkpoints.

    Parameters
    ----------
    config : path or dict
        Interpret config (see :mod:`eegfm_bench.interpret.config`): ``cv_dir``, ``out_dir``, ``select``,
        ``probe``.

    Returns
    -------
    dict
        Paths of the written table, CSV, curve plot and (when enabled) attention topomaps.
    """
    from tqdm.auto import tqdm

    from eegfm_bench.interpret.config import load_interpret_config
    from eegfm_bench.interpret.runs import CVRun, load_fold_model, load_initial_model

    cfg = load_interpret_config(config)
    run = CVRun(cfg["cv_dir"])
    sel, pc = cfg["select"], cfg["probe"]
    out = Path(cfg["out_dir"]) / "probes"
    out.mkdir(parents=True, exist_ok=True)
    cks = run.checkpoints(sel["models"], sel["regimes"], sel["heads"], sel["folds"])
    fit_kw = {k: pc[k] for k in ("max_epochs", "patience", "lr", "batch_size", "standardize_mean")}
    done: set = set()  # (model, fold, stage, weights): identical backbones are probed once per fold
    for ck in tqdm(cks, desc="probes", disable=not progress, unit="fold"):
        ws = run.windows(ck.model)
        tr, va, te = run.fold_indices(ws, ck.fold)
        model = load_fold_model(ck.path)
        frozen = None
        if pc["include_frozen"]:
            init = load_initial_model(ck.path)
            frozen = init.backbone
        run_fold_probes(model, ws, tr, va, te, fold=ck.fold, out_dir=out, experiment=run.experiment, task=run.task,
                        model_name=ck.model, source_head=ck.head, frozen_backbone=frozen, poolings=pc["poolings"],
                        cache_dir=pc["cache_dir"], batch_size=pc["forward_batch_size"], probe_kwargs=fit_kw,
                        checkpoint=str(ck.path), seed=int(run.config["seed"]), device=cfg["device"], done=done)
    ws0 = run.windows(cks[0].model)
    paths = write_report(out, chance=1.0 / len(ws0.class_names),
                         title=f"{run.experiment} ({run.task}): block-wise linear probes")
    if cfg["attention"]["enabled"]:
        from eegfm_bench.interpret.attention import run_attention

        paths.update(run_attention(cfg, run=run, progress=progress))
    return paths
