"""Depth truncation (paper 003 App. I.6): keep blocks ``0..k`` of a backbone and attach the configured head.

:func:`truncate_blocks` replaces the ``nn.ModuleList`` that holds an adapter's ``blocks`` with its first
``k + 1`` entries, whatever attribute path it lives at (LaBraM ``model.blocks``, CBraMod
``model.encoder.layers``, BIOT ``model.encoder.transformer.layers.layers``); everything after the blocks
(LaBraM's final LayerNorm, the pooling head) is kept, so the head sees block ``k``'s output through the
backbone's usual output path.

The truncated variants ``<name>_truncated`` (``labram_truncated``, ``cbramod_truncated``, ``biot_truncated``)
are backbones like any other (:mod:`eegfm_bench.models.backbones.truncated`, registered with the others), with
one extra argument ``depth``; :func:`run_depth_sweep` (``python -m eegfm_bench.runs.cv.truncation --config
configs/experiment/depth_truncation.yaml``) runs the cv for each ``k``.

EEGNet's ``blocks`` are two dropout layers of one flat ``nn.Sequential`` (no block list to cut): it has no
truncated variant.
"""
from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from eegfm_bench.config import read_yaml
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.reports.truncation import write_depth_report
from eegfm_bench.results import ResultStore
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.cv.cells import load_config as load_cv_config
from eegfm_bench.runs.cv.command import run_cv
from eegfm_bench.models.backbones.truncated import TRUNCATABLE, TruncationError


def truncated_names() -> list[str]:
    """The registered depth-truncated backbones (``<name>_truncated``)."""
    return [f"{b}_truncated" for b in TRUNCATABLE if f"{b}_truncated" in BACKBONES]


# ------------------------------------------------------------------------------------------ sweep
def depth_configs(config) -> list[tuple[int, CVConfig]]:
    """One cv config per depth ``k`` of a depth-truncation config, typed and frozen.

    The config (a YAML path or a mapping) is a cv config (:class:`~eegfm_bench.config.cv.CVConfig`) plus
    ``depths: [k, ...]``; it is read by :func:`~eegfm_bench.runs.cv.cells.load_config` once, before any data is read.
    Every run must use a ``*_truncated`` backbone and gets ``backbone_kwargs.depth = k``. Each depth is its own
    experiment (``<experiment>_depth<k>``, out_dir ``<out_dir>/depth<k>``), so result rows and checkpoints never
    collide.

    Raises
    ------
    TruncationError
        No ``depths``, or a run whose model is not a truncated variant.
    ConfigError
        Everything :func:`~eegfm_bench.runs.cv.cells.load_config` refuses.
    """
    raw = copy.deepcopy(config if isinstance(config, dict) else read_yaml(config))
    depths = raw.pop("depths", None)
    if not depths:
        raise TruncationError("a depth-truncation config needs `depths: [k, ...]` (index of the last kept block)")
    cfg = load_cv_config(raw)
    for i, run in enumerate(cfg.runs):
        if not run.model.endswith("_truncated"):
            raise TruncationError(f"runs[{i}].model is {run.model!r}; depth truncation needs a truncated variant: "
                                  f"one of {truncated_names()}")
    return [(int(k), replace(cfg, experiment=f"{cfg.experiment}_depth{k}", out_dir=str(Path(cfg.out_dir) / f"depth{k}"),
                             runs=[replace(run, backbone_kwargs={**(run.backbone_kwargs or {}), "depth": int(k)})
                                   for run in cfg.runs]))
            for k in depths]


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
            df = ResultStore(c.out_dir).load()
            if not df.empty:
                frames.append(df.assign(depth=k))
    return write_depth_report(pd.concat(frames, ignore_index=True), Path(cfgs[0][1].out_dir).parent)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eegfm_bench.runs.cv.truncation",
                                description="Depth-truncation sweep (paper 003 App. I.6): one cv per depth k.")
    p.add_argument("--config", required=True)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    print(run_depth_sweep(a.config, progress=not a.no_progress).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
