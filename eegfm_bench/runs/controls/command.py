"""``eegfm-bench controls --config X.yaml``: the negative-control suite of paper 001 on one task.

For one task and a list of models, in the subject-grouped folds of a cv run (its ``splits.json``, when
``cv_out_dir`` points at one) or of a fresh split:

(a) **handcrafted comparators** — the simple (``9·N_ch + 2``) and enhanced (``15·N_ch + 6``) families (§3.4)
    through the frozen probe (logistic by default; LDA / SVM-RBF selectable, §3.5), window-level and, where the
    label is constant within a unit, unit-aggregated estimates, reported separately (§3.5);
(b) **frozen embeddings** of every model (token cache, mean-pooled or flattened) through the same probe, for the
    configured checkpoint and for matched fully random initialisations (same architecture, ``init_seeds``;
    Control 2, §4.2.2);
(c) **fine-tuned scores** of a cv run, read from its ``predictions/`` (e.g. EEGNet ``full``, LaBraM
    ``head_only``);
(d) **label permutation** (Control 3, §4.2.3) of each model's frozen probe and of the stronger handcrafted
    family, the whole probe refitted in each fixed fold, N permutations (default 100, scheme ``auto``);
(e) **scrambled-label adaptation** (Control 4, §4.2.4): LoRA / full fine-tuning on permuted source labels with
    the schedule, seeds and head of the correct-label run (:mod:`eegfm_bench.controls.adapt`);
(f) the **dataset-identity probe** (§4.4, Table 7) of two tasks' datasets on their shared channels, one unit per
    recording: AUROC in full space and after in-fold PCA-50, a permuted-label null and balanced subsamples;
(g) **paired uncertainty** (§4.6) of each model minus the stronger handcrafted family: subject-cluster bootstrap
    95 % CI, Wilcoxon across folds, sign-flip;
(h) the **four-gate report** (§3.6, §5.5) as JSON and Markdown (``gates.json``, ``gates.md``), with gate (iii)
    from the model catalogue's pretraining corpora against the task's dataset and its aliases
    (``Task.pretraining_aliases``), plus a full ``controls_report.md`` / ``.json``.

The command reads as: load the config, typed and final (the cv run's data selection and split taken;
:mod:`eegfm_bench.runs.controls.config`) -> build the shared context (windows, folds, unit level, probe, store) and
check everything cheap before the expensive steps -> run the steps (:mod:`eegfm_bench.runs.controls.steps`; Control 4
in :mod:`eegfm_bench.runs.controls.scrambled`) -> judge the gates (:mod:`eegfm_bench.runs.controls.gates`) -> write
the reports.

Resumable with the cv's rule (:mod:`eegfm_bench.runs.controls.store`): every unit of work writes long result rows
(:class:`eegfm_bench.results.ResultStore`, keyed by experiment, task, model, init, regime, head, fold, seed,
condition, metric and config hash) and its out-of-fold predictions or null distribution under ``out_dir``, in files
named with its config hash; a rerun loads those instead of recomputing, a changed config computes the units it
changes beside the old ones, and ``cells.json`` names the current units' hashes (the reports and the page show only
those). Handcrafted features and token caches are stored on disk too.

Config schema (``configs/experiment/controls_eegmat.yaml`` is a complete example)::

    experiment: controls_eegmat
    task: eegmat
    out_dir: results/controls_eegmat
    seed: 0
    cv_out_dir: null              # a cv run's out_dir: its splits.json, data settings and predictions are used
    trainer: {accelerator: auto, devices: 1, precision: 32-true}   # the frozen embeddings' Trainer.predict passes
    data:     {data_root, cache_dir, subjects, max_windows_per_subject, batch_size}
    split:    {scheme: kfold|loso, k, seed, n_val_groups, group_by: subject, folds}   # ignored with cv_out_dir
    features: {families: [simple, enhanced], preprocessing: {...} or a backbone name, welch_seconds: 2.0,
               study_summaries: true}
    probe:    {kind: logreg|lda|svm_rbf, C: null, pca: null, svm_probability: libsvm|calibrated,
               overrides: {frozen: {pca: 50}}}   # per representation: handcrafted | frozen | adapted
    metric: auroc                 # the gates' metric (balanced_accuracy is reported too)
    aggregate: auto               # auto | subject | recording | none (unit-level estimates, §3.5)
    models:   - {model: labram, pretrained: null, init_seeds: [0], pooling: mean, backbone_kwargs: {}}
    cv_claims: auto               # auto (every run x head of the cv run) | [] | [{model, regime, head}]
    permutation: {n: 100, scheme: auto, seed: 0, families: strongest}   # families: strongest | all | none
    bootstrap:   {n_boot: 2000, level: 0.95, seed: 0}
    scrambled: - {model: labram, regime: lora, head: mean, seeds: [0], scheme: auto, perm_seed: 0,
                  correct: auto, trainer: {...}, optim: {...}, backbone_kwargs: {...}, lora: {...}}
               # correct: cv reuses the matching cv run's predictions as the correct-label arm (its schedule and
               # seed; no overrides allowed), rerun trains both arms here; auto = cv when the cv run has the cell
    identity: {tasks: [eegmmidb_mi, eegmat], family: simple, n_folds: 5, pca_k: 50, n_permutations: 20,
               n_balanced: 10, C: 1.0, seed: 0, subjects: {task: [...]}, max_windows_per_subject: null}
    gates: {alpha: 0.05}
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.config import ConfigError
from eegfm_bench.controls.embeddings import align_rows, row_keys
from eegfm_bench.controls.gates import scrambled_label_contrast
from eegfm_bench.controls.identity import shared_channels
from eegfm_bench.controls.permutation import check_scheme, infer_scheme
from eegfm_bench.controls.probes import ProbeSpec, encode_labels
from eegfm_bench.data.splits import SplitConfigError, SplitSpec, make_split, save_or_verify
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.interrupt import check_stop
from eegfm_bench.locks import out_dir_lock
from eegfm_bench.reports.controls import controls_markdown, write_gate_report
from eegfm_bench.results import FailedCellsError
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.controls.config import init_label, load_run_config
from eegfm_bench.config.controls import ControlsConfig, ControlsScrambled
from eegfm_bench.runs.controls.gates import claim_gates, scrambled_interval
from eegfm_bench.runs.controls.scrambled import scrambled_arm
from eegfm_bench.runs.controls.steps import (Rep, ControlsContext, cv_claims, frozen_models, handcrafted, identity_control,
                                             load_task_windows, model_windows, paired_uncertainty, permutation_control, probe_result, score,
                                             write_json)
from eegfm_bench.runs.controls.store import ControlsStore
from eegfm_bench.runs.launch.launcher import run_jobs
from eegfm_bench.reports.page import refresh
from eegfm_bench.trainer import log_summary


def run_controls(config, *, args=(), progress: bool = True, worker_units=None, wait: bool = True) -> dict:
    """Run the negative-control suite of one config and write its report (paper 001 §3.6, §4, §5.5).

    Steps: load the config, typed and final, with the cv run's data settings and folds
    (:func:`~eegfm_bench.runs.controls.config.load_run_config`) -> build the shared context and refuse what cannot
    run before any heavy step (:func:`_build_context`,
    :func:`_check_model_windows`, :func:`_check_identity_channels`) -> the scrambled-label fits as launcher jobs
    (:func:`_launch_adaptations`) -> the steps (a)-(g) (:func:`_run_steps`) -> the gates and the reports
    (:func:`_write_reports`).

    Parameters
    ----------
    config : str, path, dict or ControlsConfig
        A controls YAML (see the module docstring), the dict it holds, or a loaded config (a launcher's worker).
    progress : bool
        Progress bars (feature chunks, token batches, permutations, adaptation fits).
    worker_units : list of str, optional
        A launcher's worker: train only these scrambled-label adaptation fits (rows as part files) and return
        ``{"failures": []}``. With ``launcher: {kind: local | slurm}`` the launching process submits every fit
        without rows as a job first, then runs the other steps itself and finds the fits done.
    wait : bool
        When another process writes the same ``out_dir``: wait (default), or raise
        :class:`~eegfm_bench.locks.OutDirBusyError` (``--no-wait``; :func:`eegfm_bench.locks.out_dir_lock`).

    Returns
    -------
    dict
        Paths of ``gates.json``, ``gates.md``, ``controls_report.md``, ``controls_report.json``, ``results.csv``,
        and ``wall_seconds``.

    Raises
    ------
    ConfigError
        Bad config values (before any data is read), too few subjects for the folds or for the within-fold
        bootstrap, a unit level the labels do not define.
    ValueError
        A permutation scheme that does not fit the labels (naming the one that does), two identity datasets
        without shared channels (listing each one's), features on too-short windows.
    SplitMismatchError
        The cv run's ``splits.json`` does not match these windows.
    RowAlignmentError, FileNotFoundError
        A backbone's windows or a cv run's predictions do not cover the feature windows.
    """
    t_start = time.time()
    cfg, cv_cfg = load_run_config(config, args)
    with out_dir_lock(cfg.out_dir, "controls", wait=wait, enabled=worker_units is None and is_global_zero()):
        return _controls(cfg, cv_cfg, t_start, progress=progress, worker_units=worker_units)


def _controls(cfg: ControlsConfig, cv_cfg: CVConfig | None, t_start: float, *, progress: bool,
              worker_units) -> dict:
    """:func:`run_controls`'s steps on its loaded config, under the out_dir's lock (a launcher's job takes none:
    :func:`eegfm_bench.locks.out_dir_lock`)."""
    out = Path(cfg.out_dir)
    worker = worker_units is not None
    out.mkdir(parents=True, exist_ok=True)
    if not worker:
        atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    ctx = _build_context(cfg, cv_cfg, out, progress=progress, merge=not worker)
    _check_model_windows(ctx)
    if worker:
        for entry in cfg.scrambled:
            scrambled_arm(ctx, entry, cv_cfg, units=set(worker_units))
        return {"failures": []}
    _launch_adaptations(ctx, cv_cfg, progress=progress)
    if cfg.identity is not None:
        _check_identity_channels(cfg, progress=progress)
    results = _run_steps(ctx, cv_cfg)
    return _write_reports(ctx, results, t_start, progress=progress)


# ========================================================================================= context and checks
def _build_context(cfg: ControlsConfig, cv_cfg: CVConfig | None, out: Path, *, progress: bool, merge: bool) -> ControlsContext:
    """The feature windows, their labels and subjects, the fixed folds (the cv run's ``splits.json`` or a fresh
    split, saved), the permutation scheme, the unit level, the probe and the store, checked before any heavy step.

    Raises
    ------
    ConfigError
        Too few subjects for the folds or for the within-fold bootstrap, a unit level the labels do not define.
    ValueError
        A permutation scheme that does not fit the labels.
    SplitMismatchError
        The cv run's ``splits.json`` does not match these windows.
    """
    task = cfg.resolved_task
    ws = load_task_windows(cfg, task, cfg.features.preprocessing, progress, subjects=cfg.data.subjects,
                  max_windows=cfg.data.max_windows_per_subject)
    y_idx, classes = encode_labels(ws.y)
    subjects = np.asarray(ws.subject).astype(str)
    split, spec, fold_ids, folds = _fixed_folds(cfg, cv_cfg, out, ws, subjects, task.name)
    n_test_subj = _check_bootstrap_folds(folds, subjects)
    scheme = cfg.permutation.scheme
    if scheme == "auto":
        scheme = infer_scheme(y_idx, subjects)  # raises when neither subject scheme fits
    check_scheme(y_idx, subjects, scheme)
    agg_level, agg_units = _unit_level(cfg.aggregate, y_idx, subjects, np.asarray(ws.recording).astype(str))
    pr = cfg.probe
    pspec = ProbeSpec(kind=pr.kind, C=pr.C, pca=pr.pca, cap_pca=pr.pca is not None, seed=42,
                      svm_probability=pr.svm_probability)
    store = ControlsStore(out, cfg.experiment, cfg.seed, spec.group_by, merge=merge)
    ctx = ControlsContext(cfg, out, task, ws, row_keys(ws.recording, ws.window_index), y_idx, classes, subjects, split, fold_ids,
               folds, agg_level, agg_units, scheme, pspec, store, progress)
    ctx.note(f"{len(ws)} windows, {np.unique(subjects).size} subjects, folds {fold_ids} (test subjects per fold "
             f"{n_test_subj}); permutation scheme {scheme}; unit level {agg_level or 'none'}")
    return ctx


def _fixed_folds(cfg: ControlsConfig, cv_cfg: CVConfig | None, out: Path, ws, subjects: np.ndarray, task_name: str):
    """``(split, spec, fold ids, [(train+val rows, test rows)])``: the split made from the config (the cv run's when
    ``cv_out_dir`` is set), verified against (or saved as) ``splits.json``, restricted to ``split.folds``.

    Raises
    ------
    ConfigError
        More folds than subjects, or too few subjects for the requested folds.
    """
    sp = cfg.split
    spec = SplitSpec(sp.scheme, sp.k, sp.seed, sp.n_val_groups, sp.group_by)
    groups = subjects if spec.group_by == "subject" else np.asarray(ws.recording).astype(str)
    n_subj = np.unique(subjects).size
    if spec.scheme == "kfold" and spec.k > n_subj:
        raise ConfigError(f"{n_subj} subjects for {spec.k} folds; fix: split.k <= {n_subj} (or add subjects)")
    try:
        split = make_split(ws.y, groups, spec, task_name)
    except SplitConfigError as err:
        raise ConfigError(f"too few subjects for the requested folds: {err}") from err
    split_path = Path(cfg.cv_out_dir) / "splits.json" if cv_cfg is not None else out / "splits.json"
    split = save_or_verify(split, split_path)
    if cv_cfg is not None:
        save_or_verify(split, out / "splits.json")
    fold_ids = list(sp.folds) if sp.folds is not None else list(range(len(split.folds)))
    folds = []
    for k in fold_ids:
        tr, va, te = split.indices(groups, k)
        folds.append((np.sort(np.concatenate([tr, va])), te))
    return split, spec, fold_ids, folds


def _check_bootstrap_folds(folds: list, subjects: np.ndarray) -> list[int]:
    """The paired tests need at least 2 folds, each testing >= 2 subjects (or exactly 1 each: leave-one-subject-out);
    returns the test subjects per fold.

    Raises
    ------
    ConfigError
        Otherwise (naming a split that works).
    """
    n_subj = np.unique(subjects).size
    n_test_subj = [np.unique(subjects[te]).size for _, te in folds]
    if not (all(n == 1 for n in n_test_subj) or all(n >= 2 for n in n_test_subj)):
        raise ConfigError(f"too few subjects for the paired within-fold bootstrap: test folds hold "
                          f"{n_test_subj} subjects (each needs >= 2, or exactly 1 for leave-one-subject-out); "
                          f"fix: split.k <= {n_subj // 2} for {n_subj} subjects, scheme: loso, or more subjects")
    if len(folds) < 2:
        raise ConfigError(f"{len(folds)} evaluated fold(s): paired tests across folds need at least 2; fix: "
                          "split.folds: null (all folds)")
    return n_test_subj


def _unit_level(agg: str, y_idx: np.ndarray, subjects: np.ndarray, recordings: np.ndarray):
    """``(level, unit per window)`` of the unit-level estimates (§3.5): ``auto`` picks subject, else recording,
    where every unit holds one label; ``(None, None)`` for none.

    Raises
    ------
    ConfigError
        A requested level whose units hold both classes.
    """
    const = {}
    for lv, u in (("subject", subjects), ("recording", recordings)):
        n_lab = pd.Series(y_idx).groupby(u).nunique()
        const[lv] = bool((n_lab == 1).all())
    if agg == "auto":
        agg = "subject" if const["subject"] else "recording" if const["recording"] else "none"
    elif agg != "none" and not const[agg]:
        raise ConfigError(f"aggregate: {agg} but some {agg}s hold both classes, so a {agg}-level outcome is "
                          "undefined (paper 001 §3.5); fix: aggregate: auto or none")
    agg_level = None if agg == "none" else agg
    agg_units = None if agg_level is None else (subjects if agg_level == "subject" else recordings)
    return agg_level, agg_units


def _check_model_windows(ctx: ControlsContext) -> None:
    """Every model's windows (frozen and scrambled-label) cover the feature windows: cheap, before the expensive
    steps (a :class:`~eegfm_bench.controls.embeddings.RowAlignmentError` names what is missing)."""
    for model in [m.model for m in ctx.cfg.models] + [s.model for s in ctx.cfg.scrambled]:
        ws_m = model_windows(ctx, model)
        align_rows(ctx.keys, row_keys(ws_m.recording, ws_m.window_index), f"{model} windows")


def _check_identity_channels(cfg: ControlsConfig, *, progress: bool) -> None:
    """The identity probe's two datasets share channels (the error names each dataset's channels)."""
    idc = cfg.identity
    ta, tb = cfg.resolved_identity
    wa = load_task_windows(cfg, ta, cfg.features.preprocessing, progress, subjects=(idc.subjects or {}).get(ta.name),
                  max_windows=idc.max_windows_per_subject)
    wb = load_task_windows(cfg, tb, cfg.features.preprocessing, progress, subjects=(idc.subjects or {}).get(tb.name),
                  max_windows=idc.max_windows_per_subject)
    shared_channels(wa.ch_names, wb.ch_names, (ta.dataset, tb.dataset))


def _launch_adaptations(ctx: ControlsContext, cv_cfg: CVConfig | None, *, progress: bool) -> None:
    """With ``launcher: local | slurm``: every scrambled-label fit without rows as one job, then their rows merged
    (the steps find the fits done).

    Raises
    ------
    FailedCellsError
        A job failed (the finished fits are kept).
    """
    cfg, out = ctx.cfg, ctx.out
    lc = cfg.launcher
    if lc.kind == "none":
        return
    todo = [u for entry in cfg.scrambled for u in scrambled_arm(ctx, entry, cv_cfg, list_units=True)["units"]]
    if todo:
        failures = run_jobs(lc, replace(cfg, launcher=replace(lc, kind="none")), todo, out, progress=progress,
                            kind="controls")
        ctx.store.merge()
        if failures:
            raise FailedCellsError(f"{len(failures)} scrambled-label adaptation job(s) failed (first: "
                                   f"{failures[0]['cell']}: {failures[0]['error'][:300]}); the finished fits are "
                                   f"kept under {out}; fix the cause and rerun")
    ctx.note(f"launcher {lc.kind}: {len(todo)} scrambled-label adaptation fits as jobs")


# ================================================================================================== steps
@dataclass
class _Results:
    """What the steps found, for the gates and the reports."""

    hand: dict
    hand_X: dict
    strongest: str
    frozen: dict
    frozen_X: dict
    cv_reps: list
    scrambled: list
    paired: dict
    perms: dict
    identity: dict | None


def _run_steps(ctx: ControlsContext, cv_cfg: CVConfig | None) -> _Results:
    """The suite's steps in order: (a) handcrafted, (b) frozen embeddings, (c) cv claims, (e) scrambled-label
    adaptation, (g) each claim minus the stronger family, (d) permutations, (f) identity."""
    cfg = ctx.cfg
    metric = cfg.metric
    hand, hand_X = handcrafted(ctx)
    strongest = max(hand, key=lambda f: score(hand[f], metric))
    ctx.note(f"stronger handcrafted family: {strongest} ({score(hand[strongest], metric):.4f})")
    check_stop()  # between two steps, a stop request (:mod:`eegfm_bench.interrupt`); each step's rows are kept
    frozen, frozen_X = frozen_models(ctx)
    check_stop()
    cv_reps = cv_claims(ctx, cv_cfg)
    check_stop()
    scrambled = [_scrambled_entry(ctx, entry, cv_cfg) for entry in cfg.scrambled]
    paired = {r.name: paired_uncertainty(ctx, r, hand[strongest], strongest) for r in _claims(frozen, cv_reps, scrambled)}
    check_stop()
    perms = _permutations(ctx, hand, hand_X, strongest, frozen, frozen_X)
    check_stop()
    identity = identity_control(ctx) if cfg.identity is not None else None
    return _Results(hand, hand_X, strongest, frozen, frozen_X, cv_reps, scrambled, paired, perms, identity)


def _scrambled_entry(ctx: ControlsContext, entry: ControlsScrambled, cv_cfg: CVConfig | None) -> dict:
    """Control 4 for one entry: both arms (:func:`~eegfm_bench.runs.controls.scrambled.scrambled_arm`), a
    representation per arm (the seeds' mean probabilities), the correct − scrambled contrast and gate (iv)'s paired
    interval; the per-seed probabilities are dropped after."""
    cfg = ctx.cfg
    s = scrambled_arm(ctx, entry, cv_cfg)
    arm_hashes = s.pop("arm_hashes")
    for lab in ("correct", "scrambled"):
        first = s["runs"][lab][int(s["seeds"][0])]
        proba = first["proba"] if len(s["seeds"]) == 1 else np.mean(
            [v["proba"] for v in s["runs"][lab].values()], axis=0)
        user = cfg.user_models.get(entry.model)
        init = init_label(cfg, entry.model, "declared") if user and user.get("pretrained") else \
            f"pretrained:{entry.pretrained}" if entry.pretrained else "random"
        rep = Rep(f"{entry.model}-{entry.regime}-{entry.head} ({lab} labels)", entry.model, init, entry.regime,
                  entry.head, f"adaptation ({lab} labels)", proba, probe_result(ctx, proba), int(s["seeds"][0]),
                  chash=arm_hashes[lab])
        s["rep" if lab == "correct" else "rep_scrambled"] = rep
    s["contrast"] = scrambled_label_contrast([v["score"] for v in s["runs"]["correct"].values()],
                                             [v["score"] for v in s["runs"]["scrambled"].values()])
    scrambled_interval(ctx, s)  # gate (iv)'s paired interval, from the per-seed predictions (dropped next)
    for lab in ("correct", "scrambled"):
        for v in s["runs"][lab].values():
            v.pop("proba")
    return s


def _claims(frozen: dict, cv_reps: list, scrambled: list) -> list:
    """The claims compared with the stronger family: each frozen model's configured checkpoint (else its first
    random init), the cv claims, and the scrambled-label entries' correct arms the cv run does not claim."""
    claims = []
    for model, by_init in frozen.items():
        claims.append(by_init.get("pretrained") or next(r for lab, r in by_init.items() if lab.startswith("random")))
    claims += cv_reps
    claims += [s["rep"] for s in scrambled if not any((r.model, r.regime, r.head) == (s["model"], s["regime"], s["head"])
                                                      for r in cv_reps)]
    return claims


def _permutations(ctx: ControlsContext, hand: dict, hand_X: dict, strongest: str, frozen: dict, frozen_X: dict) -> dict:
    """Label permutation of each model's claim probe and of the handcrafted families ``permutation.families``
    names: ``{representation name: result}``."""
    perms = {}
    for model, by_init in frozen.items():
        lab = "pretrained" if "pretrained" in by_init else next(lab for lab in by_init if lab.startswith("random"))
        perms[by_init[lab].name] = permutation_control(ctx, by_init[lab], frozen_X[model][lab])
    fams = {"strongest": [strongest], "all": list(hand), "none": []}[ctx.cfg.permutation.families]
    for f in fams:
        perms[hand[f].name] = permutation_control(ctx, hand[f], hand_X[f])
    return perms


# ================================================================================================ reports
def _write_reports(ctx: ControlsContext, r: _Results, t_start: float, *, progress: bool) -> dict:
    """(h) the gates (``gates.json`` / ``.md``), ``controls_report.md`` / ``.json``, the trackers' summary and the
    experiment's page; returns their paths and the wall time."""
    cfg, out = ctx.cfg, ctx.out
    gate_reports, gate_context = claim_gates(ctx, r.hand, r.frozen, r.cv_reps, r.perms, r.paired, r.scrambled)
    write_gate_report(gate_reports, out / "gates.json", out / "gates.md")
    seconds = time.time() - t_start
    md = controls_markdown(ctx, r.hand, r.frozen, r.cv_reps, r.perms, r.paired, r.scrambled, r.identity, gate_reports,
                           gate_context, seconds)
    atomic_write_text(out / "controls_report.md", md)
    summary = _summary(ctx, r, gate_reports, gate_context, seconds)
    write_json(out / "controls_report.json", summary)
    ctx.store.write_index(out / "cells.json")  # the current units' hashes: the rows the page reads
    log_summary(cfg.trainer, out, "controls", {
        f"controls/{name}/{k}": float(np.nanmean(v)) for name, s in summary["scores"].items()
        for k, v in s.items() if isinstance(v, list) and v}, experiment=cfg.experiment)
    refresh([out], quiet=not progress)
    return {"gates_json": out / "gates.json", "gates_md": out / "gates.md", "report_md": out / "controls_report.md",
            "report_json": out / "controls_report.json", "results": out / "results.csv", "wall_seconds": seconds}


def _summary(ctx: ControlsContext, r: _Results, gate_reports: list, gate_context: list, seconds: float) -> dict:
    """``controls_report.json``: the run's settings, every representation's per-fold scores, the paired
    comparisons, permutations (without their null draws), scrambled-label entries, identity, gates and notes."""
    cfg, task, ws = ctx.cfg, ctx.task, ctx.ws
    return {
        "experiment": cfg.experiment, "task": task.name, "dataset": task.dataset, "n_windows": len(ws),
        "n_subjects": int(np.unique(ctx.subjects).size), "folds": ctx.fold_ids, "permutation_scheme": ctx.scheme,
        "unit_level": ctx.agg_level, "metric": cfg.metric, "stronger_family": r.strongest,
        "scores": {rep.name: {"source": rep.source, "init": rep.init, "regime": rep.regime, "head": rep.head,
                              **{f"{m}_{lv}": rep.result.fold_values(m, lv).tolist()
                                 for m in ("auroc", "balanced_accuracy") for lv in rep.result.levels}}
                   for rep in list(r.hand.values()) + [x for dd in r.frozen.values() for x in dd.values()] + r.cv_reps
                   + [s[k] for s in r.scrambled for k in ("rep", "rep_scrambled")]},
        "paired": r.paired,
        "permutation": {k: {kk: vv for kk, vv in v.items() if kk != "null"} for k, v in r.perms.items()},
        "scrambled": [{k: v for k, v in s.items() if k not in ("rep", "rep_scrambled")} for s in r.scrambled],
        "identity": r.identity, "gates": [g.to_dict() for g in gate_reports], "gate_context": gate_context,
        "notes": ctx.log, "wall_seconds": seconds}


__all__ = ["run_controls"]
