"""Result store: tidy long-format rows (DESIGN.md "Result row"), atomic writes, resumable.

One metric value per row. The identifying columns (:data:`KEY_COLUMNS`, the config hash among them) make a row
unique: rows of one cell computed under another config are kept beside the current ones under their own hash,
and a rerun skips a cell only when rows with its current hash exist. Rows are written to ``results.csv`` and
``results.parquet`` in the output folder, each through a temporary file and ``os.replace`` so that a crash never
leaves a half-written table. Under DDP only rank 0 writes (``ResultStore(folder, write=False)`` elsewhere).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score, roc_auc_score

ROW_COLUMNS = ["experiment", "task", "model", "init", "regime", "head", "fold", "seed", "condition", "metric",
               "value", "n_windows", "n_subjects", "fold_unit", "config_hash", "code_version"]
KEY_COLUMNS = ["experiment", "task", "model", "init", "regime", "head", "fold", "seed", "condition", "metric",
               "config_hash"]


class FailedCellsError(RuntimeError):
    """Some cells (or conditions) of a command failed; every other one was written (see ``failures.json``)."""


def config_hash(cfg: dict) -> str:
    """sha256 (12 hex) of a JSON-serialisable config (keys sorted)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]


def code_version() -> str:
    """``eegfm_bench`` version plus the git commit of the source tree when available (``+dirty`` if modified)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("eegfm_bench")
    except PackageNotFoundError:
        v = "0+unknown"
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        if sha:
            v += f"+g{sha}" + (".dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return v


def classification_metrics(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """Balanced accuracy, AUROC and Cohen's kappa from saved predictions (scikit-learn).

    Parameters
    ----------
    y : ndarray of int, shape (n_windows,)
    probs : ndarray, shape (n_windows, n_classes)
        Class probabilities.

    Returns
    -------
    dict
        ``balanced_accuracy`` (mean recall over the classes present in ``y``), ``accuracy`` (plain, the share of
        windows right: beside balanced accuracy, which the class weights do not inflate), ``auroc`` (binary: of class
        1; multiclass: one-vs-rest macro) and ``cohen_kappa``; AUROC and kappa are NaN (with a warning) when ``y``
        holds a single class.
    """
    y = np.asarray(y)
    pred = probs.argmax(1)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out["balanced_accuracy"] = float(balanced_accuracy_score(y, pred))
    out["accuracy"] = float(np.mean(pred == y)) if len(y) else float("nan")
    if np.unique(y).size < 2:
        warnings.warn("test set holds one class: AUROC and Cohen's kappa are undefined (NaN)", stacklevel=2)
        out["auroc"] = float("nan")
        out["cohen_kappa"] = float("nan")
        return out
    if probs.shape[1] == 2:
        out["auroc"] = float(roc_auc_score(y, probs[:, 1]))
    else:
        out["auroc"] = float(roc_auc_score(y, probs, multi_class="ovr", average="macro", labels=np.arange(probs.shape[1])))
    out["cohen_kappa"] = float(cohen_kappa_score(y, pred))
    return out


def _atomic_write(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        df.to_parquet(tmp, index=False)
    else:
        df.to_csv(tmp, index=False)
    os.replace(tmp, path)


class ResultStore:
    """Long-format result rows under ``folder`` (``results.csv`` + ``results.parquet``).

    Parameters
    ----------
    folder : path
        Output folder (created if needed).
    write : bool
        ``False`` on DDP ranks other than 0: :meth:`append` then writes nothing (rank 0 writes the same rows).
    """

    def __init__(self, folder: str | os.PathLike, write: bool = True):
        self.folder = Path(folder)
        self.write = bool(write)
        if self.write:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.csv = self.folder / "results.csv"
        self.parquet = self.folder / "results.parquet"

    def load(self) -> pd.DataFrame:
        """All rows (empty frame with :data:`ROW_COLUMNS` if none)."""
        if self.csv.is_file():
            return pd.read_csv(self.csv, keep_default_na=True)
        return pd.DataFrame(columns=ROW_COLUMNS)

    def has(self, **key) -> bool:
        """True if at least one row matches every given identifying column."""
        df = self.load()
        if df.empty:
            return False
        m = np.ones(len(df), dtype=bool)
        for k, v in key.items():
            if k not in df.columns:
                return False
            m &= df[k].astype(str).to_numpy() == str(v)
        return bool(m.any())

    def append(self, rows: list[dict]) -> None:
        """Add rows, replacing older rows with the same :data:`KEY_COLUMNS`; writes CSV and Parquet atomically.

        Raises
        ------
        ValueError
            If a row lacks a column of :data:`ROW_COLUMNS`.
        """
        if not rows or not self.write:
            return
        new = pd.DataFrame(rows)
        missing = [c for c in ROW_COLUMNS if c not in new.columns]
        if missing:
            raise ValueError(f"result rows lack columns {missing}")
        old = self.load()
        df = pd.concat([old, new], ignore_index=True) if not old.empty else new
        df = df.drop_duplicates(subset=KEY_COLUMNS, keep="last")
        cols = ROW_COLUMNS + [c for c in df.columns if c not in ROW_COLUMNS]
        df = df[cols]
        _atomic_write(df, self.csv)
        _atomic_write(df.astype({c: str for c in df.columns if df[c].dtype == object}), self.parquet)
