"""Windows and their on-disk cache.

:func:`load_windows` turns a task's recordings into a :class:`WindowSet` — ``X`` of shape
``(n_windows, n_chans, n_times)`` float32 in the backbone's unit (see ``meta["preprocessing"]``), labels,
subject / recording / window index per window, channel names and provenance — and caches it as
memory-mapped ``.npy`` under a hash of (task, files, preprocessing). A second call with the same inputs
opens the memmap and reads no EDF.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from eegfm_bench.data.preprocessing import Preprocessing, apply_preprocessing
from eegfm_bench.data.tasks import TASKS, Task, resolve_data_root

CACHE_VERSION = 1


class NonFiniteWindowError(ValueError):
    """A window contains NaN or Inf."""


def default_cache_dir() -> Path:
    """``$EEGFM_CACHE`` or ``~/.cache/eegfm_bench``."""
    return Path(os.environ.get("EEGFM_CACHE", Path.home() / ".cache" / "eegfm_bench")).expanduser()


@dataclass
class WindowSet:
    """All windows of one task under one preprocessing.

    Attributes
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times), float32
        Windows in ``meta["preprocessing"]["unit"]`` (memory-mapped when loaded from the cache).
    y : ndarray, shape (n_windows,), int64
    subject, recording : ndarray of str, shape (n_windows,)
    window_index : ndarray of int64, shape (n_windows,)
        Index of the window within its recording.
    provenance : ndarray of str, shape (n_windows,)
        Provenance group per window (default: the dataset name).
    ch_names : list of str
        Canonical 10-05 names of the channel axis.
    sfreq : float
        Sampling rate of ``X`` in Hz.
    class_names : list of str
    meta : dict
        Task, files, applied preprocessing, cache key.
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


def _files_key(task: Task, recs) -> list:
    out = []
    for r in recs:
        st = Path(r.path).stat()
        out.append([r.recording, Path(r.path).name, st.st_size, st.st_mtime_ns])
    return out


def cache_key(task: Task, recs, prep: Preprocessing) -> str:
    """sha256 (16 hex) of (task, files with size and mtime, preprocessing, cache version)."""
    blob = json.dumps({"task": task.name, "files": _files_key(task, recs), "prep": prep.to_dict(),
                       "version": CACHE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_windows(task: str | Task, prep: Preprocessing, *, data_root: str | os.PathLike | None = None,
                 subjects: list | None = None, cache_dir: str | os.PathLike | None = None,
                 download: bool | None = None, max_windows_per_subject: int | None = None,
                 progress: bool = True) -> WindowSet:
    """Load (or build and cache) a task's windows under ``prep``.

    Parameters
    ----------
    task : str or Task
        Registered task name (see ``TASKS.names()``).
    prep : Preprocessing
        The backbone's preprocessing (sfreq, band, reference, scale, window length).
    data_root : path, optional
        See :func:`~eegfm_bench.data.tasks.resolve_data_root`.
    subjects : list, optional
        Subset of subjects (default: every subject present).
    cache_dir : path, optional
        Cache root (default :func:`default_cache_dir`).
    max_windows_per_subject : int, optional
        Keep the first N windows of each subject in each class (for tiny test runs); applied after
        caching, so the cache is shared.

    Returns
    -------
    WindowSet

    Raises
    ------
    DataNotFoundError, RecordingReadError
        From the task (missing or corrupted files).
    NonFiniteWindowError
        If any window holds NaN or Inf (names the recording and window).
    """
    task = TASKS.get(task) if isinstance(task, str) else task
    root = resolve_data_root(data_root)
    recs = task.recordings(root, subjects, download)
    key = cache_key(task, recs, prep)
    cdir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = cdir / f"{task.name}-{key}"
    if not (folder / "COMPLETE").is_file():
        _build_cache(task, recs, prep, folder, key, progress)
    ws = _open_cache(folder)
    if max_windows_per_subject:
        keep = []
        for s in np.unique(ws.subject):
            for c in np.unique(ws.y):
                keep.extend(np.flatnonzero((ws.subject == s) & (ws.y == c))[:max_windows_per_subject])
        ws = ws.subset(np.sort(np.array(keep, dtype=np.int64)))
    return ws


def _build_cache(task: Task, recs, prep: Preprocessing, folder: Path, key: str, progress: bool) -> None:
    parts, applied = [], None
    for rec in tqdm(recs, desc=f"reading {task.name} ({prep.sfreq:g} Hz)", disable=not progress, unit="file"):
        raw = task.read(rec)
        raw, applied = apply_preprocessing(raw, prep, task.line_freq)
        X, y = task.cut(raw, rec, prep.window_s)
        X = (X * prep.scale).astype(np.float32)
        bad = ~np.isfinite(X).all(axis=(1, 2))
        if bad.any():
            raise NonFiniteWindowError(
                f"{rec.recording} ({rec.path}): windows {np.flatnonzero(bad).tolist()[:10]} contain NaN/Inf after "
                "preprocessing; fix: inspect the file (flat or saturated segments), exclude the recording via "
                "`subjects`, or repair it before running")
        parts.append((rec, raw.ch_names, X, y))
    ch_names = parts[0][1]
    for rec, names, _, _ in parts:
        if names != ch_names:
            raise ValueError(f"{rec.recording} has channels {names} but {parts[0][0].recording} has {ch_names}; "
                             "fix: one montage per dataset is required — exclude the differing recordings")
    n = sum(len(p[3]) for p in parts)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp", dir=folder.parent))
    X_all = np.lib.format.open_memmap(tmp / "X.npy", mode="w+", dtype=np.float32,
                                      shape=(n, len(ch_names), prep.n_times))
    i = 0
    meta_rows = {"y": [], "subject": [], "recording": [], "window_index": []}
    for rec, _, X, y in parts:
        X_all[i:i + len(y)] = X
        i += len(y)
        meta_rows["y"].append(y)
        meta_rows["subject"] += [rec.subject] * len(y)
        meta_rows["recording"] += [rec.recording] * len(y)
        meta_rows["window_index"].append(np.arange(len(y)))
    X_all.flush()
    del X_all
    np.savez(tmp / "labels.npz", y=np.concatenate(meta_rows["y"]).astype(np.int64),
             subject=np.array(meta_rows["subject"]), recording=np.array(meta_rows["recording"]),
             window_index=np.concatenate(meta_rows["window_index"]).astype(np.int64))
    meta = {"task": task.name, "dataset": task.dataset, "ch_names": ch_names, "sfreq": prep.sfreq,
            "class_names": list(task.class_names), "preprocessing": applied, "cache_key": key,
            "files": [[r.recording, str(r.path)] for r in recs], "n_windows": n}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    (tmp / "COMPLETE").write_text("ok\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def _open_cache(folder: Path) -> WindowSet:
    meta = json.loads((folder / "meta.json").read_text())
    lab = np.load(folder / "labels.npz")
    X = np.load(folder / "X.npy", mmap_mode="r")
    return WindowSet(X, lab["y"], lab["subject"].astype(str), lab["recording"].astype(str), lab["window_index"],
                     np.full(len(lab["y"]), meta["dataset"]), meta["ch_names"], float(meta["sfreq"]),
                     meta["class_names"], meta)
