"""Sweep report: per-fold degradation, significance marks, ranked tables and curves (paper 003 App. H).

From the rows a sweep wrote (:mod:`eegfm_bench.runs.sweep.command`):

* :func:`fold_deltas` — per-fold paired change from clean in percentage points
  (:func:`eegfm_bench.stats.paired_deltas`), one row per model × fold × condition;
* :func:`degradation_table` — mean Δ over folds per model and condition, an ``Average`` over the table's
  conditions, ∗ / ∇ marks from a two-sided Wilcoxon signed-rank test of each model's per-fold Δ against the
  reference model's over the shared folds, Holm-corrected across models (:func:`eegfm_bench.stats.wilcoxon_holm`),
  rows ranked by ``Average`` (least degradation first), as Tables 10–17;
* :func:`plot_degradation_curves` — balanced accuracy vs SNR (white, pink) and vs dropout probability
  (zero-padded and removed side by side), then one panel per other plot family a condition names
  (:func:`degradation_panels`), mean ± std over folds, on a score axis anchored at chance
  (:mod:`eegfm_bench.reports.style`) (PNG, matplotlib Agg);
* :func:`write_report` — ``sweep.md`` (clean table, degradation tables, not-applicable list, dropout masks,
  regions, failures), ``deltas.csv``, ``wilcoxon.csv`` and ``degradation_curves.png``.

A "model" here is one (model, init, regime, head) combination; its label is the model name when that is
unique in the sweep, else ``model (regime, head[, init])``.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.perturb.conditions import DROPOUT_REMOVED_PANEL, STANDARD_PANELS, PlotFamily, parse_condition
from eegfm_bench.reports.cv import to_markdown
from eegfm_bench.reports.style import anchor_score_axis, fold_key, plural
from eegfm_bench.results import ResultStore, run_label
from eegfm_bench.stats import paired_cluster_bootstrap, paired_deltas, wilcoxon_holm

ID_COLUMNS = ["model", "init", "regime", "head"]


def add_labels(df: pd.DataFrame) -> pd.DataFrame:
    """Add a ``label`` column naming each (model, init, regime, head) combination (see the module docstring)."""
    df = df.copy()
    combos = df[ID_COLUMNS].drop_duplicates()
    labels = {}
    for _, r in combos.iterrows():
        same = combos[combos["model"] == r["model"]]
        if len(same) == 1:
            lab = r["model"]
        else:
            parts = [r["regime"], r["head"]]
            if same["init"].nunique() > 1:
                parts.append(r["init"])
            lab = f"{r['model']} ({', '.join(map(str, parts))})"
        labels[tuple(r)] = lab
    df["label"] = [labels[tuple(v)] for v in df[ID_COLUMNS].itertuples(index=False)]
    return df


def resolve_reference(df: pd.DataFrame, reference: str | None) -> str | None:
    """The label of the reference model (a model name with one combination, or a label).

    Raises
    ------
    ValueError
        If ``reference`` names no label, or a model with several combinations (the message lists the labels).
    """
    if reference is None:
        return None
    labels = sorted(set(df["label"]))
    if reference in labels:
        return reference
    hits = sorted(set(df.loc[df["model"] == reference, "label"]))
    if len(hits) == 1:
        return hits[0]
    raise ValueError(f"reference {reference!r} matches {hits or 'no'} model label(s); labels: {labels}; "
                     "fix: set `reference:` to one of these labels")


def fold_deltas(df: pd.DataFrame, metric: str = "balanced_accuracy") -> pd.DataFrame:
    """Per-fold paired change from clean, percentage points (paper 003 App. H: "paired per fold").

    Parameters
    ----------
    df : DataFrame
        Sweep rows with a ``label`` column (:func:`add_labels`).
    metric : str
        Metric in [0, 1] (rows with another metric, e.g. ``not_applicable``, are ignored).

    Returns
    -------
    DataFrame
        ``label``, ``fold``, ``condition``, ``value``, ``clean``, ``delta_pp`` = 100 · (value − clean value
        of the same model and fold), for every non-clean condition with a finite value.
    """
    frame = df[(df["metric"] == metric)].copy()
    frame["value"] = frame["value"].astype(float)
    frame = frame[np.isfinite(frame["value"])]
    if frame.empty:
        return pd.DataFrame(columns=["label", "fold", "condition", "value", "clean", "delta_pp"])
    out = paired_deltas(frame[["label", "fold", "condition", "value"]], by=("label", "fold"))
    base = frame[frame["condition"] == "clean"].set_index(["label", "fold"])["value"]
    out["clean"] = base.reindex(pd.MultiIndex.from_frame(out[["label", "fold"]])).to_numpy()
    return out[["label", "fold", "condition", "value", "clean", "delta_pp"]].reset_index(drop=True)


def _test_column(per_label: dict[str, pd.Series], reference: str | None, alpha: float) -> tuple[dict, list[dict]]:
    """Wilcoxon + Holm of every label against the reference over the folds all labels share."""
    if reference is None or reference not in per_label or len(per_label) < 2:
        return {}, []
    shared = sorted(set.intersection(*(set(s.dropna().index) for s in per_label.values())), key=fold_key)
    if len(shared) < 2:
        return {}, []
    res = wilcoxon_holm({k: s.loc[shared].to_numpy() for k, s in per_label.items()}, reference, alpha=alpha)
    return {r.model: r.mark for r in res}, [r.__dict__ | {"folds": shared} for r in res]


def degradation_table(deltas: pd.DataFrame, conditions: Sequence[str], *, reference: str | None = None,
                      alpha: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """Mean Δ (pp) per model and condition, an Average, ∗/∇ marks, ranked by Average (Tables 10–17).

    Parameters
    ----------
    deltas : DataFrame
        From :func:`fold_deltas`.
    conditions : sequence of str
        Columns of the table, in order. Only models that have every one of them enter the table.
    reference : str or None
        Reference label for the marks (paper: EEGNet); ``None``: no marks.
    alpha : float
        Family-wise level (Holm across models, per column).

    Returns
    -------
    means : DataFrame
        Index = labels ranked by ``Average`` (descending: smallest loss first), columns = conditions +
        ``Average``; mean over folds of Δ pp. ``Average`` is the mean over the conditions, computed per fold and
        then averaged over folds.
    marks : DataFrame
        Same shape: ``"∗"`` (significantly less degradation than the reference), ``"∇"`` (more), or ``""``.
        A column whose reference is absent, or with fewer than two shared folds, has no marks.
    tests : list of dict
        Every Wilcoxon comparison (condition, model, reference, n_folds, median_diff, p_value, p_holm, mark, folds).
    """
    conditions = list(conditions)
    d = deltas[deltas["condition"].isin(conditions)]
    if d.empty or not conditions:
        return pd.DataFrame(), pd.DataFrame(), []
    wide = d.pivot_table(index=["label", "fold"], columns="condition", values="delta_pp", aggfunc="first")
    have = [lab for lab in wide.index.get_level_values(0).unique()
            if all(c in wide.columns and wide.loc[lab, c].notna().any() for c in conditions)]
    wide = wide.loc[wide.index.get_level_values(0).isin(have), conditions]
    wide["Average"] = wide[conditions].mean(axis=1, skipna=False)
    means = wide.groupby(level=0).mean()
    marks = pd.DataFrame("", index=means.index, columns=means.columns)
    tests = []
    for col in means.columns:
        per_label = {lab: wide.loc[lab, col] for lab in means.index}
        m, t = _test_column(per_label, reference, alpha)
        for lab, mark in m.items():
            marks.loc[lab, col] = mark
        tests += [{"condition": col, **r} for r in t]
    order = means["Average"].sort_values(ascending=False, na_position="last").index
    return means.loc[order], marks.loc[order], tests


def _fmt_pp(v: float) -> str:
    return "—" if not np.isfinite(v) else f"{v:+.1f}"


def table_markdown(means: pd.DataFrame, marks: pd.DataFrame) -> str:
    """Markdown of a degradation table: rank, model, Δ pp per column (best bold, second underlined), marks."""
    cols = list(means.columns)
    lines = ["| # | Model | " + " | ".join(cols) + " |", "|---|---|" + "|".join("---" for _ in cols) + "|"]
    rank_of = {}
    for c in cols:
        vals = means[c].dropna().sort_values(ascending=False)
        uniq = sorted(set(vals.round(1)), reverse=True)
        rank_of[c] = {lab: (uniq.index(round(v, 1)) if len(vals) > 1 else None) for lab, v in vals.items()}
    for i, lab in enumerate(means.index, start=1):
        cells = []
        for c in cols:
            s = _fmt_pp(means.loc[lab, c])
            r = rank_of[c].get(lab)
            if r == 0:
                s = f"**{s}**"
            elif r == 1:
                s = f"<u>{s}</u>"
            cells.append(s + marks.loc[lab, c])
        lines.append(f"| {i} | {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def clean_table(df: pd.DataFrame, metrics: Sequence[str] = ("balanced_accuracy", "auroc", "cohen_kappa")) -> pd.DataFrame:
    """Clean performance per label: mean ± std over folds of each metric and the number of folds."""
    frame = df[(df["condition"] == "clean") & df["metric"].isin(metrics)].copy()
    frame["value"] = frame["value"].astype(float)
    rows = []
    for lab, g in frame.groupby("label"):
        row = {"model": lab}
        for m in metrics:
            v = g.loc[g["metric"] == m, "value"].to_numpy()
            row[m] = (f"{np.nanmean(v):.3f} ± {np.nanstd(v, ddof=1):.3f}" if np.isfinite(v).sum() > 1
                      else (f"{np.nanmean(v):.3f}" if np.isfinite(v).any() else "—"))
        row["folds"] = int(g["fold"].nunique())
        rows.append(row)
    return pd.DataFrame(rows)


def _md(df: pd.DataFrame) -> str:
    return to_markdown(df)


def degradation_panels(df: pd.DataFrame, metric: str = "balanced_accuracy") -> dict[PlotFamily, dict[str, list]]:
    """The degradation curves' points: one panel per plot family, one curve per model.

    A condition is drawn in the panel its ``plot`` names (:class:`~eegfm_bench.perturb.conditions.PlotFamily`,
    with its level); conditions whose ``plot`` is None are not drawn.

    Parameters
    ----------
    df : DataFrame
        Sweep rows with ``label`` (:func:`add_labels`).
    metric : str

    Returns
    -------
    dict
        ``{family: {label: [(level, values), ...]}}`` — the four standard panels
        (:data:`~eegfm_bench.perturb.conditions.STANDARD_PANELS`) first, then every other family in the order its
        first condition appears in the rows; per model, the clean point (level ``family.clean_level``) and then
        one point per level, in the family's order; ``values`` holds the metric over folds (ndarray). A model
        without a clean row, or without a condition of the family, has no curve in that panel.
    """
    frame = df[df["metric"] == metric]
    plotted = {}
    for c in dict.fromkeys(frame["condition"]):
        where = parse_condition(c).plot
        if where is not None:
            plotted[c] = where
    families = list(dict.fromkeys([*STANDARD_PANELS, *(f for f, _ in plotted.values())]))
    out: dict[PlotFamily, dict[str, list]] = {f: {} for f in families}
    for lab in sorted(frame["label"].unique()):
        g = frame[frame["label"] == lab]
        value = {c: gg["value"].astype(float).to_numpy() for c, gg in g.groupby("condition", sort=False)}
        if "clean" not in value:
            continue
        for fam in families:
            pts = [(level, value[c]) for c, (f, level) in plotted.items() if f == fam and c in value]
            if pts:
                pts.sort(key=lambda t: -t[0] if fam.descending else t[0])
                out[fam][lab] = [(fam.clean_level, value["clean"])] + pts
    return out


def plot_degradation_curves(df: pd.DataFrame, path: str | os.PathLike, *, metric: str = "balanced_accuracy",
                            chance: float | None = None, title: str = "") -> Path:
    """Degradation curves: metric vs level, one panel per plot family (:func:`degradation_panels`), one line per
    model (:func:`degradation_figure`, saved at 110 dpi and closed).

    Parameters
    ----------
    df : DataFrame
        Sweep rows with ``label`` (:func:`add_labels`).
    path : path
        Output PNG.
    metric : str
        Metric on the y axis.
    chance : float, optional
        Chance level drawn as a grey line (e.g. 1 / n_classes for balanced accuracy).
    title : str

    Returns
    -------
    Path
        The PNG written (the 4 standard panels — white noise, pink noise, dropout zero-padded, dropout removed —
        then one per other family in the sweep; x = clean then the levels (SNR in dB, decreasing), or the level
        from the clean one (dropout p from 0); mean ± std over folds; the y axis anchored at chance).
    """
    import matplotlib.pyplot as plt  # reason: heavy (0.7-1.3 s to import here); Agg chosen by degradation_figure

    fig = degradation_figure(df, metric=metric, chance=chance, title=title)
    path = Path(path)
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=110)
    plt.close(fig)
    return path


def degradation_figure(df: pd.DataFrame, *, metric: str = "balanced_accuracy", chance: float | None = None,
                       title: str = ""):
    """The figure :func:`plot_degradation_curves` saves (same arguments but the path), not saved: a pyplot figure
    on the Agg backend; the caller closes it.

    The y axis is a score axis shared by the panels and anchored at chance
    (:func:`~eegfm_bench.reports.style.score_limits`: chance − 0.1 to 1, 0 to 1 without ``chance``), never
    autoscaled, so a small drop is drawn small.
    """
    import matplotlib  # reason: heavy (0.7-1.3 s to import here); Agg must be chosen before pyplot loads

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # reason: as above

    panels = degradation_panels(df, metric)
    labels = sorted(df.loc[df["metric"] == metric, "label"].unique())
    colors = {lab: plt.cm.tab10(i % 10) for i, lab in enumerate(labels)}
    listed = {parse_condition(c).plot[0] for c in df["condition"].unique() if parse_condition(c).plot is not None}
    if any(parse_condition(c).needs_variable_channels for c in df["condition"].unique()):
        listed.add(DROPOUT_REMOVED_PANEL)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2), sharey=True)
    drawn: list[float] = []  # every mean − std drawn: the shared score axis must hold them all
    for ax, (fam, curves) in zip(axes, panels.items()):
        for lab, pts in curves.items():
            xs = [t[0] for t in pts] if fam.clean_level is not None else list(range(len(pts)))
            mean = [float(np.mean(v)) if len(v) else math.nan for _, v in pts]
            std = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for _, v in pts]
            ax.errorbar(xs, mean, yerr=std, marker="o", ms=4, capsize=3, color=colors[lab], label=lab)
            drawn += [m - s for m, s in zip(mean, std)]
            if fam.clean_level is None:
                ax.set_xticks(xs, ["clean"] + [f"{t[0]:g}" for t in pts[1:]])
        if chance is not None:
            ax.axhline(chance, color="0.6", ls=":", lw=1)
        ax.set_title(fam.title)
        ax.set_xlabel(fam.axis)
        if fam.xlim is not None:
            ax.set_xlim(*fam.xlim)
        if not curves:
            ax.text(0.5, 0.5, "no model applicable" if fam in listed else "not in this sweep",
                    ha="center", va="center", transform=ax.transAxes, color="0.4")
        ax.grid(alpha=0.3)
    anchor_score_axis(axes[0], drawn, chance)  # shared by every panel
    axes[0].set_ylabel(metric.replace("_", " "))
    handles, labs = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labs, loc="lower center", ncol=min(6, len(labs)), frameon=False)
    fig.suptitle(title or f"{metric.replace('_', ' ')} under test-time perturbations (mean ± std over folds)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def delta_intervals(out_dir: str | os.PathLike, df: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0,
                    metric: str = "balanced_accuracy") -> pd.DataFrame:
    """Δ from clean per model and condition with its 95 % subject-cluster bootstrap interval.

    From the per-window predictions the sweep saves (``predictions/<cell>-<hash8>-fold<k>/<condition>.csv``): the
    condition's and the clean predictions of the same windows, paired, subjects resampled within each test fold
    (:func:`eegfm_bench.stats.paired_cluster_bootstrap`, mean-fold target). Cached in ``delta_ci.csv`` keyed by the
    rows' config hashes, so a page refresh recomputes nothing.

    Parameters
    ----------
    df : DataFrame
        The sweep's current rows with ``label`` (:func:`add_labels`).

    Returns
    -------
    DataFrame
        ``label``, ``condition``, ``clean`` (mean over folds), ``delta_pp``, ``low_pp``, ``high_pp``; empty without
        saved predictions. A pair the bootstrap cannot score (too few subjects per fold) has NaN bounds.
    """
    out = Path(out_dir)
    key = ",".join(sorted(set(df["config_hash"].astype(str)))) + f"|{n_boot}|{seed}|{metric}"
    cache = out / "delta_ci.csv"
    if cache.is_file():
        c = pd.read_csv(cache)
        if not c.empty and str(c["key"].iloc[0]) == key:
            return c.drop(columns="key")

    cells = df[(df["metric"] == metric) & (df["condition"] == "clean")]
    rows = []
    for lab, g in cells.groupby("label"):
        folders = []
        for r in g.itertuples():
            folders.append((str(r.fold), out / "predictions" /
                            f"{run_label(r.model, r.regime, r.head)}-{str(r.config_hash)[:8]}-fold{r.fold}"))
        if not all((f / "clean.csv").is_file() for _, f in folders):
            continue
        clean = {k: pd.read_csv(f / "clean.csv") for k, f in folders}
        conds = sorted({p.stem for _, f in folders for p in f.glob("*.csv")} - {"clean"})
        for cond in conds:
            if not all((f / f"{cond}.csv").is_file() for _, f in folders):
                continue
            ys, pa, pb, subj, fold = [], [], [], [], []
            for k, f in folders:
                a = pd.read_csv(f / f"{cond}.csv")
                b = clean[k].set_index("index").loc[a["index"]]
                cols = [c for c in a.columns if c.startswith("p") and c[1:].isdigit()]
                ys.append(a["y"].to_numpy()); pa.append(a[cols].to_numpy()); pb.append(b[cols].to_numpy())
                subj.append(a["subject"].astype(str).to_numpy()); fold.append(np.full(len(a), k))
            try:
                ci = paired_cluster_bootstrap(np.concatenate(ys), np.vstack(pa), np.vstack(pb), np.concatenate(subj),
                                              np.concatenate(fold), metric=metric, target="mean_fold",
                                              stratify=False, n_boot=n_boot, seed=seed)
                d, lo, hi = 100 * ci.estimate, 100 * ci.low, 100 * ci.high
            except ValueError:
                d, lo, hi = np.nan, np.nan, np.nan
            rows.append({"label": lab, "condition": cond, "clean": float(g["value"].astype(float).mean()),
                         "delta_pp": d, "low_pp": lo, "high_pp": hi})
    table = pd.DataFrame(rows, columns=["label", "condition", "clean", "delta_pp", "low_pp", "high_pp"])
    with atomic_path(cache) as tmp_file:
        table.assign(key=key).to_csv(tmp_file, index=False)
    return table


def write_report(out_dir: str | os.PathLike, *, reference: str | None = "eegnet", metric: str = "balanced_accuracy",
                 alpha: float = 0.05, chance: float | None = None, filter_notes: Sequence[str] = (),
                 experiment: str | None = None, task: str | None = None,
                 config_hashes: set[str] | None = None, config=None) -> pd.DataFrame:
    """Write ``sweep.md``, ``deltas.csv``, ``wilcoxon.csv`` and ``degradation_curves.png`` for a sweep folder.

    Parameters
    ----------
    out_dir : path
        The sweep's out_dir (``results.csv``, ``sweep.yaml``, ``dropout_masks.json``, ``failures.json``).
    reference : str or None
        Reference model of the ∗/∇ marks.
    metric : str
        Metric of the degradation tables and curves.
    alpha : float
        Family-wise level of the marks.
    chance : float, optional
        Chance level for the curves.
    filter_notes : sequence of str
        Notes on the noise filters (:func:`~eegfm_bench.perturb.evaluate.filter_from_preprocessing`).
    experiment, task : str, optional
        Restrict to these rows (default: all rows of the folder).
    config_hashes : set of str, optional
        Restrict to rows of these config hashes (the current sweep's: rows of cells since retrained are left out).
    config : SweepConfig, optional
        The sweep's typed config (:class:`~eegfm_bench.runs.sweep.config.SweepConfig`, what ``sweep.yaml`` holds): its cv
        run, perturbation seed and condition order head the report (without it: ``?`` and the rows' order).

    Returns
    -------
    DataFrame
        The main degradation table (conditions every model takes), Δ pp, ranked by Average; ``attrs["marks"]``
        holds its ∗/∇ marks (``{column: {label: mark}}``) and ``attrs["report"]`` the path of ``sweep.md``.

    Raises
    ------
    ValueError
        If ``reference`` is ambiguous or absent from the rows.
    """
    out = Path(out_dir)
    df = _current_rows(out, experiment, task, config_hashes)
    lines = [f"# Perturbation sweep: {experiment or ', '.join(sorted(set(df.get('experiment', []))))} / "
             f"{task or ', '.join(sorted(set(df.get('task', []))))}", ""]
    if df.empty:
        atomic_write_text(out / "sweep.md", "\n".join(lines + ["(no results)", ""]))
        empty = pd.DataFrame()
        empty.attrs.update(marks={}, report=str(out / "sweep.md"))
        return empty
    df = add_labels(df)
    ref = resolve_reference(df, reference)
    lines += _method_lines(df, config, metric, ref, alpha, filter_notes)
    lines += ["## Clean performance", "", _md(clean_table(df)), ""]
    deltas = fold_deltas(df, metric)
    with atomic_path(out / "deltas.csv") as tmp_file:
        deltas.to_csv(tmp_file, index=False)
    degradation, tests, main_table = _degradation_sections(df, deltas, config, ref, alpha)
    main_table.attrs.update(report=str(out / "sweep.md"))
    lines += degradation + _not_applicable_lines(df)
    with atomic_path(out / "wilcoxon.csv") as tmp_file:
        pd.DataFrame(tests).to_csv(tmp_file, index=False)
    lines += _dropout_mask_lines(out) + _region_lines(df)
    png = plot_degradation_curves(df, out / "degradation_curves.png", metric=metric, chance=chance,
                                  title=f"{task or ''} {metric.replace('_', ' ')} under test-time perturbations "
                                        "(mean ± std over folds)".strip())
    lines += ["## Degradation curves", "", f"![degradation curves]({png.name})", ""]
    lines += _failure_lines(out)
    atomic_write_text(out / "sweep.md", "\n".join(lines))
    return main_table


def _current_rows(out: Path, experiment: str | None, task: str | None, config_hashes: set[str] | None) -> pd.DataFrame:
    """The sweep folder's rows, restricted to an experiment, a task and the current config hashes when given."""
    df = ResultStore(out).load()
    if experiment is not None:
        df = df[df["experiment"] == experiment]
    if task is not None:
        df = df[df["task"] == task]
    if config_hashes is not None and not df.empty:
        df = df[df["config_hash"].astype(str).isin({str(h) for h in config_hashes})]
    return df


def _method_lines(df: pd.DataFrame, cfg, metric: str, ref: str | None, alpha: float,
                  filter_notes: Sequence[str]) -> list[str]:
    """What was run: the cv run, folds, seed and metric, the noise filters, and how Δ and the marks are read."""
    n_folds = int(df["fold"].nunique())
    fold_unit = ", ".join(sorted(set(df["fold_unit"].astype(str)))) if "fold_unit" in df else "?"
    cv_run, seed = (cfg.cv_out_dir, cfg.seed) if cfg is not None else ("?", "?")
    lines = [f"cv run: `{cv_run}`; {plural(n_folds, 'fold')} ({fold_unit}-grouped); perturbation seed {seed}; metric: "
             f"{metric.replace('_', ' ')}. Models evaluated on their own fold's test windows under every condition, "
             "no retraining (paper 003 §3, App. D).", ""]
    lines += _filter_lines(df, filter_notes)
    # the smallest two-sided p a Wilcoxon signed-rank test can reach with n folds is 2 / 2^n
    min_p = 2.0 / 2 ** n_folds if n_folds else 1.0
    lines += [f"Δ = {metric.replace('_', ' ')} change from clean in percentage points, paired per fold, mean over "
              f"folds; ranked by Average (mean over the table's conditions). Best per column in bold, second "
              f"underlined. " + (f"∗ / ∇: significantly less / more degradation than {ref} (two-sided Wilcoxon "
                                 f"signed-rank over the shared folds, Holm-corrected across models, α = {alpha:g}); "
                                 f"with {plural(n_folds, 'fold')} the smallest attainable p is {min_p:.3g}."
                                 if ref else "No significance marks (no reference model)."), ""]
    return lines


def _filter_lines(df: pd.DataFrame, filter_notes: Sequence[str]) -> list[str]:
    """The noise filters, one per preprocessing (models at other rates see other filters), from the rows' details."""
    filters: dict[str, list[str]] = {}
    if "details" in df:
        seen: set = set()
        for label, s in df[["label", "details"]].dropna().drop_duplicates().itertuples(index=False):
            f = None if label in seen else json.loads(s).get("filter")
            if f:
                seen.add(label)
                notch = f.get("notch_freq")
                desc = (f"band-pass {f['l_freq']}–{f['h_freq']} Hz, notch "
                        f"{', '.join(f'{x:g}' for x in notch) + ' Hz' if notch else 'none'}, at {f['sfreq']:g} Hz")
                filters.setdefault(desc, []).append(label)
    if not filters:
        return []
    per = "; ".join(f"{d} ({', '.join(labels)})" for d, labels in filters.items()) if len(filters) > 1 \
        else next(iter(filters))
    return [f"Noise filtered like each model's data: {per} (App. D.1)."
            + (" " + " ".join(filter_notes) if filter_notes else ""), ""]


def _degradation_sections(df: pd.DataFrame, deltas: pd.DataFrame, cfg, ref: str | None,
                          alpha: float) -> tuple[list[str], list[dict], pd.DataFrame]:
    """The degradation tables (conditions every model takes; channels removed) in the config's condition order.

    Returns the lines, the Wilcoxon tests of both tables and the main table (``attrs["marks"]`` its marks)."""
    conds = [c for c in dict.fromkeys(df["condition"]) if c != "clean"]
    order = {c: i for i, c in enumerate((cfg.conditions if cfg is not None else None) or conds)}
    conds.sort(key=lambda c: order.get(c, len(order)))
    shared = [c for c in conds if not parse_condition(c).needs_variable_channels]
    removed = [c for c in conds if parse_condition(c).needs_variable_channels]
    lines: list[str] = []
    tests: list[dict] = []
    main_table = pd.DataFrame()
    main_table.attrs.update(marks={})
    if shared:
        means, marks, t = degradation_table(deltas, shared, reference=ref, alpha=alpha)
        tests += t
        main_table = means.copy()
        main_table.attrs.update(marks=marks.to_dict())
        lines += ["## Degradation: all models (Δ pp from clean)", "", table_markdown(means, marks) if not means.empty
                  else "(no complete model)", ""]
    if removed:
        means, marks, t = degradation_table(deltas, removed, reference=ref, alpha=alpha)
        tests += t
        lines += ["## Degradation: channels removed (variable-channel models only; App. D.2, D.3)", "",
                  table_markdown(means, marks) if not means.empty else "(no model in this sweep accepts removed channels)",
                  ""]
    return lines, tests, main_table


def _not_applicable_lines(df: pd.DataFrame) -> list[str]:
    """Conditions a model cannot take, with the reason, per model."""
    na = df[df["metric"] == "not_applicable"]
    if na.empty:
        return []
    lines = ["### Not applicable", "", "| model | conditions | reason |", "|---|---|---|"]
    for lab, g in na.groupby("label"):
        for note, gg in g.groupby("note"):
            lines.append(f"| {lab} | {', '.join(sorted(set(gg['condition'])))} | {note} |")
    return lines + [""]


def _dropout_mask_lines(out: Path) -> list[str]:
    """The random dropout masks (one per dataset and p, shared by folds and models), from ``dropout_masks.json``."""
    if not (out / "dropout_masks.json").is_file():
        return []
    masks = json.loads((out / "dropout_masks.json").read_text())
    rows = [(ds, m) for ds, rec in masks.items() for m in rec["masks"]]
    if not rows:
        return []
    lines = ["## Random dropout masks (App. D.2, Table 5: one mask per dataset and p, shared by folds and "
             "models)", "", "| Dataset | p | n | Dropped channels |", "|---|---|---|---|"]
    for ds, m in rows:
        lines.append(f"| {ds} ({m['n_chans']} ch) | {m['p']:.2f} | {m['n_dropped']} | {', '.join(m['dropped'])} |")
    return lines + [""]


def _region_lines(df: pd.DataFrame) -> list[str]:
    """The regions of the region conditions (App. D.3): their channels and the electrodes a montage lacks."""
    regions = {}
    for c, s in df[["condition", "details"]].dropna().drop_duplicates("condition").itertuples(index=False):
        det = json.loads(s)
        if "role" in det and det["role"] not in regions:
            regions[det["role"]] = det
    if not regions:
        return []
    lines = ["## Regions (App. D.3, Table 6)", "", "| role | regions | channels | missing electrodes |",
             "|---|---|---|---|"]
    for role, det in regions.items():
        lines.append(f"| {role} | {', '.join(det['regions'])} | {', '.join(det['channels'])} | "
                     f"{', '.join(det['missing']) or '—'} |")
    return lines + [""]


def _failure_lines(out: Path) -> list[str]:
    """The conditions that failed (no rows written; a rerun retries them), from ``failures.json``."""
    if not (out / "failures.json").is_file():
        return []
    fails = json.loads((out / "failures.json").read_text())
    if not fails:
        return []
    lines = ["## Failures (no rows written; a rerun retries them)", "", "| model | fold | condition | error |",
             "|---|---|---|---|"]
    for f in fails:
        lines.append(f"| {f['model']} ({f['regime']}, {f['head']}) | {f['fold']} | {f['condition']} | "
                     f"{f['error'].splitlines()[0][:200]} |")
    return lines + [""]
