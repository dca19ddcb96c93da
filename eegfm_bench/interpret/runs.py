"""Reading a finished ``eegfm-bench cv`` run: its config, folds, windows and per-fold Lightning checkpoints.

``eegfm-bench probe`` and ``eegfm-bench attribute`` analyse the fold checkpoints a cv run left behind
(``<cv_dir>/checkpoints/<model>-<regime>-<head>/fold<k>/best.ckpt``, listed in ``results.csv``'s
``checkpoint`` column) on the same windows and the same subject-grouped folds (``splits.json``).
Checkpoints are read with ``torch.load(weights_only=True)``; the model is rebuilt from the checkpoint's saved
hyper-parameters and loaded with ``strict=True``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from eegfm_bench.data.windows import WindowSet


class CVRunError(FileNotFoundError):
    """A cv output folder lacks a file the analysis needs, or holds no matching checkpoint."""


@dataclass(frozen=True)
class FoldCheckpoint:
    """One trained cell of a cv run.

    Attributes
    ----------
    model, regime, head : str
        The cv run's backbone, adaptation regime and pooling head.
    fold : int
    path : Path
        The Lightning checkpoint (best validation balanced accuracy).
    init : str
        The init tag of the result rows (``random`` or ``pretrained:<id>@<sha>``).
    """

    model: str
    regime: str
    head: str
    fold: int
    path: Path
    init: str

    @property
    def cell(self) -> str:
        return f"{self.model}-{self.regime}-{self.head}"


class CVRun:
    """A finished cv output folder.

    Parameters
    ----------
    cv_dir : path
        The cv run's ``out_dir`` (holds ``config.yaml``, ``splits.json``, ``results.csv``, ``checkpoints/``).

    Raises
    ------
    CVRunError
        If one of those files is missing (the message names it and the command that writes it).
    """

    def __init__(self, cv_dir: str | Path):
        from eegfm_bench.runs.cv import load_config

        self.dir = Path(cv_dir)
        for name in ("config.yaml", "splits.json", "results.csv"):
            if not (self.dir / name).is_file():
                raise CVRunError(f"{self.dir / name} not found; fix: point `cv_dir` at the out_dir of a finished "
                                 "`eegfm-bench cv --config ...` run")
        self.config = load_config(yaml.safe_load((self.dir / "config.yaml").read_text()))
        self.splits = json.loads((self.dir / "splits.json").read_text())
        import pandas as pd

        self.results = pd.read_csv(self.dir / "results.csv")
        self._windows: dict[tuple, WindowSet] = {}

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def experiment(self) -> str:
        return self.config["experiment"]

    @property
    def n_folds(self) -> int:
        return len(self.splits["folds"])

    @property
    def group_by(self) -> str:
        return self.splits["spec"]["group_by"]

    def checkpoints(self, models=None, regimes=None, heads=None, folds=None) -> list[FoldCheckpoint]:
        """Fold checkpoints of the run, filtered by model / regime / head / fold (``None``: all).

        Raises
        ------
        CVRunError
            If nothing matches (lists what the run holds) or a listed checkpoint file is missing.
        """
        df = self.results
        if "checkpoint" not in df.columns:
            raise CVRunError(f"{self.dir / 'results.csv'} has no `checkpoint` column; fix: rerun the cv with the "
                             "current eegfm-bench (it records each fold's best checkpoint)")
        df = df[df["experiment"] == self.experiment].drop_duplicates(["model", "regime", "head", "fold"])
        for col, keep in (("model", models), ("regime", regimes), ("head", heads), ("fold", folds)):
            if keep is not None:
                df = df[df[col].astype(str).isin([str(k) for k in keep])]
        if df.empty:
            cells = sorted({f"{r.model}/{r.regime}/{r.head}" for r in self.results.itertuples()})
            raise CVRunError(f"no checkpoint of {self.dir} matches models={models} regimes={regimes} heads={heads} "
                             f"folds={folds}; the run holds {cells}")
        out = []
        for r in df.sort_values(["model", "regime", "head", "fold"]).itertuples():
            path = self._resolve(str(r.checkpoint), f"{r.model}-{r.regime}-{r.head}", int(r.fold))
            out.append(FoldCheckpoint(r.model, r.regime, r.head, int(r.fold), path, str(r.init)))
        return out

    def _resolve(self, recorded: str, cell: str, fold: int) -> Path:
        candidates = [Path(recorded)] if recorded and recorded != "nan" else []
        candidates.append(self.dir / "checkpoints" / cell / f"fold{fold}" / "best.ckpt")
        for c in candidates:
            if c.is_file():
                return c
        raise CVRunError(f"checkpoint of {cell} fold {fold} not found (looked at {[str(c) for c in candidates]}); "
                         "fix: rerun that cell (delete its rows from results.csv) or restore the file")

    def windows(self, model: str) -> WindowSet:
        """The run's windows under ``model``'s declared preprocessing (read from the window cache)."""
        from eegfm_bench.data.windows import load_windows
        from eegfm_bench.models.backbones import BACKBONES

        prep = BACKBONES.get(model).preprocessing
        key = (prep.sfreq, prep.l_freq, prep.h_freq, prep.scale, prep.window_s, prep.reference)
        if key not in self._windows:
            d = self.config["data"]
            self._windows[key] = load_windows(self.task, prep, data_root=d["data_root"], subjects=d["subjects"],
                                              cache_dir=d["cache_dir"],
                                              max_windows_per_subject=d["max_windows_per_subject"], progress=False)
        return self._windows[key]

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


def load_fold_model(path: str | Path, map_location: str = "cpu"):
    """Rebuild the :class:`~eegfm_bench.models.module.FMClassifier` of a Lightning checkpoint.

    The checkpoint is read with ``torch.load(weights_only=True)``; the model is built from its saved
    hyper-parameters and its ``state_dict`` loaded with ``strict=True``. Returned in eval mode.

    Raises
    ------
    CVRunError
        If the file lacks ``hyper_parameters`` or ``state_dict`` (not an FMClassifier checkpoint).
    """
    import torch
    from eegfm_bench.models.module import FMClassifier

    ck = torch.load(path, map_location=map_location, weights_only=True)
    if "hyper_parameters" not in ck or "state_dict" not in ck:
        raise CVRunError(f"{path} is not a Lightning FMClassifier checkpoint (keys {sorted(ck)[:8]})")
    model = FMClassifier(**ck["hyper_parameters"])
    model.load_state_dict(ck["state_dict"], strict=True)
    return model.eval()


def load_initial_model(path: str | Path, map_location: str = "cpu"):
    """The checkpoint's model *before* training: same hyper-parameters, pretrained (or seeded random) weights.

    This is the "frozen" reference of paper 003 §4.4 / App. I.4–I.5 (pre-trained vs fine-tuned); for a
    random-init run it is the random backbone built with the run's ``init_seed``.
    """
    import torch
    from eegfm_bench.models.module import FMClassifier

    ck = torch.load(path, map_location=map_location, weights_only=True)
    return FMClassifier(**ck["hyper_parameters"]).eval()


def best_fitted(trainer, pl_module):
    """``(module, path)``: a CPU copy at the trainer's best checkpoint, or ``(pl_module, "")`` when none was saved.

    Used by the :class:`~eegfm_bench.interpret.probes.BlockProbe` and
    :class:`~eegfm_bench.interpret.attribution.Attribution` callbacks after ``fit``: they analyse the model the cv
    tests (early stopping keeps the best validation epoch, not the last). Loads with ``weights_only=True``.
    """
    import copy

    import torch

    cb = trainer.checkpoint_callback
    best = getattr(cb, "best_model_path", "") if cb else ""
    if not best:
        return pl_module, ""
    model = copy.deepcopy(pl_module).cpu()
    model.load_state_dict(torch.load(best, map_location="cpu", weights_only=True)["state_dict"])
    return model, best
