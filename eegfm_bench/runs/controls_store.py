"""The result store of ``eegfm-bench controls``: one :class:`~eegfm_bench.results.ResultStore` under the out_dir, with
the rule by which the negative-control suite resumes.

Every unit of work of the suite (a probe of one representation, a permutation test, a paired comparison, one
scrambled-label fit, the identity probe) has a key (task, model, init, regime, head, seed, condition and, for the
adaptation fits, fold) and a config hash of everything that changes its numbers. :meth:`ControlsStore.done`:

* no row under the key: the unit runs;
* rows under the key, all with the current hash: the unit is skipped (its predictions / null distribution are
  read back from the files beside the rows);
* any row under the key with another hash: the run is refused with a :class:`~eegfm_bench.config.ConfigError`
  naming the unit and the fix (a new out_dir), because the unit's files (``predictions/<name>.csv``,
  ``permutation/<name>.json``, ...) are named by the key alone and the reports read every row of the folder.

This differs from the cv cells (:func:`eegfm_bench.results.done_cells`), where a changed config's cells are rerun
beside the old rows (cell folders and report filters carry the hash).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from eegfm_bench.config import ConfigError
from eegfm_bench.results import ResultStore, code_version


class ControlsStore:
    """ResultStore with a cached frame, the config-hash guard and row completion."""

    def __init__(self, out: Path, cfg: dict, fold_unit: str, merge: bool = True):
        self.store = ResultStore(out, merge=merge)
        self.df = self.store.load()
        self.cfg = cfg
        self.code = code_version()
        self.fold_unit = fold_unit

    def rows_for(self, **key) -> pd.DataFrame:
        if self.df.empty:
            return self.df
        m = np.ones(len(self.df), dtype=bool)
        for k, v in key.items():
            m &= self.df[k].astype(str).to_numpy() == str(v)
        return self.df[m]

    def done(self, chash: str, what: str, **key) -> bool:
        """True if rows for ``key`` exist; raise if they were computed with other settings."""
        rows = self.rows_for(experiment=self.cfg["experiment"], **key)
        if rows.empty:
            return False
        other = sorted(set(rows["config_hash"].astype(str)) - {chash})
        if other:
            raise ConfigError(
                f"{self.store.folder} already holds {what} computed with other settings (config_hash {other[0]} vs "
                f"{chash} now); results of two configs would mix. fix: use a new out_dir, or delete that folder to "
                "recompute")
        return True

    def append(self, rows: list[dict], chash: str) -> None:
        full = []
        for r in rows:
            full.append({"experiment": self.cfg["experiment"], "seed": self.cfg["seed"], "condition": "clean",
                         "n_windows": np.nan, "n_subjects": np.nan, "fold_unit": self.fold_unit,
                         "config_hash": chash, "code_version": self.code, **r})
        self.store.append(full)
        self.df = self.store.load()

    def merge(self) -> None:
        """Merge the part files (a launcher's workers wrote them) and reload the cached frame."""
        self.store.merge()
        self.df = self.store.load()

    def value(self, metric: str, **key) -> float:
        rows = self.rows_for(experiment=self.cfg["experiment"], metric=metric, **key)
        if rows.empty:
            raise KeyError(f"no stored row for {metric} {key}")
        return float(rows["value"].iloc[-1])
