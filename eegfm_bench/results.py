"""Result store: tidy long-format rows (docs/guide/architecture.md, "Result row"), atomic writes, resumable.

One metric value per row. The identifying columns (:data:`KEY_COLUMNS`, the config hash among them) make a row
unique: rows of one cell computed under another config are kept beside the current ones under their own hash,
and a rerun skips a cell only when rows with its current hash exist. Each append is one immutable part file
(``parts/*.parquet``, temporary name then ``os.replace``), so concurrent writers never lose rows and a crash never
leaves a half-written table; ``results.csv`` and ``results.parquet`` are merged from the parts
(:class:`ResultStore`; ``results.manifest.json`` names the parts they hold). Every column has a fixed type
(:data:`COLUMN_TYPES`, read and written with pyarrow): no value is ever retyped by what it looks like. Under DDP only
rank 0 writes (``ResultStore(folder, write=False)`` elsewhere).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import socket
import subprocess
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.errors import EEGFMError, OutsideFolderError

log = logging.getLogger(__name__)

ROW_COLUMNS = ["experiment", "task", "model", "init", "regime", "head", "fold", "seed", "condition", "metric",
               "value", "n_windows", "n_subjects", "fold_unit", "config_hash", "code_version"]
KEY_COLUMNS = ["experiment", "task", "model", "init", "regime", "head", "fold", "seed", "condition", "metric",
               "config_hash"]

_STR, _INT, _FLOAT = pa.string(), pa.int64(), pa.float64()
COLUMN_TYPES: dict[str, pa.DataType] = {
    **{c: _STR for c in ROW_COLUMNS}, "seed": _INT, "value": _FLOAT, "n_windows": _INT, "n_subjects": _INT,
    # the extra columns the commands write (cv, sweep, probe, attribute), every one nullable
    "checkpoint": _STR, "predictions": _STR, "devices": _INT, "intra_op_threads": _INT, "backbone_sha256": _STR,
    "library_versions": _STR, "reve_positions_sha256": _STR, "perturb_seed": _INT, "note": _STR, "details": _STR,
    "attention_rule": _STR, "requested_method": _STR, "stage": _STR, "pooling": _STR, "block": _INT,
    "relative_depth": _FLOAT, "val_bacc": _FLOAT, "probe_epochs": _INT, "source_head": _STR, "weights": _STR,
    "block_cache": _STR}
"""The store's schema: the Arrow type of every column it knows, whatever the values look like (``fold`` is text:
``0`` beside ``pooled``; a ``config_hash`` of digits and ``e`` stays text). Every column may hold missing values
(integers with gaps read as floats with NaN, as pandas has them). A column not named here keeps the type its writer
gave it (strings stay strings; in a CSV-only folder: strings)."""


PATH_COLUMNS = ("checkpoint", "predictions")
"""Columns that name a file of a results folder. A row stores it relative to the folder holding the store (POSIX
separators: ``checkpoints/<cell>/fold0/best.ckpt``, ``predictions/<cell>-fold0.csv``; an analysis store beside or
under its cv run names the cv's checkpoint as ``../checkpoints/...``), so a results folder is self-contained: a
``cp -r``, ``mv`` or archive-and-restore of it keeps every row pointing into the copy (:func:`row_path`,
:func:`resolve_row_path`). ``block_cache`` names a cache folder outside the results, not one of its files, and stays
as written."""


def row_path(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """The text a row stores for ``path``: its path relative to ``folder`` (the folder holding the store), with
    POSIX separators; ``""`` for no path.

    ``path`` is taken as the writer has it (absolute, or relative to the working directory); both are compared as
    real paths, so a folder reached through a symbolic link (``/tmp`` on macOS) gives the same text as Lightning's
    ``best_model_path`` (a real path).
    """
    if path is None or str(path) in ("", "nan", "None"):
        return ""
    rel = os.path.relpath(os.path.realpath(os.fspath(path)), os.path.realpath(os.fspath(folder)))
    return Path(rel).as_posix()


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies in ``folder``, by their absolute paths or by their real paths."""
    for a, b in ((os.path.normpath(os.path.abspath(path)), os.path.normpath(os.path.abspath(folder))),
                 (os.path.realpath(path), os.path.realpath(folder))):
        if os.path.commonpath([a, b]) == b:
            return True
    return False


_MAPPED: set[str] = set()  # folders whose old absolute row paths were read inside them (noted once per process)


def resolve_row_path(recorded: str, folder: str | os.PathLike, *, what: str = "file") -> Path:
    """The file a row's path column names, inside ``folder`` (the folder the reading command was given).

    A row written by this version holds a path relative to the store's folder (:func:`row_path`): it is read as
    ``folder / recorded``. A store written before held absolute paths (or paths relative to the working directory of
    the time): such a path is used as it is only when it lies inside ``folder``. Otherwise it named the folder where
    the store was written; the file the row means is the one at the same place in the folder given — a copy or a
    moved folder holds its own — so the longest tail of the path (two parts at least, e.g.
    ``checkpoints/<cell>/fold0/best.ckpt``) that is a file inside ``folder`` is read, with one log line per folder.
    Nothing outside ``folder`` is ever read: the weights of a copy are the copy's, whatever the original holds now.

    Parameters
    ----------
    recorded : str
        The row's value (``checkpoint`` or ``predictions`` column).
    folder : path
        The folder holding the store the row was read from.
    what : str
        The row in words, for messages (``"checkpoint of eegnet-full-flatten fold 0"``).

    Returns
    -------
    Path
        An absolute path inside ``folder``; it may not exist (the caller says what is missing and how to fix it).

    Raises
    ------
    OutsideFolderError
        The row names a file outside ``folder`` and ``folder`` holds no file at the same place (names both).
    """
    folder_abs = Path(os.path.abspath(folder))
    rec = Path(str(recorded))
    direct = Path(os.path.normpath(folder_abs / rec))  # an absolute ``rec`` stays itself
    inside = _inside(direct, folder_abs)
    if inside and direct.is_file():
        return direct
    for i in range(1, len(rec.parts) - 1):  # longest tail first, at least two parts
        tail = folder_abs.joinpath(*rec.parts[i:])
        if ".." not in rec.parts[i:] and tail.is_file():
            if str(folder_abs) not in _MAPPED:
                _MAPPED.add(str(folder_abs))
                log.warning("%s: its rows name files as %s (a store written before row paths were relative to it); "
                            "reading each at the same place inside %s", folder, recorded, folder_abs)
            return tail
    if inside:
        return direct
    raise OutsideFolderError(
        f"the {what} in {folder_abs} names {recorded}, outside that folder, and the folder holds no such file; "
        f"fix: put the file at its place inside {folder_abs}, or rerun the command that wrote the row there "
        "(a results folder is read only from inside)")


class StoreSchemaError(EEGFMError, ValueError):
    """A result row's value does not fit its column's type in :data:`COLUMN_TYPES` (``seed="x"``)."""


class FailedCellsError(RuntimeError):
    """Some cells (or conditions) of a command failed; every other one was written (see ``failures.json``)."""


def config_hash(cfg: dict) -> str:
    """sha256 (12 hex) of a JSON-serialisable config (keys sorted)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]


PROVENANCE_PACKAGES = ("torch", "lightning", "braindecode", "mne", "numpy", "scikit-learn", "peft")
"""The libraries whose versions every result row records (``library_versions``)."""


def library_versions() -> str:
    """``torch=2.14.1;lightning=2.6.6;...`` for :data:`PROVENANCE_PACKAGES` (``missing`` where not installed): the
    versions that change the numbers, recorded in every row so that a row keeps its provenance wherever it goes."""
    out = []
    for pkg in PROVENANCE_PACKAGES:
        try:
            out.append(f"{pkg}={version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg}=missing")
    return ";".join(out)


def code_version() -> str:
    """``eegfm_bench`` version plus the git commit of the source tree when available (``+dirty`` if modified)."""
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


def _atomic_write(obj: pd.DataFrame | pa.Table, path: Path) -> None:
    """Write a frame (``.csv`` / ``.parquet``) or an Arrow table (``.parquet``) under a unique temporary name, then
    rename it onto ``path`` (:func:`~eegfm_bench.atomic.atomic_path`: a failed write leaves ``path`` as it was)."""
    with atomic_path(path) as tmp:
        if isinstance(obj, pa.Table):
            pq.write_table(obj, tmp)
        elif path.suffix == ".parquet":
            obj.to_parquet(tmp, index=False)
        else:
            obj.to_csv(tmp, index=False)


class ResultStore:
    """Long-format result rows under ``folder``: one immutable part file per append, merged into ``results.csv`` +
    ``results.parquet`` for people.

    Every :meth:`append` writes its rows to a new part ``parts/<time_ns>-<host>-<pid>-<random>.parquet`` (a
    temporary name, then ``os.replace``): no file another writer may be writing is ever rewritten, so any number of
    processes — local workers or jobs on several nodes of a shared filesystem — can append to one folder at once
    without losing a row, and a writer killed mid-append leaves only an ignored ``*.tmp``. :meth:`load` reads every
    part (parts already read are cached: they never change) and keeps, for each :data:`KEY_COLUMNS` key, the row of
    the newest part. :meth:`merge` writes ``results.csv`` / ``results.parquet`` from it (atomically; a snapshot of
    the parts present at that moment) and then ``results.manifest.json``, the names of the parts that snapshot
    holds (what :meth:`unmerged` compares). With ``merge=True`` (the default, single-process commands) every append
    also merges, so the human tables are always current; workers of a launcher pass ``merge=False`` (an append then
    costs one small file whatever the table's size) and the parent merges once at the end.

    Every column has a fixed type (:data:`COLUMN_TYPES`; a column it does not name keeps the type its writer gave
    it, strings as strings): parts are written and read in those types, whatever their values look like (a config
    hash ``123456e78901`` stays that string).

    A folder written before parts existed (``results.csv`` only) is read as is (typed by :data:`COLUMN_TYPES`, other
    columns as strings); its first append turns the CSV into the first part (``parts/0-legacy.parquet``).

    Parameters
    ----------
    folder : path
        Output folder (created if needed).
    write : bool
        ``False`` on DDP ranks other than 0: :meth:`append` then writes nothing (rank 0 writes the same rows).
    merge : bool
        Rewrite ``results.csv`` / ``.parquet`` after every append.
    """

    _part_cache: OrderedDict = OrderedDict()  # (path, size, columns) -> Arrow table, least recently used first
    COMPACT_EVERY = 256
    """A worker's append (``merge=False``) that finds more parts than this folds them into one (:meth:`compact`)."""
    MAX_FOLDED = 8
    """Compacted parts kept side by side before :meth:`compact` folds them too."""
    COMPACT_ON_MERGE = 16
    """:meth:`merge` first folds the parts when there are more than this."""

    def __init__(self, folder: str | os.PathLike, write: bool = True, merge: bool = True):
        self.folder = Path(folder)
        self.write = bool(write)
        self.merge_on_append = bool(merge)
        if self.write:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.csv = self.folder / "results.csv"
        self.parquet = self.folder / "results.parquet"
        self.manifest = self.folder / "results.manifest.json"
        self.parts_dir = self.folder / "parts"

    # ------------------------------------------------------------------------------------------------ reading
    def parts(self) -> list[Path]:
        """Finished part files, oldest first (``*.tmp`` of an interrupted writer are ignored)."""
        if not self.parts_dir.is_dir():
            return []
        return sorted((p for p in self.parts_dir.iterdir() if p.suffix == ".parquet"), key=_part_order)

    def _read_part(self, p: Path, columns: tuple | None = None) -> pa.Table:
        """One part in the store's types (``columns``: only those), from the process-wide LRU cache (parts never
        change in place)."""
        cache = ResultStore._part_cache
        key = (str(p.resolve()), p.stat().st_size, columns)
        table = cache.get(key)
        if table is None:
            table = _conform(pq.read_table(p, columns=list(columns) if columns else None), str(p))
            cache[key] = table
            while len(cache) > PART_CACHE_SIZE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return table

    def _read_parts(self, columns: tuple | None = None) -> tuple[list[pa.Table], list[str]]:
        """Every part, oldest first, and the names of the parts read; a part folded away by a concurrent
        :meth:`compact` is read again from the listing that replaced it."""
        parts = self.parts()
        for _ in range(5):
            try:
                return [self._read_part(p, columns) for p in parts], [p.name for p in parts]
            except FileNotFoundError:
                parts = self.parts()  # compacted between the listing and the read: list again
        return [self._read_part(p, columns) for p in parts], [p.name for p in parts]

    def _table(self, columns: tuple | None = None) -> tuple[pa.Table, list[str]]:
        """The current rows (newest part wins per key) as an Arrow table in the store's types, and the parts read
        (none: the rows of a CSV-only folder, or none at all)."""
        tables, names = self._read_parts(columns)
        if not tables:
            if not self.csv.is_file():
                return _empty_table(columns), []
            table = _read_csv_table(self.csv)
            tables = [table.select(list(columns)) if columns else table]
        return _latest(_concat(tables)), names

    def load(self) -> pd.DataFrame:
        """All current rows (empty frame with :data:`ROW_COLUMNS` if none), each column in its
        :data:`COLUMN_TYPES` type (integers with gaps as floats with NaN, as pandas has it)."""
        return self._table()[0].to_pandas()

    def keys(self, **where) -> pd.DataFrame:
        """The :data:`KEY_COLUMNS` (as strings) of the current rows whose columns equal ``where`` (compared as
        strings), without the values: what ``done_cells`` (a job's start-up read, ``status``, ``plan``) needs, at a
        fraction of the cost on a large store."""
        tables, _ = self._read_parts(tuple(KEY_COLUMNS))
        if not tables:
            if not self.csv.is_file():
                return _empty_table(tuple(KEY_COLUMNS)).to_pandas()
            tables = [_read_csv_table(self.csv).select(KEY_COLUMNS)]
        table = _concat(tables)
        table = pa.table([pc.cast(table[c], _STR) for c in KEY_COLUMNS], names=KEY_COLUMNS)
        if where:
            mask = functools.reduce(pc.and_, (pc.equal(table[k], str(v)) for k, v in where.items()))
            table = table.filter(pc.fill_null(mask, False))
        return table.to_pandas().drop_duplicates(keep="last")

    # ------------------------------------------------------------------------------------------------ compaction
    def compact(self, *, wait: bool = False, full: bool = False) -> Path | None:
        """Fold the parts present now into one (the newest row of each key; parts written meanwhile stay as they
        are) so that reading the store opens a handful of files at any size.

        Leveled: the small parts are folded into a new compacted part, and the compacted parts themselves only
        once there are more than :attr:`MAX_FOLDED` of them (or with ``full``), so the rows a worker rewrites
        stay near-linear in the rows appended, not quadratic.

        The compacted part is named after the newest part it holds, so it sorts before every part written after
        them; it is written (atomically) before they are deleted, and readers that listed a deleted part list
        again. One compaction at a time per folder (an ``fcntl`` lock on ``parts/.compact.lock``): with
        ``wait=False`` a process that finds the lock taken returns at once. Returns the compacted part, or None.
        """
        if not self.write or not self.parts_dir.is_dir():
            return None
        with open(self.parts_dir / ".compact.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None
            try:
                parts = self.parts()
                folded = [p for p in parts if "-~compact-" in p.name]
                if len(folded) <= self.MAX_FOLDED and not full:  # leveled: fold the small parts only, so a
                    parts = [p for p in parts if p not in folded]  # worker never rewrites the whole store
                if len(parts) < 2:
                    return None
                table = _latest(_concat([self._read_part(p) for p in parts]))
                head = max(_part_order(p)[0] for p in parts)
                path = self.parts_dir / f"{head:020d}-~compact-{uuid.uuid4().hex[:8]}.parquet"
                _atomic_write(table, path)
                for p in parts:
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()
                return path
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

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

    # ------------------------------------------------------------------------------------------------ writing
    def append(self, rows: list[dict]) -> Path | None:
        """Add rows as one new part file (newer rows win over older rows with the same :data:`KEY_COLUMNS`);
        then merge the human tables unless ``merge=False``. Returns the part written. An absolute path in a
        :data:`PATH_COLUMNS` column is stored relative to this folder (:func:`row_path`); a relative one is taken as
        relative to it already.

        Raises
        ------
        ValueError
            If a row lacks a column of :data:`ROW_COLUMNS`.
        StoreSchemaError
            If a value does not fit its column's :data:`COLUMN_TYPES` type (``seed="x"``).
        """
        if not rows or not self.write:
            return None
        new = pd.DataFrame(rows)
        missing = [c for c in ROW_COLUMNS if c not in new.columns]
        if missing:
            raise ValueError(f"result rows lack columns {missing}")
        for c in PATH_COLUMNS:  # absolute paths are stored relative to this folder (a relative one already is)
            if c in new.columns:
                new[c] = [row_path(v, self.folder) if isinstance(v, (str, os.PathLike)) and os.path.isabs(v) else v
                          for v in new[c]]
        table = _part_table(new[ROW_COLUMNS + [c for c in new.columns if c not in ROW_COLUMNS]])
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        if self.csv.is_file() and not self.parts():  # a folder from before parts: its CSV becomes the first part
            _atomic_write(_read_csv_table(self.csv), self.parts_dir / "0-legacy.parquet")
        name = f"{time.time_ns():020d}-{socket.gethostname().replace('-', '_')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path = self.parts_dir / f"{name}.parquet"
        _atomic_write(table, path)
        if self.merge_on_append:
            self.merge()
        elif sum(1 for _ in self.parts_dir.glob("*.parquet")) > self.COMPACT_EVERY:
            self.compact()  # a worker folds the parts when no other process is doing it
        return path

    def unmerged(self) -> bool:
        """True if a part is not among those ``results.csv`` was merged from (``results.manifest.json``): workers
        wrote rows the human tables may not show yet. Exact, whatever the file system's timestamp resolution; a
        folder merged before the manifest existed counts as unmerged until its next merge, and so does one whose
        ``results.csv`` / ``.parquet`` no longer has the size the manifest recorded (cut by a copy or another tool:
        the parts hold every row, the next merge writes the tables whole again)."""
        parts = self.parts()
        if not parts:
            return False
        if not self.csv.is_file() or not self.manifest.is_file():
            return True
        try:
            manifest = json.loads(self.manifest.read_text())
            merged = set(manifest["parts"])
        except (ValueError, KeyError, TypeError):  # a damaged manifest: merge again
            return True
        sizes = manifest.get("sizes", {})  # the tables as merged: one cut or altered since is written again
        if any(f.name in sizes and (not f.is_file() or f.stat().st_size != sizes[f.name])
               for f in (self.csv, self.parquet)):
            return True
        return any(p.name not in merged for p in parts)

    def merge(self) -> pd.DataFrame:
        """Write ``results.csv`` and ``results.parquet`` from every part present now (atomic replace), then
        ``results.manifest.json`` (the parts they hold; one merger at a time writes the three, an ``fcntl`` lock on
        ``parts/.merge.lock``); return the table."""
        if self.write and len(self.parts()) > self.COMPACT_ON_MERGE:
            self.compact(wait=True, full=True)
        table, names = self._table()
        df = table.to_pandas()
        if self.write and names:
            with open(self.parts_dir / ".merge.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    _atomic_write(df, self.csv)
                    _atomic_write(table, self.parquet)
                    sizes = {f.name: f.stat().st_size for f in (self.csv, self.parquet)}
                    atomic_write_text(self.manifest, json.dumps({"parts": sorted(names), "sizes": sizes}) + "\n")
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        return df


PART_CACHE_SIZE = 4096
"""Parts (per column selection) kept in memory by a process; an LRU, so a store of any size never empties it at
once (a cleared cache made every load of a 20,000-part store read every file again)."""


def _part_order(p: Path):
    head = p.name.split("-", 1)[0]
    return (int(head) if head.isdigit() else 0, p.name)


def _part_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns as strings (missing values kept missing), so mixed columns (``fold``: 0, 1, ``pooled``)
    survive Parquet."""
    df = df.copy()
    for c in df.columns:
        if df[c].dtype == object:
            df[c] = df[c].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    return df


def _part_table(df: pd.DataFrame) -> pa.Table:
    """Rows as a part: an Arrow table in the store's types (:data:`COLUMN_TYPES`)."""
    return _conform(pa.Table.from_pandas(_part_frame(df), preserve_index=False), "the rows appended")


def _cast(col: pa.ChunkedArray, want: pa.DataType, name: str, where: str) -> pa.ChunkedArray:
    """``col`` as ``want`` (safe cast: no truncation; integers from text via floats, ``"12.0"`` as CSV writes an
    integer column with gaps; NaN as missing)."""
    try:
        if pa.types.is_integer(want):
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                try:
                    return pc.cast(col, want)
                except pa.ArrowInvalid:
                    col = pc.cast(col, _FLOAT)
            if pa.types.is_floating(col.type):
                col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
        return pc.cast(col, want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise StoreSchemaError(f"{where}: column {name!r} ({col.type}) does not fit the store's type {want} ({err}); "
                               f"fix: write {name} as {want} (eegfm_bench.results.COLUMN_TYPES)") from None


def _conform(table: pa.Table, where: str) -> pa.Table:
    """``table`` with every column of :data:`COLUMN_TYPES` cast to its type and every other column as it is
    (large strings as strings); no schema metadata."""
    cols = []
    for name, col in zip(table.column_names, table.columns):
        want = COLUMN_TYPES.get(name)
        if want is None and pa.types.is_large_string(col.type):
            want = _STR
        cols.append(col if want is None or col.type == want else _cast(col, want, name, where))
    return pa.table(cols, names=table.column_names)


def _read_csv_table(path: Path) -> pa.Table:
    """A ``results.csv`` read as text, then typed by :data:`COLUMN_TYPES` (other columns stay strings)."""
    df = pd.read_csv(path, dtype=str, keep_default_na=True)
    return _conform(pa.Table.from_pandas(df, preserve_index=False), str(path))


def read_results_csv(path: str | os.PathLike) -> pd.DataFrame:
    """A merged ``results.csv`` in the store's types (:data:`COLUMN_TYPES`; other columns as strings), as
    :meth:`ResultStore.load` returns it: what a reader of the merged table should use instead of ``pandas.read_csv``,
    which reads a config hash ``123456e78901`` as ``inf`` and ``012345678901`` as ``12345678901``.

    Raises
    ------
    StoreSchemaError
        A value does not fit its column's type.
    """
    return _read_csv_table(Path(path)).to_pandas()


def _empty_table(columns: tuple | None = None) -> pa.Table:
    return pa.schema([(c, COLUMN_TYPES[c]) for c in (columns or ROW_COLUMNS)]).empty_table()


def _concat(tables: list[pa.Table]) -> pa.Table:
    """The parts one after the other; a column missing from a part is missing there, and a column the store's
    schema does not name that two writers typed differently is read as strings."""
    if len(tables) == 1:
        return tables[0]
    types: dict[str, set] = {}
    for t in tables:
        for f in t.schema:
            if not pa.types.is_null(f.type):
                types.setdefault(f.name, set()).add(f.type)
    clash = {c for c, ts in types.items() if len(ts) > 1}
    if clash:
        tables = [pa.table([pc.cast(t[c], _STR) if c in clash else t[c] for c in t.column_names],
                           names=t.column_names) for t in tables]
    table = pa.concat_tables(tables, promote_options="permissive")
    order = ROW_COLUMNS + [c for c in table.column_names if c not in ROW_COLUMNS]
    return table.select([c for c in order if c in table.column_names])


def _latest(table: pa.Table) -> pa.Table:
    """The last row of each :data:`KEY_COLUMNS` key (the newest part's), rows in their order (missing key values
    compare equal)."""
    keys = [c for c in KEY_COLUMNS if c in table.column_names]
    if not keys or table.num_rows < 2:
        return table
    dup = table.select(keys).to_pandas().duplicated(keep="last").to_numpy()  # pandas' factorising: 3x Arrow's group_by
    return table.filter(pa.array(~dup)) if dup.any() else table


# ------------------------------------------------------------------------ cells: names and the done set
def run_label(model: str, regime: str, head: str) -> str:
    """Folder-style name of a cv run × head (``eegnet-full-flatten``)."""
    return f"{model}-{regime}-{head}"


def cell_dir_name(model: str, regime: str, head: str, chash: str) -> str:
    """``<model>-<regime>-<head>-<hash[:8]>``: the folder of one cell's checkpoints under its config hash."""
    return f"{run_label(model, regime, head)}-{chash[:8]}"


class CellKey:
    """The name and done-set key of a cell, from its ``model``, ``regime``, ``head``, ``fold`` and ``chash``
    (shared by :class:`Cell` and :class:`eegfm_bench.runs.cv.progress.CellRef`)."""

    @property
    def id(self) -> str:
        """:func:`cell_id`: ``<model>/<regime>/<head>/fold<k>/<config hash>``."""
        return cell_id(self.model, self.regime, self.head, self.fold, self.chash)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """The :func:`done_cells` key: ``(model, regime, head, fold, config hash)`` as strings."""
        return (self.model, self.regime, self.head, str(self.fold), self.chash)


@dataclass(frozen=True)
class Cell(CellKey):
    """One cell of a cv: a run entry (:class:`~eegfm_bench.config.cv.RunConfig`), one of its heads, one fold,
    and the cell's config hash."""

    run: Any
    head: str
    fold: int
    chash: str

    @property
    def model(self) -> str:
        return self.run.model

    @property
    def regime(self) -> str:
        return self.run.regime


def done_cells(store, experiment: str) -> set[tuple[str, str, str, str, str]]:
    """``(model, regime, head, fold, config hash)`` of every cell of ``experiment`` with a clean test row in
    ``store``, read once (the resumption check of ``cv``, ``status`` and ``plan``; values as strings)."""
    d = store.keys(condition="clean", metric="balanced_accuracy", experiment=str(experiment))
    if d.empty:
        return set()
    cols = [d[c].astype(str).to_numpy() for c in ("model", "regime", "head", "fold", "config_hash")]
    return set(zip(*cols))


def cell_key(c: "Cell") -> tuple[str, str, str, str, str]:
    """The :func:`done_cells` key of a cell (:attr:`Cell.key`)."""
    return c.key


def cell_id(model: str, regime: str, head: str, fold: int, chash: str) -> str:
    """``<model>/<regime>/<head>/fold<k>/<config hash>``: one cell, as jobs and ``eegfm-bench status`` name it."""
    return f"{model}/{regime}/{head}/fold{fold}/{chash}"
