"""Depth truncation (paper 003 App. I.6): keep blocks ``0..k`` of a backbone and attach the configured head.

:func:`truncate_blocks` replaces the ``nn.ModuleList`` that holds an adapter's ``blocks`` with its first
``k + 1`` entries, whatever attribute path it lives at (LaBraM ``model.blocks``, CBraMod
``model.encoder.layers``, BIOT ``model.encoder.transformer.layers.layers``); everything after the blocks
(LaBraM's final LayerNorm, the pooling head) is kept, so the head sees block ``k``'s output through the
backbone's usual output path.

For configs, truncated variants are registered as backbones ``<name>_truncated`` (``labram_truncated``,
``cbramod_truncated``, ``biot_truncated``) with one extra argument ``depth`` (index ``k`` of the last kept
block; ``None`` keeps all). They inherit the base adapter's preprocessing and channel contract, keep its
``name`` (so checkpoints of the base backbone load), and drop the removed blocks' weights from a pretrained
checkpoint before the strict load (reported by the loader like LaBraM's temporal-embedding cut). Importing
this module registers them; :func:`run_depth_sweep` (``python -m eegfm_bench.interpret.truncation --config
configs/experiment/depth_truncation.yaml``) imports it before running the cv for each ``k``.

EEGNet's ``blocks`` are two dropout layers of one flat ``nn.Sequential`` (no block list to cut): it has no
truncated variant.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from torch import nn

from eegfm_bench.models.base import BACKBONES, BackboneAdapter


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


TRUNCATABLE = ("labram", "cbramod", "biot")


def _make_truncated(base: type[BackboneAdapter]) -> type[BackboneAdapter]:
    class Truncated(base):  # type: ignore[misc, valid-type]
        derived_from = base.name
        __doc__ = (f"``{base.name}`` with blocks ``0..depth`` only (paper 003 App. I.6); see "
                   ":mod:`eegfm_bench.interpret.truncation`.")

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


def register_truncated() -> list[str]:
    """Register ``<name>_truncated`` for every truncatable backbone (idempotent); return the names."""
    import eegfm_bench.models.backbones  # noqa: F401

    names = []
    for b in TRUNCATABLE:
        key = f"{b}_truncated"
        if key not in BACKBONES:
            BACKBONES.register(key)(_make_truncated(BACKBONES.get(b)))
        names.append(key)
    return names


register_truncated()


# ------------------------------------------------------------------------------------------ sweep
def depth_configs(config) -> list[tuple[int, dict]]:
    """One cv config per depth ``k`` of a depth-truncation config.

    The config is a cv config (:mod:`eegfm_bench.cv`) plus ``depths: [k, ...]``; every run must use a
    ``*_truncated`` backbone and gets ``backbone_kwargs.depth = k``. Each depth is its own experiment
    (``<experiment>_depth<k>``, out_dir ``<out_dir>/depth<k>``), so result rows and checkpoints never collide.

    Raises
    ------
    TruncationError
        No ``depths``, or a run whose model is not a truncated variant.
    """
    raw = config if isinstance(config, dict) else yaml.safe_load(Path(config).read_text())
    raw = copy.deepcopy(raw)
    depths = raw.pop("depths", None)
    if not depths:
        raise TruncationError("a depth-truncation config needs `depths: [k, ...]` (index of the last kept block)")
    out = []
    for k in depths:
        c = copy.deepcopy(raw)
        c["experiment"] = f"{raw.get('experiment', 'depth_truncation')}_depth{k}"
        c["out_dir"] = str(Path(raw.get("out_dir", "results/depth_truncation")) / f"depth{k}")
        for i, run in enumerate(c.get("runs", [])):
            if not str(run.get("model", "")).endswith("_truncated"):
                raise TruncationError(f"runs[{i}].model is {run.get('model')!r}; depth truncation needs a truncated "
                                      f"variant: one of {register_truncated()}")
            run["backbone_kwargs"] = {**(run.get("backbone_kwargs") or {}), "depth": int(k)}
        out.append((int(k), c))
    return out


def run_depth_sweep(config, *, progress: bool = True) -> Path:
    """Run the cv for every depth and write ``depth_table.md`` / ``depth_table.csv`` / ``depth_curve.png``.

    Returns
    -------
    Path
        The Markdown table.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from eegfm_bench.cv import run_cv
    from eegfm_bench.results import ResultStore

    cfgs = depth_configs(config)
    frames = []
    for k, c in cfgs:
        try:
            run_cv(c, progress=progress)
        finally:
            df = ResultStore(c["out_dir"]).load()
            if not df.empty:
                frames.append(df.assign(depth=k))
    root = Path(cfgs[0][1]["out_dir"]).parent
    df = pd.concat(frames, ignore_index=True)
    df = df[(df["metric"] == "balanced_accuracy") & (df["condition"] == "clean")]
    g = df.groupby(["model", "regime", "head", "depth"])["value"]
    table = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n_folds": g.count()}).reset_index()
    table.to_csv(root / "depth_table.csv", index=False)
    lines = ["# Depth truncation (paper 003 App. I.6): balanced accuracy mean ± std over folds", "",
             "| model | regime | head | last block k | balanced accuracy | folds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.model} | {r.regime} | {r.head} | {r.depth} | {r.mean:.3f} ± {0 if pd.isna(r.std) else r.std:.3f} "
              f"| {r.n_folds} |" for r in table.itertuples()]
    (root / "depth_table.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for (m, reg, h), sub in table.groupby(["model", "regime", "head"]):
        ax.errorbar(sub["depth"], sub["mean"], yerr=sub["std"].fillna(0), marker="o", capsize=3, label=f"{m} {reg} {h}")
    ax.set_xlabel("last kept block k")
    ax.set_ylabel("balanced accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(root / "depth_curve.png", dpi=130)
    plt.close(fig)
    return root / "depth_table.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eegfm_bench.interpret.truncation",
                                description="Depth-truncation sweep (paper 003 App. I.6): one cv per depth k.")
    p.add_argument("--config", required=True)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    print(run_depth_sweep(a.config, progress=not a.no_progress).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
