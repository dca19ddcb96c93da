"""The cv's headline cells as a loop in Lightning's style (``reset → advance → on_run_end``), built from one cell
unit (:func:`train_cell` → :func:`evaluate_cell` → rows).

:class:`CVLoop` runs every cell of a cv config (:func:`~eegfm_bench.runs.cv.cells.enumerate_cells`): ``reset`` reads
the config, opens the result store, loads the windows, writes ``config.yaml`` / ``cells.json`` / the ingest report
and decides which cells still need rows (:class:`~eegfm_bench.runs.cv.progress.CellProgress`, shared with
``eegfm-bench status`` and ``plan``), handing them to the launcher when one is configured; ``advance`` trains and
tests one cell and appends its rows (a failing cell is recorded and loses none of the others); ``on_run_end``
merges the rows, writes ``summary.md``, ``failures.json`` and the experiment's page, and raises
:class:`~eegfm_bench.results.FailedCellsError` when a cell failed.

One cell (:func:`train_cell`): the model and fold's DataModule, LP-FT's linear-probing stage, the head-only token
cache, ``batch_size: auto``, then ``Trainer.fit`` with early stopping on validation balanced accuracy (or the
closed-form ridge solution); :func:`evaluate_cell` tests the best checkpoint, gathers the predictions (each test window
once under DDP) and returns the cell's long-format rows (the result-row contract of docs/guide/architecture.md).
"""
from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from eegfm_bench.atomic import (DamagedCheckpointError, atomic_path, atomic_write_text, disk_full_error,
                                remove_checkpoint, sidecar_of, verify_checkpoint)
from eegfm_bench.callbacks.stop import StopAtSafePoint
from eegfm_bench.data.datamodule import EEGDataModule
from eegfm_bench.data.splits import Split
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import StopRequested, check_stop, deferred, stop_requested
from eegfm_bench.metrics import classification_metrics
from eegfm_bench.models.base import state_dict_sha256
from eegfm_bench.models.features import extract_features
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.models.closed_form import closed_form_head
from eegfm_bench.reports.cv import current_summary, write_summary
from eegfm_bench.reports.ingest import write_ingest_reports
from eegfm_bench.results import (Cell, FailedCellsError, ResultStore, cell_dir_name, code_version, library_versions,
                                 run_label)
from eegfm_bench.runs.cv.cells import (LP_FT, compiled, enumerate_cells, find_batch_size, fixed_batch_size,
    head_args, head_kwargs_for, load_config, model_preprocessing, run_init_seed, run_optim, run_trainer,
    shared_batch_size, windows_for)
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.launch.ingest import sharded_fill
from eegfm_bench.runs.launch.launcher import run_jobs
from eegfm_bench.runs.cv.progress import CellProgress
from eegfm_bench.reports.page import refresh
from eegfm_bench.runs.launch.running import running_marker
from eegfm_bench.runs.cv.feature_stage import TOKEN_REGIMES, run_feature_stage
from eegfm_bench.trainer import (build_trainer, close_loggers, fit_callbacks, fixed_numerics, quiet_lightning,
                                 selection_metric)


@dataclass
class CellContext:
    """What every cell of one cv run shares: the typed config, the output folder, the loaded windows (by
    preprocessing) and the split, the rows' provenance, and the ``batch_size: auto`` sizes found so far."""

    cfg: CVConfig
    out: Path
    windows: dict
    split: Split
    progress: bool
    force: bool
    zero: bool
    code: str
    libs: str
    auto_batch: dict = field(default_factory=dict)


@dataclass
class TrainedCell:
    """A cell after :func:`train_cell`: what :func:`evaluate_cell` tests and records."""

    model: Any
    fitted: Any
    dm: EEGDataModule
    ws: Any
    trainer: Any
    ckpt: Any
    feats: Any
    extra: dict
    t0: float
    start: dict
    closed_form: bool = False


def _cdir(cell: Cell) -> str:
    return cell_dir_name(cell.model, cell.regime, cell.head, cell.chash)


def _build_model(ctx: CellContext, cell: Cell, dm: EEGDataModule, ws, head: str, regime: str) -> FMClassifier:
    """The cell's LightningModule (``head`` and ``regime`` may be the LP-FT stage's)."""
    run, cfg = cell.run, ctx.cfg
    return FMClassifier(backbone=cell.model, user_model=(cfg.user_models or {}).get(cell.model),
                        ch_names=dm.ch_names, n_times=dm.n_times, n_classes=dm.n_classes, pretrained=run.pretrained,
                        init_seed=run_init_seed(cfg, run), class_weights=dm.class_weights,
                        backbone_kwargs=run.backbone_kwargs, lora=run.lora,
                        data_reference=(ws.meta.get("reference") or {}).get("reference"),
                        regime=regime, **head_args(run, head), **run_optim(cfg, run))


def _datamodule(ctx: CellContext, cell: Cell, ws) -> EEGDataModule:
    d = ctx.cfg.data
    return EEGDataModule(task=ctx.cfg.task, backbone=cell.model, fold=cell.fold, batch_size=fixed_batch_size(d),
                         num_workers=d.num_workers, ws=ws, split=ctx.split)


def _linear_probe_stage(ctx: CellContext, cell: Cell, model: FMClassifier, ws) -> dict:
    """LP-FT's first stage: the head trained on the frozen backbone's cached tokens; its best-validation weights
    become ``model``'s head (paper 003 §4.5's regimes; Kumar et al. 2022). Returns its ``lp_epochs`` /
    ``lp_val_bacc``."""
    cfg, out, run, fold = ctx.cfg, ctx.out, cell.run, cell.fold
    tr = run_trainer(cfg, run)
    lp = _build_model(ctx, cell, _datamodule(ctx, cell, ws), ws, cell.head, "head_only")
    lp_feats = extract_features(lp.backbone, ws, parts=("tokens",), trainer=tr, batch_size=fixed_batch_size(cfg.data),
                                cache_dir=cfg.data.cache_dir, progress=ctx.progress, dtype=cfg.data.feature_dtype)
    lp_dm = _datamodule(ctx, cell, ws)
    lp_dm.use_tokens(lp_feats.array("tokens"))
    callbacks, ckpt = fit_callbacks(out / "checkpoints" / _cdir(cell) / f"fold{fold}", filename="lp",
                                    patience=tr["patience"])
    lp_tr = {**tr, "max_epochs": int((run.lp_ft or {}).get("lp_max_epochs") or tr["max_epochs"])}
    trainer = build_trainer(lp_tr, out_dir=out, name=run_label(cell.model, cell.regime, cell.head),
                            version=f"fold{fold}-{cell.chash[:8]}-lp", experiment=cfg.experiment,
                            enable_checkpointing=True, callbacks=callbacks + [StopAtSafePoint()])
    with deferred():  # a stop request waits for a batch end: never a half-written checkpoint
        trainer.fit(lp, lp_dm)
    close_loggers(trainer)
    best = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
    model.head.load_state_dict({k[len("head."):]: v for k, v in best.items() if k.startswith("head.")})
    remove_checkpoint(ckpt.best_model_path)
    return {"lp_epochs": float(trainer.current_epoch),
            "lp_val_bacc": float(ckpt.best_model_score) if ckpt.best_model_score is not None else float("nan")}


def _auto_batch_size(ctx: CellContext, cell: Cell, model: FMClassifier, dm: EEGDataModule) -> None:
    """``batch_size: auto``: Lightning's batch-size finder once per run × head (shared by its folds, workers and
    reruns: :func:`~eegfm_bench.runs.cv.cells.shared_batch_size`), then the fold's seed again."""
    key = (cell.model, cell.regime, cell.head)
    if key not in ctx.auto_batch:
        cap = min(int(ctx.cfg.data.max_batch_size), len(dm.train_idx))
        tr = run_trainer(ctx.cfg, cell.run)
        size, found_here = shared_batch_size(ctx.out, f"{cell.model}-{cell.regime}-{cell.head}-{cell.chash}",
                                             lambda: find_batch_size(model, dm, tr, cap))
        ctx.auto_batch[key] = size
        if ctx.zero:
            tqdm.write(f"batch_size auto: {cell.model}/{cell.regime}/{cell.head}: {size} windows per device "
                       + (f"(Lightning's batch-size finder on fold {cell.fold}, capped at {cap}: "
                          "min(max_batch_size, training windows))" if found_here else
                          f"(found earlier for this cell's config and device: {ctx.out / 'batch_size_auto'})"))
        L.seed_everything(ctx.cfg.seed + cell.fold, workers=True, verbose=False)
    dm.hparams.batch_size = ctx.auto_batch[key]


def _resumable(ctx: CellContext, cell: Cell, last: Path) -> str | None:
    """``last`` when the cell resumes from it (it exists, is whole, and ``--force`` is off), else ``None``.

    A damaged ``last.ckpt`` (its size or SHA-256 differs from its sidecar, or it cannot be loaded: a disk that
    filled while it was written by an older version, a killed copy) is said in one line, moved aside to
    ``last.ckpt.damaged-<UTC time>`` (its sidecar beside it) and the cell trains from the start (same seed: the
    same rows as an uninterrupted run)."""
    if ctx.force or not last.is_file():
        return None
    name = f"cell {cell.model}/{cell.regime}/{cell.head} fold {cell.fold}"
    try:
        verify_checkpoint(last, fix="moved aside; the cell trains again from the start")
    except FileNotFoundError:  # a DDP rank: rank 0 found it damaged and moved it aside
        return None
    except DamagedCheckpointError as err:
        if not ctx.zero:  # every rank reads the same file and decides the same; rank 0 moves it aside
            return None
        aside = last.with_name(f"{last.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        os.replace(last, aside)
        if sidecar_of(last).is_file():
            os.replace(sidecar_of(last), sidecar_of(aside))
        tqdm.write(f"{name}: {str(err).split('; fix:')[0]}; moved it to {aside}; training this cell from the start")
        return None
    if ctx.zero:
        tqdm.write(f"{name}: resuming from {last}")
    return str(last)


def train_cell(ctx: CellContext, cell: Cell) -> TrainedCell:
    """Train one cell (one run × head × fold): seed ``seed + fold``, build the model and the fold's DataModule,
    LP-FT's probing stage, the head-only token cache (``Trainer.predict``), ``batch_size: auto``, then
    ``Trainer.fit`` with early stopping and checkpoints (resumed from ``last.ckpt`` after an interruption), or the
    closed-form ridge solution of a ``ridge`` head.

    Raises
    ------
    Exception
        Whatever training raises; :class:`CVLoop` records it as the cell's failure.
    """
    cfg, out, run, fold, head = ctx.cfg, ctx.out, cell.run, cell.fold, cell.head
    closed_form = closed_form_head(head)  # asked once: a closed-form head (ridge) is solved, not fitted
    tr = run_trainer(cfg, run)
    ws = windows_for(cfg, cell.model, ctx.windows)
    L.seed_everything(cfg.seed + fold, workers=True, verbose=False)
    dm = _datamodule(ctx, cell, ws)
    model = _build_model(ctx, cell, dm, ws, head, LP_FT.get(cell.regime, cell.regime))
    start = {"backbone_sha256": state_dict_sha256(model.backbone), "library_versions": ctx.libs,
             **model.backbone.provenance()}
    extra = _linear_probe_stage(ctx, cell, model, ws) if cell.regime in LP_FT else {}
    feats = None
    if cell.regime == "head_only":
        feats = extract_features(model.backbone, ws, parts=("tokens",), trainer=tr,
                                 batch_size=fixed_batch_size(cfg.data), cache_dir=cfg.data.cache_dir,
                                 progress=ctx.progress, dtype=cfg.data.feature_dtype)
        dm.use_tokens(feats.array("tokens"))
    if cfg.data.batch_size == "auto" and closed_form is None:  # a closed-form cell trains no batch
        _auto_batch_size(ctx, cell, model, dm)
    folder = out / "checkpoints" / _cdir(cell) / f"fold{fold}"
    monitor, mode, note = selection_metric(ws.y[dm.val_idx]) if len(dm.val_idx) else ("val/bacc", "max", "")
    if note:
        start["selected_on"] = monitor  # a column of the cell's rows (extra holds metric values)
        if ctx.zero:
            tqdm.write(f"cell {cell.model}/{cell.regime}/{head} fold {fold}: {note}")
    callbacks, ckpt = fit_callbacks(folder, patience=tr["patience"], save_last=True, monitor=monitor, mode=mode)
    resume = _resumable(ctx, cell, folder / "last.ckpt")  # a requeued / interrupted cell
    trainer = build_trainer(tr, out_dir=out, name=run_label(cell.model, cell.regime, head),
                            version=f"fold{fold}-{cell.chash[:8]}", experiment=cfg.experiment,
                            enable_checkpointing=True, callbacks=callbacks + [StopAtSafePoint()])
    for lg in trainer.loggers:
        lg.log_hyperparams({**model.parameter_counts, "init": model.init, "config_hash": cell.chash, "fold": fold})
    t0 = time.time()
    fitted = model
    if closed_form is not None:  # solved on the cached tokens into the carrier head's weights
        extra.update(closed_form.solve(model.head, feats.array("tokens"), ws.y, dm.train_idx, dm.val_idx, dm.test_idx,
                                       dm.n_classes, **(head_kwargs_for(run, head) or {})))
    else:
        fitted = compiled(model, cfg.compile)
        with deferred():  # a stop request waits for a batch end: never a half-written last.ckpt
            trainer.fit(fitted, dm, ckpt_path=resume)
    return TrainedCell(model, fitted, dm, ws, trainer, ckpt, feats, extra, t0, start, closed_form is not None)


def evaluate_cell(ctx: CellContext, cell: Cell, t: TrainedCell) -> list[dict]:
    """Test a trained cell with its best checkpoint (a ridge cell: its solution, saved as ``best.ckpt``), write its
    predictions (rank 0) and return its rows: one per metric (balanced accuracy, accuracy, AUROC, Cohen's κ, ...,
    plus epochs, fit seconds, head parameters, batch size and the trainable fraction), each with the cell's key,
    config hash, code and library versions, backbone sha256, the numbers of test windows and subjects, and the
    torch intra-op threads the test ran with (``intra_op_threads``; :func:`~eegfm_bench.trainer.fixed_numerics`).
    ``checkpoint`` and ``predictions`` name their files; the store keeps them relative to the out_dir on append
    (:func:`~eegfm_bench.results.row_path`: a results folder is self-contained and movable).

    Raises
    ------
    RuntimeError
        The test loop did not predict each of the fold's test windows exactly once.
    """
    cfg, out, fold = ctx.cfg, ctx.out, cell.fold
    folder = out / "checkpoints" / _cdir(cell) / f"fold{fold}"
    if t.closed_form:
        t.trainer.test(t.model, t.dm, verbose=False)  # the test loop and the checkpoint, as for every head
        t.trainer.save_checkpoint(folder / "best.ckpt", weights_only=True)
        t.ckpt.best_model_path = str(folder / "best.ckpt")
    else:
        t.trainer.test(t.fitted, t.dm, ckpt_path=t.ckpt.best_model_path or None, verbose=False)
    close_loggers(t.trainer)
    pred = t.model.test_predictions.copy()
    if len(pred) != len(t.dm.test_idx) or not np.array_equal(np.sort(pred["index"].to_numpy()),
                                                             np.sort(t.dm.test_idx)):
        raise RuntimeError(f"the test loop predicted {len(pred)} windows, the fold holds {len(t.dm.test_idx)}")
    pred["subject"] = t.ws.subject[pred["index"]]
    pred["recording"] = t.ws.recording[pred["index"]]
    pred_path = out / "predictions" / f"{_cdir(cell)}-fold{fold}.csv"
    probs = pred[[c for c in pred.columns if c.startswith("p") and c[1:].isdigit()]].to_numpy()
    m = classification_metrics(pred["y"].to_numpy(), probs)
    counts = t.model.parameter_counts
    m.update(epochs=float(t.trainer.current_epoch), fit_seconds=float(time.time() - t.t0),
             head_params=float(counts["head_params"]), batch_size=float(t.dm.hparams.batch_size))
    m.update(t.extra)
    m["trainable_fraction"] = counts["trainable_params"] / counts["total_params"]
    key = dict(experiment=cfg.experiment, task=cfg.resolved_task.name, model=cell.model, init=t.model.init,
               regime=cell.regime, head=cell.head, fold=fold, seed=cfg.seed, condition="clean")
    rows = [{**key, "metric": k, "value": v, "n_windows": int(len(pred)), "n_subjects": int(pred["subject"].nunique()),
             "fold_unit": ctx.split.spec.group_by, "config_hash": cell.chash, "code_version": ctx.code,
             "checkpoint": str(t.ckpt.best_model_path), "predictions": str(pred_path),
             "devices": int(t.trainer.world_size), "intra_op_threads": int(torch.get_num_threads()), **t.start}
            for k, v in m.items()]
    if ctx.zero:
        pred_path.parent.mkdir(exist_ok=True)
        with atomic_path(pred_path) as tmp:
            pred.to_csv(tmp, index=False)
    return rows


class CVLoop:
    """Every headline cell of a cv config: ``reset`` → ``advance`` per cell → ``on_run_end`` (module docstring).

    Parameters
    ----------
    config : path, mapping or CVConfig
    args : sequence of str
        Dotted overrides (``--trainer.devices 2``) and more ``--config`` files.
    progress : bool
    force : bool
        Retrain every cell even if rows of its current config hash exist (they are replaced).
    worker_cells : sequence of str, optional
        Run only these cells (:func:`~eegfm_bench.results.cell_id`) as a launcher's worker: rows go to the store
        as part files (no merge), nothing shared is written, and the failures are returned instead of raised.
    """

    def __init__(self, config, *, args: Sequence[str] = (), progress: bool = True, force: bool = False,
                 worker_cells: Sequence[str] | None = None):
        self.config, self.args, self.progress, self.force = config, list(args), progress, force
        self.worker_cells = worker_cells
        self.worker = worker_cells is not None
        self.failures: list[dict] = []

    def run(self):
        """``reset``, ``advance`` over the cells left to train, ``on_run_end``; returns its result. A stop request
        (SIGINT / SIGTERM, :mod:`eegfm_bench.interrupt`) is taken between cells, or inside a cell's fit at a batch
        end: :meth:`on_stop` keeps what is finished and raises."""
        try:
            self.reset()
            for cell in self.todo:
                check_stop()  # the safe point between two cells
                with deferred():  # inside a cell a signal is only recorded: its fit stops at a batch end
                    self.advance(cell)
        except (KeyboardInterrupt, SystemExit) as err:  # SystemExit: Lightning's exit after its graceful shutdown
            if stop_requested() is None and not isinstance(err, StopRequested):
                raise
            raise self.on_stop() from None
        self.bar.close()
        return self.on_run_end()

    def on_stop(self) -> StopRequested:
        """After a stop request: merge the rows the finished cells (and a launcher's jobs) wrote, write the summary
        of the finished cells (rank 0, not in a worker), and return the :class:`StopRequested` to raise, saying
        what was kept."""
        signame = stop_requested() or "a stop request"
        if not hasattr(self, "todo") or not self.zero or self.worker:
            return StopRequested(f"stopped by {signame}", kept=None if self.worker else
                                 "nothing new (stopped before the first cell)")
        if getattr(self, "bar", None) is not None:
            self.bar.close()
        if self.store.unmerged():
            self.store.merge()
        left = CellProgress.of_cells(self.out, self.cfg.experiment, self.cells, store=self.store).todo()
        done = len(self.cells) - len(left)
        if done:
            self._write_failures()
            write_summary(self.out / "summary.md", current_summary(self.store, self.cfg.experiment, self.current),
                          experiment=self.cfg.experiment, task=self.cfg.resolved_task.name,
                          scheme=self.ctx.split.spec.scheme, fold_unit=self.ctx.split.spec.group_by)
        resumable = [c for c in left
                     if (self.out / "checkpoints" / _cdir(c) / f"fold{c.fold}" / "last.ckpt").is_file()]
        kept = (f"the rows of {done} of {len(self.cells)} cells in {self.store.csv}"
                + (f", the summary of those in {self.out / 'summary.md'}" if done else "")
                + (f"; {len(resumable)} unfinished cell(s) resume from their last.ckpt" if resumable else ""))
        return StopRequested(f"stopped by {signame}", kept=kept)

    # ---------------------------------------------------------------------------------------------- reset
    def reset(self) -> None:
        """Read the config, open the store, load the windows and the split, write the run's files (rank 0, not in
        a worker), decide the cells to train, and hand them to the launcher when one is configured."""
        self.t_start = time.time()
        cfg = self.cfg = load_config(self.config, self.args)
        self.out, self.zero = Path(cfg.out_dir), is_global_zero()
        if self.zero and not self.worker:
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False,
                                                                        allow_unicode=True))
        self.store = ResultStore(self.out, write=self.zero, merge=not self.worker)
        quiet_lightning()
        if cfg.launcher.kind == "slurm" and self.zero and not self.worker:
            self._ingest_stage()
        windows: dict = {}
        cells, self.current, split = enumerate_cells(cfg, windows, self.progress, splits_path=self.out / "splits.json",
                                                     write=self.zero)
        self.ctx = CellContext(cfg, self.out, windows, split, self.progress, self.force, self.zero, code_version(),
                               library_versions())
        if self.zero and not self.worker:
            self._write_run_files()
        self.cells = cells
        # decided once, identically on every rank (the store is not written before the first cell ends)
        self.todo = CellProgress.of_cells(self.out, cfg.experiment, cells, store=self.store).todo(force=self.force)
        if self.worker:
            wanted = set(self.worker_cells)
            self.todo = [c for c in self.todo if c.id in wanted]
        if self.zero and not self.worker and len(self.todo) < len(cells):
            tqdm.write(f"cv {cfg.experiment}: {len(cells) - len(self.todo)} of {len(cells)} cells already have rows for "
                       f"their current config hash (skipped; --force retrains them); {len(self.todo)} to train")
        launched = cfg.launcher.kind != "none"
        if not self.worker and launched and self.todo and self.zero:
            self._feature_stage()
        if not self.worker and launched and self.todo:
            self.failures = run_jobs(cfg.launcher, replace(cfg, launcher=replace(cfg.launcher, kind="none")),
                                     [c.id for c in self.todo], self.out, progress=self.progress and self.zero)
            self.todo = []
            self.store.merge()
        self.bar = tqdm(total=len(cells), initial=len(cells) - len(self.todo), desc=f"cv {cfg.experiment}",
                        disable=not (self.progress and self.zero) or (launched and not self.worker), unit="cell")

    def _ingest_stage(self) -> None:
        """Under ``launcher.kind: slurm``, the recordings whose per-recording entries the runs' window sets lack are
        read as a job array of their own before the cells (:func:`~eegfm_bench.runs.launch.ingest.sharded_fill`: CPU jobs,
        one per shard, logs under ``<out_dir>/ingest/jobs``), so this process, on the login node, only assembles the
        window sets. Nothing to read: no job."""
        cfg, d = self.cfg, self.cfg.data
        preps = list(dict.fromkeys(model_preprocessing(cfg, r.model) for r in cfg.runs))
        sharded_fill(cfg.resolved_task, preps, cfg.launcher, data_root=d.data_root, cache_dir=d.cache_dir, subjects=d.subjects,
                     n_jobs=d.n_jobs, out_dir=self.out / "ingest", progress=self.progress)

    def _feature_stage(self) -> None:
        """Under a launcher, the frozen tokens of every run whose cells left to train read them (head-only, LP-FT's
        probing stage) are extracted as a stage of jobs of their own before the cells
        (:func:`~eegfm_bench.runs.cv.feature_stage.run_feature_stage`: window ranges, one job each, logs under
        ``<out_dir>/features/jobs``); each cell then opens the entry instead of extracting. Entries already
        cached: no job."""
        runs = sorted({self.cfg.runs.index(c.run) for c in self.todo if c.regime in TOKEN_REGIMES})
        if runs:
            run_feature_stage(self.cfg, runs=runs, out_dir=self.out / "features", windows=self.ctx.windows,
                              progress=self.progress)

    def _write_run_files(self) -> None:
        """The ingest report of every window set the runs read, and ``cells.json`` (the config hash of every
        cell of this config: what the sweep, probes and attribution read)."""
        used: dict[str, tuple[list, Any]] = {}
        for run in self.cfg.runs:
            w = windows_for(self.cfg, run.model, self.ctx.windows)
            models = used.setdefault(w.meta["cache_key"], ([], w))[0]
            if run.model not in models:  # a model with several runs reads its windows once
                models.append(run.model)
        report = write_ingest_reports(self.out, list(used.values()))
        if report is not None and self.progress:
            tqdm.write(f"ingest report: {report}")
        atomic_write_text(self.out / "cells.json", json.dumps(
            [{"model": m, "regime": r, "head": h, "config_hash": c} for (m, r, h), c in self.current.items()], indent=1))

    # -------------------------------------------------------------------------------------------- advance
    def advance(self, cell: Cell) -> None:
        """Train and test one cell and append its rows; a failure is recorded (``failures.json``) and the loop
        goes on — except a full disk or quota (``ENOSPC`` / ``EDQUOT``), raised as
        :class:`~eegfm_bench.atomic.DiskFullError`: it is not the cell's fault, and every later cell would meet it
        (the finished cells' rows stay; the rerun trains the rest). The cell's ``running/`` marker (what ``status`` shows) lives while it runs.

        Every cell runs here, whoever runs it (this loop, a launcher's worker or SLURM job, a resumed cell, each DDP
        rank), with the config's ``intra_op_threads`` (:func:`~eegfm_bench.trainer.fixed_numerics`): its rows
        depend on its config and seed only."""
        self.bar.set_postfix_str(f"{cell.model}/{cell.regime}/{cell.head} fold {cell.fold}")
        marker = running_marker(self.out, cell.id) if self.zero else None
        try:
            with fixed_numerics(self.cfg.intra_op_threads):
                rows = evaluate_cell(self.ctx, cell, train_cell(self.ctx, cell))
            self.store.append(rows)
            if self.zero:  # the cell is finished: last.ckpt only serves an interrupted cell's resumption
                remove_checkpoint(self.out / "checkpoints" / _cdir(cell) / f"fold{cell.fold}" / "last.ckpt")
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one failing cell must not lose the others
            full = disk_full_error(err)
            if full is not None:  # not the cell's fault: every further cell would fail the same way
                raise (full if full.folder is not None else disk_full_error(err, folder=self.out)) from err
            self.failures.append({"model": cell.model, "regime": cell.regime, "head": cell.head, "fold": cell.fold,
                                  "config_hash": cell.chash, "cell": cell.id, "error": f"{type(err).__name__}: {err}",
                                  "traceback": traceback.format_exc()})
            if self.zero and not self.worker:
                atomic_write_text(self.out / "failures.json", json.dumps(self.failures, indent=1))
                tqdm.write(f"cell {cell.model}/{cell.regime}/{cell.head} fold {cell.fold} failed: "
                           f"{type(err).__name__}: {err}")
        finally:
            if marker is not None:
                marker.unlink(missing_ok=True)
                try:
                    marker.parent.rmdir()  # only when no other cell (another worker's) is running
                except OSError:
                    pass
        self.bar.update(1)

    # ----------------------------------------------------------------------------------------- on_run_end
    def on_run_end(self):
        """A worker returns its failures. Otherwise: merge the rows, write ``failures.json``, ``summary.md`` and
        the page (rank 0), raise :class:`~eegfm_bench.results.FailedCellsError` if a cell failed, and return the
        summary table of the current config (``attrs``: the config, the start time, the summary's labels)."""
        if self.worker:
            return self.failures
        cfg, out = self.cfg, self.out
        if self.zero and self.store.unmerged():  # rows of workers (this run's, or of a run killed before its merge)
            self.store.merge()
        table = current_summary(self.store, cfg.experiment, self.current)
        labels = {"experiment": cfg.experiment, "task": cfg.resolved_task.name, "scheme": self.ctx.split.spec.scheme,
                  "fold_unit": self.ctx.split.spec.group_by}
        if self.zero:
            self._write_failures()
            write_summary(out / "summary.md", table, **labels)
            refresh([out], quiet=not self.progress)  # the experiment's page (its analyses in sub-folders join it)
        if self.failures:
            first = self.failures[0]
            raise FailedCellsError(f"{len(self.failures)} cell(s) failed (first: {first['model']}/{first['regime']}/"
                                   f"{first['head']} fold {first['fold']}: {first['error'].splitlines()[0][:300]}); "
                                   f"see {out / 'failures.json'} for the tracebacks (all other cells were written; a "
                                   "rerun retries only the failed ones)")
        table.attrs.update(t_start=self.t_start, config=cfg, summary=labels)
        return table

    def _write_failures(self) -> None:
        path = self.out / "failures.json"
        if self.failures:
            for f in self.failures:  # a dead job's failures name only the cell
                if "model" not in f:
                    m, r, h, k, c = f["cell"].split("/")
                    f.update(model=m, regime=r, head=h, fold=int(k[4:]), config_hash=c)
            atomic_write_text(path, json.dumps(self.failures, indent=1))
        elif path.is_file():
            atomic_write_text(path, "[]\n")


def run_cells(config, *, args: Sequence[str] = (), progress: bool = True, force: bool = False,
              worker_cells: Sequence[str] | None = None):
    """Run every headline cell of a cv config (:class:`CVLoop`) and return the summary table of the current config
    (mean ± std over folds).

    Writes (rank 0) ``config.yaml`` (resolved), ``splits.json`` (verified on reruns), ``results.csv`` /
    ``.parquet``, ``summary.md``, ``predictions/``, ``checkpoints/`` and ``logs/`` under ``out_dir``.

    Raises
    ------
    SplitMismatchError
        If ``splits.json`` exists and differs from the folds recomputed for this data and config.
    FailedCellsError
        At the end, if any cell failed (after every other cell ran; see ``failures.json``).
    DiskFullError
        At once, when a write meets a full disk or quota (the finished cells' rows are kept).
    """
    return CVLoop(config, args=args, progress=progress, force=force, worker_cells=worker_cells).run()


__all__ = ["CVLoop", "CellContext", "TrainedCell", "train_cell", "evaluate_cell", "run_cells"]
