"""``eegfm-bench attribute``: attribution maps of every selected cv cell, fold, condition and method (App. I.1-I.2).

Predictions for the selection and the maps themselves run in ``lightning.Trainer.predict`` passes built from the
config's ``trainer:`` section (gradients enabled for the maps), so the command scales to N devices with the same
rows as on one; only rank 0 writes.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.config import ConfigError
from eegfm_bench.controls.adapt import scrambled_source_labels, train_fold
from eegfm_bench.data.splits import SplitSpec, make_split, save_or_verify
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import check_stop
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.interpret.attribution import NoWindowsSelectedError, fold_rows, cond_dir, explain_fold, resolve_method
from eegfm_bench.models.closed_form import closed_form_head
from eegfm_bench.config.interpret import AttributionConfig
from eegfm_bench.interpret.topomap import check_positions, plot_topomap_grid
from eegfm_bench.reports.attribution import method_label, write_cell_maps
from eegfm_bench.reports.attribution_checks import checks_markdown, checks_table
from eegfm_bench.results import FailedCellsError, ResultStore, code_version, config_hash
from eegfm_bench.runs.cv.cells import LP_FT, fixed_batch_size, head_kwargs_for, run_init_seed, run_optim, run_trainer
from eegfm_bench.runs.interpret.config import load_interpret_config, worker_config
from eegfm_bench.config.interpret import InterpretConfig
from eegfm_bench.runs.launch.launcher import run_jobs
from eegfm_bench.runs.cv.output import CVRun, load_fold_model
from eegfm_bench.reports.page import refresh, report_root
from eegfm_bench.trainer import hashable_trainer, log_summary

log = logging.getLogger(__name__)


def attribution_unit(ck) -> str:
    """The launcher unit of a fold checkpoint: ``<cell>/fold<k>`` (every condition and method of it)."""
    return f"{ck.cell}/fold{ck.fold}"


def label_randomised_model(run, ck, ws, root: Path, seed: int):
    """The cell ``ck`` retrained on permuted training labels: Adebayo et al. (2018)'s data randomisation test.

    The cv's recipe for the cell (its run entry, optimiser, trainer, batch size, init seed and split) through
    :func:`eegfm_bench.controls.adapt.train_fold`, with the labels of the fold's training and validation subjects
    permuted (:func:`~eegfm_bench.controls.adapt.scrambled_source_labels`, scheme ``auto``: within subject where the
    subjects carry both classes) and the test labels untouched. Cached as a checkpoint under
    ``<root>/data_randomisation/``, so a rerun reuses it. LP-FT cells are retrained with their fine-tuning stage's
    regime only (no linear-probing stage); ridge cells have no training loop and are not supported.

    Returns
    -------
    FMClassifier
        In eval mode.

    Raises
    ------
    ConfigError
        A ridge cell (the fix: leave it out of ``select.heads`` or turn data_randomisation off).
    """
    if closed_form_head(ck.head) is not None:
        raise ConfigError(f"{ck.cell}: data_randomisation retrains the cell, and a {ck.head} head has no training "
                          f"loop; fix: leave {ck.head} cells out of select.heads, or attribution.data_randomisation: "
                          "false")
    folder = root / "data_randomisation"
    tag = f"{ck.cell}-{ck.config_hash[:8]}"
    best = folder / "adaptation" / tag / f"fold{ck.fold}" / "best.ckpt"
    if best.is_file():
        return load_fold_model(best)
    cfg, r = run.config, run.run_of(ck.model, ck.regime, ck.head)
    sp = cfg.split
    spec = SplitSpec(sp.scheme, sp.k, sp.seed, sp.n_val_groups, sp.group_by)
    groups = ws.subject if spec.group_by == "subject" else ws.recording
    split = save_or_verify(make_split(ws.y, groups, spec, run.task), run.dir / "splits.json", write=False)
    tr, va, _ = run.fold_indices(ws, ck.fold)
    y_perm, _ = scrambled_source_labels(ws.y, ws.subject, np.concatenate([tr, va]), "auto", seed=seed + ck.fold)
    train_fold(task=cfg.task, model=ck.model, regime=LP_FT.get(ck.regime, ck.regime), head=ck.head, fold=ck.fold,
               split=split, ws=ws, seed=int(cfg.seed), init_seed=run_init_seed(cfg, r),
               trainer_cfg=run_trainer(cfg, r), optim=run_optim(cfg, r), batch_size=fixed_batch_size(cfg.data),
               out_dir=folder, tag=tag, backbone_kwargs=r.backbone_kwargs, head_kwargs=head_kwargs_for(r, ck.head),
               lora=r.lora, pretrained=r.pretrained, y_train=y_perm, user_model=(cfg.user_models or {}).get(ck.model))
    return load_fold_model(best)


def run_attribution(config, *, args: Sequence[str] = (), progress: bool = True,
                    worker_units: Sequence[str] | None = None, wait: bool = True) -> dict:
    """``eegfm-bench attribute``: maps of every selected cv cell, fold, condition and method.

    With ``launcher: {kind: local | slurm}`` every :func:`attribution_unit` is one job; the parent then
    aggregates the per-fold maps it finds on disk into the topomaps and the checks table. ``worker_units`` runs
    only those units as a launcher's worker (rows as part files, per-fold maps, no aggregation) and returns
    ``{"failures": [], "skipped": [...]}``.

    Writes under ``<out_dir>/attribution/``: ``<cell>/<condition>/<method>/fold<k>.npz`` (normalised maps,
    channel maps, selection), ``maps.npz`` + ``topomap.png`` per cell/condition/method (class-averaged and
    per-class), ``overview_<condition>.png`` (all cells and methods), ``results.csv`` (rows: selected
    windows, conservation ratios, randomisation correlations) and ``checks.md`` (conservation and
    randomisation summary per model).

    Steps: read the config and the cv run, check every method and montage before anything runs
    (:func:`_check_methods_and_montages`), explain every fold checkpoint (:func:`_explain_checkpoint`; with a
    launcher, one job per unit), then aggregate the maps found on disk (:func:`_aggregate_maps`), summarise the
    checks (:func:`_checks_table`) and write the page.

    Parameters
    ----------
    config : path, dict or InterpretConfig
    args : sequence of str
        Dotted overrides.
    progress : bool
    worker_units : sequence of str, optional
        A launcher's worker: only these units.
    wait : bool
        When another process writes the same ``out_dir``: wait (default), or raise
        :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``; :func:`eegfm_bench.locks.out_dir_lock`).

    Returns
    -------
    dict
        Paths written and the summary table of the checks.
    """
    cfg = load_interpret_config(config, args)
    with out_dir_lock(cfg.out_dir, "attribute", wait=wait, enabled=worker_units is None and is_global_zero()):
        return _run_attribution(cfg, progress=progress, worker_units=worker_units)


def _run_attribution(cfg: InterpretConfig, *, progress: bool, worker_units: Sequence[str] | None) -> dict:
    """:func:`run_attribution`'s steps on its loaded config, under the out_dir's lock (a launcher's job and the DDP
    ranks > 0 take none: :func:`eegfm_bench.locks.out_dir_lock`)."""
    acfg, sel = cfg.attribution, cfg.select
    run = CVRun(cfg.cv_dir, cfg.cv_config)
    zero = is_global_zero()
    root = Path(cfg.out_dir) / "attribution"
    cks = run.checkpoints(sel.models, sel.regimes, sel.heads, sel.folds)
    _check_methods_and_montages(run, cks, acfg)
    worker = worker_units is not None
    store = ResultStore(root, write=zero, merge=not worker)
    chash = config_hash({"attribution": acfg.to_dict(), "trainer": hashable_trainer(cfg.trainer, inference=True)})
    code = code_version()
    skipped = []
    current: set[str] = set()  # config hashes of this run's rows: the checks table shows only these
    todo = cks
    if worker:
        todo = [ck for ck in cks if attribution_unit(ck) in set(worker_units)]
    elif cfg.launcher.kind != "none":
        skipped += _attribution_jobs(cfg, cks, root, progress=progress and zero)
        current |= {config_hash({"attribution": chash, "cv": ck.config_hash}) for ck in cks}
        store.merge()
        todo = []
    for ck in tqdm(todo, desc="attribution", disable=not (progress and zero), unit="fold"):
        check_stop()  # a stop request between two folds (:mod:`eegfm_bench.interrupt`); finished rows are kept
        current |= _explain_checkpoint(cfg, run, ck, root, store, chash, code, skipped, write=zero)
    if worker:
        return {"failures": [], "skipped": skipped}
    if not zero:
        return {}
    if skipped:
        atomic_write_text(root / "skipped.json", json.dumps(skipped, indent=1))
    paths: dict = {"results": store.csv, **_aggregate_maps(run, cks, acfg, root)}
    table = _checks_table(cfg, run, store, current, root)
    atomic_write_text(root / "checks.md", checks_markdown(table))
    atomic_write_text(root / "interpret.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False,
                                                         allow_unicode=True))  # the page's reproduce block names it
    atomic_write_text(root / "cells.json", json.dumps(sorted(current)))  # this run's hashes: what the page reads
    paths["checks"] = root / "checks.md"
    refresh(report_root(cfg.out_dir, run.dir), quiet=not progress)
    paths["checks_table"] = table
    return paths


def _check_methods_and_montages(run, cks: list, acfg: AttributionConfig) -> None:
    """Every method resolves for every selected model and every montage has positions, before any computation
    (MOABB-style) or any folder is made."""
    for ck in cks:
        for m in acfg.methods:
            resolve_method(m, ck.model, acfg.lrp_fallback)
    for model in sorted({ck.model for ck in cks}):
        check_positions(run.windows(model).ch_names)


def _attribution_jobs(cfg: InterpretConfig, cks: list, root: Path, *, progress: bool) -> list[dict]:
    """Every :func:`attribution_unit` of ``cks`` as a launcher job; the (cell, fold, condition)s the jobs skipped.

    Raises
    ------
    FailedCellsError
        A job failed (the finished units' rows and maps are kept).
    """
    got: dict = {}
    failures = run_jobs(cfg.launcher, worker_config(cfg), [attribution_unit(ck) for ck in cks], root,
                        progress=progress, kind="attribute", collect=got)
    if failures:
        raise FailedCellsError(f"{len(failures)} attribution job(s) failed (first: {failures[0]['cell']}: "
                               f"{failures[0]['error'][:300]}); the finished units' rows and maps are kept under "
                               f"{root}; fix the cause and rerun")
    return got.get("skipped", [])


def _explain_checkpoint(cfg: InterpretConfig, run, ck, root: Path, store, chash: str, code: str, skipped: list,
                        *, write: bool) -> set[str]:
    """The maps of one fold checkpoint under every condition and method: per-fold maps (``fold<k>.npz``) and rows
    (appended to ``store``); a condition that selects no window is logged and added to ``skipped``. Returns the
    config hashes of the rows written."""
    acfg = cfg.attribution
    ws = run.windows(ck.model)
    _, _, te = run.fold_indices(ws, ck.fold)
    clf = load_fold_model(ck.path)
    lab = label_randomised_model(run, ck, ws, root, int(acfg.seed)) if acfg.data_randomisation else None
    current = set()
    for condition in acfg.conditions:
        try:
            res = explain_fold(clf, ws, te, condition=condition, acfg=acfg, trainer=cfg.trainer,
                               label_randomised=lab)
        except NoWindowsSelectedError as err:
            log.warning("%s fold %d %s: %s", ck.cell, ck.fold, condition, err)
            skipped.append({"cell": ck.cell, "fold": ck.fold, "condition": condition, "reason": str(err)})
            continue
        base = {"experiment": run.experiment, "task": run.task, "model": ck.model, "init": ck.init,
                "regime": ck.regime, "head": ck.head, "fold": ck.fold, "seed": int(run.config.seed),
                "condition": condition, "n_subjects": int(np.unique(np.asarray(ws.subject)[te]).size),
                "fold_unit": run.group_by, "config_hash": config_hash({"attribution": chash, "cv": ck.config_hash}),
                "code_version": code, "checkpoint": str(ck.path)}
        rows = []
        for method, fm in res.items():
            if write:
                fm.save(root / ck.cell / cond_dir(condition) / method / f"fold{ck.fold}.npz")
            rows += fold_rows(base, fm)
        store.append(rows)
        current.add(base["config_hash"])
    return current


def _aggregate_maps(run, cks: list, acfg: AttributionConfig, root: Path) -> dict:
    """Per cell / condition / method: the per-fold maps found on disk averaged into ``maps.npz`` + ``topomap.png``;
    per condition an overview of every cell and method. Returns the paths written."""
    paths: dict = {}
    class_names = run.windows(cks[0].model).class_names
    for condition in acfg.conditions:
        rows_maps, names_map = {}, {}
        for cell in sorted({ck.cell for ck in cks}):
            for method in sorted({resolve_method(m, cell.split("-")[0], acfg.lrp_fallback) for m in acfg.methods}):
                agg = write_cell_maps(root / cell, method, condition, class_names,
                                      f"{cell} on {run.task}, {condition}: {method_label(method, cell.split('-')[0])}")
                if agg is None:
                    continue
                label = f"{cell}\n{method_label(method, cell.split('-')[0])}"
                rows_maps[label] = np.vstack([agg["class_averaged"][None], agg["per_class"]])
                names_map[label] = agg["ch_names"]
                paths[f"{cell}/{condition}/{method}"] = agg["png"]
        if rows_maps:
            paths[f"overview_{condition}"] = plot_topomap_grid(
                rows_maps, names_map, root / f"overview_{cond_dir(condition)}.png",
                col_titles=["class-averaged"] + list(class_names), cmap="Reds", shared_scale="row",
                unit="mean |R|", title=f"{run.task}, {condition}: attribution topomaps (App. I.1 selection)")
    return paths


def _checks_table(cfg: InterpretConfig, run, store, current: set[str], root: Path):
    """The sanity checks' summary (conservation, randomisation) of this run's rows, also logged to the trackers."""
    acfg = cfg.attribution.to_dict()
    df_all = store.load()
    table = checks_table(df_all[df_all["config_hash"].astype(str).isin(current)] if not df_all.empty else df_all)
    if not table.empty:
        log_summary(cfg.trainer, root, "attribution", {
            f"attribution/{r.model}-{r.regime}-{r.head}/{r.condition}/{r.metric}": r.mean for r in table.itertuples()},
            hparams={"cv_dir": str(run.dir), **{f"attribution.{k}": str(v) for k, v in acfg.items()}},
            experiment=run.experiment)
    return table
