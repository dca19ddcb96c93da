"""Files written whole or not at all, checkpoints that prove they are whole, and a full disk as one line (ground
floor: it imports nothing of the package but :mod:`eegfm_bench.errors`).

**Atomic writes** (:func:`atomic_path`, :func:`atomic_write_text`, :func:`atomic_write_bytes`). Every file a
command writes goes to a unique temporary name in the same folder (``.<name>.<pid>-<uuid12>.tmp``, so two
processes or threads writing one file never touch each other's temporary), is flushed and ``fsync``-ed, then
renamed onto its name (``os.replace``: atomic on one filesystem, so a reader sees the old file or the new one,
never half of one). A failed write — a full disk, a quota, a crash, Ctrl-C — removes its temporary and leaves the
previous file as it was: no 0-byte ``failures.json``, no truncated ``results.csv``.

**Verified checkpoints** (:func:`write_checkpoint_bytes`, :func:`verify_checkpoint`). A checkpoint is written
atomically, then a sidecar ``<name>.ckpt.json`` holding its size in bytes and its SHA-256. Reading one checks the
size, then the digest; a checkpoint without a sidecar (written before sidecars existed, or by another tool) is
checked by ``torch.load(weights_only=True)`` alone. A mismatch or a failed load raises
:class:`DamagedCheckpointError` naming the file and the fix.

**A full disk** (:class:`DiskFullError`, :func:`disk_full_error`). ``ENOSPC`` (no space left on device) and
``EDQUOT`` (disk quota exceeded), wherever they arise in a command, become one line naming the folder, how many
bytes the write needed when it is known, the space free there, and the fix; the console script exits with status 2.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

from eegfm_bench.errors import EEGFMError

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""``errno`` values of a full filesystem or an exceeded quota."""

SIDECAR_SUFFIX = ".json"
"""A checkpoint ``best.ckpt``'s sidecar is ``best.ckpt.json``: ``{"file", "size", "sha256"}``."""

_CHUNK = 1 << 20


class DiskFullError(EEGFMError):
    """A write failed because the filesystem is full or the user's quota is exceeded (``ENOSPC`` / ``EDQUOT``).

    Attributes
    ----------
    folder : pathlib.Path or None
        The folder the write went to (``None`` when the error did not name one).
    needed : int or None
        Bytes the failed write needed, when known.
    """

    def __init__(self, message: str, folder: Path | None = None, needed: int | None = None):
        super().__init__(message)
        self.folder, self.needed = folder, needed


class DamagedCheckpointError(EEGFMError):
    """A checkpoint file whose size or SHA-256 differs from its sidecar, or which ``torch.load`` cannot read
    (truncated by a full disk or a killed copy, overwritten, ...)."""


# ------------------------------------------------------------------------------------------------- atomic writes
def unique_tmp(path: str | os.PathLike) -> Path:
    """A temporary name for ``path`` in its own folder, unique to this process and call:
    ``<folder>/.<name>.<pid>-<uuid12>.tmp`` (``os.replace`` onto ``path`` is then atomic on one filesystem)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some filesystems refuse ``fsync`` on a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, needed: int | None = None) -> Iterator[Path]:
    """Write ``path`` through a unique temporary file: ``with atomic_path(p) as tmp: <write tmp>``.

    On success the temporary is ``fsync``-ed and replaces ``path`` (readers see the old file or the new one, never
    half of one). On any error it is removed and ``path`` is untouched; a full disk or quota is raised as
    :class:`DiskFullError` (``needed``: the bytes the write needed, when the caller knows them).

    Raises
    ------
    DiskFullError
        ``ENOSPC`` / ``EDQUOT`` while writing, syncing or renaming.
    """
    path = Path(path)
    tmp = unique_tmp(path)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except OSError as err:
        full = disk_full_error(err, folder=path.parent, needed=needed)
        if full is not None:
            raise full from err
        raise
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte of ``data`` is written (a short write is continued, never dropped)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`); returns ``path``.

    Raises
    ------
    DiskFullError
        The filesystem is full or the quota exceeded (``needed``: ``len(data)``).
    """
    with atomic_path(path, needed=len(data)) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_write_bytes`); returns ``path``."""
    return atomic_write_bytes(path, text.encode(encoding))


# ------------------------------------------------------------------------------------------------- a full disk
def _disk_full_cause(err: BaseException | None) -> OSError | None:
    """The ``ENOSPC`` / ``EDQUOT`` ``OSError`` in ``err``'s chain (``__cause__`` / ``__context__``), if any."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return err
        if isinstance(err, RuntimeError) and "No space left on device" in str(err):  # torch's C++ writer
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        err = err.__cause__ or err.__context__
    return None


def _size(n: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} bytes"  # pragma: no cover


def disk_full_error(err: BaseException, folder: str | os.PathLike | None = None,
                    needed: int | None = None) -> DiskFullError | None:
    """The :class:`DiskFullError` (one line) for an error whose chain holds ``ENOSPC`` / ``EDQUOT``, else ``None``.

    Parameters
    ----------
    err : BaseException
        The error raised by a write (or by anything that wrapped it).
    folder : path, optional
        Where the write went; default: the folder of the ``OSError``'s file name, when it has one.
    needed : int, optional
        Bytes the write needed, when known.
    """
    if isinstance(err, DiskFullError):
        return err
    cause = _disk_full_cause(err)
    if cause is None:
        return None
    if folder is None and cause.filename:
        folder = Path(os.fsdecode(cause.filename)).parent
    folder = Path(folder) if folder is not None else None
    what = "disk quota exceeded (EDQUOT)" if cause.errno == errno.EDQUOT else "no space left on device (ENOSPC)"
    where = f" writing in {folder}" if folder is not None else ""
    free = ""
    if folder is not None:
        with contextlib.suppress(OSError):
            probe = next((p for p in (folder, *folder.parents) if p.exists()), None)
            if probe is not None:
                free = f", {_size(shutil.disk_usage(probe).free)} free there"
    need = f"; the write needed {_size(needed)}" if needed is not None else ""
    return DiskFullError(f"{what}{where}{need}{free}; fix: free space on that filesystem (or raise the quota), or "
                         "point out_dir (and EEGFM_CACHE, the window cache) to one with room, then rerun the same "
                         "command: every finished cell is kept and only the rest runs", folder=folder, needed=needed)


# ------------------------------------------------------------------------------------------ verified checkpoints
def sidecar_of(path: str | os.PathLike) -> Path:
    """The sidecar of checkpoint ``path``: ``<path>.json``."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def write_checkpoint_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write a serialized checkpoint atomically, then its sidecar (size in bytes, SHA-256).

    The old sidecar is removed first: a crash between the two renames leaves a whole checkpoint without a sidecar
    (checked by loading), never a sidecar that describes other bytes.

    Raises
    ------
    DiskFullError
        The filesystem is full or the quota exceeded (the previous checkpoint and sidecar are then as they were,
        or the checkpoint without its sidecar).
    """
    path = Path(path)
    side = sidecar_of(path)
    side.unlink(missing_ok=True)
    atomic_write_bytes(path, data)
    meta = {"file": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    atomic_write_text(side, json.dumps(meta) + "\n")
    return path


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Remove a checkpoint and its sidecar (either may be missing)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    sidecar_of(path).unlink(missing_ok=True)


def verify_checkpoint(path: str | os.PathLike, fix: str) -> None:
    """Check that checkpoint ``path`` is whole: its size and SHA-256 against its sidecar, or, without a sidecar,
    that ``torch.load(weights_only=True)`` reads it.

    Parameters
    ----------
    path : path
        The checkpoint (it must exist).
    fix : str
        What the user should do when it is damaged (ends the message, after ``fix:``).

    Raises
    ------
    DamagedCheckpointError
        Size or digest mismatch, an unreadable sidecar, or (no sidecar) a failed load; the message names the file,
        what differs and ``fix``.
    """
    path = Path(path)
    side = sidecar_of(path)
    size = path.stat().st_size
    if side.is_file():
        try:
            meta = json.loads(side.read_text())
            want_size, want_sha = int(meta["size"]), str(meta["sha256"])
        except (ValueError, KeyError, TypeError) as err:
            raise DamagedCheckpointError(f"checkpoint {path}: its sidecar {side} is unreadable ({err}); "
                                         f"fix: {fix}") from None
        if size != want_size:
            raise DamagedCheckpointError(f"checkpoint {path} is damaged: {size} bytes, its sidecar {side.name} says "
                                         f"{want_size}; fix: {fix}")
        got = file_sha256(path)
        if got != want_sha:
            raise DamagedCheckpointError(f"checkpoint {path} is damaged: SHA-256 {got[:12]}…, its sidecar says "
                                         f"{want_sha[:12]}…; fix: {fix}")
        return
    import torch  # reason: ground floor of the package; only a checkpoint without a sidecar needs it

    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (a truncated zip, a bad pickle, ... all mean one thing here)
        raise DamagedCheckpointError(f"checkpoint {path} is damaged: torch.load cannot read it ({size} bytes, "
                                     f"{type(err).__name__}: {str(err).splitlines()[0][:160]}); fix: {fix}") from None


__all__ = ["DISK_FULL_ERRNOS", "DamagedCheckpointError", "DiskFullError", "atomic_path", "atomic_write_bytes",
           "atomic_write_text", "disk_full_error", "file_sha256", "remove_checkpoint", "sidecar_of", "unique_tmp",
           "verify_checkpoint", "write_all", "write_checkpoint_bytes"]
