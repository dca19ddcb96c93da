"""Windows and their on-disk cache, built through the ingestion checks (:mod:`eegfm_bench.data.ingest`).

:func:`load_windows` turns a task's recordings into a :class:`WindowSet` — ``X`` of shape
``(n_windows, n_chans, n_times)`` float32 in the backbone's unit (see ``meta["preprocessing"]``), labels,
subject / recording / window index per window, channel names and provenance — and caches it with its ingest report
(``ingest_report.json`` / ``.md``, :class:`~eegfm_bench.data.qc.IngestReport`).

A window set is built in two passes so that memory does not grow with the corpus (:func:`_build_cache`): every
recording's windows go to their own cache entry (``<cache>/recordings/<task>-<key>/X.npy``) as soon as they are cut
(``n_jobs`` recordings at once, each in its own process), keeping only their labels; the channel set, the reference
and ``windows.balance`` are then decided on the labels. The windows, their order and the report equal the serial
build's whatever ``n_jobs``.

**The corpus is on disk once**: the per-recording entries are the store. A window set's folder holds
its labels, meta, ingest report and an index (``index.npz``: per window, its entry and its row there; per entry, the
columns the channel set keeps), never the windows again; its ``X`` is an :class:`EntryWindows`, a read-only array
that gathers the rows it is asked for from the entries' memmaps and applies the set's reference to them, the same
operations on the same float32 values as an assembly into one array would apply, so every window is bit for bit
what one assembled array would hold. Why this design rather than streaming every window into one final memmap: the
entries are shared by every window set built from them (another subject subset, another reference, channel set or
balance, the resumed or sharded build), so they must stay; a final copy would double the disk. The assembly reads only
the entries' headers, so it is cheap (the one step after a sharded ingest). A window set whose entry is missing or
damaged (its ``X.npy`` absent or not the size recorded in the index) is rebuilt, with a line naming the entry;
``eegfm-bench cache --prune`` keeps every entry a kept window set reads (:mod:`eegfm_bench.data.cache`).

The preprocessing the windows are built with is resolved once, model → task → cv, by :func:`resolve_preprocessing`
(a :class:`WindowPreprocessing`; the cv, ``plan`` and the paper plan read the same record).

The cache key is the sha256 of (the task's resolved spec, every recording's content hash — the sha256 of its
bytes, remembered per file version by path + size + mtime + ctime + inode, :func:`~eegfm_bench.data.qc.file_sha256`
— the preprocessing, the cache version). A file whose content changes gets a new key, so its windows are rebuilt,
even when the edit keeps its size and restores its mtime. A second call with the same inputs opens the index and
reads no recording.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed, parallel_config
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from eegfm_bench.config import ConfigError
from eegfm_bench.data.ingest import (BENIGN_WARNINGS, DeclaredTask, balance_windows, cut_windows, ingest_recording,
                                     recording_label)
from eegfm_bench.data.cache import WINDOW_INDEX as INDEX, BuildLock, default_cache_dir, mark_used
from eegfm_bench.data.preprocessing import (Preprocessing, bandpass_native, capped_band, filter_native, notch_native,
                                            reference_windows, resample_to)
from eegfm_bench.data.qc import IngestError, IngestReport, RecordingQC, capture_warnings, companion_files, file_sha256
from eegfm_bench.data.sources import DataNotFoundError, RecordingReadError
from eegfm_bench.data.tasks import get_task

CACHE_VERSION = 3
LAYOUT = "entries-index"
"""How a window set is stored (in its cache key, so a folder of another layout is never opened as this one)."""


class NonFiniteWindowError(IngestError):
    """A window contains NaN or Inf (raised under ``strict: true``; otherwise such windows are rejected)."""


class MissingEntryError(IngestError):
    """A recording's per-recording entry is missing where only an assembly may run (after a sharded ingest): the
    recording is named, never left out of the window set."""


class DamagedEntryError(IngestError):
    """A per-recording entry that a window set reads is gone or not what its index recorded (its ``X.npy`` of
    another shape or size): the entry is named; loading the windows again rebuilds it."""


class EntryWindows:
    """The windows of a cached window set, read from the per-recording entries that store them (the corpus is on
    disk once, module docstring): a read-only array of shape ``(n_windows, n_chans, n_times)``, float32.

    Indexing as numpy's (an int, a slice, an integer or boolean array on the window axis, optionally followed by
    indices of the channel and time axes) reads only the windows asked for: per entry, its rows from the entry's
    memmap, the window set's columns, then the window set's reference (:func:`reference_windows`) — the operations
    the assembly applied when it wrote an ``X.npy`` of its own, on the same float32 values, so every window is bit
    for bit the same. ``np.asarray(X)`` reads them all. A pickled copy (a DataLoader worker) reopens the memmaps.

    Parameters
    ----------
    root : path
        The folder of the entries (``<cache>/recordings``).
    entries : sequence of str
        Entry folder names, one per recording (part) of the window set, in its order.
    start : array of int, shape (n_parts + 1,)
        The window index of each part's first window; ``start[-1]`` is ``n_windows``.
    rows : array of int, shape (n_windows,)
        Each window's row in its entry's ``X.npy``.
    cols : array of int, shape (n_parts, n_chans)
        The entry columns of each part's channels, in the window set's channel order.
    entry_shape : array of int, shape (n_parts, 3)
        The shape of each entry's ``X.npy`` (checked when it is opened).
    entry_bytes : array of int, shape (n_parts,)
        The size of each entry's ``X.npy`` in bytes (:meth:`damaged`).
    reference : {"average", "none"}
        The window set's reference, over its ``n_chans`` channels.

    Raises
    ------
    DamagedEntryError
        On reading: an entry whose ``X.npy`` is gone, unreadable or of another shape than the index recorded.
    """

    dtype = np.dtype(np.float32)
    ndim = 3

    def __init__(self, root, entries, start, rows, cols, entry_shape, entry_bytes, reference: str):
        self.root = Path(root)
        self.entries = [str(e) for e in entries]
        self.start = np.asarray(start, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        self.entry_shape = np.asarray(entry_shape, dtype=np.int64)
        self.entry_bytes = np.asarray(entry_bytes, dtype=np.int64)
        self.reference = reference
        self.shape = (int(self.start[-1]), int(self.cols.shape[1]), int(self.entry_shape[0, 2]))
        n_ch = self.shape[1]
        self._all_cols = (self.entry_shape[:, 1] == n_ch) & (self.cols == np.arange(n_ch)).all(axis=1)
        self._maps: dict[int, np.ndarray] = {}

    @classmethod
    def open(cls, folder: Path, reference: str) -> "EntryWindows":
        """The windows of the window set in ``folder``, from its ``index.npz`` (entries under
        ``folder.parent / "recordings"``)."""
        with np.load(Path(folder) / INDEX) as ix:
            return cls(Path(folder).parent / "recordings", ix["entry"].astype(str), ix["start"], ix["row"],
                       ix["cols"], ix["entry_shape"], ix["entry_bytes"], reference)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        """The bytes of the windows once read (float32)."""
        return self.size * self.dtype.itemsize

    def damaged(self) -> list[tuple[Path, str]]:
        """The entries whose ``X.npy`` is gone or not the size the index recorded: ``[(entry folder, why)]`` (stat
        calls only, no window read)."""
        out = []
        for name, size in zip(self.entries, self.entry_bytes):
            path = self.root / name / "X.npy"
            try:
                got = path.stat().st_size
            except OSError:
                out.append((path.parent, "its X.npy is gone"))
                continue
            if got != int(size):
                out.append((path.parent, f"its X.npy holds {got} bytes, the index recorded {int(size)}"))
        return out

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": {}}

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        X = self._gather(np.arange(self.shape[0]))
        return X if dtype is None else X.astype(dtype, copy=False)

    def __getitem__(self, key) -> np.ndarray:
        rest: tuple = ()
        if isinstance(key, tuple):
            key, rest = (key[0], key[1:]) if key else (slice(None), ())
        rows, local = self._rows_of(key)
        return self._gather(rows)[(local,) + rest]

    def _rows_of(self, key) -> tuple[np.ndarray, Any]:
        """The sorted windows that ``key`` (on the window axis) reads, and ``key`` on the array of those windows."""
        n = self.shape[0]
        if isinstance(key, (int, np.integer)):
            i = int(key) + (n if int(key) < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"index {int(key)} is out of bounds for axis 0 with size {n}")
            return np.array([i], dtype=np.int64), 0
        if isinstance(key, slice):
            return np.arange(n, dtype=np.int64)[key], slice(None)
        if key is Ellipsis or key is None:
            return np.arange(n, dtype=np.int64), key
        idx = np.asarray(key)
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise IndexError(f"boolean index of shape {idx.shape} does not match axis 0 of size {n}")
            return np.flatnonzero(idx), slice(None)
        if idx.dtype.kind not in "iu":
            raise IndexError(f"only integers, slices, Ellipsis, None and integer or boolean arrays are valid indices "
                             f"(got {idx.dtype})")
        idx = np.where(idx < 0, idx + n, idx).astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"index {int(idx.max() if idx.max() >= n else idx.min())} is out of bounds for axis 0 "
                             f"with size {n}")
        uniq, inv = np.unique(idx, return_inverse=True)
        if idx.ndim == 1 and len(uniq) == len(idx) and np.array_equal(uniq, idx):
            return uniq, slice(None)
        return uniq, inv.reshape(idx.shape)

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """Windows ``rows`` (window indices) read entry by entry, shape ``(len(rows), n_chans, n_times)``."""
        out = np.empty((len(rows),) + self.shape[1:], dtype=np.float32)
        if not len(rows):
            return out
        part = np.searchsorted(self.start, rows, side="right") - 1
        order = np.argsort(part, kind="stable")
        for sel in np.split(order, np.flatnonzero(np.diff(part[order])) + 1):
            p = int(part[sel[0]])
            X = np.asarray(self._entry(p)[self.rows[rows[sel]]])
            if not self._all_cols[p]:
                X = X[:, self.cols[p]]
            out[sel] = reference_windows(np.ascontiguousarray(X, dtype=np.float32), self.reference)
        return out

    def _entry(self, p: int) -> np.ndarray:
        """Part ``p``'s entry ``X.npy``, memory-mapped once and checked against the index."""
        X = self._maps.get(p)
        if X is None:
            path = self.root / self.entries[p] / "X.npy"
            fix = "fix: load the windows again (the same command), which rebuilds the damaged entry"
            try:
                X = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as err:
                raise DamagedEntryError(f"{path} cannot be read ({err}); {fix}") from err
            if X.shape != tuple(self.entry_shape[p]) or X.dtype != self.dtype:
                raise DamagedEntryError(f"{path} holds {X.dtype} {X.shape}, the window set's index recorded float32 "
                                        f"{tuple(int(v) for v in self.entry_shape[p])}; {fix}")
            self._maps[p] = X
        return X


@dataclass
class WindowSet:
    """All windows of one task under one preprocessing.

    Attributes
    ----------
    X : ndarray or EntryWindows, shape (n_windows, n_chans, n_times), float32
        Windows in ``meta["preprocessing"]["unit"]``; loaded from the cache, an :class:`EntryWindows` that reads
        the rows asked for from the per-recording entries (``np.asarray(X)`` reads them all).
    y : ndarray, shape (n_windows,), int64
    subject, recording : ndarray of str, shape (n_windows,)
    window_index : ndarray of int64, shape (n_windows,)
        Index of the window within its recording (among the kept windows).
    provenance : ndarray of str, shape (n_windows,)
        Provenance group per window (default: the dataset name).
    ch_names : list of str
        Canonical 10-05 names of the channel axis.
    sfreq : float
        Sampling rate of ``X`` in Hz.
    class_names : list of str
    meta : dict
        Task, files with their sha256, applied preprocessing (per dataset and per recording), cache key, the path
        of the ingest report.
    """

    X: np.ndarray
    y: np.ndarray
    subject: np.ndarray
    recording: np.ndarray
    window_index: np.ndarray
    provenance: np.ndarray
    ch_names: list[str]
    sfreq: float
    class_names: list[str]
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        """One line: task, shape, rate, classes, subjects (the dataclass's own repr printed every array whole)."""
        task = self.meta.get("task", "?")
        labels, counts = np.unique(np.asarray(self.y), return_counts=True)
        names = list(self.class_names)
        # every window counted: a label outside the class names shows as its number, never dropped from the count
        classes = ", ".join(f"{names[int(k)] if 0 <= int(k) < len(names) else f'label {int(k)}'}: {int(n)}"
                            for k, n in zip(labels, counts))
        length = f"{self.n_times / self.sfreq:g} s windows" if self.sfreq else "sfreq 0: no window length"
        return (f"WindowSet(task={task!r}, X={tuple(int(v) for v in self.X.shape)} (windows, channels, samples), "
                f"sfreq={self.sfreq:g} Hz, {length}, classes {{{classes}}}, "
                f"{len(self.subjects)} subjects, {len(np.unique(self.recording))} recordings)")

    @property
    def n_times(self) -> int:
        return int(self.X.shape[-1])

    @property
    def subjects(self) -> np.ndarray:
        """Sorted unique subject ids."""
        return np.unique(self.subject)

    def subset(self, idx: np.ndarray) -> "WindowSet":
        """Windows ``idx`` (integer indices); ``X`` is read into memory only for those rows."""
        idx = np.asarray(idx)
        return WindowSet(np.asarray(self.X[idx]), self.y[idx], self.subject[idx], self.recording[idx],
                         self.window_index[idx], self.provenance[idx], list(self.ch_names), self.sfreq,
                         list(self.class_names), dict(self.meta))


def window_reference(ws: "WindowSet") -> str:
    """The reference a window set was built with (``average`` or ``none``; ``none`` when not recorded)."""
    ref = (ws.meta.get("reference") or {}).get("reference") or (ws.meta.get("preprocessing") or {}).get("reference")
    return ref if ref in ("average", "none") else "none"


def select_channels(ws: "WindowSet", names: list[str]) -> "WindowSet":
    """The windows of ``ws`` on the channels ``names`` (in that order), re-referenced over them when ``ws`` is
    average-referenced (the reference always covers the final channel set; :func:`reference_windows`).

    Parameters
    ----------
    ws : WindowSet
    names : list of str
        Channel names of ``ws`` (case-insensitive).

    Returns
    -------
    WindowSet
        ``X`` read into memory, shape ``(n_windows, len(names), n_times)``; ``meta["reference"]`` lists ``names``.

    Raises
    ------
    ValueError
        A name ``ws`` lacks (all of them are named).
    """
    low = {c.lower(): i for i, c in enumerate(ws.ch_names)}
    missing = [c for c in names if c.lower() not in low]
    if missing:
        raise ValueError(f"the windows lack channels {missing} (they have {list(ws.ch_names)})")
    idx = [low[c.lower()] for c in names]
    X = np.asarray(ws.X[:, idx], dtype=np.float32)
    ref = window_reference(ws)
    if len(idx) < len(ws.ch_names):
        reference_windows(X, ref)
    meta = {**ws.meta, "reference": {"reference": ref, "channels": list(names) if ref == "average" else []}}
    return WindowSet(X, ws.y, ws.subject, ws.recording, ws.window_index, ws.provenance, [ws.ch_names[i] for i in idx],
                     ws.sfreq, list(ws.class_names), meta)


@dataclass(frozen=True)
class WindowPreprocessing:
    """The preprocessing of one window set, resolved once (:func:`resolve_preprocessing`): what the cache builds
    and keys the windows by, and what ``cv``, ``plan`` and ``plan_paper`` count samples from.

    Attributes
    ----------
    prep : Preprocessing
        What the windows are built with (rate, band, scale, reference, window length); its ``to_dict()`` enters the
        cache key (:func:`cache_key`).
    declared : Preprocessing
        The model's declared preprocessing it was resolved from.
    task_key : str
        The :attr:`~eegfm_bench.data.ingest.DeclaredTask.key` of the task it was resolved for (:func:`load_windows`
        refuses it for another task).
    start_s : float or None
        Event-locked windows: the window's start after the event onset, in s (the task's ``windows.tmin``); None for
        fixed windows.
    """

    prep: Preprocessing
    declared: Preprocessing
    task_key: str
    start_s: float | None = None

    @property
    def n_times(self) -> int:
        """Samples per window at ``prep.sfreq``."""
        return self.prep.n_times

    @property
    def end_s(self) -> float | None:
        """Event-locked windows: the window's end after the event onset, in s (``start_s + prep.window_s``)."""
        return None if self.start_s is None else float(self.start_s) + float(self.prep.window_s)


def resolve_preprocessing(task: Any, prep: Preprocessing, *, band=None, shorten_s: float = 0.0,
                          model: str = "the model") -> WindowPreprocessing:
    """The preprocessing a task's windows are built with, resolved in one place, in this order of precedence
    (each step replaces what the one before set):

    1. ``prep``: the model's declared preprocessing (rate, band, scale, reference, native window length);
    2. the task's declarations: its ``window_s`` replaces the window length, its ``reference`` the reference;
    3. the cv's changes (the confound check's variations, :mod:`eegfm_bench.runs.cv.confound`), applied last to the
       result of 2: ``band`` narrows the band-pass to its intersection with the model's (``l_freq = max(model's,
       lo)``, ``h_freq = min(model's, hi)``), ``shorten_s`` shortens the window by that many seconds. The confound
       ``offset`` moves the start (the task's ``windows.tmin``) by as much as it shortens, so the window keeps its
       end, for a task with or without ``window_s``.

    Parameters
    ----------
    task : str, dict, path or DeclaredTask
        As :func:`~eegfm_bench.data.tasks.get_task`.
    prep : Preprocessing
        The model's declared preprocessing.
    band : sequence of two floats, optional
        ``[lo, hi]`` in Hz (a cv's ``data.band``).
    shorten_s : float
        Seconds taken off the window (a cv's ``data.window_shorten_s``).
    model : str
        The model's name, for the messages.

    Returns
    -------
    WindowPreprocessing

    Raises
    ------
    ConfigError
        A band that leaves nothing of the model's (``lo >= hi`` after the intersection), or a window shortened to
        nothing.
    """
    task = get_task(task)
    s = task.spec
    over: dict[str, Any] = {}
    if s.window_s is not None:
        over["window_s"] = float(s.window_s)
    if s.reference is not None:
        over["reference"] = s.reference
    if band:
        lo, hi = (float(x) for x in band)
        l_new = max(lo, prep.l_freq or 0.0)
        h_new = min(hi, prep.h_freq) if prep.h_freq else hi
        if not l_new < h_new:
            raise ConfigError(f"data.band {list(band)} and {model}'s {prep.l_freq}-{prep.h_freq} Hz leave no band; "
                              "fix: a band that overlaps the model's")
        over.update(l_freq=l_new, h_freq=h_new)
    if shorten_s:
        length = float(over.get("window_s", prep.window_s))
        whose = f"task {task.name!r}'s window_s" if s.window_s is not None else f"{model}'s declared window"
        if not length - float(shorten_s) > 0:
            raise ConfigError(f"data.window_shorten_s {shorten_s:g} s leaves no window of the {length:g} s "
                              f"({whose}); fix: confound.offset_s below the window length, or confound.keep_length: "
                              "true (the window keeps its length and ends later)")
        over["window_s"] = length - float(shorten_s)
    final = replace(prep, **over) if over else prep
    start = float(s.windows.tmin or 0.0) if s.windows.mode == "events" else None
    return WindowPreprocessing(final, prep, task.key, start)


def _resolved(task: DeclaredTask, prep) -> WindowPreprocessing:
    """``prep`` as resolved for ``task``: a model's :class:`Preprocessing` through :func:`resolve_preprocessing`
    (the task's declarations, no cv change), a :class:`WindowPreprocessing` as it is.

    Raises
    ------
    ValueError
        A :class:`WindowPreprocessing` resolved for another task.
    """
    if not isinstance(prep, WindowPreprocessing):
        return resolve_preprocessing(task, prep)
    if prep.task_key != task.key:
        raise ValueError(f"the window preprocessing was resolved for another task than {task.name!r} (task key "
                         f"{prep.task_key} != {task.key}); fix: resolve_preprocessing(task, ...) with this task")
    return prep


def recording_fingerprints(src, recs, cache_dir: Path | None) -> list[dict]:
    """Per recording: its files and the sha256 of their bytes (plus the source's fingerprint for handle-read data)."""
    out = []
    for r in recs:
        files = ([r.path] if r.path is not None else []) + list(src.companions(r))
        digests = [file_sha256(f, cache_dir) for f in files]
        sha = digests[0] if len(digests) == 1 else hashlib.sha256("".join(digests).encode()).hexdigest()
        listed = [str(c) for f in files for c in companion_files(f)]
        out.append({"recording": r.recording, "files": listed, "sha256": sha if digests else "",
                    "extra": src.fingerprint(r)})
    return out


def cache_key(task: DeclaredTask, fingerprints: list[dict], prep: Preprocessing) -> str:
    """sha256 (16 hex) of (task spec, recordings' content hashes, preprocessing, cache version)."""
    blob = json.dumps({"task": task.key, "files": [[f["recording"], f["sha256"], f["extra"]] for f in fingerprints],
                       "prep": prep.to_dict(), "version": CACHE_VERSION, "layout": LAYOUT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_windows(task: Any, prep: Preprocessing, *, data_root: str | os.PathLike | None = None,
                 subjects: list | None = None, cache_dir: str | os.PathLike | None = None,
                 max_windows_per_subject: int | None = None, progress: bool = True,
                 n_jobs: int | None = 1, build_missing: bool = True) -> WindowSet:
    """Load (or build and cache) a task's windows under ``prep``, with their ingest report.

    Parameters
    ----------
    task : str, dict, path or DeclaredTask
        A registered task (``eegfm-bench tasks``), a preset with overrides, a YAML file, or a mapping
        (:func:`~eegfm_bench.data.tasks.get_task`).
    prep : Preprocessing or WindowPreprocessing
        The backbone's preprocessing (sfreq, band, reference, scale, window length), resolved with the task's
        ``window_s`` / ``reference`` (:func:`resolve_preprocessing`); or an already resolved one (a cv's, with its
        band and shortening), used as it is.
    data_root : path, optional
        See :func:`~eegfm_bench.data.sources.resolve_data_root`.
    subjects : list, optional
        Subset of subjects (default: every subject present).
    cache_dir : path, optional
        Cache root (default :func:`default_cache_dir`).
    max_windows_per_subject : int, optional
        Keep the first N windows of each subject in each class (for tiny test runs); applied after
        caching, so the cache is shared.
    progress : bool
        A progress bar while building and the report's summary lines.
    n_jobs : int or None
        Recordings read and preprocessed at once, each in its own process with one thread (:func:`ingest_workers`:
        ``None`` or ``-1`` for every core the job has). The windows, their order and the ingest report do not depend
        on it. Memory holds about one recording's windows per process, whatever the corpus.
    build_missing : bool
        False: only assemble, every recording's entry must be cached already (after a sharded ingest,
        :func:`eegfm_bench.runs.launch.ingest.run_ingest` with a launcher); a missing one is a :class:`MissingEntryError`
        naming the recording, never a recording left out.

    Returns
    -------
    WindowSet
        ``meta["ingest_report"]`` is the path of its ``ingest_report.md``.

    Raises
    ------
    DataNotFoundError, RecordingReadError
        From the source (missing or unreadable files; the message says how to get or fix them).
    IngestError
        A refusing policy or, under ``strict: true``, any finding (the report so far is written and named);
        :class:`MissingEntryError` with ``build_missing=False`` and a recording whose entry is not cached.
    ConfigError
        An invalid task declaration.
    ValueError
        A :class:`WindowPreprocessing` resolved for another task.
    """
    task = get_task(task)
    prep = _resolved(task, prep).prep
    listing = RecordingQC(recording="", subject="")
    try:
        with capture_warnings(listing):
            src = task.source(data_root)
            recs = src.recordings(subjects)
    except DataNotFoundError as err:
        if task.spec.obtain:
            raise DataNotFoundError(f"{err}\nhow to get the data: {task.spec.obtain}") from err
        raise
    cdir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    fps = recording_fingerprints(src, recs, cdir)
    key = cache_key(task, fps, prep)
    folder = cdir / f"{task.name}-{key}"
    built = False
    if not (folder / "COMPLETE").is_file() or _damaged_entries(folder):
        with BuildLock(folder, f"the window set {folder.name}"):  # one builder, others wait
            _drop_damaged(folder)
            if not (folder / "COMPLETE").is_file():
                _build_cache(task, src, recs, fps, prep, folder, key, progress, listing.warnings, dict(src.skipped),
                             ingest_workers(n_jobs), build_missing)
                built = True
    ws = open_window_set(folder)
    if not built:
        mark_used(folder)
    if progress and not built:
        rep = folder / "ingest_report.json"
        if rep.is_file():
            tqdm.write(IngestReport.from_dict(json.loads(rep.read_text())).summary()[0] + f" [cached: {folder}]")
    if max_windows_per_subject:
        keep = []
        for s in np.unique(ws.subject):
            for c in np.unique(ws.y):
                keep.extend(np.flatnonzero((ws.subject == s) & (ws.y == c))[:max_windows_per_subject])
        ws = ws.subset(np.sort(np.array(keep, dtype=np.int64)))
    return ws


def _damaged_entries(folder: Path) -> list[tuple[Path, str]]:
    """The per-recording entries a published window set reads that are gone or damaged (:meth:`EntryWindows.damaged`;
    an unreadable index counts as the window set's own folder damaged)."""
    if not (folder / "COMPLETE").is_file():
        return []
    try:
        return EntryWindows.open(folder, "none").damaged()
    except (OSError, ValueError, KeyError) as err:
        return [(folder, f"its index {INDEX} cannot be read ({err})")]


def _drop_damaged(folder: Path) -> None:
    """A window set that reads a gone or damaged entry is removed with that entry (one line each, printed), so that
    it is built again: the entry from its recording (or, in an assembly only, :class:`MissingEntryError`)."""
    bad = _damaged_entries(folder)
    for entry, why in bad:
        tqdm.write(f"the window set {folder.name} reads {entry}, which is damaged ({why}): both are built again")
        if entry != folder:
            with BuildLock(entry, quiet=True):
                shutil.rmtree(entry, ignore_errors=True)
    if bad:
        shutil.rmtree(folder, ignore_errors=True)


def _dataset_preprocessing(per_rec: dict[str, dict]) -> dict:
    """The preprocessing of the window set: each value shared by every recording, else the sorted distinct values."""
    if not per_rec:
        return {}
    keys = list(next(iter(per_rec.values())))
    out = {}
    for k in keys:
        vals = [v.get(k) for v in per_rec.values()]
        distinct = sorted({json.dumps(v, sort_keys=True) for v in vals})
        out[k] = vals[0] if len(distinct) == 1 else [json.loads(d) for d in distinct]
    return out


ASSEMBLY_KEYS = ("description", "obtain", "pretraining_aliases", "regions", "strict", "reference", "dataset")
"""Task settings that act only when the recordings' windows are put together (or not on the windows at all): left
out of a recording's cache key, so changing them re-reads no file."""


def recording_key(task: DeclaredTask, rec, fp: dict, prep: Preprocessing) -> str:
    """sha256 (16 hex) of what one recording's windows depend on: the task spec (less :data:`ASSEMBLY_KEYS`,
    ``channels.montage``, ``channels.min_reference_channels`` and ``windows.balance``), the recording's identity
    and content hash, the preprocessing (less the reference, applied at assembly) and the cache version."""
    s = task.spec
    hashed = {**{k: v for k, v in s.to_dict().items() if k not in ASSEMBLY_KEYS},
              "channels": {k: v for k, v in s.channels.to_dict().items() if k not in ("montage", "min_reference_channels")},
              "windows": {k: v for k, v in s.windows.to_dict().items() if k != "balance"}}
    prep_d = {k: v for k, v in prep.to_dict().items() if k not in ("reference", "source")}
    ident = {"subject": rec.subject, "recording": rec.recording, "label": rec.label, "session": rec.session,
             "run": rec.run, "path": str(rec.path) if rec.path is not None else None, "handle": rec.handle}
    blob = json.dumps({"task": hashed, "rec": ident, "sha256": fp["sha256"], "extra": fp["extra"], "prep": prep_d,
                       "version": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _ingest(task: DeclaredTask, src, rec, fp: dict) -> tuple[RecordingQC, Any, Any]:
    """One recording read and checked (labels, channels, montage): ``(qc, label, raw)``, ``raw`` ``None`` when the
    recording is dropped (``qc`` says why). The part of :func:`_read_recording` that every preprocessing shares."""
    qc = RecordingQC(recording=rec.recording, subject=rec.subject, session=rec.session, run=rec.run,
                     path=str(rec.path) if rec.path is not None else rec.handle, files=fp["files"],
                     sha256=fp["sha256"])
    label = recording_label(task, rec, qc)
    if qc.status != "kept":
        return qc, label, None
    return qc, label, ingest_recording(task, src, rec, qc)


def _read_recording(task: DeclaredTask, src, rec, fp: dict, prep: Preprocessing) -> tuple[RecordingQC, Any]:
    """One recording through ingestion, preprocessing and windowing (no reference yet): ``(qc, (names, X, y))``,
    the windows ``None`` when the recording yields none (``qc`` says why). ``X`` is float32 in the model's unit.

    Raises
    ------
    IngestError, RecordingReadError
        A refusing policy, an unreadable file, or a reader / preprocessing finding under ``strict``.
    """
    qc, label, raw = _ingest(task, src, rec, fp)
    if raw is None:
        return qc, None
    with capture_warnings(qc):
        raw, applied = filter_native(raw, prep, task.line_freq)
    return _resample_and_cut(task, rec, qc, label, raw, prep, applied)


def _resample_and_cut(task: DeclaredTask, rec, qc: RecordingQC, label, raw, prep: Preprocessing,
                      applied: dict) -> tuple[RecordingQC, Any]:
    """A filtered recording (:func:`~eegfm_bench.data.preprocessing.filter_native`) resampled to ``prep.sfreq``
    and cut into windows in the model's unit: ``(qc, (names, X, y) or None)`` (see :func:`_read_recording`)."""
    with capture_warnings(qc):
        raw = resample_to(raw, prep, applied)
    qc.preprocessing = applied
    if applied.get("resample_trimmed_samples"):
        k = applied["resample_trimmed_samples"]
        qc.act(f"dropped the last {k} sample(s) ({k / applied['native_sfreq'] * 1e3:.1f} ms) so that the length is a "
               f"multiple of the resampling ratio's denominator (polyphase resampling independent of the length)")
    if task.spec.strict and [w for w in qc.warnings if not any(b in w for b in BENIGN_WARNINGS)]:
        raise IngestError(f"{rec.recording}: preprocessing warnings {qc.warnings}; fix: repair the recording or "
                          "set strict: false")
    X, y = cut_windows(task, raw, rec, prep.window_s, qc, label)
    if not len(y):
        return qc, None
    X = (X * prep.scale).astype(np.float32)
    bad = ~np.isfinite(X).all(axis=(1, 2))
    if bad.any():
        msg = (f"windows {np.flatnonzero(bad).tolist()[:10]} hold NaN/Inf after preprocessing (flat or saturated "
               "segments, or non-finite samples in the file)")
        qc.find(msg)
        if task.spec.strict:
            raise NonFiniteWindowError(f"{rec.recording} ({rec.path}): {msg}; fix: inspect the file, exclude "
                                       "the recording via `subjects`, or set strict: false to reject them")
        qc.reject("non-finite samples after preprocessing", int(bad.sum()))
        X, y = X[~bad], y[~bad]
        if not len(y):
            qc.drop("every window holds non-finite samples")
            return qc, None
    return qc, (list(raw.ch_names), X, y)


def _read_for_preprocessings(task: DeclaredTask, src, rec, fp: dict,
                             preps: list[Preprocessing]) -> list[tuple[RecordingQC, Any]]:
    """One read of a recording for several preprocessings: ``[(qc, windows or None)]`` in the order of ``preps``,
    each equal to :func:`_read_recording` for that preprocessing. The file is read and checked once; the notch and
    notch once and the band-pass at the native rate once per distinct band; only the resampling and the cut run per
    preprocessing."""
    qc0, label, raw = _ingest(task, src, rec, fp)
    if raw is None:
        return [(copy.deepcopy(qc0), None) for _ in preps]
    native = float(raw.info["sfreq"])
    by_band: dict[tuple, list[int]] = {}
    for i, p in enumerate(preps):
        by_band.setdefault(capped_band(p, native), []).append(i)
    with capture_warnings(qc0):
        notch = notch_native(raw, task.line_freq)
    out: list = [None] * len(preps)
    for members in by_band.values():
        qc_f = copy.deepcopy(qc0)
        with capture_warnings(qc_f):
            filtered, applied = bandpass_native(raw.copy(), preps[members[0]], notch)
        for j, i in enumerate(members):
            last = j == len(members) - 1
            out[i] = _resample_and_cut(task, rec, copy.deepcopy(qc_f), label, filtered if last else filtered.copy(),
                                       preps[i], {**applied, **_prep_fields(preps[i])})
    return out


def _prep_fields(prep: Preprocessing) -> dict:
    """The entries of the ``applied`` record that differ between preprocessings sharing one band (set before the
    resampling adds its own)."""
    return {"sfreq": prep.sfreq, "reference": prep.reference, "scale": prep.scale, "unit": prep.unit,
            "window_s": prep.window_s, "source": prep.source}


def load_window_sets(task: Any, preps: list[Preprocessing], *, data_root: str | os.PathLike | None = None,
                     subjects: list | None = None, cache_dir: str | os.PathLike | None = None,
                     max_windows_per_subject: int | None = None, progress: bool = True,
                     n_jobs: int | None = 1) -> list[WindowSet]:
    """The task's windows under several preprocessings (one per model of a cv), reading each recording once.

    A cold cache reads every recording a single time for all of ``preps`` (:func:`_read_for_preprocessings`: the
    reader and its checks, then notch and band-pass at the native rate shared by the preprocessings with the same
    band, and only the resampling per preprocessing) and fills each preprocessing's per-recording entries; each
    window set is then assembled by :func:`load_windows` from those entries without another read. The windows equal
    those of separate :func:`load_windows` calls.

    Parameters
    ----------
    preps : list of Preprocessing or WindowPreprocessing
        One per model (as ``prep`` of :func:`load_windows`); those that resolve alike are loaded once.
    data_root, subjects, cache_dir, max_windows_per_subject, progress, n_jobs
        As :func:`load_windows`.

    Returns
    -------
    list of WindowSet
        In the order of ``preps``.

    Raises
    ------
    As :func:`load_windows`.
    """
    task = get_task(task)
    kw = dict(data_root=data_root, subjects=subjects, cache_dir=cache_dir,
              max_windows_per_subject=max_windows_per_subject, progress=progress, n_jobs=n_jobs)
    resolved = [_resolved(task, p) for p in preps]
    distinct = {w.prep: w for w in resolved}
    if len(distinct) > 1:
        _fill_recording_entries(task, list(distinct), data_root, subjects, cache_dir, progress, ingest_workers(n_jobs))
    sets = {p: load_windows(task, w, **kw) for p, w in distinct.items()}
    return [sets[w.prep] for w in resolved]


def _fill_recording_entries(task: DeclaredTask, preps: list[Preprocessing], data_root, subjects, cache_dir,
                            progress: bool, n_jobs: int = 1) -> int:
    """Build the per-recording entries missing under any of ``preps``, one read per recording, ``n_jobs``
    recordings at once (:func:`_fill_one`). Returns the number of recordings read."""
    src = task.source(data_root)
    listing = RecordingQC(recording="", subject="")
    with capture_warnings(listing):
        recs = src.recordings(subjects)
    cdir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    fps = recording_fingerprints(src, recs, cdir)
    if all((cdir / f"{task.name}-{cache_key(task, fps, p)}" / "COMPLETE").is_file() for p in preps):
        return 0
    return fill_entries(task, preps, src, recs, fps, cdir, progress=progress, n_jobs=n_jobs)


def missing_entries(task: DeclaredTask, preps: list[Preprocessing], recs, fps, cache_dir: Path) -> list[int]:
    """Indices (in the order of ``recs``) of the recordings lacking a published per-recording entry under any of
    ``preps`` in the cache root ``cache_dir`` (what a sharded ingest builds, :mod:`eegfm_bench.runs.launch.ingest`)."""
    root = Path(cache_dir) / "recordings"
    return [i for i, (rec, fp) in enumerate(zip(recs, fps))
            if any(not (root / f"{task.name}-{recording_key(task, rec, fp, p)}" / "COMPLETE").is_file() for p in preps)]


def fill_entries(task: DeclaredTask, preps: list[Preprocessing], src, recs, fps, cache_dir: Path, *,
                 progress: bool = True, n_jobs: int = 1) -> int:
    """Build the per-recording entries of ``recs`` missing under any of ``preps`` (pass 1 of a build, without the
    assembly): one read per recording, ``n_jobs`` recordings at once. Several processes may fill one cache root
    at once (one job per shard of the recordings): each entry is built under its own lock and published by an
    atomic rename.

    Parameters
    ----------
    task : DeclaredTask
    preps : list of Preprocessing
        Resolved preprocessings (:func:`resolve_preprocessing`'s ``prep``).
    src, recs, fps
        The task's source, the recordings to fill and their :func:`recording_fingerprints`.
    cache_dir : Path
        The cache root (entries under ``<cache_dir>/recordings``).
    progress : bool
    n_jobs : int
        As :func:`load_windows`.

    Returns
    -------
    int
        The number of recordings read.

    Raises
    ------
    IngestError, RecordingReadError
        As :func:`load_windows`, for the first failing recording in ``recs``' order.
    """
    root = Path(cache_dir) / "recordings"
    items = [(task, src, recs[i], fps[i], preps, root) for i in missing_entries(task, preps, recs, fps, cache_dir)]
    n_read = sum(_per_recording(_fill_one, items, n_jobs, desc=f"reading {task.name} once for {len(preps)} "
                                "preprocessing(s)", disable=not progress, unit="rec"))
    if progress and n_read:
        tqdm.write(f"{task.name}: {n_read} recording(s) read once for {len(preps)} preprocessing(s) "
                   f"({', '.join(f'{p.sfreq:g} Hz {p.l_freq}-{p.h_freq} Hz' for p in preps)})")
    return n_read


def _fill_one(task: DeclaredTask, src, rec, fp: dict, preps: list[Preprocessing], root: Path) -> int:
    """One recording's entries missing under ``preps`` built from one read (each entry's lock held while it is
    built, taken in path order so that concurrent fillers cannot deadlock). Returns 1 when the recording was read."""
    folders = {p: root / f"{task.name}-{recording_key(task, rec, fp, p)}" for p in preps}
    missing = sorted((p for p in preps if not (folders[p] / "COMPLETE").is_file()), key=lambda p: str(folders[p]))
    if not missing:
        return 0
    locks = [BuildLock(folders[p], quiet=True).acquire() for p in missing]
    try:
        missing = [p for p in missing if not (folders[p] / "COMPLETE").is_file()]
        if not missing:
            return 0
        for p, (qc, win) in zip(missing, _read_for_preprocessings(task, src, rec, fp, missing)):
            _publish_recording_entry(task, rec, qc, win, root, folders[p])
        return 1
    finally:
        for lock in locks:
            lock.release()


def _recording_entry(task: DeclaredTask, src, rec, fp: dict, prep: Preprocessing, root: Path, build: bool = True):
    """A recording's windows from its own cache entry (``<cache>/recordings/<task>-<key>/``), built when missing
    (refused when ``build`` is False: :class:`MissingEntryError`).

    Each recording is cached on its own, so a killed build resumes with the recordings still missing and an edited
    file re-reads only its own recording. Returns ``(qc, windows or None, from_cache)``.
    """
    folder = root / f"{task.name}-{recording_key(task, rec, fp, prep)}"
    if not build and not (folder / "COMPLETE").is_file():
        raise MissingEntryError(f"{rec.recording}: its per-recording entry {folder} is missing at assembly (the "
                                "sharded ingest did not build it); fix: rerun the same ingest command, which builds "
                                "only the recordings still missing")
    if not (folder / "COMPLETE").is_file():
        with BuildLock(folder, f"the windows of {rec.recording}", quiet=True):
            if not (folder / "COMPLETE").is_file():
                return _build_recording_entry(task, src, rec, fp, prep, root, folder)
    return _open_recording_entry(task, rec, folder)


def _open_recording_entry(task: DeclaredTask, rec, folder: Path):
    """A published recording entry: ``(qc, windows or None, True)`` (a strict task refuses its findings)."""
    saved = json.loads((folder / "qc.json").read_text())
    qc = RecordingQC(**saved["qc"])
    win = None
    if saved["names"] is not None:
        win = (saved["names"], np.load(folder / "X.npy", mmap_mode="r"), np.load(folder / "y.npy"))
    if task.spec.strict and qc.findings:
        raise IngestError(f"{rec.recording} ({rec.path}): " + "; ".join(qc.findings) + ". fix: repair or exclude "
                          "the recording, or set strict: false (each finding goes in the ingest report)")
    return qc, win, True


def _build_recording_entry(task: DeclaredTask, src, rec, fp: dict, prep: Preprocessing, root: Path, folder: Path):
    """Read one recording, cut its windows and publish its entry: ``(qc, windows or None, False)``."""
    qc, win = _read_recording(task, src, rec, fp, prep)
    _publish_recording_entry(task, rec, qc, win, root, folder)
    return qc, win, False


def _publish_recording_entry(task: DeclaredTask, rec, qc: RecordingQC, win, root: Path, folder: Path) -> None:
    """Write one recording's windows and QC to its entry (atomically; a strict task refuses its findings first)."""
    if task.spec.strict and qc.findings:
        raise IngestError(f"{rec.recording} ({rec.path}): " + "; ".join(qc.findings) + ". fix: repair or exclude "
                          "the recording, or set strict: false (each finding goes in the ingest report)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp", dir=root))
    if win is not None:
        np.save(tmp / "X.npy", win[1])
        np.save(tmp / "y.npy", win[2])
    (tmp / "qc.json").write_text(json.dumps({"qc": qc.to_dict(), "names": win[0] if win else None}, default=str))
    (tmp / "COMPLETE").write_text("ok\n")
    publish_entry(tmp, folder)


@dataclass
class _Part:
    """One recording's windows in an assembly, by reference: the entry holding them on disk and the selection the
    assembly makes (channels by ``channels.montage``, rows by ``windows.balance``). Only ``y`` is in memory; the
    window set's index records the selection (:func:`_write_window_set`) and :class:`EntryWindows` applies it when
    the windows are read."""

    rec: Any
    names: list[str]
    folder: Path
    y: np.ndarray
    cols: list[int] | None = None
    rows: np.ndarray | None = None


def _apply_reference(task: DeclaredTask, parts: list[_Part], qcs: dict[str, RecordingQC], reference: str) -> None:
    """The common average reference over each part's final channels, recorded per recording (the windows are
    referenced as they are read, :class:`EntryWindows`); a reference over fewer than
    ``channels.min_reference_channels`` channels is a finding."""
    least = int(task.spec.channels.min_reference_channels or 0)
    for part in parts:
        names, qc = part.names, qcs[part.rec.recording]
        if qc.preprocessing:  # a recording's entry is shared by references: the applied one is this set's
            qc.preprocessing = {**qc.preprocessing, "reference": reference}
        qc.reference = {"reference": reference, "n_channels": len(names) if reference == "average" else 0,
                        "channels": list(names) if reference == "average" else []}
        if reference == "average" and len(names) < least:
            qc.find(f"common average reference over only {len(names)} channel(s) ({', '.join(names)}); fewer than "
                    f"channels.min_reference_channels = {least}: the average of so few channels carries each one's "
                    "signal into the others. fix: keep more channels, reference: none, or lower "
                    "channels.min_reference_channels")


def ingest_workers(n_jobs: int | None) -> int:
    """The number of processes that read recordings (``data.n_jobs``).

    Parameters
    ----------
    n_jobs : int or None
        ``None`` or ``-1``: every core this process may run on (``os.sched_getaffinity``: what the launcher or SLURM
        gives the job); a whole number >= 1: that many.

    Raises
    ------
    ConfigError
        0 or a number below -1.
    """
    if n_jobs is None or int(n_jobs) == -1:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # no sched_getaffinity (macOS)
            return max(1, os.cpu_count() or 1)
    if int(n_jobs) < 1:
        raise ConfigError(f"data.n_jobs = {n_jobs}; fix: a whole number >= 1, or -1 / null for every core the job has")
    return int(n_jobs)


class _Failed:
    """An ingestion error raised in a worker, carried back to be raised in the recordings' order."""

    def __init__(self, err: Exception):
        self.err = err


def _one_thread(fn, *args):
    """``fn(*args)`` with one BLAS / OpenMP thread (so a recording's windows do not depend on the worker count), an
    ingestion error returned as :class:`_Failed` rather than raised."""
    with threadpool_limits(limits=1):
        try:
            return fn(*args)
        except (IngestError, RecordingReadError, ConfigError) as err:
            return _Failed(err)


def _per_recording(fn, items: list[tuple], n_jobs: int, busy: int | None = None, **bar):
    """``fn(*item)`` for every item, in the items' order: in this process when ``n_jobs`` is 1 or at most one of
    the items has a recording to read (``busy``, default all), else in ``min(n_jobs, busy)`` loky processes
    (joblib) with one thread each. A generator; an ingestion error is raised when its item is reached, as in the
    serial loop."""
    n = min(int(n_jobs), len(items) if busy is None else int(busy))
    if n <= 1:
        results = (_one_thread(fn, *it) for it in items)
    else:
        with parallel_config(backend="loky", inner_max_num_threads=1):
            results = Parallel(n_jobs=n, return_as="generator")(delayed(_one_thread)(fn, *it) for it in items)
    for r in tqdm(results, total=len(items), **bar):
        if isinstance(r, _Failed):
            raise r.err
        yield r


def _entry_summary(task: DeclaredTask, src, rec, fp: dict, prep: Preprocessing, root: Path, build: bool = True):
    """A recording's entry built when missing (:func:`_recording_entry`), summed up for the assembly without its
    windows: ``(qc, names or None, y or None, folder, from_cache)``."""
    qc, win, cached = _recording_entry(task, src, rec, fp, prep, root, build)
    folder = root / f"{task.name}-{recording_key(task, rec, fp, prep)}"
    if win is None:
        return qc, None, None, folder, cached
    return qc, list(win[0]), np.asarray(win[2]), folder, cached


def _build_cache(task: DeclaredTask, src, recs, fps, prep: Preprocessing, folder: Path, key: str,
                 progress: bool, source_warnings: list[str] = (), skipped: dict | None = None,
                 n_jobs: int = 1, build_missing: bool = True) -> None:
    """Build the window set in two passes over the recordings, so that memory holds one recording's windows at a
    time whatever the corpus: each recording's own cache entry (:func:`_recording_entry`, ``n_jobs`` recordings at
    once), keeping only its labels; then one channel set (``channels.montage``), the reference over it, the class
    check and ``windows.balance`` decided on the labels, and the windows streamed entry by entry into ``X.npy``
    (:func:`_write_window_set`); published atomically. ``build_missing=False`` refuses a missing entry
    (:class:`MissingEntryError`) instead of building it."""
    report = IngestReport(task.name, settings=task.spec.to_dict(), source_warnings=list(source_warnings),
                          skipped_subjects=dict(skipped or {}))
    if task.spec.strict and [w for w in source_warnings if not any(b in w for b in BENIGN_WARNINGS)]:
        raise IngestError(f"task {task.name!r}: the source warned while listing the recordings: {list(source_warnings)}; "
                          "fix: complete the dataset, or set strict: false (the warnings go in the ingest report)")
    parts: list[_Part] = []
    qcs: dict[str, RecordingQC] = {}
    strict = bool(task.spec.strict)
    n_cached = 0
    root = folder.parent / "recordings"
    try:
        items = [(task, src, rec, fp, prep, root, build_missing) for rec, fp in zip(recs, fps)]
        busy = sum(not (root / f"{task.name}-{recording_key(task, rec, fp, prep)}" / "COMPLETE").is_file()
                   for rec, fp in zip(recs, fps))
        for rec, (qc, names, y, entry, cached) in zip(recs, _per_recording(
                _entry_summary, items, n_jobs, busy, desc=f"reading {task.name} ({prep.sfreq:g} Hz)", disable=not progress,
                unit="rec")):
            n_cached += cached
            report.recordings.append(qc)
            qcs[rec.recording] = qc
            if names is not None:
                parts.append(_Part(rec, names, entry, y))
        if not parts:
            raise IngestError(f"task {task.name!r}: no recording yielded a window (" + "; ".join(
                f"{q.recording}: {q.reason}" for q in report.recordings[:5]) + "); see the ingest report")
        parts = _check_montage(task, parts, qcs)
        _apply_reference(task, parts, qcs, prep.reference)
        if strict and any(q.findings for q in report.recordings):
            q = next(q for q in report.recordings if q.findings)
            raise IngestError(f"{q.recording}: " + "; ".join(q.findings) + ". fix: one channel set for every recording "
                              "(channels.include), or strict: false")
        found = np.bincount(np.concatenate([p.y for p in parts]), minlength=len(task.class_names))
        empty = [task.class_names[c] for c in np.flatnonzero(found == 0)]
        if empty:
            unmapped: dict[str, int] = {}
            for q in report.recordings:
                for d, n in q.events_unmapped.items():
                    unmapped[d] = unmapped.get(d, 0) + n
            raise IngestError(f"task {task.name!r}: class(es) {empty} got no window (windows per class: "
                              f"{dict(zip(task.class_names, found.tolist()))}); annotations mapped to no class: "
                              f"{unmapped or 'none'}. fix: map the right annotation / value to it (labels.events, "
                              "labels.map) or remove it from `classes`")
        final = _balance(task, parts, qcs)
    except (IngestError, RecordingReadError, ConfigError) as err:
        where = _write_failed_report(report, folder)
        raise type(err)(f"{err}\n(ingest report of the recordings read so far: {where})") from err
    if n_cached:
        tqdm.write(f"windows of {n_cached}/{len(recs)} recordings from the per-recording cache "
                   f"({root}), {len(recs) - n_cached} read")
    _write_window_set(task, final, fps, prep, folder, key, report)


def _balance(task: DeclaredTask, parts: list[_Part], qcs: dict[str, RecordingQC]) -> list[_Part]:
    """``windows.balance`` over the parts' labels, then each recording's kept counts (a part left empty is
    dropped); the kept rows are recorded in each part, nothing is read."""
    y_all = np.concatenate([p.y for p in parts])
    rec_all = np.concatenate([[p.rec.recording] * len(p.y) for p in parts])
    sub_all = np.concatenate([[p.rec.subject] * len(p.y) for p in parts])
    b = task.spec.windows.balance
    keep = balance_windows(task, y_all, sub_all if b is None or b.per == "subject" else rec_all, qcs, rec_all)
    keep_mask = np.zeros(len(y_all), dtype=bool)
    keep_mask[keep] = True
    final, off = [], 0
    for p in parts:
        m = keep_mask[off:off + len(p.y)]
        off += len(p.y)
        qc = qcs[p.rec.recording]
        if not m.any():
            qc.drop("every window removed by windows.balance")
            continue
        final.append(replace(p, y=p.y[m], rows=None if m.all() else m))
        qc.windows_kept = int(m.sum())
        qc.windows_per_class = {task.class_names[c]: int(n) for c, n in zip(*np.unique(p.y[m], return_counts=True))}
    return final


def _write_window_set(task: DeclaredTask, final: list[_Part], fps, prep: Preprocessing, folder: Path, key: str,
                      report: IngestReport) -> None:
    """Write the window set (its index, labels, meta and ingest report) and publish it.

    No window is copied: the per-recording entries are the store (module docstring). ``index.npz`` records, per
    window, its entry and row there, and per entry, the columns of the channel set and the shape and size of its
    ``X.npy`` (read from the header: the assembly reads no window), which :class:`EntryWindows` reads through.

    Raises
    ------
    DamagedEntryError
        An entry whose ``X.npy`` cannot be read or does not hold its recording's windows and channels.
    """
    ch_names = final[0].names
    n = sum(len(p.y) for p in final)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp", dir=folder.parent))
    index: dict[str, list] = {"entry": [], "row": [], "cols": [], "entry_shape": [], "entry_bytes": []}
    rows = {"y": [], "subject": [], "recording": [], "window_index": []}
    for p in final:
        shape = _entry_shape(p, prep)
        index["entry"].append(p.folder.name)
        index["row"].append(np.flatnonzero(p.rows) if p.rows is not None else np.arange(len(p.y)))
        index["cols"].append(list(p.cols) if p.cols is not None else list(range(shape[1])))
        index["entry_shape"].append(shape)
        index["entry_bytes"].append((p.folder / "X.npy").stat().st_size)
        y, rec = p.y, p.rec
        rows["y"].append(y)
        rows["subject"] += [rec.subject] * len(y)
        rows["recording"] += [rec.recording] * len(y)
        rows["window_index"].append(np.arange(len(y)))
    np.savez(tmp / INDEX, entry=np.array(index["entry"]),
             start=np.concatenate([[0], np.cumsum([len(p.y) for p in final])]).astype(np.int64),
             row=np.concatenate(index["row"]).astype(np.int64), cols=np.array(index["cols"], dtype=np.int64),
             entry_shape=np.array(index["entry_shape"], dtype=np.int64),
             entry_bytes=np.array(index["entry_bytes"], dtype=np.int64))
    np.savez(tmp / "labels.npz", y=np.concatenate(rows["y"]).astype(np.int64),
             subject=np.array(rows["subject"]), recording=np.array(rows["recording"]),
             window_index=np.concatenate(rows["window_index"]).astype(np.int64))
    per_rec = {q.recording: q.preprocessing for q in report.recordings if q.status == "kept" and q.preprocessing}
    meta = {"task": task.name, "dataset": task.dataset, "ch_names": ch_names, "sfreq": prep.sfreq,
            "class_names": list(task.class_names), "preprocessing": _dataset_preprocessing(per_rec),
            "preprocessing_per_recording": per_rec, "cache_key": key, "task_key": task.key,
            "reference": {"reference": prep.reference, "channels": list(ch_names) if prep.reference == "average"
                          else []},
            "files": [[f["recording"], ";".join(f["files"]), f["sha256"]] for f in fps], "n_windows": n,
            "ingest": report.totals()}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    report.write(tmp)
    (tmp / "COMPLETE").write_text("ok\n")
    publish_entry(tmp, folder)
    for line in report.summary():  # printed whenever the windows are built (--no-progress included)
        tqdm.write(line)


def publish_entry(tmp: Path, folder: Path) -> None:
    """Rename a finished entry into place. Entries are content-keyed, so when another process (a second worker or
    job building the same entry at once) has already published a complete one, that one is kept (its memmaps may be
    open) and ours is discarded; an incomplete leftover is replaced."""
    if (folder / "COMPLETE").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    try:
        os.replace(tmp, folder)
    except OSError:  # published by another process between the check and the rename
        if not (folder / "COMPLETE").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _write_failed_report(report: IngestReport, folder: Path) -> Path:
    where = folder.parent / "failed" / folder.name
    report.write(where)
    return where / "ingest_report.md"


def _check_montage(task: DeclaredTask, parts: list[_Part], qcs: dict[str, RecordingQC]) -> list[_Part]:
    """One channel set for the window set: ``montage: same`` refuses differing recordings, ``intersect`` keeps the
    channels every recording has (each removal reported)."""
    ref = parts[0].names
    differ = [p for p in parts if p.names != ref]
    if not differ:
        return parts
    if task.spec.channels.montage == "same":
        p = differ[0]
        extra, lack = [c for c in p.names if c not in ref], [c for c in ref if c not in p.names]
        what = (f"lacks {lack}" if lack else "") + (" and " if lack and extra else "") + (f"has {extra} too" if extra
                                                                                         else "")
        what = what or f"orders its {len(ref)} channels differently"
        raise IngestError(
            f"{p.rec.recording} {what} compared with {parts[0].rec.recording} ({len(differ)} recording(s) differ); "
            "fix: channels.montage: "
            "intersect (keep the channels every recording has), channels.include: [...] (one list for all), or exclude "
            "the differing recordings")
    common = [c for c in ref if all(c in p.names for p in parts)]
    if not common:
        raise IngestError(f"task {task.name!r}: the recordings share no channel; fix: channels.include / rename")
    out = []
    for p in parts:
        gone = [c for c in p.names if c not in common]
        if gone:
            qc = qcs[p.rec.recording]
            for c in gone:
                qc.dropped[c] = "not in every recording (channels.montage: intersect)"
            qc.act(f"dropped {gone}: not in every recording (channels.montage: intersect)")
            qc.find(f"channels {gone} dropped: not in every recording (channels.montage: intersect)")
            qc.channels_kept = list(common)
        out.append(replace(p, names=list(common), cols=[p.names.index(c) for c in common]))
    return out


def _entry_shape(p: _Part, prep: Preprocessing) -> tuple[int, int, int]:
    """The shape of part ``p``'s entry ``X.npy`` from its header, checked against the part's windows and channels.

    Raises
    ------
    DamagedEntryError
        Unreadable, or not ``(windows of the recording, its channels, prep.n_times)`` float32.
    """
    path = p.folder / "X.npy"
    try:
        X = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise DamagedEntryError(f"{p.rec.recording}: its entry {path} cannot be read ({err}); fix: delete "
                                f"{p.folder} and load the windows again") from err
    n_rows = len(p.rows) if p.rows is not None else len(p.y)
    if X.dtype != np.float32 or X.ndim != 3 or X.shape[0] != n_rows or X.shape[2] != prep.n_times or (
            p.cols is None and X.shape[1] != len(p.names)) or (p.cols is not None and max(p.cols) >= X.shape[1]):
        raise DamagedEntryError(f"{p.rec.recording}: its entry {path} holds {X.dtype} {X.shape}, not its {n_rows} "
                                f"windows of {len(p.names)} channels x {prep.n_times} samples; fix: delete "
                                f"{p.folder} and load the windows again")
    return tuple(int(v) for v in X.shape)


def open_window_set(folder: str | os.PathLike) -> WindowSet:
    """A published window set of the cache (``<cache>/<task>-<key>/``), its ``X`` an :class:`EntryWindows` over
    the per-recording entries (nothing is read but the labels and the index).

    Parameters
    ----------
    folder : path

    Returns
    -------
    WindowSet
        ``meta["ingest_report"]`` is the path of its ``ingest_report.md``.
    """
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    meta["ingest_report"] = str(folder / "ingest_report.md")
    arrays = np.load(folder / "labels.npz")
    X = EntryWindows.open(folder, (meta.get("reference") or {}).get("reference") or "none")
    return WindowSet(X, arrays["y"], arrays["subject"].astype(str), arrays["recording"].astype(str),
                     arrays["window_index"], np.full(len(arrays["y"]), meta["dataset"]), meta["ch_names"], float(meta["sfreq"]),
                     meta["class_names"], meta)
