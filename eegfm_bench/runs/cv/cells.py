"""``eegfm-bench cv``: every fold × model × head × regime of one task, result rows, summary table.

The config (YAML files plus dotted overrides, typed by :class:`CVConfig`; see
``configs/experiment/quickstart.yaml``)::

    experiment: quickstart          # name recorded in every row
    task: eegmmidb_mi
    out_dir: results/quickstart     # results.csv/.parquet, splits.json, config.yaml, checkpoints/, logs/
    seed: 0
    data:    {data_root, cache_dir, subjects, max_windows_per_subject, batch_size, num_workers}
    split:   {scheme: kfold|loso, k, seed, n_val_groups, group_by: subject|recording, folds: [0, 1] or null}
    trainer: {any lightning.Trainer argument (max_epochs, devices, strategy, precision, ...), patience, loggers}
    optim:   {lr, weight_decay, warmup_epochs}
    runs:    - {model, regime, heads: [...], pretrained, init_seed, backbone_kwargs, head_kwargs, lora,
                optim: {...}, trainer: {...}}

Each cell (run × head × fold) is trained with early stopping on validation balanced accuracy and tested with
its best checkpoint, both through :func:`~eegfm_bench.trainer.build_trainer`; a head-only cell first fills
the token cache with ``Trainer.predict`` (:func:`~eegfm_bench.models.features.extract_features`).

**Results are keyed by the cell's config hash** (:func:`cell_hash`: the model, head, regime, optimiser, the
trainer settings that change training, the data and its preprocessing, the split and the seed). A rerun skips a
cell only when rows with its current hash exist; a changed config retrains the cell and its new rows are stored
*beside* the old ones under their own hash (checkpoints and predictions too: ``<run>-<hash>/``), so nothing is
overwritten and changing a setting back finds the earlier cells again. The summary table, the sweep, the
probes and the attribution read only the rows of the current config. ``force=True`` (``--force``) retrains and
replaces the rows of the current hash.

**DDP** (``trainer: {devices: N, strategy: ddp}``): the command runs on every rank (Lightning re-executes it per
device); test predictions are gathered across ranks with the sampler's padding removed (each test window exactly
once), and only rank 0 writes rows, predictions, the summary and every other file.
"""
from __future__ import annotations

import inspect
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from lightning.pytorch.tuner import Tuner
from tqdm.auto import tqdm

from eegfm_bench.atomic import unique_tmp
from eegfm_bench.config import (INTRA_OP_THREADS, ConfigError, check_section, check_trainer_section,
                                load_typed, typed)
from eegfm_bench.data.datamodule import EEGDataModule
from eegfm_bench.data.splits import SplitSpec, make_split, save_or_verify
from eegfm_bench.data.tasks import get_task, resolve_task_path
from eegfm_bench.data.windows import WindowPreprocessing, load_window_sets, resolve_preprocessing
from eegfm_bench.distributed import is_global_zero
from eegfm_bench.models.adaptation import check_lora_section, check_regime
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.base import ChannelContractError
from eegfm_bench.models.closed_form import CLOSED_FORM, closed_form_head
from eegfm_bench.models.heads import HEADS
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.models.user import (UserModelError, user_model_config, check_user_model, hashable_user_spec,
    register_user_models)
from eegfm_bench.config.user_model import UserModelConfig
from eegfm_bench.results import Cell, config_hash
from eegfm_bench.runs.cv.confound_config import check_confound, resolve_confound
from eegfm_bench.runs.launch.launcher import check_launcher
from eegfm_bench.trainer import build_trainer, check_trainer, hashable_trainer
from eegfm_bench.config.cv import (cv_parser, DataConfig, OptimConfig, RunConfig, CVConfig, ResolvedPreprocessing,
                                   preprocessing_inputs)



def compiled(model, spec):
    """``model`` with its ``forward`` (backbone tokens → head) compiled by ``torch.compile(**spec)`` for ``compile:
    true | {kwargs}``. Only the forward: compiling the whole LightningModule would trace the torchmetrics updates of
    its steps too (dynamo fails on torchmetrics' optional-import checks). Weights, checkpoints and hyper-parameters
    are the uncompiled module's."""
    if not spec:
        return model

    model.forward = torch.compile(model.forward, **({} if spec is True else dict(spec)))
    return model


LP_FT = {"lp_ft": "full", "lp_lora": "lora"}
"""LP-FT regimes (linear probe first, then fine-tuning from that head) and the regime of their second stage."""

TOKEN_REGIMES = ("head_only", *LP_FT)
"""Regimes whose cells read the frozen backbone's cached ``tokens`` (LP-FT's first stage too)."""

AUTO_MARGIN = 0.05
"""Fraction the batch-size finder takes off the largest size that fitted (headroom for memory fragmentation)."""

AUTO_INFERENCE_BATCH = 64
"""Windows per forward of the inference passes (token cache, dry runs) when ``batch_size: auto`` (the batch size of
a forward without gradients changes no number; only training batches are searched)."""


def fixed_batch_size(data: DataConfig, fallback: int = AUTO_INFERENCE_BATCH) -> int:
    """``data.batch_size`` as a number: the configured one, or ``fallback`` when it is ``auto``."""
    b = data.batch_size
    return int(fallback if b == "auto" else b)


def find_batch_size(model, dm, tr: dict, cap: int) -> int:
    """The largest training batch that fits on the device: Lightning's ``Tuner.scale_batch_size`` (binary search,
    3 optimiser steps per trial, parameters restored afterwards) capped at ``cap`` windows, less Lightning's safety
    margin (:data:`AUTO_MARGIN`, 5 %: a cap of 12 gives 11).

    On a CPU nothing runs out of memory, so the search ends at the cap; use it on GPUs (e.g. with
    ``configs/trainer/h100_bf16.yaml``). The search consumes random numbers; the caller reseeds before the fit.

    Returns
    -------
    int
        The batch size (per device), ``<= cap``.
    """
    t = build_trainer({**tr, "enable_progress_bar": False}, loggers=False)
    init = int(min(cap, int(dm.hparams.batch_size)))
    dm.hparams.batch_size = init
    found = Tuner(t).scale_batch_size(model, datamodule=dm, mode="binsearch", init_val=init, max_val=int(cap),
                                      steps_per_trial=3, max_trials=25, margin=AUTO_MARGIN)
    return int(min(cap, found or init))


def check_user_model_on_data(name: str, spec: dict, ws, checked: set, progress: bool = True) -> None:
    """A user model on the data's montage, once per model before any cell trains: its declared weights load
    strictly (so a wrong architecture stops here, not in every cell), and with ``channels.kind: names`` the data's
    channels it leaves out are said.

    Raises
    ------
    ConfigError
        The weights do not load on this montage (naming why).
    """
    if name in checked:
        return
    checked.add(name)
    um = typed(UserModelConfig, user_model_config(dict(spec), name))
    if um.channels.kind == "names" and progress:
        keep = {c.lower() for c in um.channels.names}
        left = [c for c in ws.ch_names if c.lower() not in keep]
        if left:
            tqdm.write(f"user model {name} reads its {len(um.channels.names)} declared channels (channels.kind: "
                       f"names), in their order; the data's other {len(left)} channels are not given to it: {left}")
    if um.pretrained:
        try:
            BACKBONES.get(name)(list(ws.ch_names), int(ws.n_times), 2)
        except UserModelError as err:
            raise ConfigError(f"user model {name} on the data's {len(ws.ch_names)} channels: {err}") from None


def shared_batch_size(out: Path, key: str, compute) -> tuple[int, bool]:
    """The ``batch_size: auto`` of one run × head, found once per cv out_dir and device and shared by every fold,
    worker and rerun: ``<out>/batch_size_auto/<key>@<device>.json`` (``key`` carries the cell's config hash).

    The first process to finish ``compute()`` publishes its size atomically (a hard link, which fails when the file
    exists); a launcher's workers that searched at the same time take the published size instead of their own, so
    every fold of the cell trains with one batch size.

    Returns
    -------
    size : int
    found_here : bool
        Whether this process ran the search.
    """
    device = torch.cuda.get_device_name(0).replace(" ", "_") if torch.cuda.is_available() else "cpu"
    path = Path(out) / "batch_size_auto" / f"{key}@{device}.json"
    if path.is_file():
        return int(json.loads(path.read_text())["batch_size"]), False
    size = int(compute())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = unique_tmp(path)
    tmp.write_text(json.dumps({"batch_size": size, "device": device, "key": key}))
    try:
        os.link(tmp, path)
        return size, True
    except FileExistsError:
        return int(json.loads(path.read_text())["batch_size"]), False
    finally:
        tmp.unlink(missing_ok=True)




def load_config(source, args: Sequence[str] = ()) -> CVConfig:
    """Read a cv config (YAML path, mapping or :class:`CVConfig`, plus dotted overrides), fill defaults, validate
    every name and return it typed and frozen.

    Each run's ``optim`` / ``trainer`` overrides are checked against the same schema, and every run's merged
    trainer settings against this machine (:func:`~eegfm_bench.trainer.check_trainer`), before any data is read.

    Raises
    ------
    ConfigError, UnknownNameError
        Naming the bad key or value, the close matches and the fix.
    """
    task: list = [None]

    def prepare(raw: dict) -> dict:  # the parsing step: a task path next to its config, the confound defaults
        if isinstance(source, (str, Path)):
            raw["task"] = resolve_task_path(raw["task"], Path(source).parent)
        task[0] = get_task(raw["task"])  # the cv's one resolution of its task: cfg.resolved_task
        raw["confound"] = resolve_confound(raw.get("confound"), task[0].spec)
        return raw

    # a CVConfig (a launcher's worker) is parsed again, so its user models register in the worker too
    cfg = load_typed(cv_parser(), CVConfig, source, args, prepare=prepare)
    cfg = replace(cfg, resolved_task=task[0], runs=[replace(run, optim=check_section(run.optim, OptimConfig, f"runs[{i}].optim") or None,
                                     trainer=check_trainer_section(run.trainer, f"runs[{i}].trainer") or None)
                             for i, run in enumerate(cfg.runs)])
    _check_cv(cfg)
    return replace(cfg, resolved_preprocessing=_resolve_preprocessing(cfg))


def _check_cv(cfg: CVConfig) -> None:
    """The checks of a typed cv config that need no data: the task, the output folder, the trainer and launcher,
    user models (one batch through each), every run (:func:`_check_run`) and its window preprocessing, the confound
    section (its offset leaves every model a window), the batch size.

    Raises
    ------
    ConfigError, UnknownNameError
    """
    task = cfg.resolved_task  # validated by the loader, before any data is read
    if task.class_names and len(task.class_names) < 2:
        raise ConfigError(f"task {task.name!r} has one class ({list(task.class_names)}): nothing to classify; fix: "
                          "list every class in `classes:` and map each to its events or labels")
    check_out_dir(cfg.out_dir, "out_dir")
    if int(cfg.intra_op_threads) < 1:
        raise ConfigError(f"intra_op_threads = {cfg.intra_op_threads}; fix: a whole number >= 1 (the default is "
                          f"{INTRA_OP_THREADS}: the same numbers on every machine)")
    if not cfg.runs:
        raise ConfigError("the config lists no runs; add e.g. `runs: [{model: eegnet, regime: full, heads: [flatten]}]`")
    check_trainer(cfg.trainer, "trainer")
    check_launcher(cfg.launcher, trainer=cfg.trainer)
    if cfg.user_models:
        register_user_models(cfg.user_models)
        used = {r.model for r in cfg.runs}
        for name, spec in cfg.user_models.items():  # one batch through each, before any data is read
            if name in used:
                check_user_model(name, spec, lora=any(r.model == name and r.regime in ("lora", "lp_lora")
                                                      and not (r.lora or {}).get("target_modules") for r in cfg.runs))
    for i, run in enumerate(cfg.runs):
        _check_run(cfg, run, i)
    check_confound(cfg.confound, task.spec)
    _check_offset_windows(cfg)
    _check_batch_size(cfg)


def _check_offset_windows(cfg: CVConfig) -> None:
    """The confound check's ``offset`` variations leave every model a window (it keeps the window's end, so the
    window is ``offset_s`` shorter: :func:`~eegfm_bench.data.windows.resolve_preprocessing`), checked before the
    headline trains.

    Raises
    ------
    ConfigError
        An offset at or past the end of some model's window (naming the model and the fix).
    """
    cc = cfg.confound
    if cc is None or not cc.enabled or cc.keep_length or not any("offset" in v.split("+") for v in cc.variations):
        return
    for run in cfg.runs:
        try:
            resolve_preprocessing(cfg.resolved_task, BACKBONES.get(run.model).preprocessing, shorten_s=cc.offset_s,
                                  model=run.model)
        except ConfigError as err:
            raise ConfigError(f"confound: the offset variation of {run.model}: {err}") from None


def _check_run(cfg: CVConfig, run: RunConfig, i: int) -> None:
    """One run's model, regime, heads, head / LP-FT / LoRA settings and merged trainer settings.

    Raises
    ------
    ConfigError, UnknownNameError
    """
    BACKBONES.get(run.model)
    if run.regime not in LP_FT:
        check_regime(run.regime)
    if run.regime in ("lora", "lp_lora") and not BACKBONES.get(run.model).lora_targets \
            and not (run.lora or {}).get("target_modules"):
        raise ConfigError(f"runs[{i}]: {run.model} declares no lora_targets (a supervised baseline trained "
                          "from scratch); fix: use regime `full` for it, or give `lora: {target_modules: [...]}`")
    for h in run.heads:
        cf = closed_form_head(h)
        if cf is None:
            HEADS.get(h)
        elif run.regime != cf.regime:
            raise ConfigError(f"runs[{i}]: the {h} head is a closed-form probe of frozen tokens; fix: regime "
                              f"{cf.regime} for it (got {run.regime})")
    check_head_kwargs(run, i)
    bad_lp = sorted(set(run.lp_ft or {}) - {"lp_max_epochs"})
    if bad_lp or (run.lp_ft and run.regime not in LP_FT):
        raise ConfigError(f"runs[{i}].lp_ft: {'unknown keys ' + str(bad_lp) if bad_lp else 'set but the regime is '}"
                          f"{'' if bad_lp else run.regime}; fix: lp_ft: {{lp_max_epochs: N}} with regime lp_ft "
                          "or lp_lora")
    if run.lora:
        check_lora_section(run.lora, f"runs[{i}].lora")
    if run.trainer:
        check_trainer(run_trainer(cfg, run), f"runs[{i}].trainer")


def _check_batch_size(cfg: CVConfig) -> None:
    """``data.batch_size`` / ``max_batch_size`` whole numbers >= 1, and ``auto`` only on one device.

    Raises
    ------
    ConfigError
    """
    d = cfg.data
    if d.batch_size != "auto" and int(d.batch_size) < 1 or int(d.max_batch_size) < 1:
        raise ConfigError(f"data.batch_size = {d.batch_size}, data.max_batch_size = {d.max_batch_size}; fix: "
                          "whole numbers >= 1 (or batch_size: auto)")
    if d.batch_size != "auto":
        return
    for i, run in enumerate(cfg.runs):
        tr = run_trainer(cfg, run)
        dev, strat, nodes = tr.get("devices", 1), str(tr.get("strategy") or "auto"), int(tr.get("num_nodes") or 1)
        if (dev not in (1, "1", "auto") and not (isinstance(dev, list) and len(dev) == 1)) or nodes > 1 \
                or strat.startswith(("ddp", "fsdp", "deepspeed")):
            raise ConfigError(f"data.batch_size: auto runs Lightning's batch-size finder, which does not support "
                              f"distributed training (runs[{i}] trains with devices={dev}, strategy={strat}, "
                              f"num_nodes={nodes}); fix: find it once with --trainer.devices 1 (the size is in "
                              "the rows, metric batch_size) and set data.batch_size to it")


def check_out_dir(path, where: str) -> None:
    """Refuse, before any data is read, an output folder that cannot be created or written (nothing is created).

    Raises
    ------
    ConfigError
        ``path`` is a file, or its nearest existing parent is not a writable folder; the message names the fix.
    """
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{where} {path} is a file, not a folder; fix: --{where} a folder path")
    parent = p
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{where} {path} cannot be created: {parent} is a file; fix: --{where} another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where} {path} cannot be {'written' if parent == p else 'created'}: {parent} is not "
                          f"writable; fix: --{where} a folder you can write to")


def cv_defaults() -> dict:
    """The default ``trainer`` and ``optim`` sections of a cv config (resolved), as mappings."""
    cfg = load_typed(cv_parser(), CVConfig, {"runs": [{"model": "eegnet"}]})
    return {"trainer": dict(cfg.trainer), "optim": cfg.optim.to_dict()}


def run_trainer(cfg: CVConfig, run: RunConfig) -> dict:
    """The trainer settings of one run: the config's ``trainer`` with the run's overrides (``lightning.Trainer``
    arguments plus ``patience`` and ``loggers``, a mapping for :func:`~eegfm_bench.trainer.build_trainer`)."""
    return {**cfg.trainer, **(run.trainer or {})}


def run_optim(cfg: CVConfig, run: RunConfig) -> dict:
    """The optimiser settings of one run: ``lr``, ``weight_decay``, ``warmup_epochs`` (the keyword arguments of
    :class:`~eegfm_bench.models.module.FMClassifier`)."""
    return {**cfg.optim.to_dict(), **(run.optim or {})}


def cell_hash(cfg: CVConfig, run: RunConfig, head: str, data_key: str | None) -> str:
    """The config hash of one cell (all its folds): everything that changes its numbers.

    Hashes the model, regime and head with the run's pretrained id, init seed, architecture / head / LoRA
    settings, the optimiser, the trainer settings that change training
    (:func:`~eegfm_bench.trainer.hashable_trainer`: devices and precision included, progress bars and
    loggers not), the data selection and batch size, the window set's cache key (files, their sizes and times, the
    preprocessing), the split, the seed, ``intra_op_threads`` when it is not the default (rows computed before
    the setting existed keep their hashes) and ``data.feature_dtype`` when it is not float32 and the cell reads
    cached tokens (:data:`TOKEN_REGIMES`). Not hashed: paths (``data_root``, ``cache_dir``, ``out_dir``),
    ``num_workers``, ``data.n_jobs`` (the windows do not depend on it), the run's other heads; a user model's ``lrp`` and ``pretraining_corpora`` (they change no number). A ``ridge``
    cell (closed form on the cached tokens) hashes neither the optimiser, the batch size nor the training-only
    trainer settings: only those an inference pass depends on (``precision``, ``inference_mode``,
    ``deterministic``), so changing the schedule of the other cells does not retrain it.
    """
    d = cfg.data
    closed_form = closed_form_head(head) is not None  # trains no batch: optimiser, schedule, batch size change nothing
    user = (cfg.user_models or {}).get(run.model)
    blob = {"task": cfg.task, "model": run.model, "regime": run.regime, "head": head,
            "pretrained": run.pretrained, "init_seed": run_init_seed(cfg, run),
            "backbone_kwargs": run.backbone_kwargs, "head_kwargs": head_kwargs_for(run, head), "lora": run.lora,
            **({"lp_ft": run.lp_ft} if run.lp_ft else {}),
            **({} if closed_form else {"optim": run_optim(cfg, run)}),
            "trainer": hashable_trainer(run_trainer(cfg, run), inference=closed_form),
            **({"user_model": hashable_user_spec(user)} if user else {}),
            "data": {"subjects": d.subjects, "max_windows_per_subject": d.max_windows_per_subject,
                     **({} if closed_form else {"batch_size": d.batch_size}), "windows": data_key},
            "split": {k: v for k, v in cfg.split.to_dict().items() if k != "folds"}, "seed": cfg.seed,
            **({"intra_op_threads": int(cfg.intra_op_threads)} if int(cfg.intra_op_threads) != INTRA_OP_THREADS
               else {}),
            **({"feature_dtype": d.feature_dtype} if d.feature_dtype != "float32" and run.regime in TOKEN_REGIMES
               else {})}
    return config_hash(blob)


def head_kwargs_for(run: RunConfig, head: str) -> dict | None:
    """The ``head_kwargs`` of one head of a run: per head when every key names a head (``{mlp: {hidden: [256]},
    ridge: {alphas: [...]}}``), else the run's one mapping for all its heads (``None`` when unset)."""
    hk = run.head_kwargs
    if hk and set(hk) <= set(HEADS.names()) | set(CLOSED_FORM.names()) and all(isinstance(v, dict) or v is None for v in hk.values()):
        return hk.get(head) or None
    return hk


def takes_any_token_count(run: RunConfig, head: str) -> bool:
    """Whether ``head`` of ``run``, as the cell builds it (a closed-form head: its carrier), takes any number of
    tokens (:meth:`~eegfm_bench.models.heads.PoolingHead.takes_any_token_count`): what decides whether a sweep's
    channel-removal conditions apply to the cell."""
    built = head_args(run, head)
    return HEADS.get(built["head"]).takes_any_token_count(**(built["head_kwargs"] or {}))


def head_args(run: RunConfig, head: str) -> dict:
    """The ``head`` and ``head_kwargs`` a cell's :class:`~eegfm_bench.models.module.FMClassifier` is built with: the
    head and its settings, or for a closed-form head (:func:`~eegfm_bench.models.closed_form.closed_form_head`) its
    carrier without settings (the solution fills the carrier's weights; its settings are the solver's)."""
    cf = closed_form_head(head)
    if cf is not None:
        return {"head": cf.carrier, "head_kwargs": None}
    return {"head": head, "head_kwargs": head_kwargs_for(run, head)}


def check_head_kwargs(run: RunConfig, i: int) -> None:
    """Every head of a run takes its ``head_kwargs`` (checked before any data is read).

    Raises
    ------
    ConfigError
        A key that is not an argument of that head, naming the head's arguments and the per-head form.
    """
    for h in run.heads:
        kw = head_kwargs_for(run, h) or {}
        cf = closed_form_head(h)
        valid = set(cf.settings) if cf else set(inspect.signature(HEADS.get(h).__init__).parameters) - {
            "self", "n_tokens", "d_model", "n_classes"}
        bad = sorted(set(kw) - valid)
        if bad:
            raise ConfigError(f"runs[{i}].head_kwargs {bad} are not settings of the {h} head (it takes "
                              f"{sorted(valid) or 'none'}); fix: per-head settings, e.g. head_kwargs: "
                              "{mlp: {hidden: [256]}, ridge: {alphas: [0.1, 1, 10]}}")


def run_init_seed(cfg: CVConfig, run: RunConfig) -> int:
    """The seed of a run's architecture initialisation: its ``init_seed``, else the config's ``seed``."""
    return int(run.init_seed if run.init_seed is not None else cfg.seed)


def _resolve_preprocessing(cfg: CVConfig) -> ResolvedPreprocessing:
    """The cv's one resolution of every run's window preprocessing
    (:func:`~eegfm_bench.data.windows.resolve_preprocessing`: the model's declared preprocessing, then the task's
    ``window_s`` / ``reference``, then the config's ``data.band`` / ``data.window_shorten_s``), carried as
    ``cfg.resolved_preprocessing``.

    Raises
    ------
    ConfigError
        A band that leaves nothing of a model's (``lo >= hi`` after the intersection), or a window shortened to
        nothing.
    """
    d = cfg.data
    return ResolvedPreprocessing(preprocessing_inputs(cfg), {
        m: resolve_preprocessing(cfg.resolved_task, BACKBONES.get(m).preprocessing, band=d.band,
                                 shorten_s=d.window_shorten_s, model=m)
        for m in dict.fromkeys(run.model for run in cfg.runs)})


def model_preprocessing(cfg: CVConfig, model: str) -> WindowPreprocessing:
    """The preprocessing of ``model``'s windows in this cv, as :func:`load_config` resolved it
    (``cfg.resolved_preprocessing``); the window cache, the cells, the sweep and ``plan`` read it.

    Raises
    ------
    ConfigError
        ``cfg`` carries no preprocessing for ``model``: it was not read by :func:`load_config`, its task, user
        models, ``data.band`` or ``data.window_shorten_s`` were replaced after loading (or its runs, by runs naming
        another model), or no run names ``model``.
    """
    carried = cfg.resolved_preprocessing
    if carried is None or model not in carried.by_model:
        why = ("it carries none: not read by load_config, or its task, user models, data.band or "
               "data.window_shorten_s were replaced after loading, or runs naming another model" if carried is None
               else f"no run names it (runs: {sorted(carried.by_model)})")
        raise ConfigError(f"no window preprocessing resolved for {model!r} in this cv config: {why}; fix: read the "
                          "config with eegfm_bench.runs.cv.cells.load_config (a changed config too: "
                          "load_config(dataclasses.replace(cfg, ...)))")
    return carried.by_model[model]


def _prep_key(win: WindowPreprocessing) -> tuple:
    prep = win.prep
    return (prep.sfreq, prep.l_freq, prep.h_freq, prep.scale, prep.window_s, prep.reference)


def windows_for(cfg: CVConfig, model: str, cache: dict, progress: bool = False):
    """The task's windows under ``model``'s declared preprocessing (one load per preprocessing)."""
    prep = model_preprocessing(cfg, model)
    if _prep_key(prep) not in cache:
        windows_for_models(cfg, [model], cache, progress)
    return cache[_prep_key(prep)]


def windows_for_models(cfg: CVConfig, models: Sequence[str], cache: dict, progress: bool = False) -> None:
    """Load the task's windows under every preprocessing ``models`` need into ``cache`` (keyed by preprocessing):
    a cold cache reads each recording once for all of them
    (:func:`~eegfm_bench.data.windows.load_window_sets`)."""
    d = cfg.data
    preps = [p for p in dict.fromkeys(model_preprocessing(cfg, m) for m in models) if _prep_key(p) not in cache]
    if not preps:
        return
    sets = load_window_sets(cfg.resolved_task, preps, data_root=d.data_root, subjects=d.subjects, cache_dir=d.cache_dir,
                            max_windows_per_subject=d.max_windows_per_subject, progress=progress and is_global_zero(),
                            n_jobs=d.n_jobs)
    for p, ws in zip(preps, sets):
        cache[_prep_key(p)] = ws


def enumerate_cells(cfg: CVConfig, windows: dict, progress: bool = False, *, splits_path: Path | None = None,
                    write: bool = False):
    """Every cell of a cv config: ``(cells, {(model, regime, head): config hash}, split)``.

    Loads (or builds) each run's windows into ``windows`` and makes the split; with ``splits_path`` the split is
    saved there or verified against the saved one (:func:`~eegfm_bench.data.splits.save_or_verify`).

    Raises
    ------
    ConfigError
        If two models' preprocessing yield different subjects (they must share the folds).
    SplitMismatchError
        If the saved split differs from the recomputed one.
    """
    sp = cfg.split
    spec = SplitSpec(sp.scheme, sp.k, sp.seed, sp.n_val_groups, sp.group_by)
    tname = cfg.resolved_task.name
    split = None
    cells: list[Cell] = []
    current: dict[tuple, str] = {}
    checked: set[str] = set()
    windows_for_models(cfg, [run.model for run in cfg.runs], windows, progress)  # each recording read once
    for run in cfg.runs:
        ws = windows_for(cfg, run.model, windows, progress)
        declared = getattr(BACKBONES.get(run.model), "declared_contract", None)
        if declared is not None:  # a user model: its channel contract against the windows, before any cell trains

            try:
                declared.check(list(ws.ch_names), ws.sfreq, ws.n_times, run.model)
            except ChannelContractError as err:
                raise ConfigError(f"user model {run.model}: {err}") from None
            check_user_model_on_data(run.model, cfg.user_models[run.model], ws, checked,
                                     progress=write)
        groups = ws.subject if spec.group_by == "subject" else ws.recording
        if split is None:
            split = make_split(ws.y, groups, spec, tname)
            if splits_path is not None:
                split = save_or_verify(split, splits_path, write=write)
        elif sorted(np.unique(groups).tolist()) != split.groups:
            have = set(np.unique(groups).tolist())
            raise ConfigError(
                f"{run.model}'s preprocessing ({ws.sfreq:g} Hz, {ws.n_times / ws.sfreq:g} s windows) yields other "
                f"{spec.group_by}s than the first model's: missing {sorted(set(split.groups) - have)[:8]}, extra "
                f"{sorted(have - set(split.groups))[:8]} (recordings shorter than its window give it no window). Every "
                "model of one cv run must be compared on the same folds. fix: give the task one `window_s` for all "
                "models, drop the short recordings (data.subjects), or run this model in its own cv config")
        folds = sp.folds if sp.folds is not None else range(len(split.folds))
        for head in run.heads:
            chash = cell_hash(cfg, run, head, ws.meta.get("cache_key"))
            current[(run.model, run.regime, head)] = chash
            for f in folds:
                cells.append(Cell(run, head, int(f), chash))
    return cells, current, split


CHECK_SUBJECTS = 3
"""Subjects ``eegfm-bench check`` reads: one to train, one to validate and one to test a batch on."""


def check_subjects(cfg: CVConfig) -> tuple[list | None, int]:
    """The subjects whose recordings ``eegfm-bench check`` reads: the first :data:`CHECK_SUBJECTS` listed (plus,
    where the source knows each recording's label before reading it, the first subject of each class they miss),
    as ``(subjects, k)`` for a ``k``-fold split over them; ``(data.subjects, 0)`` (the config's own split) when
    there are too few subjects to leave any out. Listing reads no recording. Prints one line saying how many of the
    task's recordings the check reads.
    """
    d = cfg.data
    recs = cfg.resolved_task.source(d.data_root).recordings(d.subjects)
    order = list(dict.fromkeys(r.subject for r in recs))
    if len(order) < CHECK_SUBJECTS:
        return d.subjects, 0
    picked = order[:CHECK_SUBJECTS]
    labels = {r.subject: r.label for r in recs}
    if all(v is not None for v in labels.values()):  # subject-level labels: cover every class
        for s in order[CHECK_SUBJECTS:]:
            if labels[s] not in {labels[p] for p in picked}:
                picked.append(s)
    n = sum(r.subject in picked for r in recs)
    if is_global_zero():
        print(f"check: reading {n} of the task's {len(recs)} recordings (subjects {', '.join(map(str, picked))}: one "
              f"to train, one to validate, one to test a batch on; the cv reads them all)")
    return picked, len(picked)


def run_check(config, args: Sequence[str] = (), *, progress: bool = True) -> None:
    """One batch through every configured run before a long cv run: a ``Trainer`` with ``fast_dev_run=1`` fits one
    training and one validation batch of fold 0 (forward, loss, backward, metrics) per run × head.

    Reads only the recordings of a few subjects (:func:`check_subjects`), not the whole task. ``progress=False``
    (``--no-progress``): no progress bar, neither the windows' nor the Trainer's.

    Prints one line per run × head; raises the first error with its fix.
    """
    cfg = load_config(config, args)
    d, sp = cfg.data, cfg.split
    subjects, k = check_subjects(cfg)
    windows_for_models(replace(cfg, data=replace(d, subjects=subjects)), [r.model for r in cfg.runs], {},
                       progress=progress)  # each of those recordings read once for every model's preprocessing
    for run in cfg.runs:
        dm = EEGDataModule(task=cfg.task, backbone=run.model, scheme="kfold" if k else sp.scheme, k=k or sp.k,
                           split_seed=sp.seed, n_val_groups=1 if k else sp.n_val_groups, group_by=sp.group_by,
                           batch_size=min(4, fixed_batch_size(d)), data_root=d.data_root, cache_dir=d.cache_dir,
                           subjects=subjects, max_windows_per_subject=d.max_windows_per_subject)
        for head in run.heads:
            m = FMClassifier(backbone=run.model, user_model=(cfg.user_models or {}).get(run.model),
                             regime=LP_FT.get(run.regime, run.regime), ch_names=dm.ch_names, n_times=dm.n_times,
                             n_classes=dm.n_classes, pretrained=run.pretrained, backbone_kwargs=run.backbone_kwargs,
                             lora=run.lora, **head_args(run, head), **run_optim(cfg, run))
            tr = run_trainer(cfg, run)
            t = build_trainer({**tr, "enable_progress_bar": bool(progress and tr.get("enable_progress_bar"))},
                              loggers=False, fast_dev_run=1)
            t.fit(m, dm)
            x = next(iter(dm.train_dataloader()))["x"]
            if is_global_zero():
                print(f"ok  {run.model:>10s} {run.regime:>9s} {head:>9s}  x{tuple(x.shape)} -> "
                      f"logits({x.shape[0]}, {dm.n_classes})  init={m.init}  head params={m.parameter_counts['head_params']}  "
                      f"train loss {float(t.callback_metrics.get('train/loss', float('nan'))):.3f}")
