"""Depth truncation (paper 003 App. I.6): keep blocks ``0..k`` of a backbone and attach the configured head.

:func:`truncate_blocks` replaces the ``nn.ModuleList`` that holds an adapter's ``blocks`` with its first
``k + 1`` entries, whatever attribute path it lives at (LaBraM ``model.blocks``, CBraMod
``model.encoder.layers``, BIOT ``model.encoder.transformer.layers.layers``); everything after the blocks
(LaBraM's final LayerNorm, the pooling head) is kept, so the head sees block ``k``'s output through the
backbone's usual output path.

The truncated variants ``<name>_truncated`` (``labram_truncated``, ``cbramod_truncated``, ``biot_truncated``)
are backbones like any other (:mod:`eegfm_bench.models.backbones.truncated`, registered with the others), with
one extra argument ``depth``; :func:`run_depth_sweep` (``python -m eegfm_bench.runs.truncation --config
configs/experiment/depth_truncation.yaml``) runs the cv for each ``k``.

EEGNet's ``blocks`` are two dropout layers of one flat ``nn.Sequential`` (no block list to cut): it has no
truncated variant.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import pandas as pd
import yaml

from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.reports.truncation import write_depth_report
from eegfm_bench.results import ResultStore
from eegfm_bench.runs.cv import run_cv
from eegfm_bench.models.backbones.truncated import (  # noqa: F401  (public here too)
    TRUNCATABLE,
    TruncationError,
    blocks_container,
    truncate_blocks,
)


def truncated_names() -> list[str]:
    """The registered depth-truncated backbones (``<name>_truncated``)."""
    return [f"{b}_truncated" for b in TRUNCATABLE if f"{b}_truncated" in BACKBONES]


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
                                      f"variant: one of {truncated_names()}")
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
    cfgs = depth_configs(config)
    frames = []
    for k, c in cfgs:
        try:
            run_cv(c, progress=progress)
        finally:
            df = ResultStore(c["out_dir"]).load()
            if not df.empty:
                frames.append(df.assign(depth=k))
    return write_depth_report(pd.concat(frames, ignore_index=True), Path(cfgs[0][1]["out_dir"]).parent)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eegfm_bench.runs.truncation",
                                description="Depth-truncation sweep (paper 003 App. I.6): one cv per depth k.")
    p.add_argument("--config", required=True)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    print(run_depth_sweep(a.config, progress=not a.no_progress).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
