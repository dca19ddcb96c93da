"""``eegfm-bench plan --config <paper file>``: a paper's cells, jobs and device-hours before anything runs.

Every member of the paper (:mod:`eegfm_bench.runs.plan.paper`) is planned from its own config, training nothing:

* **cv** and **truncation** members: cells (run × head × fold; per depth), the jobs the launcher makes of them and
  the backbone passes (:func:`~eegfm_bench.runs.plan.command.cell_passes`, as ``eegfm-bench plan`` of a cv config);
* **sweep**: the cv member's swept cells × the conditions that apply to them (removed-channel conditions only for
  variable-channel models whose head takes any token count:
  :meth:`~eegfm_bench.models.heads.PoolingHead.takes_any_token_count`): one forward per test window and condition, head-only models
  of one backbone sharing it; units (backbone group × fold) as jobs;
* **probe**: block outputs of every window per fine-tuned fold checkpoint (and once of the pre-trained model), the
  linear probes (blocks × poolings) as fits; **attribute**: a prediction pass over the test windows and a
  forward + backward pass per selected window (at most the top ``1 − percentile`` share), method and condition;
* **controls**: frozen embeddings of every window per encoder and initialisation, the probe and permutation fits,
  and the scrambled-label adaptations as jobs (the part with a launcher);
* **provenance**: one encoder per seed trained on every view of the training windows, then every view embedded.

Window counts come from the paper file's ``datasets`` (the whole dataset the paper used) when given, else from the
local copy (the windows are read and cached); a member with neither gets its cells and jobs and its cost per 1,000
windows. Seconds per window come from the throughput table (the paper file's ``throughput``, or ``--bench``), keyed
by model, input size and architecture overrides; an entry missing from it is measured here on the CPU unless
``--no-measure``. Probe fits and handcrafted features run on CPUs and are counted, not timed. Like a cv plan, an
estimate assumes every training runs ``max_epochs`` (early stopping only shortens it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.config import ConfigError
from eegfm_bench.data.tasks import DeclaredTask
from eegfm_bench.data.windows import load_windows, resolve_preprocessing
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.catalogue import load_catalogue
from eegfm_bench.perturb.evaluate import resolve_conditions
from eegfm_bench.runs.cv.cells import cv_defaults, run_trainer, takes_any_token_count
from eegfm_bench.runs.launch.launcher import chunks
from eegfm_bench.runs.plan.paper import load_paper, local_copy, member_config, missing_weights
from eegfm_bench.config.paper import PaperConfig, PaperDataset, PaperMember, ProvenanceRunConfig
from eegfm_bench.runs.plan.command import (lightning_overhead, measure_backbone, parallel_jobs, cell_passes, cell_seconds, lookup,
                                   read_bench, throughput_key)
from eegfm_bench.runs.plan.text import throughput_line, throughput_summary

TEN_TWENTY = ["F4", "C4", "O2", "C3", "Fp1", "Fp2", "F7", "F8", "F3", "T7", "T8", "P7", "P8", "P3", "P4", "O1", "Fz",
              "Cz", "Pz"]
"""The 10-20 electrodes, spread over the scalp from the first four on (an interpolating model fits a sphere to
them) and BIOT's 16 bipolar anodes and cathodes within the first 18: a montage of up to 19 channels is measured on
the first ``n``."""

TEN_FIVE = ["FC5", "FC3", "FC1", "FCz", "FC2", "FC4", "FC6", "C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP5", "CP3",
            "CP1", "CPz", "CP2", "CP4", "CP6", "Fp1", "Fpz", "Fp2", "AF7", "AF3", "AFz", "AF4", "AF8", "F7", "F5", "F3",
            "F1", "Fz", "F2", "F4", "F6", "F8", "FT7", "FT8", "T7", "T8", "T9", "T10", "TP7", "TP8", "P7", "P5", "P3",
            "P1", "Pz", "P2", "P4", "P6", "P8", "PO7", "PO3", "POz", "PO4", "PO8", "O1", "Oz", "O2", "Iz", "F9", "F10",
            "FT9", "FT10", "TP9", "TP10", "P9", "P10", "PO9", "PO10", "PO5", "PO6", "AF5", "AF6"]
"""EEGMMIDB's 64 electrodes and 14 more 10-05 positions: a larger montage is measured on the first ``n``."""

PER_WINDOWS = 1000
"""Windows a member without a known window count is costed for."""


def montage(n: int) -> list[str]:
    """``n`` electrode names an ``n``-channel montage is measured on (the cost depends on the count).

    Raises
    ------
    ValueError
        More channels than :data:`TEN_FIVE` holds.
    """
    names = TEN_TWENTY if n <= len(TEN_TWENTY) else TEN_FIVE
    if n > len(names):
        raise ValueError(f"no {n}-channel measuring montage (at most {len(TEN_FIVE)}); fix: a bench file with it")
    return names[:n]


@dataclass
class Size:
    """The windows a member's task has: ``windows`` (None: unknown), ``subjects``, ``n_chans``, where they come from
    (``kind``: declared, local copy or unknown; ``source``: the paper file's note) and the task's name."""

    windows: int | None
    subjects: int | None
    n_chans: int | None
    source: str
    kind: str = "declared"
    task: str = ""


@dataclass
class Ctx:
    """What every member's planner shares: the paper, throughput table, measured entries and launcher overrides."""

    paper: PaperConfig
    table: dict
    measure: bool
    over: dict | None
    launcher: list[str]
    used: dict = field(default_factory=dict)
    measured: list = field(default_factory=list)
    sizes: dict = field(default_factory=dict)
    on_measure: Callable | None = None
    failed: dict = field(default_factory=dict)
    missing: set = field(default_factory=set)


# --------------------------------------------------------------------------------------------- data and rates
def task_size(ctx: Ctx, task: DeclaredTask) -> Size:
    """The windows of a task (resolved: a member config's ``resolved_task``): the paper file's ``datasets`` entry
    when it gives windows, else the local copy's (read under EEGNet's preprocessing and cached), else the declared
    channels and subjects with unknown windows."""
    name = task.name
    if name in ctx.sizes:
        return ctx.sizes[name]
    d = ctx.paper.datasets.get(name) or PaperDataset()
    if d.windows:
        size = Size(int(d.windows), d.subjects, d.n_chans, d.source, "declared", name)
    elif local_copy(task) is None:
        ws = load_windows(task, BACKBONES.get("eegnet").preprocessing, progress=False)
        size = Size(len(ws), int(len(np.unique(ws.subject))), len(ws.ch_names), "the windows on disk",
                    f"local copy ({len(np.unique(ws.subject))} subjects)", name)
    else:
        size = Size(None, d.subjects, d.n_chans, d.source or "no local copy, size not declared",
                    "unknown", name)
    ctx.sizes[name] = size
    return size


def n_times(task: DeclaredTask, model: str) -> int:
    """Samples of one window of ``task`` (resolved: a member config's ``resolved_task``) under ``model``'s
    preprocessing, resolved as the cache resolves it (:func:`~eegfm_bench.data.windows.resolve_preprocessing`: the
    task's ``window_s`` when it sets one)."""
    return resolve_preprocessing(task, BACKBONES.get(model).preprocessing, model=model).n_times


def rate(ctx: Ctx, model: str, n_chans: int | None, n: int, kwargs: dict | None = None) -> dict | None:
    """The throughput of ``model`` on ``n_chans`` × ``n`` inputs: the table's entry for exactly that input, else
    measured here (:func:`_measure_entry`, unless measuring is off; a model that does not build on it has none)."""
    if n_chans is None:
        ctx.missing.add(f"{model} (channels unknown)")
        return None
    kw = dict(kwargs or {})
    hit = lookup(ctx.table, model, n_chans, n, kw, exact=True)
    key = throughput_key(model, n_chans, n, kw)
    if hit is None and ctx.measure and not model.endswith("_truncated") and key not in ctx.failed:
        try:
            hit = _measure_entry(model, montage(n_chans), n, kw)
        except Exception as err:  # noqa: BLE001  (a model that does not build on this input: no rate, said once)
            ctx.failed[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            return None
        ctx.table[key] = hit
        ctx.measured.append(hit)
        if ctx.on_measure is not None:
            ctx.on_measure(hit)
    label = f"{model} ({n_chans} ch × {n})" + (f" {kw}" if kw else "")
    if hit is not None:
        ctx.used.setdefault(label, hit)
    else:
        ctx.missing.add(label)
    return hit


MEASURE_BATCH = 16
"""Windows per timed step when a paper's plan measures a missing entry. On a shared CPU every operator waits for its
time slice, so a step of a few windows is mostly waiting (REVE: about 11 s per step at 1, 2 or 8 windows under a load
average of 10); 16 windows is nearer the paper's batches at a price a 2-core machine can time."""

MEASURE_STEPS = 3
"""Timed steps (after 2 warm-up steps) of such a measurement."""


def _measure_entry(model: str, names: list[str], n: int, kwargs: dict) -> dict:
    """One throughput entry measured here (:func:`~eegfm_bench.runs.plan.command.measure_backbone` at :data:`MEASURE_BATCH` windows,
    at least :data:`MEASURE_STEPS` timed steps and 2 s), with the machine's 1-minute load average before and after."""
    load = os.getloadavg()[0]
    out = measure_backbone(model, names, n, kwargs, MEASURE_BATCH, min_batches=MEASURE_STEPS)
    return {**out, "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)], "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads()}


def _windows(size: Size) -> tuple[int, bool]:
    """Windows to cost and whether they are the task's (False: :data:`PER_WINDOWS` stand in for unknown)."""
    return (size.windows, True) if size.windows else (PER_WINDOWS, False)


LOSO_UNKNOWN = 10
"""Folds assumed for a leave-one-subject-out split whose subject count is neither declared nor on disk (said in the
member's notes)."""


def _folds(split, size: Size) -> int:
    """Folds of a split: its ``folds`` subset, ``k``, or one per subject for LOSO (:data:`LOSO_UNKNOWN` when the
    subjects are unknown)."""
    if split.folds is not None:
        return len(split.folds)
    if split.scheme == "loso":
        return int(size.subjects or LOSO_UNKNOWN)
    return int(split.k)


def _fold_windows(w: int, folds: int, size: Size, n_val_groups: int) -> tuple[int, int, int]:
    """(train, validation, test) windows of one fold: a ``1/folds`` test share, ``n_val_groups`` subjects' share of
    validation windows when the subject count is known."""
    test = w // folds
    val = int(w * n_val_groups / size.subjects) if size.subjects else 0
    return max(0, w - test - val), val, test


def _jobs(ctx: Ctx, cfg, n_units: int) -> tuple[int, int, str]:
    """(jobs, run at once, launcher kind) for ``n_units`` units under a member's typed ``launcher`` section."""
    lc = cfg.launcher
    if lc.kind == "none":
        return (1 if n_units else 0), 1, "none"
    n = len(chunks([str(i) for i in range(n_units)], lc))
    return n, parallel_jobs(lc, n), lc.kind


def _row(name: str, command: str, size: Size, cells: int, jobs: int, parallel: int, launcher: str,
         seconds, known: bool, unit: str = "cells", notes: Sequence[str] = ()) -> dict:
    sec = np.asarray(seconds, dtype=float)
    return {"member": name, "command": command, "windows": size.windows, "data": size.kind, "task": size.task,
            "cells": int(cells),
            "unit": unit, "jobs": int(jobs), "parallel": int(parallel), "launcher": launcher,
            "seconds": sec.tolist(), "known_windows": known, "costed": bool(sec[0] > 0), "notes": list(notes)}


# --------------------------------------------------------------------------------------------- member planners
def _cv_cost(ctx: Ctx, cfg, size: Size) -> tuple[int, int, np.ndarray, bool]:
    """(cells, todo, seconds, windows known) of a resolved, typed cv config on ``size`` windows."""
    w, known = _windows(size)
    folds = _folds(cfg.split, size)
    seconds, cells, extracted = np.zeros(3), 0, set()
    tr_fold = _fold_windows(w, folds, size, int(cfg.split.n_val_groups))
    for run in cfg.runs:
        epochs = int(run_trainer(cfg, run).get("max_epochs") or 1)
        tput = rate(ctx, run.model, size.n_chans, n_times(cfg.resolved_task, run.model), run.backbone_kwargs)
        key = (run.model, json.dumps(run.backbone_kwargs, sort_keys=True), run.pretrained)
        for _head in run.heads:
            for _f in range(folds):
                fwd, bwd = cell_passes(run.regime, epochs, *tr_fold, w, key not in extracted)
                if run.regime == "head_only":
                    extracted.add(key)
                seconds += cell_seconds(fwd, bwd, tput, ctx.over, epochs)
                cells += 1
    return cells, folds, seconds, known


def plan_cv_member(ctx: Ctx, m: PaperMember, cfg) -> dict:
    """A cv member: its cells and jobs, costed on the declared dataset (or the local copy's windows)."""
    size = task_size(ctx, cfg.resolved_task)
    cells, folds, seconds, known = _cv_cost(ctx, cfg, size)
    jobs, par, kind = _jobs(ctx, cfg, cells)
    return _row(m.name, "cv", size, cells, jobs, par, kind, seconds, known,
                notes=[f"{folds} folds × {sum(len(r.heads) for r in cfg.runs)} run-heads"])


def plan_truncation_member(ctx: Ctx, m: PaperMember, cfgs: list) -> dict:
    """A truncation member: one cv per depth, run one after the other in one process."""
    size = task_size(ctx, cfgs[0][1].resolved_task)
    cells, seconds, known = 0, np.zeros(3), True
    for _k, cfg in cfgs:
        c, _f, s, known = _cv_cost(ctx, cfg, size)
        cells, seconds = cells + c, seconds + s
    return _row(m.name, "truncation", size, cells, 1, 1, "none (one process)", seconds, known,
                notes=[f"depths {[k for k, _ in cfgs]}; throughput scaled from the full model by the blocks kept"])


def _cv_of(ctx: Ctx, m: PaperMember):
    """The typed cv config of the cv member ``m`` comes after."""
    byname = {x.name: x for x in ctx.paper.members}
    cvs = [byname[a] for a in m.after if a in byname and byname[a].command == "cv"]
    if not cvs:
        raise ConfigError(f"member {m.name!r} ({m.command}) names no cv member in `after`; fix: after: [<cv>]")
    return member_config(cvs[0])


def _selected(cvcfg, models=None, regimes=None, heads=None) -> list[tuple]:
    """(run, head) pairs of a typed cv config that the selection keeps (``None``: every one)."""
    return [(r, h) for r in cvcfg.runs for h in r.heads if (models is None or r.model in models)
            and (regimes is None or r.regime in regimes) and (heads is None or h in heads)]


def plan_sweep_member(ctx: Ctx, m: PaperMember, cfg) -> dict:
    """A sweep member: cell × applicable condition pairs, one forward per test window and condition."""
    cv = _cv_of(ctx, m)
    size = task_size(ctx, cv.resolved_task)
    w, known = _windows(size)
    folds = len(cfg.folds) if cfg.folds else _folds(cv.split, size)
    conds = resolve_conditions(cfg.conditions, cv.resolved_task.name)
    cat = load_catalogue(check_registry=False)
    test = w // folds
    pairs, conds_of, rate_of = 0, {}, {}
    for run, head in _selected(cv, cfg.models):
        var = bool((cat.get(run.model) or {}).get("variable_channels")) and takes_any_token_count(run, head)
        n_cond = sum(1 for c in conds if var or not c.needs_variable_channels)
        pairs += n_cond * folds
        kw = run.backbone_kwargs
        g = (run.model, json.dumps(kw, sort_keys=True), run.pretrained) if run.regime == "head_only" \
            else (run.model, run.regime, head)  # head-only heads share their frozen backbone's forward
        conds_of[g] = max(conds_of.get(g, 0), n_cond)
        rate_of[g] = rate(ctx, run.model, size.n_chans, n_times(cv.resolved_task, run.model), kw)
    seconds = np.zeros(3)
    for g, n_cond in conds_of.items():
        seconds += cell_seconds(folds * test * n_cond, 0, rate_of[g], None, 0)
    units = folds * len(conds_of)
    if ctx.over:
        seconds += units * ctx.over["per_cell"]
    jobs, par, kind = _jobs(ctx, cfg, units)
    return _row(m.name, "sweep", size, pairs, jobs, par, kind, seconds, known, unit="cell × condition",
                notes=[f"{len(conds)} conditions (clean included), {units} units (backbone group × fold)"])


def plan_probe_member(ctx: Ctx, m: PaperMember, cfg) -> dict:
    """A probe member: block outputs of every window per fine-tuned fold (and of the pre-trained model once)."""
    cv = _cv_of(ctx, m)
    size = task_size(ctx, cv.resolved_task)
    w, known = _windows(size)
    folds = _folds(cv.split, size)
    sel, pr, att = cfg.select, cfg.probe, cfg.attention
    seconds, fits, units, frozen = np.zeros(3), 0, 0, set()
    for run, _head in _selected(cv, sel.models, sel.regimes, sel.heads):
        tput = rate(ctx, run.model, size.n_chans, n_times(cv.resolved_task, run.model), run.backbone_kwargs)
        blocks = int((tput or {}).get("n_blocks") or 0)
        passes = folds * w + (w if pr.include_frozen and run.model not in frozen else 0)
        if att.enabled and (att.models is None or run.model in att.models):
            passes += folds * (w // folds)
        frozen.add(run.model)
        seconds += cell_seconds(passes, 0, tput, None, 0)
        fits += folds * blocks * len(pr.poolings) * (2 if pr.include_frozen else 1)
        units += folds
    jobs, par, kind = _jobs(ctx, cfg, units)
    return _row(m.name, "probe", size, fits, jobs, par, kind, seconds, known, unit="probe fits",
                notes=[f"{units} units (model × fold); probe training on the cached blocks not timed"])


def plan_attribute_member(ctx: Ctx, m: PaperMember, cfg) -> dict:
    """An attribute member: a prediction pass per condition and forward + backward passes for selected windows."""
    cv = _cv_of(ctx, m)
    size = task_size(ctx, cv.resolved_task)
    w, known = _windows(size)
    folds = _folds(cv.split, size)
    a, sel = cfg.attribution, cfg.select
    test = w // folds
    chosen = int(test * (1 - float(a.percentile) / 100))
    if a.max_windows_per_fold is not None:
        chosen = min(chosen, int(a.max_windows_per_fold))
    n_c, n_m = len(a.conditions), len(a.methods)
    seconds, units = np.zeros(3), 0
    for run, _head in _selected(cv, sel.models, sel.regimes, sel.heads):
        tput = rate(ctx, run.model, size.n_chans, n_times(cv.resolved_task, run.model), run.backbone_kwargs)
        bwd = folds * (n_c * n_m * chosen + n_m * (a.conservation_windows + a.randomisation_windows))
        seconds += cell_seconds(folds * n_c * test, bwd, tput, None, 0)
        units += folds
    jobs, par, kind = _jobs(ctx, cfg, units)
    return _row(m.name, "attribute", size, units * n_c * n_m, jobs, par, kind, seconds, known,
                unit="maps (cell × fold × condition × method)",
                notes=[f"at most {chosen} windows per fold and condition (top {100 - float(a.percentile):g} %)"])


def plan_controls_member(ctx: Ctx, m: PaperMember, cfg) -> dict:
    """A controls member: embeddings per encoder and initialisation, probe fits, and the scrambled adaptations."""
    size = task_size(ctx, cfg.resolved_task)
    w, known = _windows(size)
    folds = _folds(cfg.split, size)
    seconds, reps, encoders = np.zeros(3), len(cfg.features.families), 0
    for mod in cfg.models:
        arms = (1 if mod.pretrained else 0) + len(mod.init_seeds)
        reps, encoders = reps + arms, encoders + (1 if mod.pretrained else 0)
        tput = rate(ctx, mod.model, size.n_chans, n_times(cfg.resolved_task, mod.model), mod.backbone_kwargs)
        seconds += cell_seconds(arms * w, 0, tput, None, 0)
    fits = reps * folds + int(cfg.permutation.n) * folds * (encoders + 1)
    if cfg.identity:
        idc = cfg.identity
        fits += idc.n_folds * (1 + idc.n_permutations + idc.n_balanced) * (1 + len(cfg.models))
    units = 0
    for s in cfg.scrambled:
        epochs = int((s.trainer or {}).get("max_epochs") or cfg.trainer.get("max_epochs") or 1)
        tput = rate(ctx, s.model, size.n_chans, n_times(cfg.resolved_task, s.model), s.backbone_kwargs)
        n_tr, n_va, n_te = _fold_windows(w, folds, size, int(cfg.split.n_val_groups))
        per = cell_seconds(epochs * n_va + n_te + w, epochs * n_tr, tput, ctx.over, epochs)
        seconds += per * 2 * len(s.seeds) * folds
        units += 2 * len(s.seeds) * folds
    jobs, par, kind = _jobs(ctx, cfg, units)
    jobs = 1 if kind == "none" else jobs + 1  # the launching process runs every step but the adaptations
    return _row(m.name, "controls", size, fits, jobs, par, kind, seconds, known, unit="probe fits",
                notes=[f"{reps} representations × {folds} folds; {units} scrambled-label adaptations as jobs, the "
                       "rest in the launching process; probe fits and handcrafted features not timed"])


def plan_provenance_member(ctx: Ctx, m: PaperMember, cfg: ProvenanceRunConfig) -> dict:
    """A provenance member: one encoder per seed on every view of the training windows, then every view embedded."""
    size = task_size(ctx, cfg.resolved_task)
    w, known = _windows(size)
    enc, sp = cfg.encoder, cfg.split
    k = len(cfg.data.views or ("original", "average", "Cz"))
    held = int(sp.n_val or 0) + int(sp.n_test or 0)
    n_tr = int(w * (1 - held / size.subjects)) if size.subjects else w
    n_va = int(w * int(sp.n_val or 0) / size.subjects) if size.subjects else 0
    model = enc.backbone
    tput = rate(ctx, model, size.n_chans, n_times(cfg.resolved_task, model), enc.backbone_kwargs)
    epochs = int(enc.max_epochs or 1)
    per_seed = cell_seconds(k * (epochs * n_va + w), k * epochs * n_tr, tput, ctx.over, epochs)
    seeds = len(enc.seeds)
    return _row(m.name, "provenance", size, seeds, 1, 1, "none (one process)", per_seed * seeds, known,
                unit="encoders (seeds)", notes=[f"K = {k} views; the audits (CPU, on the embeddings) not timed"])


PLANNERS = {"cv": plan_cv_member, "truncation": plan_truncation_member, "sweep": plan_sweep_member,
            "probe": plan_probe_member, "attribute": plan_attribute_member, "controls": plan_controls_member,
            "provenance": plan_provenance_member}
"""Member command → its planner ``f(ctx, member, resolved config) -> row``."""


# ------------------------------------------------------------------------------------------------------ paper
def _weights(ctx: Ctx, cfgs: list) -> list[str]:
    ids = []
    for cmd, cfg in cfgs:
        if cmd == "cv":
            ids += [r.pretrained for r in cfg.runs]
        elif cmd == "truncation":
            ids += [r.pretrained for _k, c in cfg for r in c.runs]
        elif cmd == "controls":
            ids += [x.pretrained for x in cfg.models] + [s.pretrained for s in cfg.scrambled]
    return missing_weights(ids)


def plan_paper(path, launcher_args: Sequence[str] = (), *, bench: str | None = None, measure: bool = True,
               members: Sequence[str] | None = None, on_measure: Callable | None = None) -> dict:
    """The plan of a paper file (see the module docstring) as a dict.

    Parameters
    ----------
    path : str or Path
        The paper file.
    launcher_args : sequence of str
        Dotted launcher overrides for every member with a launcher (``--launcher.kind slurm``).
    bench : str, optional
        Throughput table (default: the paper file's ``throughput``).
    measure : bool
        Measure the entries the table lacks (CPU).
    members : sequence of str, optional
        Plan only these members.
    on_measure : callable, optional
        Called with every entry measured here (``--write-bench`` saves them as they come).

    Returns
    -------
    dict
        ``members`` (one row each: cells, jobs, seconds at the median / slow / fast quartile step, data source),
        totals, the throughput entries used, missing weights and what is not runnable.

    Raises
    ------
    ConfigError
        From the paper file or a member's config.
    """
    paper = load_paper(path, members)
    src = bench or paper.throughput
    table = read_bench(src) if src and Path(src).is_file() else {}
    over = lightning_overhead(cv_defaults()["trainer"]) if (table or measure) else None
    ctx = Ctx(paper, table, measure, over, list(launcher_args), on_measure=on_measure)
    rows, cfgs = [], []
    for m in paper.members:
        cfg = member_config(m, launcher_args)
        cfgs.append((m.command, cfg))
        ctx.missing = set()
        row = PLANNERS[m.command](ctx, m, cfg)
        if ctx.missing:  # a part without a rate: the member is not costed (rather than costed in part)
            row.update(costed=False, notes=row["notes"] + [f"no throughput for {', '.join(sorted(ctx.missing))}"])
        rows.append(row)
    known = [r for r in rows if r["known_windows"] and r["costed"]]
    total = np.sum([r["seconds"] for r in known], axis=0) if known else np.zeros(3)
    wall = sum(r["seconds"][0] / max(1, r["parallel"]) for r in known)
    return {"paper": paper.title, "path": str(path), "throughput_table": src, "members": rows,
            "n_cells": sum(r["cells"] for r in rows if r["unit"] == "cells"), "n_jobs": sum(r["jobs"] for r in rows),
            "estimate_device_hours": float(total[0]) / 3600, "estimate_device_hours_range":
                sorted(float(x) / 3600 for x in total[1:]), "estimate_wall_hours": wall / 3600,
            "uncosted": [r["member"] for r in rows if not (r["known_windows"] and r["costed"])],
            "throughput": throughput_summary(ctx.table, ctx.used),
            "datasets": {k: vars(v) for k, v in ctx.sizes.items()},
            "overhead_s": over, "missing_weights": _weights(ctx, cfgs), "not_runnable": [g.to_dict() for g in paper.not_runnable],
            "measured_here": len(ctx.measured),
            "not_measurable": {f"{k[0]} ({k[1]} ch × {k[2]})": v for k, v in ctx.failed.items()}}


def _hours(sec: float) -> str:
    return f"{sec / 3600:,.1f}" if sec >= 360 else f"{sec / 3600:.3f}"


def plan_paper_markdown(p: dict) -> str:
    """The ``eegfm-bench plan`` text of :func:`plan_paper`: one row per member, totals, rates, gaps."""
    lines = [f"# plan: {p['paper']} ({p['path']})", "",
             "| member | command | windows | cells | jobs (launcher, at once) | device-hours (quartile steps) |",
             "|---|---|---|---:|---|---:|"]
    for r in p["members"]:
        w = f"{r['windows']:,} ({r['data']})" if r["windows"] else f"unknown: per {PER_WINDOWS:,} windows"
        s = r["seconds"]
        cost = "no throughput" if not r["costed"] else f"{_hours(s[0])} ({_hours(min(s[1:]))}–{_hours(max(s[1:]))})"
        lines.append(f"| {r['member']} | {r['command']} | {w} | {r['cells']:,} {r['unit']} | "
                     f"{r['jobs']:,} ({r['launcher']}, {r['parallel']}) | {cost} |")
    lines += ["", "datasets:"]
    for k, ds in p["datasets"].items():
        w = f"{ds['windows']:,}" if ds["windows"] else "unknown"
        lines.append(f"- {k}: {w} windows, {ds['subjects'] or '?'} subjects, {ds['n_chans'] or '?'} channels "
                     f"({ds['kind']}: {ds['source']})")
    notes = [f"- {r['member']}: {'; '.join(r['notes'])}" for r in p["members"] if r["notes"]]
    if notes:
        lines += ["", "notes:"] + notes
    lo, hi = p["estimate_device_hours_range"]
    lines += ["", f"cells (cv and truncation): {p['n_cells']:,}; jobs: {p['n_jobs']:,}",
              f"estimate: {p['estimate_device_hours']:,.1f} device-hours ({lo:,.1f}–{hi:,.1f} at the quartile steps) "
              f"over the members with known windows and a throughput, if every training runs max_epochs; wall clock "
              f"about {p['estimate_wall_hours']:,.1f} h with each member's launcher parallelism (members in order)"]
    if p["uncosted"]:
        lines.append(f"not in the total (windows unknown or no throughput): {', '.join(p['uncosted'])}")
    lines += ["", "throughput (seconds per window = 1 / rate):"]
    lines += [throughput_line(k, t) for k, t in p["throughput"].items()]
    if p.get("overhead_s"):
        o = p["overhead_s"]
        lines.append(f"- Lightning outside the model (measured on a toy model): {o['per_cell']:.2f} s per cell + "
                     f"{o['per_epoch']:.2f} s per epoch")
    for k, v in (p.get("not_measurable") or {}).items():
        lines.append(f"- {k}: not measurable here ({v})")
    if p["missing_weights"]:
        lines += ["", "pretrained weights not on disk (the plan needs none; the run does):"]
        lines += [f"- {x}" for x in p["missing_weights"]]
    if p["not_runnable"]:
        lines += ["", "not runnable here (configs/paper/README.md):"]
        lines += [f"- {g['what']}: {g['why']}" for g in p["not_runnable"]]
    return "\n".join(lines)


def write_bench(paths: Sequence[str], out: str, *, members: Sequence[str] | None = None) -> Path:
    """Measure every throughput entry the papers' plans need and the table ``out`` lacks (CPU, one by one), saving
    the table after each; ``python -m eegfm_bench.runs.plan.paper_plan --write-bench OUT --config P ...``."""
    path = Path(out)
    rows = json.loads(path.read_text()) if path.is_file() else []

    def save(measured: dict) -> None:
        rows.append({k: v for k, v in measured.items() if k != "source"})
        atomic_write_text(path, json.dumps(rows, indent=1))
        print(f"measured {measured['model']} {measured['n_chans']} × {measured['n_times']} "
              f"{measured['backbone_kwargs'] or ''}: {measured['fwd_per_s']:.2f} / {measured['fwd_bwd_per_s']:.2f} "
              f"windows/s (batch {measured['batch']})", flush=True)

    for p in paths:
        plan_paper(p, bench=str(path) if path.is_file() else None, measure=True, members=members, on_measure=save)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eegfm_bench.runs.plan.paper_plan", description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append", required=True, help="paper file(s)")
    ap.add_argument("--write-bench", required=True, help="the throughput table to fill (created or extended)")
    ap.add_argument("--members", nargs="+")
    a = ap.parse_args(argv)
    print(write_bench(a.config, a.write_bench, members=a.members))
    return 0


__all__ = ["plan_paper", "plan_paper_markdown", "write_bench", "montage", "PLANNERS"]

if __name__ == "__main__":
    sys.exit(main())
