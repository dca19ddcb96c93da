"""The confound check's reports (``confound.md``, the rows the page and the README read): the headline beside each
confound-checked score with its interval and verdict (:mod:`eegfm_bench.runs.cv.confound` computes them)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


def current_rows(out_dir: Path) -> pd.DataFrame:
    """The rows of ``confound.csv`` whose headline cell is the run's current one (``cells.json``): a headline
    retrained since (another config hash) leaves its old confound rows out."""
    path = Path(out_dir) / "confound.csv"
    if not path.is_file() or path.stat().st_size < 2:
        return pd.DataFrame()
    df = pd.read_csv(path, dtype={"headline_hash": str, "variation_hash": str})  # hashes stay text
    cur = {str(c["config_hash"]) for c in json.loads((Path(out_dir) / "cells.json").read_text())}
    return df[df["headline_hash"].astype(str).isin(cur)] if "headline_hash" in df else df.iloc[0:0]


def confound_markdown(table: pd.DataFrame, head_cfg) -> str:
    """``confound.md``: the variations' settings (from ``head_cfg``, the headline's typed
    :class:`~eegfm_bench.config.cv.CVConfig`) and one row per (cell, variation) of ``table``."""
    cc = head_cfg.confound
    lines = [f"# Confound check: {head_cfg.experiment}", "",
             "Every headline cell retrained and tested on other windows, same folds and seeds: "
             f"`offset` starts the windows {cc.offset_s:g} s after the cue "
             f"({'same length' if cc.keep_length else 'same end, shorter'}); `band` narrows every model's "
             f"band-pass to {cc.band[0]:g}–{cc.band[1]:g} Hz; `frontal` removes {', '.join(cc.frontal_channels)}."
             " Balanced accuracy, window level, mean ± SD over folds; Δ = variation − headline (paired on the windows "
             "both hold, mean over folds) with a 95 % subject-cluster bootstrap interval (subjects resampled within "
             "each test fold).", "",
             "| model | regime | head | headline | condition | confound-checked [95 % CI] | Δ [95 % CI] | verdict | "
             "windows |", "|---|---|---|---|---|---|---|---|---|"]
    for r in ordered(table).itertuples():
        lines.append(f"| {r.model} | {r.regime} | {r.head} | {_pm(r.headline_mean, r.headline_sd)} | "
                     f"{r.condition} | {_pm(r.variation_mean, r.variation_sd)} {_ci(r)} | {r.delta:+.3f} "
                     f"[{r.low:+.3f}, {r.high:+.3f}] | {verdict_text(r)} | "
                     f"{r.n_windows} of {r.n_windows_headline} |")
    lines += ["", VERDICT_LEGEND.format(chance=f"{table['chance'].iloc[0]:.3f}" if "chance" in table and len(table)
                                        else "1/K")]
    return "\n".join(lines) + "\n"


VERDICT_LEGEND = ("Verdict: survives — the confound-checked score's 95 % subject-cluster interval lies above chance "
                  "({chance}) and Δ is not significantly negative; partly — above chance but significantly below the "
                  "headline; does not survive — the interval reaches chance. \"rests on one subject (S → v)\": "
                  "recomputed from the same predictions without subject S alone, the verdict would be v.")


def verdict_text(r) -> str:
    """A row's verdict with its stability mark: ``survives — rests on one subject (S004 → does not survive)`` when
    leaving out one subject flips it (``loso_flips``: ``subject:verdict`` pairs, ``;``-joined; rows written before
    the column existed carry no mark)."""
    verdict = getattr(r, "verdict", "")
    verdict = verdict if isinstance(verdict, str) else ""
    flips = getattr(r, "loso_flips", "")
    if not verdict or not isinstance(flips, str) or not flips:
        return verdict
    pairs = [f.split(":", 1) for f in flips.split(";")]
    return f"{verdict} — rests on one subject (" + "; ".join(f"{k} → {v}" for k, v in pairs) + ")"


def _pm(m: float, sd: float) -> str:
    return f"{m:.3f} ± {sd:.3f}" if np.isfinite(sd) else f"{m:.3f}"


def _ci(r) -> str:
    lo, hi = getattr(r, "checked_low", np.nan), getattr(r, "checked_high", np.nan)
    return f"[{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) else ""


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Rows in the one fixed model order of every table (model, regime, head, then the condition)."""
    if table.empty:
        return table
    return table.sort_values(["model", "regime", "head", "condition"], kind="stable")


__all__ = ["current_rows", "confound_markdown", "ordered", "verdict_text", "VERDICT_LEGEND"]
