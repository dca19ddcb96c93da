"""``eegfm-bench cv``: every fold × model × head × regime of one task, result rows, summary table.

The YAML schema (see ``configs/experiment/quickstart.yaml``)::

    experiment: quickstart          # name recorded in every row
    task: eegmmidb_mi
    out_dir: results/quickstart     # results.csv/.parquet, splits.json, config.yaml, checkpoints/, logs/
    seed: 0
    data:    {data_root, cache_dir, subjects, max_windows_per_subject, batch_size, num_workers}
    split:   {scheme: kfold|loso, k, seed, n_val_groups, group_by: subject|recording, folds: [0, 1] or null}
    trainer: {max_epochs, patience, precision, accelerator, devices, enable_progress_bar, loggers: [csv, tensorboard, wandb]}
    optim:   {lr, weight_decay, warmup_epochs}
    runs:    - {model, regime, heads: [...], pretrained, init_seed, backbone_kwargs, optim: {...}, trainer: {...}}

Each cell (run × head × fold) is trained with early stopping on validation balanced accuracy, tested
with its best checkpoint, and its rows are written at once; a rerun skips cells already written, and a
failing cell is recorded in ``failures.json`` without losing the others.
"""
from __future__ import annotations

import json
import logging
import os
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from eegfm_bench.config import ConfigError, merge_config  # noqa: F401  (ConfigError re-exported)

DEFAULTS = {
    "experiment": "experiment", "task": "eegmmidb_mi", "out_dir": "results/experiment", "seed": 0,
    "data": {"data_root": None, "cache_dir": None, "subjects": None, "max_windows_per_subject": None,
             "batch_size": 64, "num_workers": 0},
    "split": {"scheme": "kfold", "k": 5, "seed": 0, "n_val_groups": 1, "group_by": "subject", "folds": None},
    "trainer": {"max_epochs": 30, "patience": 5, "precision": "32-true", "accelerator": "auto", "devices": 1,
                "enable_progress_bar": False, "loggers": ["csv"], "min_epochs": 1, "deterministic": False},
    "optim": {"lr": 1e-3, "weight_decay": 1e-2, "warmup_epochs": 1.0},
    "runs": [],
}
RUN_KEYS = {"model", "regime", "heads", "pretrained", "init_seed", "backbone_kwargs", "head_kwargs", "optim",
            "trainer", "lora"}
LOGGERS = ("csv", "tensorboard", "wandb")




def load_config(path_or_dict) -> dict:
    """Read a cv YAML (or dict), fill defaults, validate names of tasks, models, heads, regimes, loggers.

    Raises
    ------
    ConfigError, UnknownNameError
        Naming the bad key or value and the valid ones.
    """
    from eegfm_bench.data.tasks import TASKS
    from eegfm_bench.models.adaptation import check_regime
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.heads import HEADS

    raw = path_or_dict if isinstance(path_or_dict, dict) else yaml.safe_load(Path(path_or_dict).read_text())
    cfg = merge_config(DEFAULTS, raw or {}, "")
    TASKS.get(cfg["task"])
    if not cfg["runs"]:
        raise ConfigError("the config lists no runs; add e.g. `runs: [{model: eegnet, regime: full, heads: [flatten]}]`")
    for i, run in enumerate(cfg["runs"]):
        bad = set(run) - RUN_KEYS
        if bad:
            raise ConfigError(f"runs[{i}]: unknown keys {sorted(bad)}; valid keys: {sorted(RUN_KEYS)}")
        if "model" not in run:
            raise ConfigError(f"runs[{i}] needs a `model` (one of {BACKBONES.names()})")
        BACKBONES.get(run["model"])
        check_regime(run.setdefault("regime", "full"))
        if run["regime"] == "lora" and not BACKBONES.get(run["model"]).lora_targets and not (run.get("lora") or {}).get("target_modules"):
            raise ConfigError(f"runs[{i}]: {run['model']} declares no lora_targets (a supervised baseline trained "
                              "from scratch); fix: use regime `full` for it, or give `lora: {target_modules: [...]}`")
        run.setdefault("heads", ["flatten"])
        for h in run["heads"]:
            HEADS.get(h)
        merge_config(DEFAULTS["optim"], run.get("optim") or {}, f"runs[{i}].optim.")
        merge_config(DEFAULTS["trainer"], run.get("trainer") or {}, f"runs[{i}].trainer.")
    for lg in cfg["trainer"]["loggers"]:
        if lg not in LOGGERS:
            raise ConfigError(f"unknown logger {lg!r}; valid: {LOGGERS}")
    return cfg


def _loggers(names, out: Path, name: str, version: str, cfg: dict):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    out_l = [CSVLogger(out / "logs", name=name, version=version)]
    if "tensorboard" in names:
        out_l.append(TensorBoardLogger(out / "tb", name=name, version=version))
    if "wandb" in names:
        os.environ.setdefault("WANDB_MODE", "offline")
        out_l.append(WandbLogger(project=cfg["experiment"], name=f"{name}-{version}", save_dir=str(out)))
    return out_l


@dataclass
class Cell:
    run: dict
    head: str
    fold: int


def run_cv(config, *, progress: bool = True, quiet: bool = True) -> "pandas.DataFrame":
    """Run every cell of a cv config and return the summary table (mean ± std over folds).

    Writes ``config.yaml`` (resolved), ``splits.json`` (verified on reruns), ``results.csv`` / ``.parquet``,
    ``summary.md``, ``predictions/``, ``checkpoints/`` and ``logs/`` under ``out_dir``.

    Raises
    ------
    SplitMismatchError
        If ``splits.json`` exists and differs from the folds recomputed for this data and config.
    RuntimeError
        At the end, if any cell failed (after every other cell ran; see ``failures.json``).
    """
    import lightning as L
    import pandas as pd
    import torch
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
    from tqdm.auto import tqdm

    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.data.splits import SplitSpec, make_split, save_or_verify
    from eegfm_bench.data.windows import load_windows
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.cache import compute_tokens
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.results import (ResultStore, classification_metrics, code_version, config_hash, summary_table,
                                     to_markdown)

    cfg = load_config(config)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    store = ResultStore(out)
    if quiet:
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*number of training batches.*")
    d, sp = cfg["data"], cfg["split"]
    spec = SplitSpec(sp["scheme"], sp["k"], sp["seed"], sp["n_val_groups"], sp["group_by"])
    windows, split = {}, None

    def get_ws(model: str):
        prep = BACKBONES.get(model).preprocessing
        key = (prep.sfreq, prep.l_freq, prep.h_freq, prep.scale, prep.window_s, prep.reference)
        if key not in windows:
            windows[key] = load_windows(cfg["task"], prep, data_root=d["data_root"], subjects=d["subjects"],
                                        cache_dir=d["cache_dir"], max_windows_per_subject=d["max_windows_per_subject"],
                                        progress=progress)
        return windows[key]

    failures, code = [], code_version()
    cells = []
    for run in cfg["runs"]:
        ws = get_ws(run["model"])
        groups = ws.subject if spec.group_by == "subject" else ws.recording
        if split is None:
            split = save_or_verify(make_split(ws.y, groups, spec, cfg["task"]), out / "splits.json")
        elif sorted(np.unique(groups).tolist()) != split.groups:
            raise RuntimeError(f"{run['model']}'s preprocessing yields subjects {np.unique(groups).tolist()} but the "
                               f"split holds {split.groups}")
        folds = sp["folds"] if sp["folds"] is not None else range(len(split.folds))
        for head in run["heads"]:
            for f in folds:
                cells.append(Cell(run, head, int(f)))
    fold_unit = spec.group_by
    bar = tqdm(cells, desc=f"cv {cfg['experiment']}", disable=not progress, unit="cell")
    for cell in bar:
        run, head, fold = cell.run, cell.head, cell.fold
        model_name, regime = run["model"], run["regime"]
        bar.set_postfix_str(f"{model_name}/{regime}/{head} fold {fold}")
        optim = merge_config(cfg["optim"], run.get("optim") or {}, "optim.")
        tr = merge_config(cfg["trainer"], run.get("trainer") or {}, "trainer.")
        init_seed = int(run.get("init_seed", cfg["seed"]))
        run_cfg = {"task": cfg["task"], "run": run, "head": head, "optim": optim, "trainer": tr, "data": d,
                   "split": sp, "seed": cfg["seed"]}
        chash = config_hash(run_cfg)
        ws = get_ws(model_name)
        try:
            L.seed_everything(cfg["seed"] + fold, workers=True, verbose=False)
            dm = EEGDataModule(task=cfg["task"], backbone=model_name, fold=fold, batch_size=d["batch_size"],
                               num_workers=d["num_workers"], ws=ws, split=split)
            model = FMClassifier(backbone=model_name, head=head, regime=regime, ch_names=dm.ch_names,
                                 n_times=dm.n_times, n_classes=dm.n_classes, pretrained=run.get("pretrained"),
                                 init_seed=init_seed, class_weights=dm.class_weights,
                                 backbone_kwargs=run.get("backbone_kwargs"), head_kwargs=run.get("head_kwargs"),
                                 lora=run.get("lora"), **optim)
            init = model.init
            key = dict(experiment=cfg["experiment"], task=cfg["task"], model=model_name, init=init, regime=regime,
                       head=head, fold=fold, seed=cfg["seed"], condition="clean")
            if store.has(**key):
                continue
            if regime == "head_only":
                dm.use_tokens(compute_tokens(model.backbone, ws, init=init + f"#seed{init_seed}",
                                             cache_dir=d["cache_dir"], progress=progress,
                                             device="cuda" if torch.cuda.is_available() and tr["accelerator"] != "cpu" else "cpu"))
            name = f"{model_name}-{regime}-{head}"
            ckpt = ModelCheckpoint(dirpath=out / "checkpoints" / name / f"fold{fold}", filename="best",
                                   monitor="val/bacc", mode="max", save_top_k=1, enable_version_counter=False)
            trainer = L.Trainer(max_epochs=tr["max_epochs"], min_epochs=tr["min_epochs"], precision=tr["precision"],
                                accelerator=tr["accelerator"], devices=tr["devices"],
                                enable_progress_bar=tr["enable_progress_bar"], enable_model_summary=False,
                                deterministic=tr["deterministic"], log_every_n_steps=1,
                                callbacks=[EarlyStopping("val/bacc", mode="max", patience=tr["patience"]), ckpt],
                                logger=_loggers(tr["loggers"], out, name, f"fold{fold}", cfg))
            for lg in trainer.loggers:
                lg.log_hyperparams({**model.parameter_counts, "init": init, "config_hash": chash})
            t0 = time.time()
            trainer.fit(model, dm)
            trainer.test(model, dm, ckpt_path=ckpt.best_model_path or None, verbose=False)
            for lg in trainer.loggers:  # one wandb run per cell: close it before the next cell starts one
                if type(lg).__name__ == "WandbLogger":
                    lg.experiment.finish()
            pred = model.test_predictions.copy()
            pred["subject"] = ws.subject[pred["index"]]
            pred["recording"] = ws.recording[pred["index"]]
            (out / "predictions").mkdir(exist_ok=True)
            pred.to_csv(out / "predictions" / f"{name}-fold{fold}.csv", index=False)
            probs = pred[[c for c in pred.columns if c.startswith("p") and c[1:].isdigit()]].to_numpy()
            m = classification_metrics(pred["y"].to_numpy(), probs)
            m["epochs"] = float(trainer.current_epoch)
            m["fit_seconds"] = float(time.time() - t0)
            m["head_params"] = float(model.parameter_counts["head_params"])
            m["trainable_fraction"] = model.parameter_counts["trainable_params"] / model.parameter_counts["total_params"]
            rows = [{**key, "metric": k, "value": v, "n_windows": int(len(pred)),
                     "n_subjects": int(pred["subject"].nunique()), "fold_unit": fold_unit, "config_hash": chash,
                     "code_version": code, "checkpoint": ckpt.best_model_path} for k, v in m.items()]
            store.append(rows)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one failing cell must not lose the others
            failures.append({"model": model_name, "regime": regime, "head": head, "fold": fold,
                             "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()})
            (out / "failures.json").write_text(json.dumps(failures, indent=1))
            tqdm.write(f"cell {model_name}/{regime}/{head} fold {fold} failed: {type(err).__name__}: {err}")
    df = store.load()
    df = df[df["experiment"] == cfg["experiment"]]
    table = summary_table(df) if not df.empty else pd.DataFrame()
    md = to_markdown(table) if not table.empty else "(no results)"
    header = (f"# {cfg['experiment']}: {cfg['task']}, {spec.scheme} ({fold_unit}-grouped"
              f"{', RECORDING-level folds: windows of one subject can be in train and test' if fold_unit == 'recording' else ''}), "
              f"mean ± std over folds\n\n")
    (out / "summary.md").write_text(header + md + "\n")
    if failures:
        raise RuntimeError(f"{len(failures)} cell(s) failed; see {out / 'failures.json'} (all other cells were written)")
    return table


def check_config(config) -> None:
    """One batch through every configured run (contracts, shapes, heads) before a long cv run.

    Prints one line per run × head; raises the first error with its fix.
    """
    import torch

    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.models.module import FMClassifier

    cfg = load_config(config)
    d, sp = cfg["data"], cfg["split"]
    for run in cfg["runs"]:
        dm = EEGDataModule(task=cfg["task"], backbone=run["model"], scheme=sp["scheme"], k=sp["k"],
                           split_seed=sp["seed"], n_val_groups=sp["n_val_groups"], group_by=sp["group_by"],
                           batch_size=min(4, d["batch_size"]), data_root=d["data_root"], cache_dir=d["cache_dir"],
                           subjects=d["subjects"], max_windows_per_subject=d["max_windows_per_subject"])
        batch = next(iter(dm.train_dataloader()))
        for head in run["heads"]:
            m = FMClassifier(backbone=run["model"], head=head, regime=run["regime"], ch_names=dm.ch_names,
                             n_times=dm.n_times, n_classes=dm.n_classes, pretrained=run.get("pretrained"),
                             backbone_kwargs=run.get("backbone_kwargs"), head_kwargs=run.get("head_kwargs"),
                             lora=run.get("lora"))
            with torch.no_grad():
                logits = m(batch["x"])
            print(f"ok  {run['model']:>10s} {run['regime']:>9s} {head:>9s}  x{tuple(batch['x'].shape)} -> "
                  f"logits{tuple(logits.shape)}  init={m.init}  head params={m.parameter_counts['head_params']}")
