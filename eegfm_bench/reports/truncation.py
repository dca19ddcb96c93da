"""The depth-truncation report (paper 003 App. I.6): balanced accuracy per last kept block, as a Markdown table, a
CSV and a curve (:func:`write_depth_report`, written by ``eegfm_bench.runs.cv.truncation``)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from eegfm_bench.atomic import atomic_path, atomic_write_text


def write_depth_report(rows: pd.DataFrame, root: Path) -> Path:
    """Write ``depth_table.csv`` / ``depth_table.md`` and ``depth_curve.png`` under ``root``.

    Parameters
    ----------
    rows : DataFrame
        The result rows of every depth's cv (long format) with a ``depth`` column (the last kept block k).
    root : Path
        The folder above the depths' cv folders.

    Returns
    -------
    Path
        The Markdown table: balanced accuracy (clean test folds) mean ± std over folds per model × regime × head ×
        depth.
    """
    df = rows[(rows["metric"] == "balanced_accuracy") & (rows["condition"] == "clean")]
    g = df.groupby(["model", "regime", "head", "depth"])["value"]
    table = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n_folds": g.count()}).reset_index()
    with atomic_path(root / "depth_table.csv") as tmp_file:
        table.to_csv(tmp_file, index=False)
    lines = ["# Depth truncation (paper 003 App. I.6): balanced accuracy mean ± std over folds", "",
             "| model | regime | head | last block k | balanced accuracy | folds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.model} | {r.regime} | {r.head} | {r.depth} | {r.mean:.3f}{'' if pd.isna(r.std) else f' ± {r.std:.3f}'} "
              f"| {r.n_folds} |" for r in table.itertuples()]
    atomic_write_text(root / "depth_table.md", "\n".join(lines) + "\n")
    fig = Figure(figsize=(5, 3.5))
    ax = fig.subplots()
    for (m, reg, h), sub in table.groupby(["model", "regime", "head"]):
        ax.errorbar(sub["depth"], sub["mean"], yerr=sub["std"].fillna(0), marker="o", capsize=3, label=f"{m} {reg} {h}")
    ax.set_xlabel("last kept block k")
    ax.set_ylabel("balanced accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(root / "depth_curve.png") as tmp_file:
        fig.savefig(tmp_file, format="png", dpi=130)
    return root / "depth_table.md"


__all__ = ["write_depth_report"]
