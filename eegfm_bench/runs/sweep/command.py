"""``eegfm-bench sweep``: every App. D condition on every fold checkpoint of a cv run, as Lightning test loops.

For each fold, the fold's fitted models (the cv run's ``best.ckpt`` files of the current config hash,
:class:`~eegfm_bench.runs.cv.output.CVRun`) are evaluated on that fold's test windows under every condition of
:mod:`eegfm_bench.perturb.conditions` — clean first — with no retraining: one ``trainer.test`` per fold and group of
models, with one dataloader per condition (:class:`~eegfm_bench.perturb.dataset.PerturbedWindows`: each window's
noise is drawn from (seed, condition, window) only), and head-only models sharing one frozen backbone run one
backbone forward per batch (:class:`~eegfm_bench.perturb.evaluate.SweepModule`). The Trainer comes from the sweep's
``trainer:`` section (devices, strategy, precision — ``precision: null`` keeps each cell's training precision —
and loggers), so a sweep scales to N devices and gives the same rows as on one: the
:class:`~eegfm_bench.callbacks.sweep.TestSweep` callback gathers every condition's probabilities across ranks and
keeps each test window once.

Rows (one per condition × metric, ``condition`` = the condition string) go to the sweep's own store as soon as a
condition ends, on rank 0; they carry the cv's identifying columns plus ``perturb_seed``, ``checkpoint``, ``note``,
``details``, and a ``config_hash`` of (the cv cell's hash, perturbation seed, noise filter, precision): a rerun skips
conditions whose rows exist under that hash and retries failed ones; a cv cell retrained under a new config is
swept again. One ``out_dir`` holds one perturbation seed.

The config (``configs/experiment/sweep_quickstart.yaml``)::

    cv_out_dir: results/tiny       # the cv run's out_dir ...
    # cv_config: configs/experiment/tiny_ci.yaml   # ... or its config (must match the run's config hashes)
    out_dir: null                  # default <cv out_dir>/sweep
    conditions: null               # default: all of App. D for the task (paper 003 App. D.1-D.3, D.5)
    seed: 0                        # perturbation seed (dropout masks and noise)
    reference: eegnet              # model of the ∗/∇ marks (Tables 10-17); null: no marks
    folds: null                    # subset of the cv folds
    models: null                   # subset of the cv models
    batch_size: 64                 # windows per batch and device
    num_workers: 0                 # DataLoader processes perturbing the next batches
    save_predictions: true         # predictions/<model>-<regime>-<head>-<hash8>-fold<k>/<condition>.csv
    alpha: 0.05                    # family-wise level of the marks (Holm across models)
    corruption_order: before_reference   # corrupt, then re-reference over the channels present (or after_reference)
    region_snr: montage            # region noise SNR against the montage's signal power (or region)
    mask: paper                    # random dropout masks drawn as the paper's runs (or hashed)
    trainer: {accelerator: auto, devices: 1, precision: null, loggers: [csv]}

References
----------
Paper 003 (seed 003), §3 "Robustness to Perturbations", App. D (conditions), App. H (Tables 10-17).
"""
from __future__ import annotations

import dataclasses
import json
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

import pandas as pd
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.callbacks.sweep import TestSweep
from eegfm_bench.config import ConfigError, read_saved
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import check_stop
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.perturb.conditions import Condition, PerturbContext
from eegfm_bench.perturb.dataset import PerturbedWindows
from eegfm_bench.perturb.evaluate import (NOT_APPLICABLE, ConditionResult, SweepCondition, SweepModule, condition_details,
                                          condition_rows, dropout_masks_record, not_applicable_reason,
                                          perturb_context, resolve_conditions, shared_backbone_groups)
from eegfm_bench.perturb.regions import REGION_ROLES, MissingElectrodesWarning, resolve_region
from eegfm_bench.reports.sweep import write_report
from eegfm_bench.results import FailedCellsError, ResultStore, code_version, config_hash, run_label
from eegfm_bench.runs.cv.cells import model_preprocessing
from eegfm_bench.runs.launch.launcher import run_jobs
from eegfm_bench.runs.cv.output import CVRun, load_fold_model
from eegfm_bench.reports.page import refresh, report_root
from eegfm_bench.runs.sweep.config import load_sweep_config
from eegfm_bench.config.sweep import SweepConfig, sweep_parser
from eegfm_bench.trainer import build_trainer, close_loggers, quiet_lightning


@dataclass(frozen=True)
class SweepPlan:
    """A sweep config resolved against its cv run (:func:`plan_sweep`).

    Attributes
    ----------
    config : SweepConfig
        The config with its ``conditions`` resolved to their names (what ``sweep.yaml`` records and a launcher's
        workers run).
    run : CVRun
        The cv run.
    cells : list of FoldCheckpoint
        The fold checkpoints to sweep.
    conditions : list of Condition
        The conditions, clean first.
    """

    config: SweepConfig
    run: CVRun
    cells: list
    conditions: list


def plan_sweep(cfg: SweepConfig) -> SweepPlan:
    """The cv run of a loaded sweep config (:class:`~eegfm_bench.runs.cv.output.CVRun`; with ``cv_config`` its hashes
    are verified), its conditions and the cells to sweep, before any data or model is touched.

    Raises
    ------
    ConfigError
        A ``reference`` that is not among the swept models.
    StaleCVRunError
        ``cv_config`` gives other cell hashes than the cv run holds (names both).
    CVRunError
        The cv folder lacks a file, a model / fold is not in it, or a checkpoint is missing.
    UnknownNameError, ValueError
        From the condition strings (see :func:`~eegfm_bench.perturb.evaluate.resolve_conditions`).
    """
    run = CVRun(cfg.cv_out_dir)
    conditions = resolve_conditions(cfg.conditions, run.task)
    if cfg.cv_config is not None:
        run.verify(cfg.cv_config)
    cells = run.checkpoints(models=cfg.models, folds=cfg.folds)
    if cfg.reference is not None and cfg.reference not in {c.model for c in cells}:
        raise ConfigError(f"reference model {cfg.reference!r} is not among the swept models "
                          f"{sorted({c.model for c in cells})}; fix: set `reference:` to one of them, or "
                          "`reference: null` for no significance marks")
    return SweepPlan(replace(cfg, conditions=[c.name for c in conditions]), run, cells, conditions)


def _check_resume(out: Path, cfg: SweepConfig) -> None:
    path = out / "sweep.yaml"
    if path.is_file():
        old = read_saved(sweep_parser(), path, SweepConfig)
        for key, theirs, value in (("seed", old.seed, cfg.seed), ("cv_out_dir", old.cv_out_dir, cfg.cv_out_dir)):
            if str(theirs) != str(value):
                raise ConfigError(
                    f"{out} holds a sweep with {key}={theirs!r}, this config has {value!r}; resuming would mix "
                    f"the two. fix: use a new out_dir, or set {key}: {theirs!r}")


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, default=str))


def _save_predictions(folder: Path, condition: str, index: np.ndarray, probs: np.ndarray, ws) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"index": index, "subject": ws.subject[index], "recording": ws.recording[index],
                       "y": ws.y[index], "pred": probs.argmax(1)})
    for c in range(probs.shape[1]):
        df[f"p{c}"] = probs[:, c]
    path = folder / f"{condition}.csv"
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def run_sweep(config, *, args: Sequence[str] = (), progress: bool = True, raise_on_failure: bool = True,
               worker_units: Sequence[str] | None = None, wait: bool = True):
    """Run the perturbation sweep on every current fold checkpoint of a cv run, then write the report.

    Steps: load and check the config (:func:`load_sweep_config`) and resolve its cv run (:func:`plan_sweep`),
    group the models by preprocessing and resolve every region, mask and fold's test windows before any model runs
    (:func:`_prepare_groups`), run every (backbone group × fold) unit (:class:`_Sweep`; with a launcher, as jobs),
    then write ``failures.json``, ``cells.json``, the report and the page.

    Parameters
    ----------
    config : path, dict or SweepConfig
        Sweep config (see the module docstring and :class:`SweepConfig`).
    args : sequence of str
        Dotted overrides (``--trainer.devices 2``).
    progress : bool
    raise_on_failure : bool
        Raise :class:`RuntimeError` at the end if a condition or a checkpoint failed (after everything else ran
        and the report was written).
    worker_units : sequence of str, optional
        Run only these ``group<g>/fold<k>`` units as a launcher's worker (rows as part files, nothing shared
        written); returns the failures.
    wait : bool
        When another process writes the same ``out_dir``: wait (default), or raise
        :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``; :func:`eegfm_bench.locks.out_dir_lock`).

    Returns
    -------
    pandas.DataFrame
        The degradation table of the report (Δ balanced accuracy in pp, ranked by average).

    Raises
    ------
    ConfigError, UnknownNameError, ValueError, CVRunError
        Config problems, before any model runs (see :func:`load_sweep_config` and :func:`plan_sweep`); also if a
        fold's test windows differ from those the cv tested (the data changed since), or a region / dropout mask
        cannot be resolved.
    FailedCellsError
        At the end, if something failed (see ``failures.json``).
    StopRequested
        SIGINT / SIGTERM, between two units (:mod:`eegfm_bench.interrupt`): the finished conditions' rows are kept.
    """
    plan = plan_sweep(load_sweep_config(config, args))
    lead = worker_units is None and is_global_zero()  # a launcher's job and the DDP ranks > 0: the lead holds it
    with out_dir_lock(plan.config.out_dir, "sweep", wait=wait, enabled=lead):
        return _sweep(plan, progress=progress, raise_on_failure=raise_on_failure, worker_units=worker_units)


def _sweep(plan: SweepPlan, *, progress: bool, raise_on_failure: bool, worker_units: Sequence[str] | None):
    """:func:`run_sweep`'s steps on its resolved plan, under the out_dir's lock."""
    cfg, run, cells = plan.config, plan.run, plan.cells
    out = Path(cfg.out_dir)
    zero = is_global_zero()
    worker = worker_units is not None
    if zero:
        out.mkdir(parents=True, exist_ok=True)
    if not worker:
        _check_resume(out, cfg)
    quiet_lightning()
    missing = run.missing_folds()
    if missing and zero:
        tqdm.write(f"note: the cv run {run.dir} has no rows yet for folds {missing} of its current config; they are "
                   "not swept (let the cv finish, then rerun the sweep)")
    groups, notes, masks = _prepare_groups(plan, warn=zero)  # everything that can fail on names or data, first
    if zero and not worker:
        atomic_write_text(out / "sweep.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
        _write_json(out / "dropout_masks.json", masks)
    store = ResultStore(out, write=zero, merge=not worker)
    units = [f"group{gi}/fold{fold}" for gi, g in enumerate(groups)
             for fold in sorted({c.fold for c in cells if c.model in g["models"]})]
    launched_failures = None
    if not worker and cfg.launcher.kind != "none":
        launched_failures = run_jobs(cfg.launcher, _worker_config(cfg), units, out, progress=progress and zero,
                                     kind="sweep")
        store.merge()
    sweep = _Sweep(plan, out, store, zero=zero)
    sweep.run_units(groups, worker_units, launched=launched_failures is not None, progress=progress)
    failures = sweep.failures
    if worker:
        return failures
    if zero and store.unmerged():
        store.merge()
    if launched_failures:
        failures += [{"model": f.get("cell", "?"), "fold": "", **f} for f in launched_failures]
    table = None
    if zero:
        _write_json(out / "failures.json", failures)
        _write_json(out / "cells.json", sorted(sweep.hashes))  # this config's hashes: what reports may read
        table = write_report(out, reference=cfg.reference, alpha=cfg.alpha,
                             chance=1.0 / len(groups[0]["ws"].class_names), filter_notes=notes,
                             experiment=run.experiment, task=run.task, config_hashes=sweep.hashes,
                             config=cfg)
        refresh(report_root(out, run.dir), quiet=not progress)
    if failures and raise_on_failure:
        raise FailedCellsError(f"{len(failures)} condition(s) failed (first: {failures[0]['model']} fold "
                               f"{failures[0]['fold']} {failures[0]['condition']}: "
                               f"{failures[0]['error'].splitlines()[0][:300]}); see {out / 'failures.json'} (every "
                               "other condition was written; a rerun retries only the failed ones)")
    return table


def _worker_config(cfg: SweepConfig) -> SweepConfig:
    """The config a launcher's worker runs: no launcher of its own, and the ``cv_out_dir`` the parent resolved and
    verified (``cv_config`` dropped: loading both set is refused)."""
    return replace(cfg, launcher=replace(cfg.launcher, kind="none"), cv_config=None)


def _prepare_groups(plan: SweepPlan, *, warn: bool) -> tuple[list[dict], list[str], dict]:
    """The swept models grouped by preprocessing (one window set each), with every name and window check done
    before any model runs.

    Returns
    -------
    groups : list of dict
        ``models``, ``ws`` (the windows), ``ctx`` (:class:`PerturbContext`) and ``details`` (per condition).
    notes : list of str
        The noise filters' notes.
    masks : dict
        Dataset → its channel names and random dropout masks (``dropout_masks.json``).

    Raises
    ------
    ConfigError
        A fold's test windows differ from those the cv tested (the data changed since).
    UnknownNameError, ValueError
        A region or dropout mask that cannot be resolved on the windows' channels.
    """
    cfg, run, cells, conditions = plan.config, plan.run, plan.cells, plan.conditions
    by_prep: dict[tuple, dict] = {}
    for m in sorted({c.model for c in cells}):
        prep = model_preprocessing(run.config, m).prep  # the cv run's band / window settings applied
        key = (prep.sfreq, prep.l_freq, prep.h_freq, prep.scale, prep.window_s, prep.reference)
        by_prep.setdefault(key, {"models": []})["models"].append(m)
    notes, masks = [], {}
    for g in by_prep.values():
        ws = run.windows(g["models"][0])
        ctx, fnotes = perturb_context(ws.meta, run.task, cfg.seed, order=cfg.corruption_order,
                                      region_power=cfg.region_snr, mask=cfg.mask)
        notes += [n for n in fnotes if n not in notes]
        details = {c.name: condition_details(c, ws.ch_names, ctx) for c in conditions}  # resolves regions and masks (raises)
        for role in REGION_ROLES:
            if any(getattr(c, "role", None) == role for c in conditions):
                resolve_region(run.task, role, ws.ch_names, warn=warn)
        g.update(ws=ws, ctx=ctx, details=details)
        masks[ws.meta["dataset"]] = {"ch_names": list(ws.ch_names),
                                     "masks": dropout_masks_record(ws.ch_names, ws.meta["dataset"], cfg.seed,
                                                                   conditions, rule=cfg.mask)}
        _check_test_windows(run, [ck for ck in cells if ck.model in g["models"]], ws)
    return list(by_prep.values()), notes, masks


def _check_test_windows(run, cells: list, ws) -> None:
    """Every fold still holds the test windows the cv tested (a changed data folder or cache would not)."""
    for ck in cells:
        te = run.fold_indices(ws, ck.fold)[2]
        if ck.n_windows and len(te) != ck.n_windows:
            raise ConfigError(f"fold {ck.fold} of {ck.model} now holds {len(te)} test windows, the cv tested "
                              f"{ck.n_windows}; the data or window cache changed since the cv run. fix: rerun "
                              "the cv, or restore the data")


class _Sweep:
    """One sweep's units (backbone group × fold): what is done, what failed, the rows as each condition ends."""

    def __init__(self, plan: SweepPlan, out: Path, store, *, zero: bool):
        self.plan, self.cfg, self.run, self.out, self.store, self.zero = plan, plan.config, plan.run, out, store, zero
        existing = store.load()
        done_cols = ["model", "init", "regime", "head", "fold", "condition", "config_hash"]
        self.done = (set(map(tuple, existing[done_cols].astype(str).to_numpy()))
                     if not existing.empty and set(done_cols) <= set(existing.columns) else set())
        self.code = code_version()
        self.failures: list[dict] = []
        self.hashes: set[str] = set()
        self.bar = None

    def precision_of(self, ck) -> Any:
        """The sweep's precision, or (``precision: null``) the cell's training precision."""
        p = self.cfg.trainer.get("precision")
        return p if p is not None else self.run.trainer_of(ck.model, ck.regime, ck.head).get("precision", "32-true")

    def chash_of(self, ck, ctx) -> str:
        """The config hash of a cell's sweep rows: the cv cell's hash, perturbation seed and filter, precision."""
        return config_hash({"cv_config_hash": ck.config_hash, "perturb_seed": self.cfg.seed,
                            "perturbation": ctx.as_dict(), "precision": str(self.precision_of(ck))})

    def fail(self, ck, condition: str, error: str, tb: str) -> None:
        """Record a failed condition of a cell (``failures.json`` rewritten at once on rank 0)."""
        self.failures.append({"model": ck.model, "init": ck.init, "regime": ck.regime, "head": ck.head,
                              "fold": ck.fold, "condition": condition, "error": error, "traceback": tb})
        if self.zero:
            _write_json(self.out / "failures.json", self.failures)
            tqdm.write(f"sweep {ck.model}/{ck.regime}/{ck.head} fold {ck.fold} {condition} failed: "
                       f"{error.splitlines()[0]}")

    def run_units(self, groups: list[dict], worker_units, *, launched: bool, progress: bool) -> None:
        """Every (backbone group × fold) unit in order (a worker: only its units; after a launcher: only counted)."""
        cells, conditions = self.plan.cells, self.plan.conditions
        self.bar = tqdm(total=len(cells) * len(conditions), desc=f"sweep {self.run.experiment}",
                        disable=not (progress and self.zero), unit="cond")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingElectrodesWarning)  # warned once above; recorded in `details`
            for gi, g in enumerate(groups):
                gcells = [c for c in cells if c.model in g["models"]]
                for fold in sorted({c.fold for c in gcells}):
                    if worker_units is not None and f"group{gi}/fold{fold}" not in worker_units:
                        continue
                    check_stop()  # a stop request between two units (:mod:`eegfm_bench.interrupt`)
                    self.run_fold(g, [c for c in gcells if c.fold == fold], fold, launched=launched)
        self.bar.close()

    def run_fold(self, g: dict, fcells: list, fold: int, *, launched: bool) -> None:
        """The conditions each cell of one fold still needs, in one :func:`evaluate_conditions` pass."""
        run, ws, ctx = self.run, g["ws"], g["ctx"]
        te = run.fold_indices(ws, fold)[2]
        todo, bases = self._fold_todo(fcells, fold, ctx, te, ws)
        if launched:  # the workers ran this unit
            self.bar.update(sum(len(t) for t in todo.values()))
            return
        models = self._load_models(fcells, todo)
        if not models:
            return
        evaluate_conditions(models, ws, te, self.plan.conditions, ctx, trainer=self.cfg.trainer,
                            todo={i: [c.name for c in todo[i]] for i in models},
                            precision={i: self.precision_of(fcells[i]) for i in models},
                            batch_size=self.cfg.batch_size, num_workers=self.cfg.num_workers,
                            sink=lambda results: self._sink(results, fcells, bases, fold, ws),
                            details=g["details"], out_dir=self.out, name=f"sweep-fold{fold}",
                            experiment=run.experiment,
                            labels={i: run_label(c.model, c.regime, c.head) for i, c in enumerate(fcells)},
                            versions={i: f"{run_label(c.model, c.regime, c.head)}-{bases[i]['config_hash'][:8]}"
                                      for i, c in enumerate(fcells)})
        del models

    def _fold_todo(self, fcells: list, fold: int, ctx, te: np.ndarray, ws) -> tuple[dict, dict]:
        """Per cell of the fold: the conditions without rows under its current hash, and its rows' base columns."""
        run, conditions = self.run, self.plan.conditions
        n_subjects = int(np.unique(ws.subject[te]).size)
        todo, bases = {}, {}
        for i, ck in enumerate(fcells):
            h = self.chash_of(ck, ctx)
            self.hashes.add(h)
            ident = [ck.model, ck.init, ck.regime, ck.head, str(ck.fold)]
            todo[i] = [c for c in conditions if tuple(ident + [c.name, h]) not in self.done]
            self.bar.update(len(conditions) - len(todo[i]))
            bases[i] = {"experiment": run.experiment, "task": run.task, "model": ck.model, "init": ck.init,
                        "regime": ck.regime, "head": ck.head, "fold": int(fold), "seed": ck.seed,
                        "n_windows": int(len(te)), "n_subjects": n_subjects,
                        "fold_unit": ck.fold_unit or run.group_by, "config_hash": h, "code_version": self.code,
                        "checkpoint": str(ck.path), "perturb_seed": self.cfg.seed}
        return todo, bases

    def _load_models(self, fcells: list, todo: dict) -> dict:
        """The fold's models that still need a condition; a checkpoint that does not load fails its conditions."""
        models = {}
        for i, ck in enumerate(fcells):
            if not todo[i]:
                continue
            try:
                models[i] = load_fold_model(ck.path)
            except Exception as err:  # noqa: BLE001  (this cell fails, the others go on)
                for c in todo[i]:
                    self.fail(ck, c.name, f"{type(err).__name__}: {err}", traceback.format_exc())
                self.bar.update(len(todo[i]))
                todo[i] = []
        return models

    def _sink(self, results: list, fcells: list, bases: dict, fold: int, ws) -> None:
        """One finished condition's results: its rows at once (a later crash cannot lose them), its predictions."""
        rows = []
        for res in results:
            ck = fcells[res.model]
            if res.status == "failed":
                self.fail(ck, res.condition, res.error, res.traceback or res.error)
                continue
            base = bases[res.model] if res.index is None else {**bases[res.model], "n_windows": int(len(res.index))}
            rows += condition_rows(res, base)
            if self.cfg.save_predictions and res.status == "ok":
                _save_predictions(self.out / "predictions" / f"{run_label(ck.model, ck.regime, ck.head)}-"
                                  f"{base['config_hash'][:8]}-fold{fold}", res.condition, res.index, res.probs, ws)
        self.store.append(rows)
        self.bar.update(len(results))


PREFETCH_BYTES = 1 << 30
"""Largest fold (bytes of one condition's float32 windows) whose perturbation is computed ahead in a thread."""


def evaluate_conditions(models: Mapping[Any, Any], ws, rows: np.ndarray, conditions: Sequence[Condition],
                        ctx: PerturbContext, *, trainer: dict | None = None, todo: Mapping[Any, Sequence[str]] | None = None,
                        precision: Mapping[Any, Any] | None = None, batch_size: int = 64, num_workers: int = 0,
                        share_backbones: bool = True, prefetch: bool = True, sink=None,
                        details: Mapping[str, dict] | None = None,
                        out_dir=None, name: str = "sweep", version: str | None = None,
                        experiment: str = "sweep", labels: Mapping[Any, str] | None = None,
                        versions: Mapping[Any, str] | None = None) -> list:
    """Every model under every condition on windows ``rows`` of ``ws``: ``trainer.test`` loops, no retraining.

    Models are grouped (:func:`shared_backbone_groups`: head-only models with identical frozen backbones share one
    forward); each group runs one ``trainer.test`` with one dataloader per condition it needs
    (:class:`~eegfm_bench.perturb.dataset.PerturbedWindows`), and the :class:`~eegfm_bench.callbacks.sweep.TestSweep`
    callback turns every finished condition into one :class:`ConditionResult` per model.

    Parameters
    ----------
    models : mapping key -> FMClassifier
        Fitted models (keys must be unique as strings).
    ws : WindowSet
        Clean windows in the models' input unit.
    rows : ndarray of int
        WindowSet rows to evaluate (a fold's test windows).
    conditions : sequence of Condition
        In order (clean first by convention).
    ctx : PerturbContext
    trainer : dict, optional
        A ``trainer:`` section (devices, strategy, precision, loggers); default one device, fp32, no loggers.
    todo : mapping key -> condition names, optional
        What each model still needs (default: every condition).
    precision : mapping key -> str, optional
        Per-model precision overriding ``trainer["precision"]`` (e.g. each cell's training precision).
    batch_size, num_workers : int
        Per-device batch and DataLoader worker processes (results do not depend on either).
    share_backbones : bool
        Share one backbone forward between head-only models with identical frozen backbones.
    prefetch : bool
        With ``num_workers=0``: perturb the next condition in a background thread while the models run the current
        one (:meth:`~eegfm_bench.perturb.dataset.PerturbedWindows.prefetch`; skipped when a condition's windows
        exceed :data:`PREFETCH_BYTES`). Results do not depend on it.
    sink : callable, optional
        ``sink(list[ConditionResult])`` on rank 0 as each condition finishes (not-applicable results included).
    details : mapping condition name -> dict, optional
        Precomputed :func:`condition_details`.
    out_dir, name, version, experiment
        Where the Trainer's loggers write (``None``: no loggers).
    labels : mapping key -> str, optional
        Names of the models in the logged metric keys (default: the keys).
    versions : mapping key -> str, optional
        Names of the models in the logger versions (default: ``labels``); a group's version joins them with ``+``.

    Returns
    -------
    list of ConditionResult
        ``ok`` (metrics, probabilities and window indices, each test window once), ``not_applicable`` or ``failed``.
    """
    tr = dict(trainer or {"accelerator": "auto", "devices": 1, "precision": "32-true"})
    keys = list(models)
    skey = {k: str(k) for k in keys}
    if len(set(skey.values())) != len(keys):
        raise ValueError(f"model keys must be unique as strings, got {keys}")
    want = {k: set(todo[k]) if todo is not None else {c.name for c in conditions} for k in keys}
    prec = {k: (precision or {}).get(k, tr.get("precision") or "32-true") for k in keys}
    details = _resolve_details(conditions, details, ws.ch_names, ctx)
    groups = shared_backbone_groups(models, prec) if share_backbones else [[k] for k in keys]
    results: list[ConditionResult] = []
    by_key = {skey[k]: k for k in keys}

    def remap(rs):  # the module's string keys back to the caller's keys
        return [dataclasses.replace(r, model=by_key[r.model]) for r in rs]

    order = {c.name: i for i, c in enumerate(conditions)}
    for group in groups:
        sconds, pre = _plan_group(group, conditions, want, details, models, skey)
        hand = _InOrder(pre, order, sink)  # every condition's results in the order of `conditions`
        if sconds:
            datasets, pool = _condition_datasets(sconds, ws, rows, ctx, num_workers=num_workers, prefetch=prefetch)
            module = SweepModule({skey[k]: models[k] for k in group},
                                 [SweepCondition(cond, ds.ch_names, ks, details[cond.name])
                                  for (cond, ks), ds in zip(sconds, datasets)], shared=len(group) > 1)
            loaders = [DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=num_workers) for ds in datasets]
            labels_g = {skey[k]: str((labels or {}).get(k, k)) for k in group}
            cb = TestSweep(ws.y, lambda rs: hand(remap(rs)), labels=labels_g, sink_on_all_ranks=True)
            vers = "+".join(str((versions or {}).get(k, labels_g[skey[k]])) for k in group)
            t = build_trainer({**tr, "precision": prec[group[0]]}, out_dir=out_dir, name=name,
                              version=version or vers, experiment=experiment, callbacks=[cb],
                              loggers=out_dir is not None)
            _test_and_release(t, module, loaders, datasets, pool)
            results += remap(cb.results)
        hand([])
        results += [r for rs in pre.values() for r in rs]
    return results


def _resolve_details(conditions: Sequence[Condition], details: Mapping[str, dict] | None, ch_names, ctx) -> dict:
    """Every condition's details (its mask, region, noise filter); one that cannot be resolved records the error,
    so that condition fails and the others run."""
    details = dict(details or {})
    for c in conditions:
        if c.name not in details:
            try:
                details[c.name] = condition_details(c, ch_names, ctx)
            except Exception as e:  # noqa: BLE001  (a mask / region that cannot be resolved: this condition fails)
                details[c.name] = {"condition": c.name, "_error": (f"{type(e).__name__}: {e}", traceback.format_exc())}
    return details


def _plan_group(group: list, conditions: Sequence[Condition], want: dict, details: dict, models: Mapping,
                skey: dict) -> tuple[list, dict]:
    """What one backbone group runs: ``[(condition, model keys that run it)]``, and by condition the results known
    without running (not applicable to a model, or a condition whose details could not be resolved)."""
    sconds, pre = [], {}
    for cond in conditions:
        need = [k for k in group if cond.name in want[k]]
        if not need:
            continue
        det = details[cond.name]
        if "_error" in det:
            err, tb = det["_error"]
            pre[cond.name] = [ConditionResult(cond.name, "failed", model=k, details={"condition": cond.name},
                                              error=err, traceback=tb) for k in need]
            continue
        ok = []
        for k in need:
            reason = not_applicable_reason(cond, models[k])
            if reason is None:
                ok.append(skey[k])
            else:
                pre.setdefault(cond.name, []).append(ConditionResult(cond.name, NOT_APPLICABLE, model=k,
                                                                     note=reason, details=det))
        if ok:
            sconds.append((cond, ok))
    return sconds, pre


class _InOrder:
    """Hands every condition's results to ``sink`` in the order of the conditions: the results known beforehand
    (``pending``) go out just before those of the first condition that runs after them (all of them at the end)."""

    def __init__(self, pending: dict, order: dict, sink):
        self.pending, self.order, self.sink = dict(pending), order, sink

    def __call__(self, rs: list) -> list:
        upto = self.order[rs[0].condition] if rs else len(self.order)
        first = [r for name in sorted(self.pending, key=self.order.get) if self.order[name] <= upto
                 for r in self.pending.pop(name)]
        out = first + rs
        if self.sink is not None and out and is_global_zero():
            self.sink(out)
        return first


def _condition_datasets(sconds: list, ws, rows: np.ndarray, ctx, *, num_workers: int, prefetch: bool):
    """One :class:`PerturbedWindows` per condition and, when the fold fits :data:`PREFETCH_BYTES` (and no worker
    processes perturb), a thread that perturbs the next condition ahead. Returns ``(datasets, pool or None)``."""
    datasets = [PerturbedWindows(ws, rows, cond, ctx) for cond, _ in sconds]
    pool = None
    if num_workers == 0 and prefetch and len(rows) * ws.X.shape[1] * ws.n_times * 4 <= PREFETCH_BYTES:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perturb")
        for a, b in zip(datasets, datasets[1:]):
            a.next, b.prev = b, a
        for d in datasets:
            d.executor = pool
        datasets[0].prefetch(pool)
    return datasets, pool


def _test_and_release(trainer, module, loaders: list, datasets: list, pool) -> None:
    """``trainer.test`` over every condition's loader; then the loggers are closed, the prefetch thread stopped and
    the perturbed windows released, whatever happened."""
    try:
        trainer.test(module, dataloaders=loaders, verbose=False)
    finally:
        close_loggers(trainer)  # each backbone group is its own tracker run (wandb would reuse the open one)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for d in datasets:
            d.release()
