"""Multi-dataset robustness report: paper 003 Tables 10–17 and Figure 2 from several sweeps.

Each sweep (``eegfm-bench sweep``, one task) holds per-fold balanced accuracy for every model × condition. This
module combines sweeps of several tasks:

* **one table per perturbation type and level** (``dropout_p=0.5_zero`` is Table 12, ``dropout_p=0.5_removed``
  Table 13, ``region=primary_zero`` Table 14, ``white_snr=-5dB`` Table 10, ...): rows are models, one column per
  benchmark with the mean Δ from clean over its folds (percentage points, paired per fold), and an ``Average`` that
  weights the benchmarks equally (the mean of the benchmark columns, not of the pooled folds). Perturbation types
  are never averaged together. Benchmarks where a model cannot take a condition (``n/a``: a removed-channel
  condition on a fixed-montage model) are left out of that model's Average, which then says over how many;
* **∗ / ∇ marks** on the Average: a two-sided Wilcoxon signed-rank test of each model's per-fold Δ against the
  reference model's over the (benchmark, fold) pairs both have, Holm-corrected across the models of the table
  (:func:`eegfm_bench.stats.wilcoxon_holm`). The paper names the test and the correction but not the pairs (its
  code does not include them); pooling the shared folds of every benchmark is our reading of "over the shared
  folds";
* **degradation curves per plot family** (Figure 2): balanced accuracy against the level, one panel per family a
  condition's ``plot`` names — white / pink noise (SNR in dB), random dropout zero-padded / removed (p), and every
  condition a user registered with a ``plot`` (as a sweep's own figure) — averaged over the benchmarks that have
  every level of the family, one line per model, on a 0–1 score axis.

Only rows of each sweep's current config hashes are read (``cells.json`` of the sweep), so a rerun never mixes in
old results.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.perturb.conditions import STANDARD_PANELS, PlotFamily, parse_condition
from eegfm_bench.reports.style import anchor_score_axis, fold_key, plural
from eegfm_bench.reports.sweep import add_labels, fold_deltas, resolve_reference
from eegfm_bench.results import ResultStore
from eegfm_bench.stats import wilcoxon_holm

PAPER_TABLES = {"white_snr=-5dB": 10, "pink_snr=-5dB": 11, "dropout_p=0.5_zero": 12, "dropout_p=0.5_removed": 13,
                "region=primary_zero": 14, "region=control_zero": 15, "region_noise=primary_snr=-3dB": 16,
                "region_noise=control_snr=-3dB": 17}
"""Paper 003 App. H table number of a condition."""


class RobustnessReportError(ValueError):
    """A sweep folder is missing, holds no current rows, or the sweeps cannot be combined (names the fix)."""


def load_sweep_rows(sweep_dir: str | os.PathLike) -> pd.DataFrame:
    """The current rows of one sweep (its ``cells.json`` config hashes), with the task of every row.

    Raises
    ------
    RobustnessReportError
        The folder holds no sweep results, or no ``cells.json`` (a sweep written before it existed: rerun it).
    """
    d = Path(sweep_dir)
    if not (d / "results.csv").is_file() and not (d / "results.parquet").is_file():
        raise RobustnessReportError(f"{d} holds no sweep results; fix: run `eegfm-bench sweep` for it first")
    cells = d / "cells.json"
    if not cells.is_file():
        raise RobustnessReportError(f"{d}/cells.json is missing (a sweep from before the report existed); fix: rerun "
                                    "the sweep (it skips what is done and writes the file)")
    current = set(json.loads(cells.read_text()))
    df = ResultStore(d, write=False).load()
    df = df[df["config_hash"].astype(str).isin(current)]
    if df.empty:
        raise RobustnessReportError(f"{d} holds no row of its current config; fix: rerun the sweep")
    return df


def combine(sweep_dirs: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """The current rows of several sweeps, one ``benchmark`` (task) per sweep.

    Raises
    ------
    RobustnessReportError
        Two sweeps of the same task, or one sweep holding several tasks.
    """
    parts = []
    for d in sweep_dirs:
        df = load_sweep_rows(d)
        tasks = sorted(set(df["task"].astype(str)))
        if len(tasks) != 1:
            raise RobustnessReportError(f"{d} holds rows of tasks {tasks}; fix: one task per sweep folder")
        df = df.assign(benchmark=tasks[0], sweep_dir=str(d))
        parts.append(df)
    out = pd.concat(parts, ignore_index=True)
    dup = out.groupby("benchmark")["sweep_dir"].nunique()
    if (dup > 1).any():
        raise RobustnessReportError(f"benchmarks {dup[dup > 1].index.tolist()} come from several sweeps; fix: one "
                                    "sweep per task")
    return add_labels(out)


def benchmark_deltas(df: pd.DataFrame, metric: str = "balanced_accuracy") -> pd.DataFrame:
    """Per-fold Δ (pp) for every benchmark: ``benchmark``, ``label``, ``fold``, ``condition``, ``delta_pp``."""
    parts = [fold_deltas(g, metric).assign(benchmark=b) for b, g in df.groupby("benchmark", sort=True)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def condition_table(deltas: pd.DataFrame, condition: str, benchmarks: Sequence[str], *, reference: str | None,
                    alpha: float = 0.05, not_applicable: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """One paper table: mean Δ per model × benchmark, an equally weighted Average, ∗/∇ marks, ranked.

    Returns
    -------
    table : DataFrame
        Index: model labels ranked by Average (least degradation first); columns: the benchmarks, ``Average``,
        ``n_benchmarks`` (behind the Average), ``mark``.
    tests : list of dict
        The Wilcoxon / Holm results (pairs used, statistic, p, adjusted p).
    """
    d = deltas[deltas["condition"] == condition]
    labels = sorted(set(deltas["label"]))
    means = d.groupby(["label", "benchmark"])["delta_pp"].mean().unstack("benchmark").reindex(index=labels,
                                                                                             columns=list(benchmarks))
    table = means.copy()
    table["Average"] = means.mean(axis=1, skipna=True)
    table["n_benchmarks"] = means.notna().sum(axis=1)
    per = {lab: g.set_index(["benchmark", "fold"])["delta_pp"] for lab, g in d.groupby("label")}
    marks, tests = {}, []
    if reference is not None and reference in per and len(per) >= 2:
        shared = sorted(set.intersection(*(set(s.index) for s in per.values())),
                        key=lambda bf: (bf[0], fold_key(bf[1])))
        if len(shared) >= 2:
            res = wilcoxon_holm({k: s.loc[shared].to_numpy() for k, s in per.items()}, reference, alpha=alpha)
            marks = {r.model: r.mark for r in res}
            tests = [r.__dict__ | {"pairs": [f"{b}/fold{f}" for b, f in shared], "condition": condition} for r in res]
    table["mark"] = [marks.get(lab, "") for lab in table.index]
    table = table[table["n_benchmarks"] > 0].sort_values("Average", ascending=False)
    return table, tests


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    return f"{v:+.1f}".replace("-", "−")


def table_markdown(table: pd.DataFrame, benchmarks: Sequence[str], n_total: int) -> str:
    cols = list(benchmarks)
    L = ["| # | model | " + " | ".join(cols) + " | Average |", "|" + "---|" * (len(cols) + 3)]
    for rank, (lab, r) in enumerate(table.iterrows(), 1):
        avg = _fmt(r["Average"]) + (r["mark"] or "")
        if int(r["n_benchmarks"]) < n_total:
            avg += f" (over {plural(int(r['n_benchmarks']), 'benchmark')})"
        L.append(f"| {rank} | {lab} | " + " | ".join(_fmt(r[c]) for c in cols) + f" | {avg} |")
    return "\n".join(L)


def curve_panels(df: pd.DataFrame, metric: str = "balanced_accuracy") -> dict[PlotFamily, dict]:
    """Figure 2's points: one panel per plot family, one curve per model, averaged over benchmarks.

    A condition is drawn in the panel its ``plot`` names (:class:`~eegfm_bench.perturb.conditions.PlotFamily` and
    its level), as in a sweep's own figure (:func:`~eegfm_bench.reports.sweep.degradation_panels`): the built-in
    noise and dropout conditions and every condition a user registered with a ``plot``; conditions whose ``plot``
    is None (regions, substitutions) are not drawn. A panel averages the benchmarks that hold clean and every level
    of its family; a model is drawn at a level when every such benchmark has its score there.

    Parameters
    ----------
    df : DataFrame
        The combined rows (:func:`combine`: ``benchmark``, ``label``, ``condition``, ``metric``, ``value``).
    metric : str

    Returns
    -------
    dict
        ``{family: {"benchmarks": [...], "curves": {label: [(x, mean over benchmarks), ...]}}}`` — the standard
        panels first (:data:`~eegfm_bench.perturb.conditions.STANDARD_PANELS`, those with a condition here), then
        the other families in the order their first condition appears; x is the level on a numeric axis (clean
        at ``family.clean_level``), or the position (clean 0, then the levels in the family's order) on a
        categorical one; ``"levels"`` holds the tick labels of a categorical axis.
    """
    frame = df[df["metric"] == metric].copy()
    frame["value"] = frame["value"].astype(float)
    plotted = {c: parse_condition(c).plot for c in dict.fromkeys(frame["condition"]) if c != "clean"}
    plotted = {c: p for c, p in plotted.items() if p is not None}
    found = list(dict.fromkeys(f for f, _ in plotted.values()))
    families = [f for f in STANDARD_PANELS if f in found] + [f for f in found if f not in STANDARD_PANELS]
    out: dict = {}
    for fam in families:
        levels = sorted({(lvl, c) for c, (f, lvl) in plotted.items() if f == fam},
                        key=lambda t: -t[0] if fam.descending else t[0])
        conds = [c for _, c in levels]
        full = [b for b, g in frame.groupby("benchmark") if set(conds) | {"clean"} <= set(g["condition"])]
        xs = ([fam.clean_level] + [lvl for lvl, _ in levels] if fam.clean_level is not None
              else list(range(len(levels) + 1)))
        curves = {}
        for lab, g in frame[frame["benchmark"].isin(full)].groupby("label"):
            per_b = g.groupby(["benchmark", "condition"])["value"].mean().unstack("condition").reindex(full)
            pts = [(x, float(per_b[c].mean())) for x, c in zip(xs, ["clean"] + conds)
                   if c in per_b.columns and per_b[c].notna().all()]
            if len(pts) > 1:
                curves[lab] = pts
        out[fam] = {"benchmarks": full, "curves": curves, "levels": ["clean"] + [f"{lvl:g}" for lvl, _ in levels]}
    return out


def plot_curves(df: pd.DataFrame, path: str | os.PathLike, metric: str = "balanced_accuracy") -> Path | None:
    """Figure 2 (:func:`curves_figure`) saved at 120 dpi; None when no condition has a panel."""
    fig = curves_figure(df, metric)
    if fig is None:
        return None
    path = Path(path)
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=120)
    return path


def curves_figure(df: pd.DataFrame, metric: str = "balanced_accuracy") -> Figure | None:
    """Figure 2: the score vs level, one panel per plot family (:func:`curve_panels`: the built-in families and
    every user condition with a ``plot``), averaged over the benchmarks with every level, one line per model.

    The y axis is a score axis from 0 to 1 (:func:`~eegfm_bench.reports.style.score_limits` without a chance level:
    the benchmarks' chance levels differ), shared by the panels and never autoscaled. Returns None (nothing drawn)
    when no condition has a panel.
    """
    panels = curve_panels(df, metric)
    if not panels:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.4), layout="constrained")  # no pyplot: the user's backend is left alone
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
    drawn: list[float] = []
    for ax, (fam, panel) in zip(axes[0], panels.items()):
        for lab, pts in panel["curves"].items():
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=lab)
            drawn += [y for _, y in pts]
        if fam.clean_level is None:
            ax.set_xticks(range(len(panel["levels"])), panel["levels"])
        elif fam.xlim is not None:
            ax.set_xlim(*fam.xlim)
        ax.set_title(f"{fam.title}\n(mean over {plural(len(panel['benchmarks']), 'benchmark')})", fontsize=9)
        ax.set_xlabel(fam.axis)
        ax.grid(alpha=0.3)
    anchor_score_axis(axes[0][0], drawn)
    axes[0][0].set_ylabel(metric.replace("_", " "))
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    return fig


def write_robustness_report(sweep_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
                            reference: str | None = "eegnet", alpha: float = 0.05,
                            conditions: Sequence[str] | None = None) -> Path:
    """``robustness.md`` (one table per condition), ``robustness_tables.csv``, ``robustness_wilcoxon.csv`` and
    ``robustness_curves.png`` in ``out_dir``.

    Raises
    ------
    RobustnessReportError
        See :func:`combine`.
    """
    df = combine(sweep_dirs)
    ref = resolve_reference(df, reference)
    benchmarks = sorted(set(df["benchmark"]))
    deltas = benchmark_deltas(df)
    conds = list(conditions) if conditions else sorted(set(deltas["condition"]), key=lambda c: (
        PAPER_TABLES.get(c, 99), c))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    L = [f"# Robustness over {plural(len(benchmarks), 'benchmark')} ({', '.join(benchmarks)})", "",
         "Δ balanced accuracy in percentage points from clean, paired per fold, mean over each benchmark's folds; "
         "Average = mean of the benchmark columns (each benchmark weighs the same); ∗ / ∇: the model's per-fold Δ is "
         f"significantly above / below {ref or '(no reference)'}'s (two-sided Wilcoxon signed-rank over the "
         f"(benchmark, fold) pairs both have, Holm-corrected across the table's models, α = {alpha}). One table per "
         "perturbation type and level: types are never averaged together.", ""]
    inits = df.groupby("label")["init"].agg(lambda v: ", ".join(sorted(set(map(str, v)))))
    L += ["Initialisation: " + "; ".join(f"{lab}: init={i}" for lab, i in inits.items()), ""]
    rows, tests = [], []
    for cond in conds:
        table, t = condition_table(deltas, cond, benchmarks, reference=ref, alpha=alpha)
        if table.empty:
            continue
        num = PAPER_TABLES.get(cond)
        L += [f"## {cond}" + (f" (paper 003 Table {num})" if num else ""), "", table_markdown(table, benchmarks,
                                                                                            len(benchmarks)), ""]
        rows.append(table.reset_index().rename(columns={"index": "label"}).assign(condition=cond))
        tests += t
    clean = df[(df["condition"] == "clean") & (df["metric"] == "balanced_accuracy")]
    cm = clean.groupby(["label", "benchmark"])["value"].mean().unstack("benchmark")
    L += ["## Clean balanced accuracy (mean over folds)", "",
          "| model | " + " | ".join(benchmarks) + " |", "|" + "---|" * (len(benchmarks) + 1)]
    for lab, r in cm.iterrows():
        L.append(f"| {lab} | " + " | ".join("n/a" if not np.isfinite(r.get(b, np.nan)) else f"{r[b]:.3f}"
                                           for b in benchmarks) + " |")
    fig = plot_curves(df, out / "robustness_curves.png")
    if fig is not None:
        L += ["", "Figure 2: balanced accuracy against the level, one panel per perturbation family (white / pink "
              "noise, random dropout, and every registered condition with a plot family), mean over the benchmarks "
              "with every level of the family, one line per model; conditions without a plot family (regions, "
              "substitutions) are in the tables only.", "", f"![degradation curves]({fig.name})"]
    L += ["", "Sweeps: " + ", ".join(f"`{d}`" for d in sweep_dirs)]
    atomic_write_text(out / "robustness.md", "\n".join(L) + "\n")
    if rows:
        with atomic_path(out / "robustness_tables.csv") as tmp_file:
            pd.concat(rows, ignore_index=True).to_csv(tmp_file, index=False)
    with atomic_path(out / "robustness_wilcoxon.csv") as tmp_file:
        pd.DataFrame(tests).to_csv(tmp_file, index=False)
    return out / "robustness.md"


__all__ = ["PAPER_TABLES", "RobustnessReportError", "load_sweep_rows", "combine", "benchmark_deltas",
           "condition_table", "curve_panels", "curves_figure", "plot_curves", "write_robustness_report"]
