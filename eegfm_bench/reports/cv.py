"""The cv summary (``summary.md``): mean ± std over folds per model × init × regime × head, current config only."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def summary_table(df: pd.DataFrame, metrics=("balanced_accuracy", "auroc", "cohen_kappa"), condition: str = "clean",
                  by=("model", "init", "regime", "head")) -> pd.DataFrame:
    """Mean ± std over folds per ``by`` group and metric (one column per metric, "0.612 ± 0.034")."""
    d = df[(df["condition"] == condition) & (df["metric"].isin(metrics))].copy()
    d["value"] = d["value"].astype(float)
    g = d.groupby(list(by) + ["metric"])["value"]
    agg = g.agg(["mean", "std", "count"]).reset_index()
    agg["cell"] = [f"{m:.3f} ± {s:.3f}" if np.isfinite(s) else f"{m:.3f}" for m, s in zip(agg["mean"], agg["std"])]
    wide = agg.pivot_table(index=list(by), columns="metric", values="cell", aggfunc="first").reset_index()
    folds = agg.groupby(list(by))["count"].max().reset_index().rename(columns={"count": "folds"})
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
    import pandas as pd

    df = store.load()
    if df.empty:
        return pd.DataFrame()
    df = df[df["experiment"] == experiment]
    keep = np.array([current.get((m, r, h)) == c for m, r, h, c in
                     zip(df["model"], df["regime"], df["head"], df["config_hash"])], dtype=bool)
    df = df[keep]
    return summary_table(df) if not df.empty else pd.DataFrame()


def write_summary(path: str | Path, table: pd.DataFrame, *, experiment: str, task: str, scheme: str,
                  fold_unit: str) -> Path:
    """Write the cv's ``summary.md``: a header naming the protocol, then the table (or ``(no results)``)."""
    md = to_markdown(table) if not table.empty else "(no results)"
    rec = ", RECORDING-level folds: windows of one subject can be in train and test" if fold_unit == "recording" else ""
    header = (f"# {experiment}: {task}, {scheme} ({fold_unit}-grouped{rec}), mean ± std over folds (rows of the "
              "current config only)\n\n")
    path = Path(path)
    path.write_text(header + md + "\n")
    return path
