"""The result store of ``eegfm-bench controls``: one :class:`~eegfm_bench.results.ResultStore` under the out_dir, with
the cv's rule by which the negative-control suite resumes.

Every unit of work of the suite (a probe of one representation, a permutation test, a paired comparison, one
scrambled-label fit, the identity probe) is a :class:`Unit`: a key (task, model, init, regime, head, seed, condition
and, for the adaptation fits, fold) and a config hash of everything that changes its numbers (a derived unit's
hash holds the hashes of the units it reads). As for the cv cells (:func:`eegfm_bench.results.done_cells`):

* a unit is done when rows of its key under its **current** hash exist (and its files, named with the hash, are
  there): a rerun skips it;
* a changed config reruns the units whose hash it changes; their new rows sit beside the old ones under their own
  hash, and their files (``predictions/<name>-<hash>.csv``, ``permutation/<name>-<hash>.json``, ...) beside the
  old files; changing the config back finds the old rows and files again;
* a unit's rows are written once per hash (:meth:`ControlsStore.append` skips a unit that already has rows: the
  first complete write stands; a unit whose rows exist but whose file was deleted recomputes the file only);
* ``cells.json`` lists the units of the current config with their hashes (:meth:`ControlsStore.write_index`),
  which the experiment page reads, as it reads a cv run's.

The store's key columns are read once (and again after a launcher's workers wrote theirs); an append adds its rows
to the in-memory index instead of reloading the store.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.results import ResultStore, code_version

UNIT_FIELDS = ("task", "model", "init", "regime", "head", "seed", "condition")
"""The key columns of a unit (an adaptation fit adds ``fold``)."""


@dataclass(frozen=True)
class Unit:
    """One resumable unit of work: its key columns (:data:`UNIT_FIELDS`, optionally ``fold``) and config hash."""

    key: tuple[tuple[str, Any], ...]
    chash: str

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.key)

    @property
    def values(self) -> tuple[str, ...]:
        """The key's values as the store's key columns hold them (strings)."""
        return tuple(str(v) for _, v in self.key)

    @property
    def row_key(self) -> dict:
        """The key as the columns of the unit's rows."""
        return dict(self.key)

    @property
    def id(self) -> str:
        """``<task>/<model>/<init>/<regime>/<head>/seed<s>/<condition>[/fold<k>]/<hash>``."""
        v = dict(zip(self.fields, self.values))
        v["seed"] = f"seed{v['seed']}"
        if "fold" in v:
            v["fold"] = f"fold{v['fold']}"
        return "/".join([*v.values(), self.chash])

    def file(self, folder: Path, stem: str, suffix: str) -> Path:
        """The unit's file ``<folder>/<stem>-<hash><suffix>`` (each config hash has its own)."""
        return folder / f"{stem}-{self.chash}{suffix}"


class ControlsStore:
    """The suite's rows under ``out``: which units are done (their current hash), appending a unit's rows once,
    and the index of the current units (``cells.json``).

    Parameters
    ----------
    out : path
        The out_dir.
    experiment : str
        The rows' ``experiment``.
    seed : int
        The rows' ``seed`` where a row does not give one.
    fold_unit : str
        The rows' ``fold_unit`` (``subject`` or ``recording``).
    merge : bool
        Merge ``results.csv`` after every append (False in a launcher's workers).
    """

    def __init__(self, out: Path, experiment: str, seed: int, fold_unit: str, merge: bool = True):
        self.store = ResultStore(out, merge=merge)
        self.experiment, self.seed, self.fold_unit = str(experiment), int(seed), fold_unit
        self.code = code_version()
        self.current: dict[str, str] = {}
        self._read_keys()

    def _read_keys(self) -> None:
        """The key columns of the stored rows of this experiment, read once; indexes are built from them lazily."""
        self._keys = self.store.keys(experiment=self.experiment)
        self._index: dict[tuple[str, ...], set[tuple[str, ...]]] = {}

    def _lookup(self, fields: tuple[str, ...]) -> set[tuple[str, ...]]:
        """``{(values of fields..., config hash)}`` of the stored rows."""
        idx = self._index.get(fields)
        if idx is None:
            cols = [self._keys[c].astype(str).to_numpy() for c in (*fields, "config_hash")]
            idx = set(zip(*cols)) if len(self._keys) else set()
            self._index[fields] = idx
        return idx

    def unit(self, chash: str, **key) -> Unit:
        """The unit of ``key`` (:data:`UNIT_FIELDS`, optionally ``fold``) under hash ``chash``, recorded as one of
        the current config's units (:meth:`write_index`)."""
        u = Unit(tuple((k, key[k]) for k in (*UNIT_FIELDS, *(("fold",) if "fold" in key else ()))), chash)
        self.current[u.id] = chash
        return u

    def done(self, unit: Unit) -> bool:
        """True if rows of ``unit`` under its hash are stored."""
        return (*unit.values, unit.chash) in self._lookup(unit.fields)

    def append(self, unit: Unit, rows: list[dict]) -> None:
        """Store the rows of ``unit`` (each completed with the experiment, seed, condition, fold unit, hash and code
        version), unless rows of the unit under its hash are stored already (the first complete write stands)."""
        if self.done(unit):
            return
        full = [{"experiment": self.experiment, "seed": self.seed, "condition": "clean", "n_windows": np.nan,
                 "n_subjects": np.nan, "fold_unit": self.fold_unit, "config_hash": unit.chash,
                 "code_version": self.code, **r} for r in rows]
        self.store.append(full)
        for fields, idx in self._index.items():  # the unit's own index among them (built by done() above)
            idx.update(tuple(str(r.get(f)) for f in fields) + (unit.chash,) for r in full)

    def merge(self) -> None:
        """Merge the part files (a launcher's workers wrote them) and read the key columns again."""
        self.store.merge()
        self._read_keys()

    def write_index(self, path: Path) -> None:
        """``cells.json``: ``[{"unit", "config_hash"}]`` of the current config's units (what the page reads)."""
        atomic_write_text(path, json.dumps([{"unit": u, "config_hash": h} for u, h in sorted(self.current.items())],
                                           indent=1))
