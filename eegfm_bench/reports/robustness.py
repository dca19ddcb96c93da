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
* **degradation curves per type** (Figure 2): balanced accuracy against the level (SNR in dB, dropout probability),
  averaged over the benchmarks that have every level, one line per model.

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
from eegfm_bench.perturb.conditions import AdditiveNoise, ChannelDropout, parse_condition
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
        shared = sorted(set.intersection(*(set(s.index) for s in per.values())))
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
            avg += f" (over {int(r['n_benchmarks'])})"
        L.append(f"| {rank} | {lab} | " + " | ".join(_fmt(r[c]) for c in cols) + f" | {avg} |")
    return "\n".join(L)


def plot_curves(df: pd.DataFrame, path: str | os.PathLike, metric: str = "balanced_accuracy") -> Path | None:
    """Figure 2: balanced accuracy vs level per perturbation type, averaged over the benchmarks with every level."""
    frame = df[df["metric"] == metric].copy()
    frame["value"] = frame["value"].astype(float)
    kinds: dict[str, list] = {}
    for cond in sorted(set(frame["condition"])):
        c = parse_condition(cond)
        if isinstance(c, AdditiveNoise):
            kinds.setdefault(f"{c.kind} noise (SNR dB)", []).append((cond, c.snr_db))
        elif isinstance(c, ChannelDropout):
            kinds.setdefault(f"random dropout, {c.handling} (p)", []).append((cond, c.p))
    if not kinds:
        return None
    fig = Figure(figsize=(4.2 * len(kinds), 3.4))  # no pyplot: the user's backend is left alone
    axes = fig.subplots(1, len(kinds), squeeze=False)
    for ax, (kind, levels) in zip(axes[0], kinds.items()):
        conds = [c for c, _ in levels]
        full = [b for b, g in frame.groupby("benchmark") if set(conds) | {"clean"} <= set(g["condition"])]
        for lab, g in frame[frame["benchmark"].isin(full)].groupby("label"):
            per_b = g.groupby(["benchmark", "condition"])["value"].mean().unstack("condition")
            xs, ys = [], []
            for cond, lvl in sorted(levels, key=lambda t: t[1], reverse="SNR" in kind):
                if cond in per_b.columns and per_b[cond].notna().all():
                    xs.append(lvl)
                    ys.append(per_b[cond].mean())
            if xs:
                ax.plot(xs, ys, marker="o", label=lab)
        ax.set_title(f"{kind}\n(mean over {len(full)} benchmarks)", fontsize=9)
        ax.set_xlabel(kind.rsplit("(", 1)[-1].rstrip(")"))
        ax.set_ylabel("balanced accuracy")
        if "SNR" in kind:
            ax.invert_xaxis()
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=120)
    return path


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
    L = [f"# Robustness over {len(benchmarks)} benchmarks ({', '.join(benchmarks)})", "",
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
        L += ["", f"![degradation curves]({fig.name})"]
    L += ["", "Sweeps: " + ", ".join(f"`{d}`" for d in sweep_dirs)]
    atomic_write_text(out / "robustness.md", "\n".join(L) + "\n")
    if rows:
        with atomic_path(out / "robustness_tables.csv") as tmp_file:
            pd.concat(rows, ignore_index=True).to_csv(tmp_file, index=False)
    with atomic_path(out / "robustness_wilcoxon.csv") as tmp_file:
        pd.DataFrame(tests).to_csv(tmp_file, index=False)
    return out / "robustness.md"


__all__ = ["PAPER_TABLES", "RobustnessReportError", "load_sweep_rows", "combine", "benchmark_deltas",
           "condition_table", "write_robustness_report"]
