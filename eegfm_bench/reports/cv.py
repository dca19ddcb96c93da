"""The cv summary (``summary.md``): mean ± std over folds per model × init × regime × head, current config only."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.reports.confound import VERDICT_LEGEND, verdict_text


SUMMARY_METRICS = ("balanced_accuracy", "accuracy", "auroc", "cohen_kappa")
"""The summary's columns: balanced accuracy (the papers' headline), plain accuracy, AUROC, Cohen's kappa."""


def summary_table(df: pd.DataFrame, metrics=SUMMARY_METRICS, condition: str = "clean",
                  by=("model", "init", "regime", "head")) -> pd.DataFrame:
    """Mean ± std over folds per ``by`` group and metric (one column per metric, "0.612 ± 0.034").

    A fold whose metric is undefined (NaN: AUROC or kappa of a one-class test fold) does not enter that metric's
    mean; a cell computed from fewer folds than the row has says so (``0.701 ± 0.020 (4 folds)``); ``folds`` is the
    number of folds of the row. No finite value at all gives ``n/a``.
    """
    frame = df[(df["condition"] == condition) & (df["metric"].isin(metrics))].copy()
    frame["value"] = frame["value"].astype(float)
    g = frame.groupby(list(by) + ["metric"])["value"]
    agg = g.agg(["mean", "std", "count", "size"]).reset_index()
    folds = agg.groupby(list(by))["size"].max().reset_index().rename(columns={"size": "folds"})
    agg = agg.merge(folds, on=list(by))

    def cell(m, s, n, total):
        if n == 0:
            return "n/a"
        txt = f"{m:.3f} ± {s:.3f}" if np.isfinite(s) else f"{m:.3f}"
        return txt if n == total else f"{txt} ({n} fold{'s' if n != 1 else ''})"

    agg["cell"] = [cell(m, s, n, t) for m, s, n, t in zip(agg["mean"], agg["std"], agg["count"], agg["folds"])]
    wide = agg.pivot_table(index=list(by), columns="metric", values="cell", aggfunc="first").reset_index()
    wide = wide.merge(folds, on=list(by))
    return wide[list(by) + [m for m in metrics if m in wide.columns] + ["folds"]]


def to_markdown(df: pd.DataFrame) -> str:
    """A Markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def current_summary(store, experiment: str, current: dict):
    """The summary table of the rows whose config hash is the current one of their cell."""
    df = store.load()
    if df.empty:
        return pd.DataFrame()
    df = df[df["experiment"] == experiment]
    keep = np.array([current.get((m, r, h)) == c for m, r, h, c in
                     zip(df["model"], df["regime"], df["head"], df["config_hash"])], dtype=bool)
    df = df[keep]
    return summary_table(df) if not df.empty else pd.DataFrame()


def confound_side_by_side(table: pd.DataFrame, confound: pd.DataFrame) -> pd.DataFrame:
    """The headline balanced accuracy beside every confound-checked one, with its interval, Δ and verdict.

    Parameters
    ----------
    table : DataFrame
        :func:`summary_table` (one row per model × init × regime × head).
    confound : DataFrame
        ``confound.csv`` rows of the current cells (:func:`eegfm_bench.runs.cv.confound.compare`).

    Returns
    -------
    DataFrame
        One row per cell: model, init, regime, head, the headline, then per condition ``<condition>`` (checked
        mean [95 % CI], Δ [95 % CI]) and ``verdict (<condition>)``; empty when there is no confound row.
    """
    if table.empty or confound is None or confound.empty:
        return pd.DataFrame()
    out = table[["model", "init", "regime", "head", "balanced_accuracy"]].rename(
        columns={"balanced_accuracy": "headline balanced_accuracy"}).copy()
    for cond, g in confound.groupby("condition", sort=True):
        cells, verdicts = {}, {}
        for r in g.itertuples():
            ci = f" [{r.checked_low:.3f}, {r.checked_high:.3f}]" if np.isfinite(getattr(r, "checked_low", np.nan)) else ""
            cells[(r.model, r.regime, r.head)] = (f"{r.variation_mean:.3f}{ci} (Δ {r.delta:+.3f} [{r.low:+.3f}, "
                                                  f"{r.high:+.3f}])")
            verdicts[(r.model, r.regime, r.head)] = verdict_text(r)
        keys = list(zip(out["model"], out["regime"], out["head"]))
        out[cond] = [cells.get(k, "–") for k in keys]
        out[f"verdict ({cond})"] = [verdicts.get(k, "–") for k in keys]
    return out


def write_summary(path: str | Path, table: pd.DataFrame, *, experiment: str, task: str, scheme: str,
                  fold_unit: str, confound: pd.DataFrame | None = None) -> Path:
    """Write the cv's ``summary.md``: a header naming the protocol, the table (or ``(no results)``), and, when the
    confound check ran, the headline beside the confound-checked scores with a verdict per cell."""
    md = to_markdown(table) if not table.empty else "(no results)"
    rec = ", RECORDING-level folds: windows of one subject can be in train and test" if fold_unit == "recording" else ""
    header = (f"# {experiment}: {task}, {scheme} ({fold_unit}-grouped{rec}), mean ± std over folds (rows of the "
              "current config only)\n\n")
    side = confound_side_by_side(table, confound)
    if not side.empty:
        chance = confound["chance"].iloc[0] if "chance" in confound else float("nan")
        md += ("\n\n## Headline and confound-checked (balanced accuracy)\n\nEach cell retrained on the same folds "
               "and seeds with the task's default confound variations (`confound: off` turns them off); the checked "
               "score with its 95 % subject-cluster interval, and Δ = checked − headline (paired, same interval).\n\n"
               + to_markdown(side) + "\n\n" + VERDICT_LEGEND.format(chance=f"{chance:.3f}"))
    path = Path(path)
    atomic_write_text(path, header + md + "\n")
    return path
