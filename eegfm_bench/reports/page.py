"""One report per experiment: ``report.html`` (self-contained: figures embedded, sortable tables) and ``report.md``.

:func:`run_report` gathers what the commands wrote under one or more out_dirs — a cv run (``cells.json``), its
sweeps (``sweep.yaml``), block probes and attention maps (``probes/``, ``attention/``), attribution
(``attribution/``), negative controls (``gates.json``) and provenance audits (``audit_*.json``), found in the
folders given and below them — and renders one page with Jinja2 templates (``templates/report.html.j2``,
``templates/report.md.j2``). Sections (paper 003 §4-7 recommend reporting them together; paper 001's gate table;
paper 000's verdicts), each present only when its results exist:

1. the run: configuration, data and ingestion summary, and the init of every model (``random`` or
   ``pretrained:<id>@<sha>``) stated at the top;
2. clean performance per model × regime × head (mean ± SD over folds, and every fold as a point);
3. the pooling-head comparison (paper 003 §4.5) with head parameter counts;
4. robustness per perturbation type with the ∗/∇ marks and the degradation curves (paper 003 §5, App. D);
5. block-wise probe curves and the attention maps per block (§7, App. I.4);
6. attribution topomaps with their conservation and randomisation checks (§6, App. I.1-I.2);
7. the negative-control gate table (paper 001 §5.5);
8. the provenance audit's Recover / Stress / Intervene / Verify figures and verdict (paper 000).

Only rows of each run's current config hashes enter a table (``cells.json`` of the cv run, the sweep, the probes
and the attribution), the same rows the commands' own Markdown reports show. Every number on the page is read
from the result stores and JSON files, never typed in. Every figure has a caption saying what was measured and on
what (folds, windows, init), and promising only what the figure draws (a chance line only where one is drawn,
intervals only where they were computed). Every score axis is anchored at chance, never autoscaled, counted nouns
agree with their count and folds are listed in natural order (:mod:`eegfm_bench.reports.style`).
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jinja2
import matplotlib.figure
import numpy as np
import pandas as pd

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.config import read_saved
from eegfm_bench.config.controls import ControlsConfig, controls_parser
from eegfm_bench.config.cv import CVConfig, cv_parser
from eegfm_bench.config.interpret import InterpretConfig, interpret_parser
from eegfm_bench.config.sweep import SweepConfig, sweep_parser
from eegfm_bench.errors import NotAResultFolderError
from eegfm_bench.interpret.sanity import RANDOMISATION_THRESHOLD, sanity_verdict
from eegfm_bench.perturb.conditions import parse_condition
from eegfm_bench.reports.attribution_checks import SANITY_METRICS, checks_table
from eegfm_bench.reports.audit import stability_mark
from eegfm_bench.reports.confound import VERDICT_LEGEND, current_rows, ordered, verdict_text
from eegfm_bench.reports.cv import SUMMARY_METRICS
from eegfm_bench.reports.probes import probe_table
from eegfm_bench.reports.style import anchor_score_axis, fold_key, plural
from eegfm_bench.reports.sweep import add_labels, degradation_table, delta_intervals, fold_deltas, resolve_reference
from eegfm_bench.registry import UnknownNameError
from eegfm_bench.results import ResultStore, code_version, resolve_row_path

log = logging.getLogger(__name__)

REPORT_HTML = "report.html"
REPORT_MD = "report.md"


# ------------------------------------------------------------------------------------------------ page model
@dataclass
class Cell:
    """One table cell: ``text`` as shown, ``sort`` the value a click on the header sorts by (number or text)."""

    text: str
    sort: Any = None


@dataclass
class Table:
    """A sortable table: ``columns`` and ``rows`` of :class:`Cell`; ``caption`` says what the numbers are."""

    caption: str
    columns: list[str]
    rows: list[list[Cell]]
    name: str = ""


@dataclass
class Figure:
    """An embedded figure (PNG as a data URI); ``path`` is the file it was read from (for ``report.md``)."""

    caption: str
    path: Path
    uri: str = ""


@dataclass
class Section:
    """One section of the page."""

    id: str
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pre: str = ""
    commands: str = ""


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _fmt(v, nd: int = 3) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.{nd}f}"


def _pm(mean, std, nd: int = 3) -> Cell:
    m, s = _num(mean), _num(std)
    if m is None:
        return Cell("n/a", None)
    return Cell(f"{m:.{nd}f} ± {s:.{nd}f}" if s is not None else f"{m:.{nd}f}", m)


def _text(v) -> Cell:
    return Cell("" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v),
                None if v is None else str(v))


def table_from_frame(df: pd.DataFrame, caption: str, *, name: str = "", nd: int = 3) -> Table:
    """A :class:`Table` from a DataFrame: numbers formatted with ``nd`` decimals and sorted numerically."""
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for v in rec:
            f = _num(v) if not isinstance(v, (str, bool)) else None
            if f is not None and isinstance(v, (int, np.integer)):
                cells.append(Cell(str(int(v)), f))
            elif f is not None:
                cells.append(Cell(f"{f:.{nd}f}", f))
            else:
                cells.append(_text(v))
        rows.append(cells)
    return Table(caption, [str(c) for c in df.columns], rows, name)


def _figure(path: Path, caption: str) -> Figure | None:
    path = Path(path)
    if not path.is_file():
        return None
    return Figure(caption, path, "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii"))


# ------------------------------------------------------------------------------------------------ discovery
def _rglob(root: Path, pattern: str, depth: int = 3) -> list[Path]:
    out = []
    for p in sorted(root.rglob(pattern)):
        rel = p.relative_to(root)
        if len(rel.parts) <= depth + 1 and not any(x in ("checkpoints", "jobs", "logs", "parts", "predictions", "cache",
                                                                 "confound")
                                                   for x in rel.parts[:-1]):
            out.append(p)
    return out


ConfigReaders = Mapping[str, Callable[[Path], Any]]
"""How the page reads back the config a result folder saved, by the command that wrote it: ``cv``
(``config.yaml``), ``sweep`` (``sweep.yaml``), ``interpret`` (``interpret.yaml`` of probes / attribution) and
``controls`` (``config.yaml`` beside ``gates.json``); each takes the file's path and returns that command's typed
config."""

SAVED_CONFIGS: ConfigReaders = {
    "cv": lambda path: read_saved(cv_parser(saved=True), path, CVConfig),
    "sweep": lambda path: read_saved(sweep_parser(saved=True), path, SweepConfig),
    "interpret": lambda path: read_saved(interpret_parser(saved=True), path, InterpretConfig),
    "controls": lambda path: read_saved(controls_parser(saved=True), path, ControlsConfig),
}
"""Each command's saved config read back through its own parser into its typed config
(:func:`~eegfm_bench.config.read_saved`: one line naming the fix for a file of another version)."""


@dataclass
class Sources:
    """What was found under the report's folders; ``configs`` holds the typed config each folder saved, by the
    saved file's path (read by :func:`discover` with the given readers)."""

    cv: list[Path] = field(default_factory=list)
    sweeps: list[Path] = field(default_factory=list)
    probes: list[Path] = field(default_factory=list)
    attention: list[Path] = field(default_factory=list)
    attribution: list[Path] = field(default_factory=list)
    controls: list[Path] = field(default_factory=list)
    audits: list[Path] = field(default_factory=list)
    configs: dict[Path, Any] = field(default_factory=dict)

    def config(self, path: Path) -> Any:
        """The typed config saved at ``path`` (None when the folder saved none)."""
        return self.configs.get(Path(path))


def discover(dirs: Sequence[str | os.PathLike], configs: ConfigReaders | None = None) -> Sources:
    """Every result folder under ``dirs`` (a folder and three levels below it), each found once; with ``configs``
    the config each saved is read (typed) into :attr:`Sources.configs`.

    Raises
    ------
    NotAResultFolderError
        A folder that does not exist.
    ConfigError
        A saved config that does not read as its command's (from the reader: one line naming the fix).
    """
    s = Sources()
    seen: set = set()

    def add(lst, p):
        p = p.resolve()
        if p not in seen:
            seen.add(p)
            lst.append(p)

    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            raise NotAResultFolderError(f"no folder {root}; fix: pass the out_dir of an eegfm-bench command")
        for p in _rglob(root, "cells.json"):
            if (p.parent / "sweep.yaml").is_file():
                add(s.sweeps, p.parent)
            elif (p.parent / "config.yaml").is_file() and not (p.parent / "gates.json").is_file():
                add(s.cv, p.parent)
        for p in _rglob(root, "sweep.yaml"):
            add(s.sweeps, p.parent)
        for p in _rglob(root, "results.csv"):
            if p.parent.name == "probes":
                add(s.probes, p.parent)
            elif p.parent.name == "attribution":
                add(s.attribution, p.parent)
        for p in _rglob(root, "*.npz", depth=2):
            if p.parent.name == "attention":
                add(s.attention, p.parent)
        for p in _rglob(root, "gates.json"):
            add(s.controls, p.parent)
        for p in _rglob(root, "audit_*.json"):
            add(s.audits, p)
    if configs is not None:
        for kind, folders, name in (("cv", s.cv, "config.yaml"), ("sweep", s.sweeps, "sweep.yaml"),
                                    ("interpret", s.probes + s.attribution, "interpret.yaml"),
                                    ("controls", s.controls, "config.yaml")):
            for d in folders:
                if (d / name).is_file():
                    s.configs[d / name] = configs[kind](d / name)
    return s


def _hashes(folder: Path) -> set[str] | None:
    """The current config hashes a command wrote to ``cells.json`` (None: no file, every row counts)."""
    p = folder / "cells.json"
    if not p.is_file():
        return None
    data = json.loads(p.read_text())
    return {str(c["config_hash"]) if isinstance(c, dict) else str(c) for c in data}


def _rows(folder: Path, hashes: set[str] | None = None) -> pd.DataFrame:
    df = ResultStore(folder).load()
    hashes = _hashes(folder) if hashes is None else hashes
    if hashes is not None and not df.empty:
        df = df[df["config_hash"].astype(str).isin(hashes)]
    return df


# ------------------------------------------------------------------------------------------------ sections
def _inits(frames: Sequence[pd.DataFrame]) -> list[str]:
    vals = set()
    for df in frames:
        if not df.empty and "init" in df:
            vals |= {f"{m}: {i}" for m, i in df[["model", "init"]].drop_duplicates().astype(str).itertuples(index=False)
                     if not m.startswith("handcrafted")}
    return sorted(vals)


def confound_commands(d: Path, cfg) -> list[str]:
    """The ``eegfm-bench confound`` commands that added the confound rows a cv run's own config does not run.

    Read from the conditions of ``d/confound.csv`` (``confound=offset1s``, ``confound=band4-40``, ...): the
    variations beyond the config's ``confound.variations`` (``cfg``: the run's typed
    :class:`~eegfm_bench.config.cv.CVConfig`, None when it saved none), one command per offset and band they used,
    with ``--offset-s`` / ``--band`` where those differ from the config's. Empty when there are none.
    """
    table = d / "confound.csv"
    if not table.is_file():
        return []
    cc = cfg.confound if cfg is not None and not isinstance(cfg.confound, bool) else None
    own_offset = float(cc.offset_s) if cc is not None else 1.0
    own_band = tuple(float(x) for x in cc.band) if cc is not None else (4.0, 40.0)
    own = set(cc.variations or []) if cc is not None and cc.enabled else set()
    groups: dict[tuple, list[str]] = {}
    for cond in sorted(set(pd.read_csv(table)["condition"].astype(str))):
        names, offset, band = [], own_offset, own_band
        for part in cond.removeprefix("confound=").split("+"):
            if part.startswith("offset") and part.endswith("s"):
                names.append("offset")
                offset = float(part[len("offset"):-1])
            elif part.startswith("band") and "-" in part:
                names.append("band")
                band = tuple(float(x) for x in part[len("band"):].split("-"))
            else:
                names.append(part)
        name = "+".join(names)
        if name not in own or (offset, band) != (own_offset, own_band):
            groups.setdefault((offset, band), []).append(name)
    order = {"offset": 0, "band": 1, "offset+band": 2}
    cmds = []
    for (offset, band), names in groups.items():
        cmd = (f"eegfm-bench confound --cv {_out_dir(cfg, d)} --variations "
               + " ".join(sorted(set(names), key=lambda v: (order.get(v, 3), v))))
        if offset != own_offset:
            cmd += f" --offset-s {offset:g}"
        if band != own_band:
            cmd += f" --band {band[0]:g} {band[1]:g}"
        cmds.append(cmd)
    return cmds


def reproduce_commands(src: Sources) -> list[str]:
    """The commands that reproduce the page, in the order they ran, with the config each result folder saved (its
    paths as the config gives them: run from the working directory the commands ran in)."""
    cmds = []
    for d in src.cv:
        cfg = src.config(d / "config.yaml")
        cmds.append(f"eegfm-bench cv --config {Path(_out_dir(cfg, d)) / 'config.yaml'}")
        cmds += confound_commands(d, cfg)
    for d in src.sweeps:
        cmds.append(f"eegfm-bench sweep --config {Path(_out_dir(src.config(d / 'sweep.yaml'), d)) / 'sweep.yaml'}")
    for kind, lst in (("probe", src.probes), ("attribute", src.attribution)):
        for d in lst:
            cfg = src.config(d / "interpret.yaml")
            if cfg is not None:
                cmds.append(f"eegfm-bench {kind} --config {Path(_out_dir(cfg, d.parent)) / d.name / 'interpret.yaml'}")
    for d in src.controls:
        cfg = src.config(d / "config.yaml")
        if cfg is not None:
            cmds.append(f"eegfm-bench controls --config {Path(_out_dir(cfg, d)) / 'config.yaml'}")
    for p in src.audits:
        if (p.parent.parent / f"{p.parent.name}.yaml").is_file():
            cmds.append(f"eegfm-bench audit --config {p.parent.parent / (p.parent.name + '.yaml')}")
    if src.cv:
        cmds.append("eegfm-bench report " + " ".join(str(_out_dir(src.config(d / "config.yaml"), d)) for d in src.cv))
    return cmds


def _out_dir(cfg, folder: Path):
    """The ``out_dir`` a saved config names, as the command was given it (a relative one reads the same in any
    checkout); an absolute one only when it is the folder it was found in, else that folder (a moved or copied
    results folder is named where it is, never where it was written)."""
    named = cfg.out_dir if cfg is not None else None
    if named and Path(named).is_absolute() and Path(named).resolve() != Path(folder).resolve():
        return folder
    return named or folder


def run_section(src: Sources, frames: Sequence[pd.DataFrame], page_dir: Path | None = None) -> Section:
    """The run: what was measured, on which data, with which weights (always first); result folders relative to the
    page (``page_dir``) and the commands that reproduce it."""
    rel = (lambda p: os.path.relpath(p, page_dir)) if page_dir is not None else str
    sec = Section("run", "The run")
    inits = _inits(frames)
    random = [i for i in inits if i.split(": ", 1)[1].startswith("random")]
    if inits:
        sec.intro = ("Init of every model: " + "; ".join(inits) + ". "
                     + ("Every foundation model here is randomly initialised (no pretrained weights): its results "
                        "say nothing about the published checkpoint." if random and len(random) == len(inits) else
                        "Rows marked random are not the published checkpoints."))
    rows = []
    for d in src.cv:
        cfg = src.config(d / "config.yaml")
        if cfg is None:
            rows.append([_text(d.name), _text("cv"), _text("?"), _text("?"), _text(""), _text(rel(d))])
            continue
        sp = cfg.split
        rows.append([_text(d.name), _text("cv"), _text(cfg.task if isinstance(cfg.task, str) else json.dumps(cfg.task)),
                     _text(f"{sp.scheme} k={sp.k}, grouped by {sp.group_by}, seed {sp.seed}"),
                     _text(", ".join(f"{r.model}/{r.regime}/{'+'.join(r.heads)}" for r in cfg.runs)),
                     _text(rel(d))])
    for d in src.sweeps:
        cfg = src.config(d / "sweep.yaml")
        rows.append([_text(d.name), _text("sweep"), _text(""),
                     _text(f"cv run {cfg.cv_out_dir if cfg is not None else '?'}"),
                     _text(f"{plural(len(cfg.conditions or []) if cfg is not None else 0, 'condition')}, "
                           "perturbation seed "
                           f"{cfg.seed if cfg is not None else '?'}"),
                     _text(rel(d))])
    for kind, lst in (("probes", src.probes), ("attention", src.attention), ("attribution", src.attribution),
                      ("controls", src.controls)):
        for d in lst:
            rows.append([_text(d.name), _text(kind), _text(""), _text(""), _text(""), _text(rel(d))])
    for p in src.audits:
        rows.append([_text(p.stem), _text("audit"), _text(""), _text(""), _text(""), _text(rel(p))])
    if rows:
        sec.tables.append(Table("Result folders on this page, relative to it (each read from its result store; only "
                                "rows of the current config hashes).", ["name", "command", "task", "split / source",
                                                                        "contents", "folder"], rows, "folders"))
    cmds = reproduce_commands(src)
    if cmds:
        sec.notes.append("Reproduce this page (from the working directory the commands ran in; each config is the "
                         "resolved one the command saved):")
        sec.commands = "\n".join(cmds)
    for d in src.cv:
        ing = d / "ingest_report.json"
        if ing.is_file():
            cfg = src.config(d / "config.yaml")
            cap = cfg.data.max_windows_per_subject if cfg is not None else None
            sec.notes.append(f"Data ({d.name}): {_ingest_line(json.loads(ing.read_text()))}"
                             + (f" The cv then keeps at most {cap} windows per subject and class "
                                "(data.max_windows_per_subject); the rows' n_windows are what was tested."
                                if cap else "")
                             + " The full ingestion report and the configuration are under 'configuration and "
                               "ingestion report' below.")
        if (d / "ingest_report.md").is_file():
            sec.pre += (d / "ingest_report.md").read_text().strip() + "\n\n"
        if (d / "config.yaml").is_file():
            sec.pre += f"# {d / 'config.yaml'}\n" + (d / "config.yaml").read_text().strip() + "\n\n"
    return sec


def _ingest_line(rep: dict) -> str:
    """One sentence from ``ingest_report.json`` (one entry per window set): recordings, subjects and windows kept,
    rejected windows, findings (e.g. an interpolated flat channel, a dropped subject) and reader warnings."""
    parts = []
    for window_set in rep.values():
        t = window_set.get("totals") or {}
        rej = t.get("windows_rejected") or {}
        parts.append(f"{window_set.get('task', '?')} for {', '.join(window_set.get('models') or [])}: "
                     f"{t.get('recordings_kept', '?')} of {t.get('recordings', '?')} recordings and "
                     f"{t.get('subjects_kept', '?')} of {t.get('subjects', '?')} subjects kept, "
                     f"{t.get('windows_kept', '?')} windows, rejected windows: "
                     f"{', '.join(f'{k} {v}' for k, v in rej.items()) or 'none'}, {t.get('findings', 0)} finding(s), "
                     f"{t.get('warnings', 0)} reader warning(s)"
                     + (f", reference: {t['reference']}" if t.get("reference") else "")
                     + (f", {t['windows_past_event']} window(s) longer than their event (windows.past_event)"
                        if t.get("windows_past_event") else "")
                     + (f", {t['events_overrunning']} event(s) overrunning the next annotation"
                        if t.get("events_overrunning") else ""))
    return "; ".join(parts) + "." if parts else ""


def fold_points_figure(df: pd.DataFrame, metric: str = "balanced_accuracy",
                       chance: float | None = None) -> matplotlib.figure.Figure:
    """The clean score of every test fold (dots) with mean ± SD (squares), one column per model / regime / head.

    The y axis is a score axis anchored at chance (:func:`~eegfm_bench.reports.style.score_limits`: chance − 0.1 to
    1, or 0 to 1 without a chance level), never autoscaled: fold noise must not read as an effect. The layout is
    constrained (labels inside the figure whatever the number of columns, one included) and the chance label sits
    at the axes' right edge, not at a data x outside them.

    Parameters
    ----------
    df : DataFrame
        Result rows (``model``, ``regime``, ``head``, ``fold``, ``metric``, ``condition``, ``value``).
    metric : str
        The score drawn (rows of the ``clean`` condition).
    chance : float, optional
        Chance level: a dashed line and the axis' anchor.

    Returns
    -------
    matplotlib.figure.Figure
        Not saved (:func:`_fold_points_figure` saves it).
    """
    pts = df[(df["metric"] == metric) & (df["condition"] == "clean")].copy()
    pts["value"] = pts["value"].astype(float)
    pts["label"] = pts["model"].astype(str) + "\n" + pts["regime"].astype(str) + " / " + pts["head"].astype(str)
    labels = list(dict.fromkeys(pts.sort_values(["model", "regime", "head"])["label"]))
    # no pyplot: the user's backend is left alone
    fig = matplotlib.figure.Figure(figsize=(max(4.0, 1.3 * len(labels) + 1.5), 3.4), layout="constrained")
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    for i, lab in enumerate(labels):
        v = pts.loc[pts["label"] == lab, "value"].to_numpy()
        ax.scatter(i + rng.uniform(-0.08, 0.08, v.size), v, s=22, alpha=0.8, color="C0", zorder=3)
        ax.errorbar(i + 0.22, v.mean(), yerr=v.std(ddof=1) if v.size > 1 else 0, fmt="s", color="k", ms=5, capsize=3)
    if chance is not None:
        ax.axhline(chance, ls="--", lw=1, color="0.4", zorder=1)
        ax.text(0.99, chance, f"chance {chance:.3f}", va="bottom", ha="right", fontsize=7, color="0.3",
                transform=ax.get_yaxis_transform())
    ax.set_xlim(-0.5, len(labels) - 0.5)
    anchor_score_axis(ax, pts["value"], chance)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(axis="y", alpha=0.3)
    return fig


def _fold_points_figure(df: pd.DataFrame, path: Path, metric: str = "balanced_accuracy",
                        chance: float | None = None) -> Path:
    fig = fold_points_figure(df, metric, chance)
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=100)
    return path


def _span(values) -> str:
    """``"144"`` when every fold has the same count, else ``"120-160"``."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna().astype(int)
    if v.empty:
        return "?"
    return str(v.iloc[0]) if v.min() == v.max() else f"{v.min()}-{v.max()}"


def _class_names(cv_dir: Path, cfg) -> list[str]:
    """The task's class names (label order) of a cv run: those its ``ingest_report.json`` saved (every window set
    records them); for a run written before the report saved them, resolved from its typed config's task (which
    loads MNE). [] when neither gives them (no config, or a task file no longer at its path)."""
    ing = cv_dir / "ingest_report.json"
    saved = json.loads(ing.read_text()) if ing.is_file() else {}
    for window_set in saved.values():
        if window_set.get("class_names"):
            return [str(c) for c in window_set["class_names"]]
    if cfg is None:
        return []
    from eegfm_bench.data.tasks import get_task  # reason: heavy (MNE); only for runs saved without class names

    try:
        return list(get_task(cfg.task).class_names)
    except Exception:  # noqa: BLE001  (a page must render even for a task file no longer at its path)
        return []


def _predictions_path(recorded: str, cv_dir: Path) -> Path | None:
    """A row's prediction CSV inside ``cv_dir`` (:func:`~eegfm_bench.results.resolve_row_path`; never a file outside
    it), else ``predictions/<name>`` there; None when neither exists (the recall table then has no row for it)."""
    p = resolve_row_path(str(recorded), cv_dir, what="predictions")
    for cand in (p, cv_dir / "predictions" / p.name):
        if cand.is_file():
            return cand
    return None


def _recall_table(cv_dir: Path, df: pd.DataFrame, names: list[str]) -> tuple[Table | None, list[str]]:
    """Per-class recall per cell (mean ± SD over folds, from the test predictions), and a flag for every fold whose
    predictions are all one class (balanced accuracy exactly chance, whatever the AUROC says)."""
    rows_df = df[(df["metric"] == "balanced_accuracy") & df.get("predictions", pd.Series(dtype=str)).notna()] \
        if "predictions" in df else pd.DataFrame()
    if rows_df.empty:
        return None, []
    auroc = df[df["metric"] == "auroc"].set_index(["model", "regime", "head", "fold"])["value"]
    per: dict = {}
    flags = []
    order = rows_df.assign(_fold=rows_df["fold"].map(fold_key)).sort_values(["model", "regime", "head", "_fold"])
    for r in order.itertuples():  # folds in natural order ("2" before "10"; the store holds them as text)
        path = _predictions_path(r.predictions, cv_dir)
        if path is None:
            continue
        p = pd.read_csv(path)
        cols = [c for c in p.columns if c.startswith("p") and c[1:].isdigit()]
        pred = p[cols].to_numpy().argmax(1)
        y = p["y"].to_numpy()
        k = len(cols)
        rec = [float(np.mean(pred[y == c] == c)) if np.any(y == c) else np.nan for c in range(k)]
        per.setdefault((r.model, r.regime, r.head), []).append(rec)
        if np.unique(pred).size == 1:
            a = auroc.get((r.model, r.regime, r.head, r.fold), np.nan)
            flags.append(f"⚠ {r.model}/{r.regime}/{r.head} fold {r.fold} predicts one class for every window "
                         f"({names[pred[0]] if pred[0] < len(names) else pred[0]}): balanced accuracy is chance by "
                         f"construction" + (f" while its AUROC is {float(a):.3f} (the scores rank, the threshold does "
                                             "not separate)" if np.isfinite(float(a)) else ""))
    if not per:
        return None, flags
    k = max(len(v[0]) for v in per.values())
    labels = [names[c] if c < len(names) else f"class {c}" for c in range(k)]
    rows = []
    for key, recs in sorted(per.items()):
        a = np.asarray(recs, dtype=float)
        rows.append([_text(x) for x in key] + [_pm(np.nanmean(a[:, c]), np.nanstd(a[:, c], ddof=1) if len(a) > 1
                                                   else np.nan) for c in range(k)]
                    + [Cell(str(len(a)), len(a))])
    return (Table("Recall per class (mean ± SD over folds, window level): a model that predicts one class scores chance "
                  "balanced accuracy with one recall at 1.", ["model", "regime", "head"] + [f"recall {c}" for c in labels]
                  + ["folds"], rows, "recall"), flags)


def clean_sections(cv_dir: Path, assets: Path, cfg=None) -> list[Section]:
    """Clean performance and the pooling-head comparison of one cv run (current config hashes only); ``cfg`` is
    the run's typed config (its task gives the class names and the chance level)."""
    df = _rows(cv_dir)
    if df.empty:
        return []
    df = df[df["condition"] == "clean"]
    by = ["model", "init", "regime", "head"]
    n_folds = int(df["fold"].nunique())
    unit = "/".join(sorted(set(df["fold_unit"].dropna().astype(str)))) if "fold_unit" in df else ""
    summary = df[df["metric"].isin(SUMMARY_METRICS)].copy()
    summary["value"] = summary["value"].astype(float)
    agg = summary.groupby(by + ["metric"])["value"].agg(["mean", "std", "count"]).reset_index()
    rows = []
    metrics = [m for m in SUMMARY_METRICS if m in set(agg["metric"])]
    names = _class_names(cv_dir, cfg)
    chance = 1.0 / len(names) if names else None
    per_fold = summary[summary["metric"] == "balanced_accuracy"]
    for key, g in agg.groupby(by, sort=True):
        vals = {r.metric: r for r in g.itertuples()}
        f = per_fold[(per_fold[by] == pd.Series(dict(zip(by, key)))).all(axis=1)]
        rows.append([_text(k) for k in key] + [_pm(vals[m].mean, vals[m].std) if m in vals else Cell("n/a")
                                                for m in metrics]
                    + [Cell(str(int(g["count"].max())), int(g["count"].max())),
                       _text(_span(f["n_windows"]) + " / " + _span(f["n_subjects"])),
                       Cell(_fmt(chance), chance)])
    folds_txt = plural(n_folds, unit + "-grouped test fold" if unit else "test fold")
    sec = Section("clean", f"Clean performance ({cv_dir.name})",
                  f"{cv_dir.name}: {'mean ± SD' if n_folds > 1 else 'the score'} over {folds_txt}"
                  ", window-level (the rows of `summary.md`); chance (balanced accuracy of any constant prediction) = "
                  f"{_fmt(chance)}" + (f" ({plural(len(names), 'class', 'classes')}: {', '.join(names)})" if names
                                       else "") + ".")
    sec.tables.append(Table("Clean test performance per model × init × regime × head (mean ± SD over folds), the test "
                            "windows and subjects of each fold (range over folds) and the chance level.",
                            by + metrics + ["folds", "test windows / subjects per fold", "chance"], rows, "clean"))
    recall, flags = _recall_table(cv_dir, df, names)
    if recall is not None:
        sec.tables.append(recall)
    sec.notes += flags
    inits = ", ".join(sorted(set(summary["init"].astype(str))))
    png = _fold_points_figure(df, assets / f"{cv_dir.name}_folds.png", chance=chance)
    axis = ("the chance level (dashed); y axis from chance − 0.1 (lower if a fold is) to 1" if chance is not None
            else "y axis from 0 to 1 (no chance level: the task's classes are unknown)")
    sec.figures.append(_figure(png, f"Balanced accuracy of every test fold (dots; {plural(n_folds, 'fold')}) with "
                                    f"the mean{' ± SD' if n_folds > 1 else ''} (squares), per model / regime / head; "
                                    f"{axis}; init {inits}; {cv_dir.name}."))
    out = [sec]
    c = current_rows(cv_dir)
    if not c.empty:
        csec = Section("confound", f"Confound check ({cv_dir.name})",
                       "Every headline cell retrained on windows that start after the cue-evoked response and/or in a "
                       "restricted band, same folds and seeds: if the headline collapses, it was not the task. Δ = "
                       "variation − headline (balanced accuracy, paired on the windows both hold, mean over folds) with "
                       "a 95 % subject-cluster bootstrap interval.")
        rows = []
        for r in ordered(c).itertuples():
            lo, hi = getattr(r, "checked_low", np.nan), getattr(r, "checked_high", np.nan)
            rows.append([_text(r.model), _text(r.regime), _text(r.head), _pm(r.headline_mean, r.headline_sd),
                         _text(r.condition), _pm(r.variation_mean, r.variation_sd),
                         _text(f"[{lo:.3f}, {hi:.3f}]" if pd.notna(lo) else "—"),
                         Cell(f"{r.delta:+.3f} [{r.low:+.3f}, {r.high:+.3f}]", float(r.delta)),
                         _text(verdict_text(r)),
                         Cell(f"{int(r.n_windows)} of {int(r.n_windows_headline)}", int(r.n_windows))])
        csec.tables.append(Table("Headline vs confound-checked balanced accuracy (mean ± SD over folds), the checked "
                                 "score's 95 % subject-cluster interval, Δ with its interval, and the verdict.",
                                 ["model", "regime", "head", "headline", "condition", "confound-checked",
                                  "checked 95 % CI", "Δ [95 % CI]", "verdict", "windows"], rows, "confound"))
        ch = c["chance"].iloc[0] if "chance" in c and pd.notna(c["chance"].iloc[0]) else None
        csec.notes.append(VERDICT_LEGEND.format(chance=_fmt(ch) if ch is not None else "1/K"))
        out.append(csec)
    heads = df.groupby(["model", "regime"])["head"].nunique()
    if (heads > 1).any():
        hp = df[df["metric"].isin(["balanced_accuracy", "auroc", "head_params", "trainable_fraction"])].copy()
        hp["value"] = hp["value"].astype(float)
        a = hp.groupby(by + ["metric"])["value"].agg(["mean", "std"]).reset_index()
        prow = []
        for key, g in a.groupby(by, sort=True):
            if heads.get((key[0], key[2]), 1) < 2:
                continue
            v = {r.metric: r for r in g.itertuples()}
            prow.append([_text(k) for k in key]
                        + [_pm(v[m].mean, v[m].std) if m in v else Cell("n/a") for m in ("balanced_accuracy", "auroc")]
                        + [Cell(f"{int(round(v['head_params'].mean)):,}", float(v["head_params"].mean))
                           if "head_params" in v else Cell("n/a"),
                           Cell(f"{100 * v['trainable_fraction'].mean:.3g} %", float(v["trainable_fraction"].mean))
                           if "trainable_fraction" in v else Cell("n/a")])
        psec = Section("pooling", f"Pooling heads ({cv_dir.name}; paper 003 §4.5)",
                       "The same backbone and regime under each pooling head: a large gap between heads is a pooling "
                       "effect, not a property of the representation.")
        psec.tables.append(Table("Pooling heads: balanced accuracy and AUROC (mean ± SD over folds), the head's "
                                 "parameter count and the trainable share of all parameters.",
                                 by + ["balanced_accuracy", "auroc", "head params", "trainable"], prow, "pooling"))
        out.append(psec)
    return out


def _perturbation_type(condition: str) -> str:
    """The table a condition's deltas go in: its condition class's ``display_name``.

    Raises
    ------
    UnknownNameError
        If the condition's kind is not registered in this process; the message names the entry point group.
    """
    try:
        return parse_condition(condition).display_name
    except UnknownNameError as err:
        raise UnknownNameError(f"{str(err).splitlines()[0]}\nfix: the sweep ran a condition this process does not "
                               "know: declare it as an entry point of the group 'eegfm_bench.conditions' (or import "
                               "the module that registers it) before writing the page") from None


def robustness_sections(sweep_dir: Path, cfg=None) -> list[Section]:
    """Robustness per perturbation type: Δ pp from clean with ∗/∇ marks, and the degradation curves; ``cfg`` is
    the sweep's typed config (reference model, condition order, α; None: no marks, the rows' order, α = 0.05)."""
    df = _rows(sweep_dir)
    if df.empty:
        return []
    df = add_labels(df)
    ref = resolve_reference(df, cfg.reference if cfg is not None else None)
    deltas = fold_deltas(df, "balanced_accuracy")
    conds = [c for c in dict.fromkeys(df["condition"]) if c != "clean" and c in set(deltas["condition"])]
    order = {c: i for i, c in enumerate((cfg.conditions if cfg is not None else None) or conds)}
    conds.sort(key=lambda c: order.get(c, len(order)))
    n_folds = int(df["fold"].nunique())
    alpha = float((cfg.alpha if cfg is not None else None) or 0.05)
    reachable = n_folds >= 2 and 2.0 / 2 ** n_folds < alpha  # the smallest two-sided Wilcoxon p with n folds
    ci = delta_intervals(sweep_dir, df)
    ci_of = {(r.label, r.condition): r for r in ci.itertuples() if np.isfinite(r.low_pp)} if not ci.empty else {}
    evidence = ("the intervals below are the evidence" if ci_of else
                "no interval either (the sweep saved no per-window predictions): the per-fold Δ are all there is")
    if not ref:
        marks_txt = "No reference model: no ∗/∇ marks."
    elif reachable:
        marks_txt = (f"∗ / ∇: significantly less / more degradation than {ref} (Wilcoxon signed-rank over folds, Holm "
                     f"across models, α = {alpha:g}).")
    else:
        marks_txt = (f"No ∗/∇ marks: with {plural(n_folds, 'fold')} the smallest two-sided Wilcoxon p is "
                     f"{2.0 / 2 ** n_folds if n_folds else 1:.3g}, so no comparison with {ref} can reach α = "
                     f"{alpha:g} (6 folds or more can); {evidence}.")
    clean_of = df[(df["metric"] == "balanced_accuracy") & (df["condition"] == "clean")].assign(
        value=lambda x: x["value"].astype(float)).groupby("label")["value"].mean()
    interval = (", with its 95 % subject-cluster bootstrap interval (subjects resampled within each test fold, from "
                "the saved per-window predictions)" if ci_of else "")
    sec = Section("robustness", f"Robustness under test-time perturbations ({sweep_dir.name})",
                  f"Δ = balanced accuracy change from clean in percentage points, paired per fold, mean over "
                  f"{plural(n_folds, 'fold')}{interval}, beside the clean score; each model on its own fold's test "
                  f"windows, no retraining (paper 003 §5, App. D). {marks_txt} Models in one fixed order (by name) in "
                  "every table.")
    by_type: dict[str, list[str]] = {}
    for c in conds:
        by_type.setdefault(_perturbation_type(c), []).append(c)
    for kind, cs in by_type.items():
        means, marks, _ = degradation_table(deltas, cs, reference=ref, alpha=alpha)
        if means.empty:
            continue
        rows = []
        for lab in sorted(means.index):
            cells = [_text(lab), Cell(_fmt(clean_of.get(lab)), _num(clean_of.get(lab)))]
            for c in means.columns:
                m = means.loc[lab, c]
                txt = ("—" if not np.isfinite(m) else f"{m:+.1f}") + (marks.loc[lab, c] or "")
                r = ci_of.get((lab, c))
                if r is not None:
                    txt += f" [{r.low_pp:+.1f}, {r.high_pp:+.1f}]"
                cells.append(Cell(txt, _num(m)))
            rows.append(cells)
        shown = any((lab, c) in ci_of for lab in means.index for c in means.columns)
        sec.tables.append(Table(f"{kind}: Δ balanced accuracy (pp) per condition"
                                + (" [95 % subject-cluster interval, where the predictions were saved]" if shown
                                   else "")
                                + " beside the clean balanced accuracy; Average = mean over these conditions.",
                                ["model", "clean"] + [str(c) for c in means.columns], rows, f"robustness:{kind}"))
    na = df[df["metric"] == "not_applicable"]
    for lab, g in na.groupby("label"):
        for note, gg in g.groupby("note"):
            sec.notes.append(f"Not applicable to {lab}: {', '.join(sorted(set(gg['condition'])))} ({note}).")
    fig = _figure(sweep_dir / "degradation_curves.png",
                  f"Balanced accuracy (mean{' ± SD' if n_folds > 1 else ''} over {plural(n_folds, 'fold')}) against "
                  "perturbation strength, one line per model, one panel per perturbation family; "
                  f"the sweep's test windows; init {', '.join(sorted(set(df['init'].astype(str))))}.")
    if fig:
        sec.figures.append(fig)
    return [sec]


def probe_sections(probe_dirs: Sequence[Path], attention_dirs: Sequence[Path]) -> list[Section]:
    """Block-wise probe curves and per-block attention maps."""
    secs = []
    for d in probe_dirs:
        df = _rows(d)
        df = df[df["metric"].astype(str).str.startswith("probe_bacc_block")] if not df.empty else df
        if df.empty:
            continue
        t = probe_table(df)
        inits = ", ".join(sorted(set(df["init"].astype(str))))
        sec = Section("probes", "Block-wise linear probes (paper 003 §7, App. I.4)",
                      f"Balanced accuracy of a linear probe on each block's output (mean ± SD over folds), per "
                      f"model, stage and pooling; init {inits}.")
        rows = [[_text(r.model), _text(r.curve), _text(r.pooling), Cell(str(int(r.block)), int(r.block)),
                 Cell(f"{r.relative_depth:.2f}", float(r.relative_depth)), _pm(r.mean, r.std),
                 Cell(str(int(r.n_folds)), int(r.n_folds))] for r in t.itertuples()]
        sec.tables.append(Table("Probe balanced accuracy per block.", ["model", "curve", "pooling", "block",
                                                                       "relative depth", "balanced accuracy", "folds"],
                                rows, "probes"))
        nf = int(t["n_folds"].max())
        fig = _figure(d / "probe_curves.png", f"Probe balanced accuracy against relative depth (mean"
                                              f"{' ± SD band' if nf > 1 else ''} over {plural(nf, 'fold')}), one line "
                                              f"per stage and pooling, y axis 0 to 1; init {inits}.")
        if fig:
            sec.figures.append(fig)
        secs.append(sec)
    for d in attention_dirs:
        sec = secs[-1] if secs else Section("probes", "Attention per block")
        for png in sorted(d.glob("*_per_block.png")):
            npz = np.load(png.with_name(png.name.replace("_per_block.png", ".npz")))
            n_folds = int(npz["frozen"].shape[0])
            sec.figures.append(_figure(png, f"{png.name.split('_per_block')[0]}: per-channel attention of every "
                                            f"block (sum over queries; mean over heads, patches and test windows, "
                                            f"{plural(n_folds, 'fold')}), fine-tuned and frozen."))
        if not secs:
            secs.append(sec)
    return secs


def attribution_sections(attr_dirs: Sequence[Path]) -> list[Section]:
    """Attribution topomaps with their conservation and randomisation checks."""
    secs = []
    for d in attr_dirs:
        df = _rows(d)
        if df.empty:
            continue
        t = checks_table(df)
        sec = Section("attribution", "Attribution (paper 003 §6, App. I.1-I.2)",
                      "Conservation: input relevance / logit (must be 1 for a conserving rule); randomisation: "
                      "Spearman correlation of the maps of the trained vs a weight-randomised model (low passes); a "
                      f"method fails the sanity check at {RANDOMISATION_THRESHOLD} or more (Adebayo et al. 2018).")
        if not t.empty:
            rows = []
            for r in t.itertuples():
                verdict = sanity_verdict(r.mean) if str(r.metric).endswith(SANITY_METRICS) else ""
                rows.append([_text(r.model), _text(r.regime), _text(r.head), _text(r.condition), _text(r.metric),
                             _pm(r.mean, r.std), Cell(_fmt(r.min), _num(r.min)), Cell(_fmt(r.max), _num(r.max)),
                             Cell(str(int(r.n_folds)), int(r.n_folds)), _text(verdict)])
            sec.tables.append(Table("Attribution sanity checks per model (mean ± SD over folds).",
                                    ["model", "regime", "head", "condition", "check", "mean ± SD", "min", "max",
                                     "folds", "sanity"], rows, "attribution"))
        sel = df[df["metric"].astype(str).str.endswith(":n_selected")]
        n_win = int(sel["value"].astype(float).sum()) if not sel.empty else 0
        n_folds = int(df["fold"].nunique())
        inits = ", ".join(sorted(set(df["init"].astype(str))))
        for png in sorted(d.glob("overview_*.png")):
            sec.figures.append(_figure(png, f"Attribution topomaps ({png.stem.replace('overview_', '')}): mean |R| per "
                                            f"channel, class-averaged and per class, every cell and method; "
                                            f"{plural(n_win, 'selected test window')} over "
                                            f"{plural(n_folds, 'fold')}; init {inits}."))
        secs.append(sec)
    return secs


def controls_sections(ctrl_dirs: Sequence[Path]) -> list[Section]:
    """The negative-control gate table (paper 001 §5.5)."""
    secs = []
    for d in ctrl_dirs:
        gates = json.loads((d / "gates.json").read_text())
        rep = json.loads((d / "controls_report.json").read_text()) if (d / "controls_report.json").is_file() else {}
        names = [g["name"] for g in gates[0]["gates"]] if gates else []
        rows = []
        for g in gates:
            cells = [_text(g["model"])]
            for gg in g["gates"]:
                cells.append(Cell(f"{gg['status']}: {gg['detail']}", gg["status"]))
            cells += [_text(g.get("stopped_at") or "—"), _text("yes" if g.get("attributed") else "no")]
            rows.append(cells)
        metric = gates[0].get("metric", "auroc") if gates else "auroc"
        how = {}
        for g in gates:
            for gg in g["gates"]:
                if gg.get("decided_by") and gg["status"] != "not_reached":
                    how.setdefault(f"({gg['gate']}) {gg['name']}", gg["decided_by"])
        sec = Section("controls", f"Negative controls ({d.name}; paper 001)",
                      "Each claim passes the gates in order; the first gate that does not pass (fail, inconclusive "
                      "— its paired interval straddles zero — or missing evidence) stops it. "
                      + ("How each gate was decided: " + "; ".join(f"{k}: {v}" for k, v in how.items()) + ". "
                         if how else "") + f"Metric {metric}"
                      + (f"; {rep['n_windows']} windows, {rep['n_subjects']} subjects, folds {rep['folds']}, "
                         f"stronger handcrafted family: {rep.get('stronger_family')}" if rep else "") + ".")
        sec.tables.append(Table("Gate table: status and evidence of every gate per claim (intervals are 95 % "
                                "subject-cluster bootstrap intervals).",
                                ["claim"] + [f"({n})" if len(n) < 4 else n for n in names] + ["stopped at",
                                                                                                "attributed"],
                                rows, "gates"))
        scores = rep.get("scores") or {}
        srows = []
        for name, s in scores.items():
            vals = s.get(f"{metric}_window") or []
            srows.append([_text(name), _text(s.get("source")), _text(s.get("init")),
                          _pm(np.mean(vals) if vals else None, np.std(vals, ddof=1) if len(vals) > 1 else None),
                          Cell(str(len(vals)), len(vals))])
        if srows:
            sec.tables.append(Table(f"Window-level {metric} of every representation (mean ± SD over folds).",
                                    ["representation", "source", "init", metric, "folds"], srows, "controls_scores"))
        prows = []
        for name, pr in sorted((rep.get("paired") or {}).items()):
            b = ((pr.get("levels") or {}).get("window") or {}).get("bootstrap") or {}
            if not b:
                continue
            prows.append([_text(name), _text(pr.get("comparator")), Cell(_fmt(b.get("estimate_a")), _num(b.get("estimate_a"))),
                          Cell(_fmt(b.get("estimate_b")), _num(b.get("estimate_b"))),
                          Cell(f"{b['estimate']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]", _num(b.get("estimate")))])
        if prows:
            sec.tables.append(Table(f"Paired Δ {metric} of each claim minus the stronger handcrafted family (window "
                                    "level, mean over folds) with its 95 % subject-cluster interval (gate ii), beside "
                                    "both scores.", ["claim", "comparator", "claim score", "comparator score",
                                                     "Δ [95 % CI]"], prows, "controls_paired"))
        secs.append(sec)
    return secs


def _audit_figure(a: dict, path: Path) -> Path:
    fig = matplotlib.figure.Figure(figsize=(14, 3.2))  # no pyplot: the user's backend is left alone
    ax = fig.subplots(1, 4)
    r = a.get("recover") or {}
    ax[0].bar(["LPI"], [r.get("lpi_bits", np.nan)], yerr=[[r.get("lpi_bits", 0) - r.get("low", 0)],
                                                        [r.get("high", 0) - r.get("lpi_bits", 0)]], capsize=4)
    if r.get("baseline_bits") is not None:
        ax[0].axhline(r["baseline_bits"], ls="--", c="gray", label="H(provenance)")
        ax[0].legend(fontsize=7)
    ax[0].set_ylabel("bits")
    ax[0].set_title("Recover: LPI (95 % CI)", fontsize=9)
    st = a.get("stress") or {}
    rot = (st.get("rotations") or [{}])[0]
    au = rot.get("auroc") or {}
    labs = [k for k in ("aligned", "independent", "reversed") if k in au]
    x = np.arange(len(labs))
    ax[1].bar(x - 0.2, [au[k]["exposed"] for k in labs], 0.4, label="exposed")
    ax[1].bar(x + 0.2, [au[k]["control"] for k in labs], 0.4, label="control")
    ax[1].set_xticks(x, labs, fontsize=8)
    ax[1].set_ylim(0, 1)
    ax[1].set_title(f"Stress: AUROC ({rot.get('shortcut', '')} shortcut)", fontsize=9)
    ax[1].legend(fontsize=7)
    iv = a.get("intervene") or {}
    sv = iv.get("singular_values") or []
    ax[2].plot(range(1, len(sv) + 1), sv, "o-")
    if iv.get("rank"):
        ax[2].axvline(iv["rank"] + 0.5, ls="--", c="gray", label=f"removed rank {iv['rank']}")
        ax[2].legend(fontsize=7)
    ax[2].set_title(f"Intervene: spectrum (captured {iv.get('captured', float('nan')):.2f})", fontsize=9)
    v = a.get("verify") or {}
    gs = [(k.replace("G_", "G "), v[k]) for k in ("G_before", "G_after") if k in v]
    ax[3].bar([g[0] for g in gs], [g[1]["estimate"] for g in gs],
              yerr=[[g[1]["estimate"] - g[1]["low"] for g in gs], [g[1]["high"] - g[1]["estimate"] for g in gs]],
              capsize=4, color=["C3", "C2"][:len(gs)])
    eps = (a.get("config") or {}).get("epsilon")
    if eps is not None:
        ax[3].axhline(float(eps), ls="--", c="gray", label=f"ε = {eps}")
        ax[3].legend(fontsize=7)
    ax[3].set_title(f"Verify: excess vulnerability G — {a.get('verdict', '?')}", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=90)
    return path


def audit_sections(audits: Sequence[Path], assets: Path) -> list[Section]:
    """The provenance audit's four stages and verdict (paper 000)."""
    if not audits:
        return []
    sec = Section("audit", "Provenance audit (PhysioTRACE, paper 000)",
                  "Recover: how much of the provenance the representation carries (LPI, bits); Stress: the task "
                  "score when the shortcut is aligned, independent or reversed; Intervene: the removed provenance "
                  "subspace; Verify: the excess vulnerability G before and after the removal, and the verdict.")
    rows = []
    for p in audits:
        a = json.loads(p.read_text())
        v = a.get("verify") or {}
        gb, ga = v.get("G_before") or {}, v.get("G_after") or {}
        rec = a.get("recover") or {}
        rows.append([_text((a.get("config") or {}).get("name") or p.stem),
                     _text(f"{a.get('verdict')}{stability_mark(a.get('stability'))}"),
                     Cell(f"{_fmt(rec.get('lpi_bits'))} [{_fmt(rec.get('low'))}, {_fmt(rec.get('high'))}]",
                          _num(rec.get("lpi_bits"))),
                     Cell(f"{_fmt(gb.get('estimate'), 4)} [{_fmt(gb.get('low'), 4)}, {_fmt(gb.get('high'), 4)}]",
                          _num(gb.get("estimate"))),
                     Cell(f"{_fmt(ga.get('estimate'), 4)} [{_fmt(ga.get('low'), 4)}, {_fmt(ga.get('high'), 4)}]",
                          _num(ga.get("estimate"))),
                     _text("; ".join(a.get("reasons") or []))])
        png = _audit_figure(a, assets / f"{p.stem}.png")
        sec.figures.append(_figure(png, f"{(a.get('config') or {}).get('name') or p.stem}: the four stages "
                                        f"(test: {(a.get('data') or {}).get('n_windows', {}).get('test', '?')} "
                                        f"windows, {(a.get('data') or {}).get('n_subjects', {}).get('test', '?')} "
                                        f"subjects); verdict {a.get('verdict')}."))
    sec.tables.append(Table("Audit verdicts: LPI (bits) and G with 95 % cluster-bootstrap intervals.",
                            ["audit", "verdict", "LPI bits", "G before", "G after", "reasons"], rows, "audits"))
    return [sec]


# ------------------------------------------------------------------------------------------------ render
def _env():
    return jinja2.Environment(loader=jinja2.PackageLoader("eegfm_bench.reports", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True,
                              lstrip_blocks=True)


def build_sections(dirs: Sequence[str | os.PathLike], assets: Path,
                   configs: ConfigReaders = SAVED_CONFIGS) -> tuple[Sources, list[Section]]:
    """Every section the results under ``dirs`` support, in the page's order (``configs``: :data:`ConfigReaders`)."""
    src = discover(dirs, configs)
    assets.mkdir(parents=True, exist_ok=True)
    body: list[Section] = []
    frames = []
    for d in src.cv:
        frames.append(_rows(d))
        body += clean_sections(d, assets, src.config(d / "config.yaml"))
    for d in src.sweeps:
        frames.append(_rows(d))
        body += robustness_sections(d, src.config(d / "sweep.yaml"))
    body += probe_sections(src.probes, src.attention)
    body += attribution_sections(src.attribution)
    for d in src.controls:
        frames.append(_rows(d))
    body += controls_sections(src.controls)
    body += audit_sections(src.audits, assets)
    seen: dict[str, int] = {}
    for s in body:  # unique anchors when several runs give the same section
        s.figures = [f for f in s.figures if f is not None]
        seen[s.id] = seen.get(s.id, 0) + 1
        if seen[s.id] > 1:
            s.id = f"{s.id}-{seen[s.id]}"
    return src, [run_section(src, frames, assets.parent)] + body


def run_report(dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None,
               title: str | None = None, *, configs: ConfigReaders | None = None) -> dict[str, Path]:
    """Write ``report.html`` and ``report.md`` for the results under ``dirs`` (into ``out``, default the first).

    The page gathers what the commands wrote under the folders (a cv run, its sweeps, probes, attribution, negative
    controls, provenance audits), each folder's saved config read as its command's typed config (``configs``,
    default :data:`SAVED_CONFIGS`).

    Parameters
    ----------
    dirs : sequence of path
        Result folders (a command's ``out_dir``); folders below them are found too.
    out : path, optional
        Where the page goes (default: the first folder).
    title : str, optional
        The page's title (default: the experiments' names).
    configs : mapping, optional
        The saved-config readers by folder kind (:data:`ConfigReaders`; ``None``: :data:`SAVED_CONFIGS`).

    Returns
    -------
    dict
        ``html``, ``md`` and ``assets`` (the folder of the page's own figures) paths.

    Raises
    ------
    NotAResultFolderError
        A folder that does not exist, or nothing to report under the folders (names what the commands write).
    ConfigError
        A saved config that does not read as its command's (one line naming the fix).
    """
    dirs = [Path(d) for d in dirs]
    out = Path(out) if out is not None else dirs[0]
    assets = out / "report_assets"
    src, sections = build_sections(dirs, assets, SAVED_CONFIGS if configs is None else configs)
    if len(sections) == 1 and not sections[0].tables:
        raise NotAResultFolderError(f"nothing to report under {', '.join(map(str, dirs))}: no cv run (cells.json), sweep "
                         "(sweep.yaml), probes/, attribution/, gates.json or audit_*.json; fix: pass the out_dir of "
                         "an eegfm-bench command")
    experiments = list(dict.fromkeys(cfg.experiment for cfg in map(src.config, (d / "config.yaml" for d in src.cv))
                                     if cfg is not None and cfg.experiment))
    meta = {"title": title or (f"{', '.join(experiments)}: eegfm_bench report" if experiments else
                               f"eegfm_bench report: {', '.join(d.name for d in dirs)}"),
            "generated": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "code_version": code_version(),
            "dirs": [os.path.relpath(d, out) for d in dirs]}
    env = _env()
    out.mkdir(parents=True, exist_ok=True)
    html = env.get_template("report.html.j2").render(meta=meta, sections=sections)
    md_env = _env()
    md_env.autoescape = False
    md = md_env.get_template("report.md.j2").render(meta=meta, sections=sections, rel=lambda p: os.path.relpath(p, out))
    atomic_write_text(out / REPORT_HTML, html, encoding="utf-8")
    atomic_write_text(out / REPORT_MD, md, encoding="utf-8")
    return {"html": out / REPORT_HTML, "md": out / REPORT_MD, "assets": assets}


def refresh(dirs: Sequence[str | os.PathLike], out: str | os.PathLike | None = None, *, quiet: bool = False,
            configs: ConfigReaders = SAVED_CONFIGS) -> Path | None:
    """:func:`run_report` at the end of a command: a failure is reported in one line (the command's own results
    are already written) and returns None."""
    try:
        path = run_report(dirs, out, configs=configs)["html"]
    except Exception as err:  # the report must not lose a finished command's results
        msg = f"report not refreshed ({type(err).__name__}: {err}); fix the cause and run `eegfm-bench report " \
              f"{' '.join(map(str, dirs))}`"
        log.warning(msg)
        print(msg)
        return None
    if not quiet:
        print(f"report: {path}")
    return path


def report_root(out_dir: str | os.PathLike, cv_dir: str | os.PathLike | None) -> list[Path]:
    """The folders an analysis' report covers: its cv run's folder when the analysis lives inside it (one page for
    the experiment), else the analysis' own folder plus the cv run's."""
    out = Path(out_dir).resolve()
    if cv_dir is None:
        return [out]
    cv = Path(cv_dir).resolve()
    return [cv] if cv == out or cv in out.parents else [out, cv]


__all__ = ["run_report", "refresh", "discover", "report_root", "Table", "Figure", "Section"]
