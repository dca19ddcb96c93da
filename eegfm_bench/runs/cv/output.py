"""The one reader of a finished ``eegfm-bench cv`` run, and the one loader of its fold checkpoints.

``eegfm-bench sweep``, ``probe``, ``attribute`` and ``controls`` analyse the fold checkpoints a cv run left
behind on the same windows and the same subject-grouped folds. :class:`CVRun` reads the run's resolved
``config.yaml``, ``splits.json``, ``results.csv`` and ``cells.json`` (the config hash of every cell of the config
the cv last ran with) and serves only the rows, checkpoints and predictions of those hashes: a cell retrained
under another config is never mixed with the current one. Given the cv *config file* as well
(``cv_config:``), it refuses to go on when that file now gives other cell hashes than the run holds (the file was
edited after the run), naming both hashes and the fix.

Checkpoints are read with ``torch.load(weights_only=True)`` (only tensors and plain containers are unpickled); the
model is rebuilt from the checkpoint's saved hyper-parameters and its state dict loaded with ``strict=True``.
"""
from __future__ import annotations

import json
import pickle
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from eegfm_bench.atomic import verify_checkpoint
from eegfm_bench.config import ConfigError
from eegfm_bench.data.windows import WindowSet
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.results import read_results_csv, resolve_row_path
from eegfm_bench.runs.cv.cells import cell_hash, load_config, run_trainer, windows_for
from eegfm_bench.config.cv import RunConfig


class CVRunError(FileNotFoundError):
    """A cv output folder lacks a file the analysis needs, or holds no matching checkpoint."""


class StaleCVRunError(ConfigError):
    """The cv run was made with another config than the one given (names both config hashes)."""


@dataclass(frozen=True)
class FoldCheckpoint:
    """One trained cell × fold of a cv run (current config hash).

    Attributes
    ----------
    model, regime, head : str
    fold : int
    path : Path
        The Lightning checkpoint (best validation balanced accuracy): an absolute path inside the cv folder given
        (the row stores it relative to that folder).
    init : str
        ``random`` or ``pretrained:<id>@<sha>``.
    config_hash : str
        The cell's config hash.
    seed : int
        The cv's training seed.
    n_windows : int
        Test windows of the fold, as the cv tested them.
    fold_unit : str
    predictions : str
        The fold's per-window prediction CSV, an absolute path inside the cv folder (empty for old runs).
    """

    model: str
    regime: str
    head: str
    fold: int
    path: Path
    init: str
    config_hash: str = ""
    seed: int = 0
    n_windows: int = 0
    fold_unit: str = "subject"
    predictions: str = ""

    @property
    def cell(self) -> str:
        return f"{self.model}-{self.regime}-{self.head}"


class CVRun:
    """A finished cv output folder.

    Parameters
    ----------
    cv_dir : path
        The cv run's ``out_dir``.
    cv_config : path or dict, optional
        The cv config the caller believes made the run; its cell hashes must equal the run's.

    Raises
    ------
    CVRunError
        A file is missing (the message names it and the command that writes it).
    StaleCVRunError
        ``cv_config`` gives other cell hashes than the run holds.
    """

    def __init__(self, cv_dir: str | Path, cv_config=None):


        self.dir = Path(cv_dir)
        for name in ("config.yaml", "splits.json", "results.csv"):
            if not (self.dir / name).is_file():
                raise CVRunError(f"{self.dir / name} not found; fix: point the config at the out_dir of a finished "
                                 "`eegfm-bench cv --config ...` run")
        # the resolved config names the out_dir the run was written to; a moved or copied folder is read where it is
        self.config = replace(load_config(self.dir / "config.yaml"), out_dir=str(self.dir))
        self.splits = json.loads((self.dir / "splits.json").read_text())
        self.results = read_results_csv(self.dir / "results.csv")  # hashes stay text (never 123456e78901 -> inf)
        self._windows: dict = {}
        cells = self.dir / "cells.json"
        if cells.is_file():
            self.current = {(c["model"], c["regime"], c["head"]): c["config_hash"] for c in json.loads(cells.read_text())}
        else:  # a run written before cells.json existed: its newest hash per cell
            df = self.results[self.results["experiment"] == self.experiment]
            self.current = {(m, r, h): str(g["config_hash"].iloc[-1]) for (m, r, h), g in
                            df.groupby(["model", "regime", "head"], sort=False)}
        if cv_config is not None:
            self.verify(cv_config)

    # -------------------------------------------------------------------------------------------- facts
    @property
    def task(self) -> str:
        """The task's name (a declared task's ``name``; its region assignment is registered on the way)."""
        return self.config.resolved_task.name

    @property
    def experiment(self) -> str:
        return self.config.experiment

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    @property
    def n_folds(self) -> int:
        return len(self.splits["folds"])

    @property
    def group_by(self) -> str:
        return self.splits["spec"]["group_by"]

    def run_of(self, model: str, regime: str, head: str) -> RunConfig:
        """The cv config's run entry of a cell."""
        for r in self.config.runs:
            if r.model == model and r.regime == regime and head in r.heads:
                return r
        raise CVRunError(f"{self.dir}/config.yaml has no run {model}/{regime} with head {head}")

    def trainer_of(self, model: str, regime: str, head: str) -> dict:
        """The trainer settings a cell was trained with."""
        return run_trainer(self.config, self.run_of(model, regime, head))

    def verify(self, cv_config) -> None:
        """Refuse when ``cv_config`` gives other cell hashes than the run's (see the class docstring); the message
        names both hashes and the settings that differ between the file and the run's resolved ``config.yaml``."""
        cfg = load_config(cv_config)
        cache: dict = {}
        name = cv_config if not isinstance(cv_config, dict) else "the given cv config"
        for run in cfg.runs:
            key = windows_for(cfg, run.model, cache).meta.get("cache_key")
            for head in run.heads:
                want = cell_hash(cfg, run, head, key)
                have = self.current.get((run.model, run.regime, head))
                if have != want:
                    diff = _config_diff(self.config.to_dict(), cfg.to_dict())
                    why = (f"they differ in {', '.join(diff[:6])}" if diff else "the data files changed since the run")
                    raise StaleCVRunError(
                        f"{run.model}/{run.regime}/{head}: the cv run in {self.dir} was made with config hash "
                        f"{have} but {name} gives {want}: {why} (the file was edited after the run, or the run used "
                        f"command-line overrides). fix: rerun `eegfm-bench cv --config {name}` first, or point "
                        f"`cv_out_dir:` at {self.dir} to analyse the run as it is")

    # -------------------------------------------------------------------------------------------- cells
    def cells(self):
        """The clean balanced-accuracy rows of the current config hash of every cell (one per cell × fold)."""
        df = self.results
        if "checkpoint" not in df.columns:
            raise CVRunError(f"{self.dir / 'results.csv'} has no `checkpoint` column; fix: rerun the cv with the "
                             "current eegfm-bench (it records each fold's best checkpoint)")
        df = df[(df["experiment"] == self.experiment) & (df["condition"] == "clean")
                & (df["metric"] == "balanced_accuracy")]
        keep = np.array([self.current.get((m, r, h)) == str(c) for m, r, h, c in
                         zip(df["model"], df["regime"], df["head"], df["config_hash"])], dtype=bool)
        return df[keep].drop_duplicates(["model", "regime", "head", "fold"], keep="last")

    def missing_folds(self) -> dict[str, list[int]]:
        """Cells of the current config with folds that have no rows yet (an interrupted cv)."""
        df = self.cells()
        folds = self.config.split.folds
        want = list(folds) if folds is not None else list(range(self.n_folds))
        out = {}
        for (m, r, h) in self.current:
            have = set(df[(df["model"] == m) & (df["regime"] == r) & (df["head"] == h)]["fold"].astype(int))
            miss = [f for f in want if f not in have]
            if miss:
                out[f"{m}-{r}-{h}"] = miss
        return out

    def checkpoints(self, models=None, regimes=None, heads=None, folds=None) -> list[FoldCheckpoint]:
        """Fold checkpoints of the current config, filtered by model / regime / head / fold (``None``: all).

        Raises
        ------
        CVRunError
            Nothing matches (lists what the run holds) or a listed checkpoint file is missing.
        """
        df = self.cells()
        for col, keep in (("model", models), ("regime", regimes), ("head", heads), ("fold", folds)):
            if keep is not None:
                unknown = sorted({str(k) for k in keep} - set(df[col].astype(str)))
                if unknown:
                    raise CVRunError(f"{col}s {unknown} are not in the cv run {self.dir} (current config); valid: "
                                     f"{sorted(set(df[col].astype(str)))}")
                df = df[df[col].astype(str).isin([str(k) for k in keep])]
        if df.empty:
            cells = sorted({f"{m}/{r}/{h}" for m, r, h in self.current})
            raise CVRunError(f"no checkpoint of {self.dir} matches models={models} regimes={regimes} heads={heads} "
                             f"folds={folds}; the run holds {cells} (fix: let the cv run finish)")
        out = []
        for r in df.sort_values(["model", "regime", "head", "fold"]).itertuples():
            cell = f"{r.model}-{r.regime}-{r.head}"
            path = self._resolve(str(r.checkpoint), cell, int(r.fold))
            out.append(FoldCheckpoint(r.model, r.regime, r.head, int(r.fold), path, str(r.init), str(r.config_hash),
                                      int(r.seed), int(r.n_windows), str(getattr(r, "fold_unit", self.group_by)),
                                      self._predictions(getattr(r, "predictions", ""), cell, int(r.fold))))
        return out

    def _resolve(self, recorded: str, cell: str, fold: int) -> Path:
        """The fold's checkpoint inside this folder (:func:`~eegfm_bench.results.resolve_row_path`: never a file
        outside it, whatever an old row's absolute path names)."""
        if not recorded or recorded == "nan":
            raise CVRunError(f"the row of {cell} fold {fold} in {self.dir / 'results.csv'} names no checkpoint; fix: "
                             "rerun that cell (`eegfm-bench cv --force`)")
        path = resolve_row_path(recorded, self.dir, what=f"checkpoint of {cell} fold {fold}")
        if not path.is_file():
            raise CVRunError(f"checkpoint of {cell} fold {fold} not found: {path} (the row names {recorded}, relative "
                             f"to {self.dir}); fix: rerun that cell (`eegfm-bench cv --force`), or restore the file")
        return path

    def _predictions(self, recorded, cell: str, fold: int) -> str:
        """The fold's prediction CSV inside this folder, as text (``""`` when the row names none)."""
        if not isinstance(recorded, str) or recorded in ("", "nan"):
            return ""
        return str(resolve_row_path(recorded, self.dir, what=f"predictions of {cell} fold {fold}"))

    # -------------------------------------------------------------------------------------------- data
    def windows(self, model: str) -> WindowSet:
        """The run's windows under ``model``'s declared preprocessing (read from the window cache)."""
        return windows_for(self.config, model, self._windows)

    def fold_indices(self, ws: WindowSet, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Window indices ``(train, val, test)`` of ``fold`` (from ``splits.json``).

        Raises
        ------
        CVRunError
            If the windows' groups differ from the split's (other data than the cv run used).
        """
        groups = ws.subject if self.group_by == "subject" else ws.recording
        groups = np.asarray(groups).astype(str)
        if sorted(np.unique(groups).tolist()) != sorted(self.splits["groups"]):
            raise CVRunError(f"the windows hold {self.group_by}s {np.unique(groups).tolist()} but {self.dir}/splits.json "
                             f"holds {self.splits['groups']}; fix: use the cv run's data settings")
        f = self.splits["folds"][fold]
        return tuple(np.flatnonzero(np.isin(groups, f[part])) for part in ("train", "val", "test"))  # type: ignore


def _config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs, as ``key: run value → file value``."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _config_diff(va, vb, f"{prefix}{k}.")
        elif isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb) and \
                all(isinstance(x, dict) for x in va + vb):
            for i, (xa, xb) in enumerate(zip(va, vb)):
                out += _config_diff(xa, xb, f"{prefix}{k}[{i}].")
        elif va != vb and k not in ("out_dir",):
            out.append(f"{prefix}{k}: {va!r} (run) vs {vb!r} (file)")
    return out


# ================================================================================================ checkpoints
def load_fold_model(path: str | Path, map_location: str = "cpu"):
    """Rebuild the :class:`~eegfm_bench.models.module.FMClassifier` of a Lightning checkpoint (eval mode).

    The checkpoint is read with ``torch.load(weights_only=True)``; the model is built from its saved
    hyper-parameters with ``pretrained=None`` (the state dict holds every weight: nothing is fetched again) and
    its ``state_dict`` loaded with ``strict=True``.

    The file is first checked against its sidecar (size, SHA-256: :func:`~eegfm_bench.atomic.verify_checkpoint`;
    one without a sidecar, from an older run, by loading it).

    Raises
    ------
    CVRunError
        The file is missing, cannot be read (damaged or cut short: the message names it), or lacks
        ``hyper_parameters`` / ``state_dict`` (not an FMClassifier checkpoint).
    DamagedCheckpointError
        The file is truncated or altered against its sidecar (names it and the cv command that writes it again).
    """

    path = Path(path)
    if not path.is_file():
        raise CVRunError(f"checkpoint {path} not found; fix: rerun the cv for this fold")
    verify_checkpoint(path, fix=_retrain_fix(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            ck = torch.load(path, map_location=map_location, weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:  # a truncated or damaged file
            raise CVRunError(f"checkpoint {path} cannot be read ({type(err).__name__}: {str(err).splitlines()[0]}): "
                             "damaged or cut short; fix: rerun that cell (`eegfm-bench cv --force`) or restore the "
                             "file") from err
    if "hyper_parameters" not in ck or "state_dict" not in ck:
        raise CVRunError(f"{path} is not a Lightning FMClassifier checkpoint (keys {sorted(ck)[:8]})")
    model = FMClassifier(**{**ck["hyper_parameters"], "pretrained": None})
    model.init = _init_of(ck)
    model.load_state_dict(ck["state_dict"], strict=True)
    return model.eval()


def _retrain_fix(path: Path) -> str:
    """The command that writes a fold's checkpoint again: ``<out_dir>/checkpoints/<cell>/fold<k>/best.ckpt`` is
    retrained by the cv of ``<out_dir>/config.yaml`` with ``--force``."""
    out = path.parents[3] if len(path.parents) > 3 else None
    if out is not None and (out / "config.yaml").is_file():
        return (f"retrain the cv's cells: eegfm-bench cv --config {out / 'config.yaml'} --force (same config and "
                "seeds: the same numbers), then rerun this command")
    return "retrain the cv cell that wrote it (eegfm-bench cv --force), then rerun this command"


def _init_of(ck: dict) -> str:
    hp = ck.get("hyper_parameters", {})
    return "random" if not hp.get("pretrained") else f"pretrained:{hp['pretrained']}"


def load_initial_model(path: str | Path, map_location: str = "cpu"):
    """The checkpoint's model *before* training: same hyper-parameters, pretrained (or seeded random) weights.

    This is the "frozen" reference of paper 003 §4.4 / App. I.4–I.5 (pre-trained vs fine-tuned); for a random-init
    run it is the random backbone built with the run's ``init_seed``. It is built frozen (``regime: head_only``):
    a LoRA run's adapters start as the identity, so its initial backbone is the head-only cells' one, and equal
    weights give one frozen probe per fold, not one per cell.
    """

    verify_checkpoint(path, fix=_retrain_fix(Path(path)))
    ck = torch.load(path, map_location=map_location, weights_only=True)
    return FMClassifier(**{**ck["hyper_parameters"], "regime": "head_only"}).eval()


