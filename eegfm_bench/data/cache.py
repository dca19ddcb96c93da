"""The cache root's entries: listing and pruning (``eegfm-bench cache``).

The cache root (``$EEGFM_CACHE`` or ``~/.cache/eegfm_bench``; a config's ``data.cache_dir``) holds window sets
(``<task>-<key>/``, :mod:`eegfm_bench.data.windows`), each recording's windows before they are put together
(``recordings/<task>-<key>/``: a killed build resumes from them, an edited file re-reads only its own), frozen-backbone features (``features/<backbone>-<key>/``,
:mod:`eegfm_bench.models.features`), the file-digest index ``sha256.jsonl`` and the ingest reports of failed builds
(``failed/``). Entries are keyed by content, so an entry of an old config or an edited file is never served again,
but it stays on disk until pruned. Each open from the cache touches the entry's ``LAST_USED`` file, so pruning goes
by when an entry was last read, not when it was built. A window set stores no window of its own: it reads them from
the recordings' entries through its index (``index.npz``, :class:`eegfm_bench.data.windows.EntryWindows`), so a
prune keeps every recording entry that a window set it keeps reads, however long ago the entry was built. Builds in progress (``<entry>.tmp*``,
``<entry>.partial-*``) are left alone until they are older than ``partial_hours``: a leftover of a killed run.

**One builder per entry** (:class:`BuildLock`): any number of processes or SLURM jobs that need the same missing
entry at once build it once. The first takes an exclusive lock on ``.locks/<entry>.lock`` beside the entry
(:class:`eegfm_bench.locks.ExclusiveLock`: the ``filelock`` library over ``fcntl.flock``, the holder's pid and host
written in the file); the others print one line naming the holder, wait for the lock and then open the entry the
first one published. ``flock`` is honoured across the nodes of NFSv4 and of Lustre / GPFS mounted with ``flock``.
"""
from __future__ import annotations

import os
import shutil
import zipfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eegfm_bench.locks import ExclusiveLock

USED = "LAST_USED"
WINDOW_INDEX = "index.npz"
"""A window set's index of its windows in the recordings' entries (:class:`eegfm_bench.data.windows.EntryWindows`)."""
LOCKS = ".locks"
"""The folder beside the entries that holds their build locks (``<parent>/.locks/<entry>.lock``; not an entry)."""


def default_cache_dir() -> Path:
    """``$EEGFM_CACHE`` or ``~/.cache/eegfm_bench``."""
    return Path(os.environ.get("EEGFM_CACHE", Path.home() / ".cache" / "eegfm_bench")).expanduser()


def mark_used(folder: Path) -> None:
    """Touch ``<folder>/LAST_USED`` (a read-only cache is left as it is)."""
    try:
        (Path(folder) / USED).touch()
    except OSError:
        pass


class BuildLock(ExclusiveLock):
    """An exclusive lock on building one cache entry, across processes, jobs and threads
    (:class:`eegfm_bench.locks.ExclusiveLock`: ``filelock`` over ``fcntl.flock`` on ``<parent>/.locks/<entry>.lock``,
    a folder that listings of the entries skip).

    Use as ``with BuildLock(folder) as lock:`` and check the entry's ``COMPLETE`` again inside: a process that
    waited finds the entry the holder published (``lock.waited_s`` > 0) and opens it instead of building.

    Parameters
    ----------
    folder : path
        The entry's final folder; the lock file sits in ``.locks/`` beside it.
    what : str
        What is being built, for the waiting line (e.g. ``"window set eegmmidb_mi-…"``).
    quiet : bool
        No waiting line (DDP ranks other than 0).

    Raises
    ------
    OSError
        The lock file cannot be created (a read-only cache root): the message names the folder.
    """

    def __init__(self, folder: str | os.PathLike, what: str = "", quiet: bool = False):
        self.folder = Path(folder)
        self.what = what or self.folder.name
        super().__init__(self.folder.parent / LOCKS / (self.folder.name + ".lock"), self._waiting_line, quiet=quiet)

    def _waiting_line(self, holder: str) -> str:
        return f"waiting for another process that is building {self.what} ({holder}; lock {self.path})"

    def acquire(self, wait: bool = True) -> "BuildLock":
        super().acquire(wait)
        return self


@dataclass
class CacheEntry:
    """One folder of the cache root.

    Attributes
    ----------
    kind : str
        ``windows``, ``recording`` (one recording's windows), ``features``, ``partial`` (an unfinished build) or ``failed`` (an ingest report of a build
        that failed).
    path : Path
    size_bytes : int
    built : float
        POSIX time of ``COMPLETE`` (or the folder's mtime).
    last_used : float
        POSIX time of ``LAST_USED`` (or ``built``).
    """

    kind: str
    path: Path
    size_bytes: int
    built: float
    last_used: float


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _entry(kind: str, p: Path) -> CacheEntry:
    done = p / "COMPLETE"
    built = done.stat().st_mtime if done.is_file() else p.stat().st_mtime
    used = p / USED
    return CacheEntry(kind, p, _size(p), built, max(built, used.stat().st_mtime) if used.is_file() else built)


def cache_entries(root: str | Path) -> list[CacheEntry]:
    """Every window set, feature entry, unfinished build and failed-build report under ``root``, largest first."""
    root = Path(root).expanduser()
    out: list[CacheEntry] = []
    if not root.is_dir():
        return out
    for parent, kind in ((root, "windows"), (root / "recordings", "recording"), (root / "features", "features")):
        if not parent.is_dir():
            continue
        for p in parent.iterdir():
            if not p.is_dir() or p.name in ("features", "failed", "recordings", "reve") or p.name.startswith("."):
                continue
            partial = ".tmp" in p.name or ".partial-" in p.name or not (p / "COMPLETE").is_file()
            out.append(_entry("partial" if partial else kind, p))
    if (root / "failed").is_dir():
        out += [_entry("failed", p) for p in (root / "failed").iterdir() if p.is_dir()]
    return sorted(out, key=lambda e: -e.size_bytes)


def prune_plan(entries: list[CacheEntry], *, older_than_days: float, partial_hours: float = 24.0,
               now: float | None = None) -> list[CacheEntry]:
    """The entries a prune removes: complete entries (and failed-build reports) not read for ``older_than_days``
    days, and unfinished builds untouched for ``partial_hours`` hours; never a recording entry that a window set it
    keeps reads (:func:`entries_read_by`).

    Raises
    ------
    ValueError
        A negative age.
    """
    if older_than_days < 0 or partial_hours < 0:
        raise ValueError(f"ages must be >= 0 (got older_than_days={older_than_days}, partial_hours={partial_hours})")
    now = time.time() if now is None else now
    doomed = [e for e in entries
              if (e.kind == "partial" and now - e.last_used > partial_hours * 3600)
              or (e.kind != "partial" and now - e.last_used > older_than_days * 86400)]
    gone = {e.path for e in doomed}
    read = set().union(*(entries_read_by(e.path) for e in entries if e.kind == "windows" and e.path not in gone))
    return [e for e in doomed if not (e.kind == "recording" and e.path.name in read)]


def entries_read_by(window_set: Path) -> set[str]:
    """The names of the recording entries (``recordings/<name>``) a window set reads its windows from (empty when
    its index is unreadable)."""
    try:
        with np.load(Path(window_set) / WINDOW_INDEX) as ix:
            return set(ix["entry"].astype(str).tolist())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return set()


def remove(entries: list[CacheEntry]) -> int:
    """Delete the entries' folders; returns the bytes freed."""
    freed = 0
    for e in entries:
        shutil.rmtree(e.path, ignore_errors=True)
        freed += e.size_bytes
    return freed


def cache_table(entries: list[CacheEntry], root: Path, now: float | None = None) -> str:
    """A Markdown table of the entries (kind, folder, MB, days since built and since last read)."""
    now = time.time() if now is None else now
    lines = ["| kind | entry | size (MB) | built (days ago) | last read (days ago) |", "|---|---|---:|---:|---:|"]
    for e in entries:
        lines.append(f"| {e.kind} | {e.path.relative_to(root)} | {e.size_bytes / 2**20:.1f} | "
                     f"{(now - e.built) / 86400:.1f} | {(now - e.last_used) / 86400:.1f} |")
    total = sum(e.size_bytes for e in entries)
    lines.append(f"\n{len(entries)} entries, {total / 2**20:.1f} MB under {root}")
    return "\n".join(lines)


def run_cache(root: str | Path | None = None, *, prune: bool = False, older_than_days: float = 30.0,
               partial_hours: float = 24.0, yes: bool = False) -> int:
    """``eegfm-bench cache``: list the cache root's entries; with ``prune``, the ones a prune would remove, and
    (with ``yes``) remove them. Returns the exit code."""
    root = Path(root).expanduser() if root else default_cache_dir()
    entries = cache_entries(root)
    if not prune:
        print(cache_table(entries, root))
        return 0
    doomed = prune_plan(entries, older_than_days=older_than_days, partial_hours=partial_hours)
    if not doomed:
        print(f"nothing to prune under {root}: no entry unread for {older_than_days:g} days and no unfinished build "
              f"older than {partial_hours:g} h ({len(entries)} entries)")
        return 0
    print(cache_table(doomed, root))
    if not yes:
        print(f"dry run: pass --yes to delete these {len(doomed)} entries")
        return 0
    freed = remove(doomed)
    print(f"deleted {len(doomed)} entries, {freed / 2**20:.1f} MB freed")
    return 0


__all__ = ["default_cache_dir", "BuildLock", "CacheEntry", "cache_entries", "prune_plan", "remove", "cache_table", "run_cache", "mark_used", "entries_read_by",
           "WINDOW_INDEX"]
