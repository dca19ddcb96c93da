"""Block-wise probe report (paper 003 §4.4, App. I.5): table, Markdown and depth curves from the stored rows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.results import ResultStore


def probe_table(df):
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
                cells.append("–" if r.empty else f"{r['mean'].iloc[0]:.3f}" if np.isnan(r["std"].iloc[0])
                             else f"{r['mean'].iloc[0]:.3f} ± {r['std'].iloc[0]:.3f}")  # one fold: a plain mean
            lines.append(f"| {b} | {rows['relative_depth'].iloc[0]:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def pooling_colors(poolings) -> dict[str, str]:
    """One matplotlib colour (``"C0"`` …) per pooling name in ``poolings``: ``mean`` and ``flatten`` first (blue,
    orange), then the others by name, so that no two poolings of a figure share a colour (matplotlib's cycle, left
    to itself, gives the third line blue again: a ``max`` curve drawn as ``mean``'s). Ten or more poolings reuse
    the ten colours."""
    order = sorted(set(poolings), key=lambda p: ({"mean": 0, "flatten": 1}.get(p, 2), p))
    return {p: f"C{i % 10}" for i, p in enumerate(order)}


def plot_probe_curves(table, path: str | Path, chance: float | None = None, title: str | None = None) -> Path:
    """Balanced accuracy vs relative depth, one line per (curve, pooling), ±std band; one panel per model.

    Returns
    -------
    Path
        The PNG written.
    """
    models = list(dict.fromkeys(table["model"]))
    fig = Figure(figsize=(5.2 * len(models), 3.8))  # no pyplot: the user's backend is left alone
    axes = fig.subplots(1, len(models), squeeze=False)
    styles = {"frozen": "--", "fine-tuned": "-"}
    colors = pooling_colors(table["pooling"])
    for ax, model in zip(axes[0], models):
        sub = table[table["model"] == model]
        for (curve, stage, pooling), rows in sub.groupby(["curve", "stage", "pooling"]):
            rows = rows.sort_values("relative_depth")
            x, m, s = rows["relative_depth"].to_numpy(), rows["mean"].to_numpy(), np.nan_to_num(rows["std"].to_numpy())
            ax.plot(x, m, styles.get(stage, ":"), marker="o", ms=3, color=colors[pooling], label=f"{curve}, {pooling}")
            ax.fill_between(x, m - s, m + s, color=colors[pooling], alpha=0.15)
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
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=130)
    return path


def write_report(store_dir: str | Path, chance: float | None = None, title: str | None = None,
                 config_hashes: set[str] | None = None) -> dict[str, Path]:
    """Table (``probes.md``, ``probe_table.csv``) and curves (``probe_curves.png``) from the stored probe rows
    (only those of ``config_hashes`` when given: the current run's, so rows of cells since retrained are left out)."""
    store = ResultStore(store_dir)
    df = store.load()
    df = df[df["metric"].astype(str).str.startswith("probe_bacc_block")]
    if config_hashes is not None:
        df = df[df["config_hash"].astype(str).isin({str(h) for h in config_hashes})]
    if df.empty:
        raise RuntimeError(f"no probe rows in {store.csv}")
    table = probe_table(df)
    out = Path(store_dir)
    with atomic_path(out / "probe_table.csv") as tmp_file:
        table.to_csv(tmp_file, index=False)
    atomic_write_text(out / "probes.md", (f"# {title}\n\n" if title else "") + probe_markdown(table))
    png = plot_probe_curves(table, out / "probe_curves.png", chance=chance, title=title)
    return {"table": out / "probes.md", "csv": out / "probe_table.csv", "plot": png}
