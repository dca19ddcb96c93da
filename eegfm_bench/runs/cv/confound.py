"""Confound check of an event-locked cv: every cell again without the cue-evoked response and
outside the artefact bands, beside the headline.

Paper 003 §4.2 / App. H.3 leaves PhysioNet MI out of its interpretability analyses for eye-movement contamination;
paper 001 asks that an advantage survive the control aimed at its most likely alternative explanation. For a task
whose windows are locked to events (``windows.mode: events``), each variation is the same cv — the same folds,
seeds, models, regimes and heads, retrained — on other windows:

* ``offset`` (``confound=offset1s``): windows start ``offset_s`` after the cue, past the cue-evoked response. The
  window keeps its end, so it is ``offset_s`` shorter (``keep_length: true``: it keeps its length and ends later);
  a model whose contract refuses the length names it.
* ``band`` (``confound=band4-40``): every model's band-pass is narrowed to ``band`` (``l_freq = max(model's,
  lo)``, ``h_freq = min(model's, hi)``): the slow eye-movement and fast muscle bands are gone.
* ``offset+band``: both.
* ``frontal`` (optional, ``confound=frontal``): the prefrontal and lateral frontal electrodes (``Fp*``, ``AF*``,
  ``F7/F8``, ``FT7/FT8``: ``frontal_channels``) removed from the montage before training (every built-in
  contract accepts a montage without them; a model that needs them is refused with its message).

Each variation runs as its own cv under ``<out_dir>/confound/<variation>/`` (resumable, launchable, keyed by its
config hash); its rows are copied into the headline's store with ``condition = confound=<variation>``.
``confound.md`` / ``confound.csv`` give, per model × regime × head, the headline and each variation's balanced
accuracy (mean ± SD over folds) and the paired difference (variation − headline, window level, mean over folds)
with a 95 % subject-cluster bootstrap interval (:func:`eegfm_bench.stats.paired_cluster_bootstrap`, subjects
resampled within each test fold), on the windows both runs hold.
"""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.data.tasks import preset_names, resolve_task_spec
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.metrics import classification_metrics
from eegfm_bench.reports.confound import confound_markdown, current_rows
from eegfm_bench.results import PATH_COLUMNS, ResultStore, resolve_row_path
from eegfm_bench.runs.cv.cells import load_config, windows_for
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.cv.loop import run_cells
from eegfm_bench.config.confound import label
from eegfm_bench.runs.cv.confound_config import check_confound
from eegfm_bench.reports.page import refresh
from eegfm_bench.stats import leave_one_cluster_out, paired_cluster_bootstrap

def derive(cfg: CVConfig, variation: str) -> CVConfig:
    """The cv config of one variation: same runs, folds and seeds; other windows; out_dir under ``confound/``.

    Raises
    ------
    ConfigError
        As :func:`~eegfm_bench.runs.cv.cells.load_config` (e.g. a band that leaves a model no band).
    """
    cc = cfg.confound
    out = cfg.to_dict()
    out["confound"] = {**cc.to_dict(), "enabled": False}
    out["out_dir"] = str(Path(cfg.out_dir) / "confound" / variation.replace("+", "_"))
    spec = cfg.resolved_task.spec
    # the changed task is a mapping, parsed again by load_config: a preset's name plus the changed sections
    # (merged key by key); a declared task (mapping or YAML file): its mapping with the changed sections
    task = {"preset": spec.name} if cfg.task in preset_names() else copy.deepcopy(resolve_task_spec(cfg.task))
    parts = variation.split("+")
    if "offset" in parts:
        task["windows"] = {**(task.get("windows") or {}), "tmin": float(spec.windows.tmin or 0.0) + float(cc.offset_s)}
        out["data"]["window_shorten_s"] = 0.0 if cc.keep_length else float(cc.offset_s)
    if "band" in parts:
        out["data"]["band"] = [float(x) for x in cc.band]
    if "frontal" in parts:
        task["channels"] = {**(task.get("channels") or {}),
                            "exclude": sorted(set(spec.channels.exclude) | set(cc.frontal_channels))}
    out["task"] = task
    return load_config(out)


def _preds(run_dir: Path, cfg: CVConfig) -> pd.DataFrame:
    """Every cell's test predictions of a cv run (current config hashes), keyed by (recording, window_index)."""
    cells = json.loads((run_dir / "cells.json").read_text())
    hashes = {(c["model"], c["regime"], c["head"]): c["config_hash"] for c in cells}
    rows = ResultStore(run_dir).load()
    rows = rows[(rows["metric"] == "balanced_accuracy") & (rows["condition"] == "clean")]
    out = []
    cache: dict = {}
    for r in rows.itertuples():
        if hashes.get((r.model, r.regime, r.head)) != str(r.config_hash) or not isinstance(r.predictions, str):
            continue
        p = pd.read_csv(resolve_row_path(r.predictions, run_dir, what=f"predictions of {r.model}-{r.regime}-"
                                                                   f"{r.head} fold {r.fold}"))
        ws = windows_for(cfg, r.model, cache)
        p["window_index"] = np.asarray(ws.window_index)[p["index"].to_numpy()]
        p["model"], p["regime"], p["head"], p["fold"] = r.model, r.regime, r.head, int(r.fold)
        out.append(p)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _hash_of(run_dir: Path, model: str, regime: str, head: str) -> str:
    for c in json.loads((run_dir / "cells.json").read_text()):
        if (c["model"], c["regime"], c["head"]) == (model, regime, head):
            return str(c["config_hash"])
    return ""


def compare(head_dir: Path, head_cfg: CVConfig, var_dir: Path, var_cfg: CVConfig, condition: str, n_boot: int,
            seed: int = 0) -> list[dict]:
    """Headline vs one variation per model × regime × head, from the two runs' saved test predictions
    (:func:`compare_predictions`), with each cell's config hash in both runs."""
    rows = compare_predictions(_preds(head_dir, head_cfg), _preds(var_dir, var_cfg), condition, n_boot, seed=seed)
    for r in rows:
        r["headline_hash"] = _hash_of(head_dir, r["model"], r["regime"], r["head"])
        r["variation_hash"] = _hash_of(var_dir, r["model"], r["regime"], r["head"])
    return rows


PRED_KEY = ["model", "regime", "head", "fold", "recording", "window_index"]
"""What pairs a headline window with its variation window: the cell, the fold, the recording and the window."""


def compare_predictions(a: pd.DataFrame, b: pd.DataFrame, condition: str, n_boot: int, seed: int = 0) -> list[dict]:
    """Headline (``a``) vs variation (``b``) test predictions per model × regime × head: balanced accuracy of each
    (mean ± SD over folds, on the windows both hold, paired by :data:`PRED_KEY`), the paired difference with its
    subject-cluster bootstrap interval, the verdict, and whether leaving out any one subject flips the verdict
    (``loso_flips``: ``subject:verdict`` without it, ``;``-joined; ``rests_on_one_subject``; ``loso_undecided``: the
    subjects without whom no interval exists).

    Parameters
    ----------
    a, b : DataFrame
        One row per test window: :data:`PRED_KEY`, ``subject``, ``y`` and the class probabilities ``p0..pK-1``
        (a cv's ``predictions/*.csv`` with the cell and fold added).
    condition : str
        The variation's condition label.
    n_boot, seed : int
        Bootstrap replicates and seed.

    Returns
    -------
    list of dict
        One per cell held by both tables.
    """
    out = []
    if a.empty or b.empty:
        return out
    m = a.merge(b, on=PRED_KEY, suffixes=("_h", "_v"))
    pc = sorted(c[:-2] for c in m.columns if c.endswith("_h") and c.startswith("p") and c[1:-2].isdigit())
    for (mo, rg, hd), g in m.groupby(["model", "regime", "head"], sort=True):
        n_a = int(((a.model == mo) & (a.regime == rg) & (a["head"] == hd)).sum())
        folds = sorted(g["fold"].unique())
        per = {"h": [], "v": []}
        for f in folds:
            gf = g[g.fold == f]
            for s in ("h", "v"):
                per[s].append(classification_metrics(gf["y_h"].to_numpy(),
                                                      gf[[f"{c}_{s}" for c in pc]].to_numpy())["balanced_accuracy"])
        cell = _CellPair(g["y_h"].to_numpy(), g[[f"{c}_v" for c in pc]].to_numpy(), g[[f"{c}_h" for c in pc]].to_numpy(),
                         g["subject_h"].astype(str).to_numpy(), g["fold"].to_numpy(), n_boot, seed)
        h, v = np.asarray(per["h"]), np.asarray(per["v"])
        try:
            ci, sc, verdict = cell.verdict(np.arange(len(g)))
            stab = leave_one_cluster_out(lambda rows: cell.verdict(rows, min_clusters=1)[2], cell.subject)
        except ValueError as err:  # e.g. folds that mix one- and several-subject test sets: no interval, said so
            nan = float("nan")
            ci = sc = type("NoCI", (), {"estimate": float(v.mean() - h.mean()), "low": nan, "high": nan})()
            verdict, stab = f"not assessable (no interval: {err})", None
        out.append({"model": mo, "regime": rg, "head": hd, "condition": condition, "folds": len(folds),
                    "n_windows": int(len(g)), "n_windows_headline": n_a,
                    "headline_mean": float(h.mean()), "headline_sd": float(h.std(ddof=1)) if h.size > 1 else np.nan,
                    "variation_mean": float(v.mean()), "variation_sd": float(v.std(ddof=1)) if v.size > 1 else np.nan,
                    "delta": float(ci.estimate), "low": float(ci.low), "high": float(ci.high),
                    "chance": cell.chance, "checked_low": cell.chance + float(sc.low),
                    "checked_high": cell.chance + float(sc.high), "verdict": verdict,
                    "n_subjects": int(np.unique(cell.subject).size),
                    "loso_flips": "" if stab is None else ";".join(f"{k}:{w}" for k, w in stab.flips.items()),
                    "rests_on_one_subject": bool(stab is not None and stab.rests_on_one),
                    "loso_undecided": "" if stab is None else ";".join(stab.undecided)})
    return out


class _CellPair:
    """One cell's paired headline / variation predictions (rows aligned), and its verdict on any subset of rows."""

    def __init__(self, y, pv, ph, subject, fold, n_boot: int, seed: int):
        self.y, self.pv, self.ph, self.subject, self.fold = y, pv, ph, subject, fold
        self.chance = 1.0 / pv.shape[1]
        self.kw = dict(metric="balanced_accuracy", target="mean_fold", stratify=False, n_boot=n_boot, seed=seed)

    def verdict(self, rows: np.ndarray, min_clusters: int = 2):
        """``(Δ interval, checked-score interval minus chance, verdict)`` on ``rows``. A constant prediction scores
        exactly chance in every fold, so the checked score's interval is its paired interval against one.
        ``min_clusters=1`` lets a fold keep a single subject (a subject left out of a two-subject fold).

        Raises
        ------
        ValueError
            As :func:`~eegfm_bench.stats.paired_cluster_bootstrap` (no interval on these rows).
        """
        y, sub, fold = self.y[rows], self.subject[rows], self.fold[rows]
        flat = np.full((rows.size, self.pv.shape[1]), self.chance)
        ci = paired_cluster_bootstrap(y, self.pv[rows], self.ph[rows], sub, fold, min_clusters=min_clusters, **self.kw)
        sc = paired_cluster_bootstrap(y, self.pv[rows], flat, sub, fold, min_clusters=min_clusters, **self.kw)
        return ci, sc, confound_verdict(self.chance + float(sc.low), self.chance, float(ci.high))


VERDICTS = ("survives", "partly", "does not survive")


def confound_verdict(checked_low: float, chance: float, delta_high: float) -> str:
    """The verdict of one cell under one confound variation.

    * ``survives``: the confound-checked score's 95 % subject-cluster interval lies above chance *and* the paired
      difference from the headline is not significantly negative (its interval reaches 0 or above);
    * ``partly``: the checked score is above chance, but significantly below the headline (part of the headline was
      the confound);
    * ``does not survive``: the checked score's interval reaches chance.

    Parameters
    ----------
    checked_low : float
        Lower bound of the checked balanced accuracy's interval (mean over folds).
    chance : float
        1 / n_classes (balanced accuracy of any constant prediction).
    delta_high : float
        Upper bound of the interval of (checked − headline).
    """
    if not checked_low > chance:
        return "does not survive"
    return "survives" if delta_high >= 0 else "partly"


def confound_check(cfg: CVConfig, *, progress: bool = True, variations: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Run every variation of ``cfg.confound`` (after the headline cv in ``cfg.out_dir``) and write
    ``confound.md`` / ``confound.csv`` there; the variations' rows join the headline's store with their
    ``condition``. Returns the comparison table.

    Raises
    ------
    ConfigError
        As :func:`check_confound`.
    """
    cc = cfg.confound
    check_confound(replace(cc, enabled=True), cfg.resolved_task.spec)
    out = Path(cfg.out_dir)
    zero = is_global_zero()
    rows, store = [], ResultStore(out, write=zero)
    for v in variations or cc.variations:
        dcfg = derive(cfg, v)
        cond = label(v, cc)
        if progress:
            tqdm.write(f"confound check {cond}: {dcfg.out_dir}")
        run_cells(dcfg, progress=progress)
        vout = Path(dcfg.out_dir)
        vrows = ResultStore(vout).load()
        cells = {c["config_hash"] for c in json.loads((vout / "cells.json").read_text())}
        vrows = vrows[vrows["config_hash"].astype(str).isin(cells) & (vrows["condition"] == "clean")].copy()
        vrows["condition"] = cond
        for c in PATH_COLUMNS:  # relative to the variation's folder: made relative to the headline's by append
            if c in vrows:
                vrows[c] = [str(vout.absolute() / v) if isinstance(v, str) and v else v for v in vrows[c]]
        store.append(vrows.to_dict("records"))
        rows += compare(out, cfg, vout, load_config(vout / "config.yaml"), cond, int(cc.n_boot), seed=int(cfg.seed))
    table = pd.DataFrame(rows)
    old = current_rows(out)
    if not old.empty and not table.empty:  # variations of earlier calls stay (this call's replace theirs)
        keep = ~old.set_index(["model", "regime", "head", "condition"]).index.isin(
            table.set_index(["model", "regime", "head", "condition"]).index)
        table = pd.concat([old[keep], table], ignore_index=True)
    elif table.empty:
        table = old
    if zero:
        with atomic_path(out / "confound.csv") as tmp_file:
            table.to_csv(tmp_file, index=False)
        atomic_write_text(out / "confound.md",
                          confound_markdown(table, cfg) if not table.empty else "(no confound rows)\n")
        if progress:
            print((out / "confound.md").read_text())
    return table


def run_confound(cv_dir, *, variations: Optional[Sequence[str]] = None, offset_s: Optional[float] = None,
                  band: Optional[Sequence[float]] = None, progress: bool = True, wait: bool = True) -> pd.DataFrame:
    """``eegfm-bench confound --cv <out_dir>``: the confound check of a finished cv, on its ``config.yaml``, with
    the command line's variations / offset / band in place of the config's; then the experiment's page. It holds
    the cv out_dir's lock (``wait=False``, ``--no-wait``: refuse when another process writes it;
    :func:`eegfm_bench.locks.out_dir_lock`).

    Raises
    ------
    ConfigError
        As :func:`check_confound`; NotAResultFolderError-like ``ConfigError`` when ``cv_dir`` has no config.yaml.
    """
    # the folder given, not the out_dir its config.yaml names: a moved or copied run is checked where it is
    cfg = replace(load_config(Path(cv_dir) / "config.yaml"), out_dir=str(cv_dir))
    over = {"enabled": True, **({"variations": list(variations)} if variations else {}),
            **({"offset_s": float(offset_s)} if offset_s is not None else {}),
            **({"band": [float(x) for x in band]} if band else {})}
    cfg = replace(cfg, confound=replace(cfg.confound, **over))
    check_confound(cfg.confound, cfg.resolved_task.spec)
    with out_dir_lock(cv_dir, "confound", wait=wait, enabled=is_global_zero()):
        table = confound_check(cfg, progress=progress)
        refresh([cv_dir])
    return table


__all__ = ["confound_check", "run_confound", "derive", "compare", "compare_predictions", "PRED_KEY"]
