"""Files that several processes write: one writer per out_dir, one builder per cache entry, and temporary files
with unique names (ground floor: it imports nothing of the package but :mod:`eegfm_bench.errors`).

**One writer per out_dir** (:func:`out_dir_lock`). A command that writes an out_dir (``cv``, ``confound``,
``sweep``, ``probe``, ``attribute``, ``controls``, ``audit``) holds an exclusive lock on
``<out_dir>/.eegfm-bench.lock`` while it runs. A second command on the same out_dir prints one line, ``waiting for
pid <pid> on <host> holding <out_dir>/.eegfm-bench.lock (...)``, and starts when the first ends; with ``--no-wait``
it refuses at once with one line (:class:`OutDirBusyError`, exit status 2). The jobs a command launches (local
workers, SLURM array jobs: :mod:`eegfm_bench.runs.launch.launcher`) run while their parent holds the lock and take none
themselves (they are called with ``worker_cells`` / ``worker_units``), and neither do the DDP ranks other than 0
(Lightning's launcher re-runs the command line in them): only the process that decides the work holds the lock.
Within one process the lock is re-entrant (a command that runs another on the same out_dir does not wait on
itself).

**One builder per cache entry** (:class:`BuildLock`, :mod:`eegfm_bench.data.cache`): the same lock on
``<parent>/.locks/<entry>.lock``.

Both are ``fcntl.flock`` locks through the ``filelock`` library (:class:`ExclusiveLock`): released by the kernel
when the holder exits however it exits (no stale lock after a crash or ``kill -9``), honoured across the nodes of
NFSv4 and of Lustre / GPFS mounted with ``flock``. The holder writes ``pid <pid> on <host>`` into the lock file,
which is what a waiting process names.

**Unique temporary names** (:func:`~eegfm_bench.atomic.unique_tmp`, :func:`~eegfm_bench.atomic.atomic_write_text`,
defined in :mod:`eegfm_bench.atomic` and re-exported here): every file written under a temporary name and then renamed
into place gets ``.<name>.<pid>-<uuid>.tmp`` in the same folder, so two processes (or threads) writing the same file
never write, rename or delete each other's temporary file.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from eegfm_bench.errors import EEGFMError

OUT_DIR_LOCK = ".eegfm-bench.lock"
"""The lock file of an out_dir (a dotfile: listings of results skip it)."""


class OutDirBusyError(EEGFMError):
    """Another process is writing the out_dir and the command was asked not to wait (``--no-wait``)."""


def holder_of(lock_path: str | os.PathLike) -> str:
    """What the lock file says about its holder (``pid <pid> on <host>``), or ``another process`` when it says
    nothing yet."""
    try:
        text = Path(lock_path).read_text().strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "another process"


def _stamp(fd: int) -> None:
    """filelock's ``on_acquired``: the holder's pid and host into the (locked) lock file."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)


class ExclusiveLock:
    """An exclusive lock between processes (and between threads) on one lock file: ``filelock.FileLock``
    (``fcntl.flock``), the holder's ``pid <pid> on <host>`` written into the file.

    Parameters
    ----------
    path : path
        The lock file (its folder is created).
    waiting : callable
        ``waiting(holder) -> str``: the one line printed when the lock is taken and the caller waits.
    quiet : bool
        No waiting line.
    stream : file, optional
        Where the waiting line goes (default ``sys.stdout``).

    Attributes
    ----------
    waited_s : float
        Seconds spent waiting (0 when the lock was free).
    """

    def __init__(self, path: str | os.PathLike, waiting: Callable[[str], str], *, quiet: bool = False,
                 stream=None):
        self.path = Path(path)
        self.waiting = waiting
        self.quiet = quiet
        self.stream = stream
        self.waited_s = 0.0
        self._lock: FileLock | None = None

    def acquire(self, wait: bool = True) -> "ExclusiveLock":
        """Take the lock: at once when free; otherwise print the waiting line and wait (``wait=False``: raise).

        Raises
        ------
        filelock.Timeout
            With ``wait=False``, when another holder has it.
        OSError
            The lock file cannot be created (a read-only folder).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(self.path, on_acquired=_stamp, poll_interval=0.2)
        try:
            self._lock.acquire(blocking=False)
        except Timeout:
            if not wait:
                raise
            if not self.quiet:
                tqdm.write(self.waiting(holder_of(self.path)), file=self.stream or sys.stdout)
            t0 = time.monotonic()
            self._lock.acquire()
            self.waited_s = max(time.monotonic() - t0, 1e-6)
        return self

    def release(self) -> None:
        """Release the lock (a no-op when not held); the lock file stays, so later holders share its inode."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "ExclusiveLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_HELD: dict[str, int] = {}
"""Out_dir lock files this process holds -> nesting depth (the re-entrant part of :func:`out_dir_lock`)."""
_LOCKED: list[Path] = []
"""Every out_dir this process has locked, in order (what a stopped command names as kept)."""


def locked_out_dirs() -> list[Path]:
    """The out_dirs this process has held the lock of (held now or released), outermost first."""
    return list(_LOCKED)


@contextlib.contextmanager
def out_dir_lock(out_dir: str | os.PathLike, command: str, *, wait: bool = True,
                 enabled: bool = True) -> Iterator[ExclusiveLock | None]:
    """Hold the exclusive lock of ``out_dir`` (``<out_dir>/.eegfm-bench.lock``) for the ``with`` block.

    Parameters
    ----------
    out_dir : path
        The folder the command writes (created if needed).
    command : str
        The command, for the lines (``cv``, ``sweep``, ...).
    wait : bool
        When another process holds it: wait, after one line on stderr (``waiting for pid <pid> on <host> holding
        <lock file> ...``); ``False`` (``--no-wait``): raise.
    enabled : bool
        ``False`` for a launcher's worker or a DDP rank other than 0: no lock (their parent / rank 0 holds it).

    Raises
    ------
    OutDirBusyError
        ``wait=False`` and another process holds the lock: one line naming the holder and the fix.
    """
    if not enabled:
        yield None
        return
    path = Path(out_dir).expanduser().resolve() / OUT_DIR_LOCK
    key = str(path)
    if key in _HELD:  # this process already holds it (a command inside a command): no second flock on one file
        _HELD[key] += 1
        try:
            yield None
        finally:
            _HELD[key] -= 1
        return
    lock = ExclusiveLock(path, lambda holder: f"waiting for {holder} holding {path} (another eegfm-bench command "
                                              f"writing this out_dir; {command} starts when it ends)",
                         stream=sys.stderr)
    try:
        lock.acquire(wait=wait)
    except Timeout:
        raise OutDirBusyError(f"{path.parent} is being written by {holder_of(path)} (lock {path}); fix: wait for it "
                              "to end (run without --no-wait to wait), or write to another out_dir") from None
    _HELD[key] = 1
    if path.parent not in _LOCKED:
        _LOCKED.append(path.parent)
    try:
        yield lock
    finally:
        del _HELD[key]
        lock.release()


__all__ = ["OUT_DIR_LOCK", "ExclusiveLock", "OutDirBusyError", "holder_of", "locked_out_dirs", "out_dir_lock"]
