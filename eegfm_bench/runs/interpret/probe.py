"""``eegfm-bench probe``: block-wise probes and per-block attention maps on a cv run's fold checkpoints.

Every backbone forward (block outputs, attention) runs in a ``lightning.Trainer`` from the config's ``trainer:``
section, so the command scales to N devices and gives the same rows as on one; only rank 0 writes.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import check_stop
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.interpret.attention import check_attention_support, mean_channel_attention
from eegfm_bench.errors import UnsupportedMethodError
from eegfm_bench.interpret.probes import run_fold_probes
from eegfm_bench.interpret.topomap import check_positions, plot_topomap_grid
from eegfm_bench.models.features import state_hash
from eegfm_bench.reports.probes import write_report
from eegfm_bench.results import FailedCellsError, ResultStore
from eegfm_bench.runs.interpret.config import load_interpret_config, worker_config
from eegfm_bench.config.interpret import InterpretConfig
from eegfm_bench.runs.launch.launcher import run_jobs
from eegfm_bench.runs.cv.output import CVRun, load_fold_model, load_initial_model
from eegfm_bench.reports.page import refresh, report_root
from eegfm_bench.trainer import log_summary

log = logging.getLogger(__name__)


def probe_unit(ck) -> str:
    """The launcher unit of a fold checkpoint: ``<model>/fold<k>`` (every head and regime of one model on one fold
    share a job, so one frozen backbone is probed once per fold, as in the sequential run)."""
    return f"{ck.model}/fold{ck.fold}"


def run_probes(config, *, args: Sequence[str] = (), progress: bool = True,
               worker_units: Sequence[str] | None = None, wait: bool = True):
    """``eegfm-bench probe``: block-wise probes (and attention topomaps) on a cv run's fold checkpoints.

    Steps: read the config and the cv run, refuse attention models without attention before anything runs, probe
    every fold checkpoint (:func:`_probe_folds`; with a launcher, one job per :func:`probe_unit`), then write the
    report of this run's rows (:func:`_write_probe_report`), the attention maps (:func:`run_attention`) and the
    experiment's page.

    Parameters
    ----------
    config : path, dict or InterpretConfig
        Interpret config (see :mod:`eegfm_bench.interpret.config`; read by
        :func:`~eegfm_bench.runs.interpret.config.load_interpret_config`): ``cv_dir``, ``out_dir``, ``select``,
        ``probe``, ``launcher`` (``local`` / ``slurm``: one job per :func:`probe_unit`; the parent then writes the
        report and the attention maps).
    worker_units : sequence of str, optional
        Run only these units as a launcher's worker: rows as part files, no report; returns
        ``{"failures": [], "current": [config hashes written]}``.
    wait : bool
        When another process writes the same ``out_dir``: wait (default), or raise
        :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``; :func:`eegfm_bench.locks.out_dir_lock`).

    Returns
    -------
    dict
        Paths of the written table, CSV, curve plot and (when enabled) attention topomaps.
    """
    cfg = load_interpret_config(config, args)
    with out_dir_lock(cfg.out_dir, "probe", wait=wait, enabled=worker_units is None and is_global_zero()):
        return _run_probes(cfg, progress=progress, worker_units=worker_units)


def _run_probes(cfg: InterpretConfig, *, progress: bool, worker_units: Sequence[str] | None):
    """:func:`run_probes`'s steps on its loaded config, under the out_dir's lock (a launcher's job and the DDP
    ranks > 0 take none: :func:`eegfm_bench.locks.out_dir_lock`)."""
    run = CVRun(cfg.cv_dir, cfg.cv_config)
    if cfg.attention.enabled and cfg.attention.models:  # refused before any probe is fitted
        for m in cfg.attention.models:
            check_attention_support(m)
    zero = is_global_zero()
    sel = cfg.select
    out = Path(cfg.out_dir) / "probes"
    if zero:
        out.mkdir(parents=True, exist_ok=True)
    cks = run.checkpoints(sel.models, sel.regimes, sel.heads, sel.folds)
    current: set[str] = set()  # config hashes of this run's rows: the report shows only these
    worker = worker_units is not None
    launched = cfg.launcher.kind != "none"
    if worker:
        cks = [ck for ck in cks if probe_unit(ck) in set(worker_units)]
    elif launched:
        current |= _probe_jobs(cfg, cks, out, progress=progress and zero)
        cks = []
    current |= _probe_folds(cfg, run, cks, out, progress=progress and zero, write=zero, merge=not worker)
    if worker:
        return {"failures": [], "current": sorted(current)}
    if zero and launched:
        ResultStore(out).merge()
    ws0 = run.windows(run.checkpoints(sel.models, sel.regimes, sel.heads, sel.folds)[0].model)
    paths = _write_probe_report(cfg, run, out, current, chance=1.0 / len(ws0.class_names)) if zero else {}
    if cfg.attention.enabled:
        paths.update(run_attention(cfg, run=run, progress=progress))
    if zero:
        refresh(report_root(cfg.out_dir, run.dir), quiet=not progress)
    return paths


def _probe_jobs(cfg: InterpretConfig, cks: list, out: Path, *, progress: bool) -> set[str]:
    """Every :func:`probe_unit` of ``cks`` as a launcher job; the config hashes the jobs wrote.

    Raises
    ------
    FailedCellsError
        A job failed (the finished units' rows are kept).
    """
    got: dict = {}
    failures = run_jobs(cfg.launcher, worker_config(cfg), list(dict.fromkeys(map(probe_unit, cks))), out,
                        progress=progress, kind="probe", collect=got)
    if failures:
        raise FailedCellsError(f"{len(failures)} probe job(s) failed (first: {failures[0]['cell']}: "
                               f"{failures[0]['error'][:300]}); the finished units' rows are kept under {out}; "
                               "fix the cause and rerun (block outputs come from the feature cache)")
    return set(got.get("current", []))


def _probe_folds(cfg: InterpretConfig, run, cks: list, out: Path, *, progress: bool, write: bool,
                 merge: bool) -> set[str]:
    """The block-wise probes of every fold checkpoint in ``cks`` (identical backbones probed once per fold); the
    config hashes of the rows written."""
    pc = cfg.probe
    fit_kw = {"max_epochs": pc.max_epochs, "patience": pc.patience, "lr": pc.lr, "batch_size": pc.batch_size,
              "standardize_mean": pc.standardize_mean}
    done: set = set()  # (model, fold, stage, weights): identical backbones are probed once per fold
    current: set[str] = set()
    for ck in tqdm(cks, desc="probes", disable=not progress, unit="fold"):
        check_stop()  # a stop request between two folds (:mod:`eegfm_bench.interrupt`); finished rows are kept
        ws = run.windows(ck.model)
        tr, va, te = run.fold_indices(ws, ck.fold)
        model = load_fold_model(ck.path)
        frozen = None
        if pc.include_frozen:
            init = load_initial_model(ck.path)
            frozen = init.backbone
        rows = run_fold_probes(model, ws, tr, va, te, fold=ck.fold, out_dir=out, experiment=run.experiment,
                               task=run.task, model_name=ck.model, source_head=ck.head, frozen_backbone=frozen,
                               poolings=pc.poolings, cache_dir=pc.cache_dir or run.config.data.cache_dir,
                               batch_size=pc.forward_batch_size, probe_kwargs=fit_kw, checkpoint=str(ck.path),
                               seed=run.seed, trainer=cfg.trainer, done=done, write=write, merge=merge)
        current |= {str(r["config_hash"]) for r in rows}
    return current


def _write_probe_report(cfg: InterpretConfig, run, out: Path, current: set[str], *, chance: float) -> dict:
    """The probe report of this run's rows, its hashes (``cells.json``), its config and the tracker summary."""
    pc = cfg.probe.to_dict()
    paths = write_report(out, chance=chance,
                         title=f"{run.experiment} ({run.task}): block-wise linear probes", config_hashes=current)
    atomic_write_text(out / "cells.json", json.dumps(sorted(current)))  # this run's hashes: what the page reads
    atomic_write_text(out / "interpret.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    table = pd.read_csv(paths["csv"])
    log_summary(cfg.trainer, out, "probes", {
        f"probe/{r.model}/{r.curve}/{r.pooling}/block{int(r.block):02d}": r.mean for r in table.itertuples()},
        hparams={"cv_dir": str(run.dir), **{f"probe.{k}": v for k, v in pc.items()}}, experiment=run.experiment)
    return paths


def run_attention(cfg: InterpretConfig, *, run=None, progress: bool = True) -> dict[str, Path]:
    """Per-block attention topomaps, frozen vs fine-tuned, for a cv run's transformer checkpoints (App. I.4.1).

    For each selected model with attention: per fold, the per-channel attention of every block on the fold's
    test windows, for the backbone before fine-tuning (frozen: pretrained / random-init) and for the fold's
    checkpoint when its regime trains the backbone; averaged over folds. Writes ``attention/<model>.npz``
    (``frozen`` / ``fine_tuned``: ``(n_folds, n_blocks, n_chans)``, ``ch_names``) and
    ``attention/<model>_per_block.png`` (rows: fine-tuned, frozen; columns: blocks).

    Raises
    ------
    UnsupportedMethodError
        If ``attention.models`` names a backbone without attention (models not named explicitly and without
        attention are skipped with a log line).
    """
    run = run or CVRun(cfg.cv_dir, cfg.cv_config)
    tr = cfg.trainer
    ac, sel = cfg.attention, cfg.select
    explicit = ac.models
    if explicit:
        for m in explicit:
            check_attention_support(m)
    cks = run.checkpoints(explicit or sel.models, sel.regimes, sel.heads, sel.folds)
    out_dir = Path(cfg.out_dir) / "attention"
    out: dict[str, Path] = {}
    by_model: dict[str, list] = {}
    def supported(model: str) -> bool:
        try:
            check_attention_support(model)
        except UnsupportedMethodError:
            return False
        return True

    for ck in cks:
        if not supported(ck.model):
            log.info("attention maps: skipping %s (no softmax attention, or a user model without token_layout)",
                     ck.model)
            continue
        by_model.setdefault(ck.model, []).append(ck)
    for model_name, group in by_model.items():
        check_positions(run.windows(model_name).ch_names)
        frozen, tuned, names = [], [], None
        frozen_done: dict[str, np.ndarray] = {}
        for ck in tqdm(group, desc=f"attention {model_name}", disable=not (progress and is_global_zero()), unit="fold"):
            ws = run.windows(ck.model)
            _, _, te = run.fold_indices(ws, ck.fold)
            if ac.max_windows_per_fold:
                te = te[: int(ac.max_windows_per_fold)]
            names = list(ws.ch_names)
            init = load_initial_model(ck.path)
            key = f"{state_hash(init.backbone)}-{ck.fold}"
            if key not in frozen_done:  # one frozen backbone per fold, whatever heads were trained on it
                frozen_done[key] = mean_channel_attention(init.backbone, ws, te, ac.batch_size, tr)
                frozen.append(frozen_done[key])
            if ck.regime != "head_only":
                model = load_fold_model(ck.path)
                tuned.append(mean_channel_attention(model.backbone, ws, te, ac.batch_size, tr))
        frozen_a = np.stack(frozen)
        arrays = {"frozen": frozen_a, "ch_names": np.array(names)}
        rows = {}
        if tuned:
            arrays["fine_tuned"] = np.stack(tuned)
            rows["fine-tuned"] = arrays["fine_tuned"].mean(0)
        rows[f"frozen ({group[0].init})"] = frozen_a.mean(0)
        if not is_global_zero():
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(out_dir / f"{model_name}.npz") as tmp_file, open(tmp_file, "wb") as fh:
            np.savez(fh, **arrays)
        n_blocks = frozen_a.shape[1]
        png = plot_topomap_grid(rows, names, out_dir / f"{model_name}_per_block.png",
                                col_titles=[f"block {i}" for i in range(n_blocks)], cmap="viridis", shared_scale="row",
                                title=f"{model_name} on {run.task}: per-channel attention per block (sum over queries; "
                                      f"mean over heads, patches, test windows, {len({ck.fold for ck in group})} folds)",
                                unit="attention")
        out[f"attention_{model_name}"] = png
    return out
