"""The sources' shared parts: :class:`Recording`, the :class:`Source` base class, the data root and the errors of a
missing or unreadable recording (the sources themselves live beside this module; :mod:`eegfm_bench.data.sources`
registers them)."""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import mne

from eegfm_bench.config import ConfigError, check_section, typed


class DataNotFoundError(FileNotFoundError):
    """Raised when recordings are missing; the message says where they go and how to get them."""


class DataRootNotFoundError(DataNotFoundError):
    """Raised when the data root itself is not a folder (a mistyped ``--data-root`` or ``EEGFM_DATA``)."""


class RecordingReadError(RuntimeError):
    """Raised when a recording exists but cannot be read (e.g. a corrupted EDF)."""


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """Data root: ``data_root`` if given, else ``$EEGFM_DATA``, else MNE's data folder (``MNE_DATA`` or ``~/mne_data``).

    The path rule (one for every command): a relative data root — ``EEGFM_DATA=../shared/data``, ``--data.data_root``
    or ``data_root:`` in a config — is relative to the working directory and made absolute here, once; a task's
    relative ``root:`` is a folder under it (:meth:`~eegfm_bench.data.ingest.DeclaredTask.source`); ``out_dir`` and
    ``cache_dir`` are relative to the working directory; a task YAML named in a config is looked up in the working
    directory, then next to the config.

    Returns
    -------
    Path
        Absolute.
    """
    if data_root:
        return Path(os.path.abspath(Path(data_root).expanduser()))
    if os.environ.get("EEGFM_DATA"):
        return Path(os.path.abspath(Path(os.environ["EEGFM_DATA"]).expanduser()))
    return Path(os.path.abspath(Path(mne.get_config("MNE_DATA") or Path.home() / "mne_data").expanduser()))


def existing_data_root(data_root: str | os.PathLike | None = None, where: str = "") -> Path:
    """The data root (:func:`resolve_data_root`), refused when it is not a folder.

    A data root named explicitly (``--data-root``, ``data_root:``, ``EEGFM_DATA``) must exist, and so must MNE's
    data folder when nothing may be downloaded into it (``EEGFM_OFFLINE=1``). A missing one is never replaced by
    the working directory: every relative task root would silently point somewhere else.

    Parameters
    ----------
    data_root : path, optional
        As :func:`resolve_data_root`.
    where : str
        What asks (``task 'eegmat'``), the start of the message.

    Returns
    -------
    Path
        Absolute.

    Raises
    ------
    DataRootNotFoundError
        The data root is not a folder; the one-line message names it, where it came from and the fix.
    """
    base = resolve_data_root(data_root)
    if base.is_dir():
        return base
    if data_root:
        origin = "--data-root / data_root"
    elif os.environ.get("EEGFM_DATA"):
        origin = f"EEGFM_DATA={os.environ['EEGFM_DATA']}"
    elif download_allowed():
        return base  # MNE's own folder, created by the first download
    else:
        origin = "MNE's data folder: neither --data-root / data_root nor EEGFM_DATA is set"
    what = "is a file, not a folder" if base.exists() else "does not exist"
    raise DataRootNotFoundError(f"{where + ': ' if where else ''}the data root {base} ({origin}) {what}; fix: point "
                                "--data-root (or data_root / EEGFM_DATA) at the folder that holds the datasets, "
                                "e.g. EEGFM_DATA=../shared/data")


def download_allowed(download: bool | None = None) -> bool:
    """Whether missing files may be fetched (default yes, unless ``EEGFM_OFFLINE=1``)."""
    if download is not None:
        return bool(download)
    return os.environ.get("EEGFM_OFFLINE", "0") not in ("1", "true", "yes")


@dataclass(frozen=True)
class Recording:
    """One recording and what it contributes.

    Attributes
    ----------
    subject : str
    recording : str
        Unique id within the task (used in windows' identities, folds by recording and the report).
    path : Path or None
        The file (None for sources that read through a handle, e.g. a braindecode dataset).
    label : str or None
        The class of every window of a recording-labelled task (a class *name*); None when labels come from
        annotations.
    session, run : str
    handle : str
        A source-specific key to find the recording again (e.g. the index into a braindecode dataset).
    """

    subject: str
    recording: str
    path: Path | None
    label: str | None = None
    session: str = ""
    run: str = ""
    handle: str = ""


class Source:
    """Base of the sources: options, recordings, reading (see the module docstring)."""

    name: ClassVar[str] = "base"
    reads_root: ClassVar[bool] = True
    """Whether the recordings are found under the task's ``root`` (MOABB keeps its own folder: False)."""
    options: ClassVar[type | None] = None
    """The schema of the source's own options (a frozen :class:`~eegfm_bench.config.ConfigRecord`; None: none)."""

    def __init__(self, spec, root: Path):
        """``spec``: the task's :class:`~eegfm_bench.config.task.TaskSpec`; ``root``: the folder of its data
        (absolute). ``self.opts`` is the source's options (:attr:`TaskSpec.source_section
        <eegfm_bench.config.task.TaskSpec.source_section>`) as its typed record (:attr:`options`; None without)."""
        self.spec, self.root = spec, Path(root)
        self.opts = None if self.options is None else typed(self.options, spec.source_section)
        self.skipped: dict[str, str] = {}  # subjects present but not usable (subject -> why), for the report

    @classmethod
    def check_options(cls, opts: dict, where: str) -> dict:
        """Validate the source's own options (the task's mapping, unknown keys refused with close matches) and fill
        defaults: the parsing step (:func:`~eegfm_bench.data.spec.parse_task_spec`); the source reads them back
        typed (``self.opts``)."""
        if cls.options is None:
            if opts:
                raise ConfigError(f"{where}: the {cls.name} source takes no options")
            return {}
        check_section(opts, cls.options, where)
        return {**{f: getattr(cls.options(), f) if _has_default(cls.options, f) else None
                   for f in cls.options.__dataclass_fields__}, **opts}

    def recordings(self, subjects: list | None = None) -> list[Recording]:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, rec: Recording):  # pragma: no cover - abstract
        """The recording as stored: an ``mne.io.Raw`` (preloaded, volts, every channel, annotations)."""
        raise NotImplementedError

    def header_path(self, rec: Recording) -> Path | None:
        """The file whose header declares the duration (EDF/BDF) and whose bytes are hashed."""
        return rec.path

    def companions(self, rec: Recording) -> list[Path]:
        """Other files whose bytes make up the recording (e.g. a separate annotation file); hashed with it."""
        return []

    def fingerprint(self, rec: Recording) -> str:
        """What identifies the recording's content beyond its files (e.g. a dataset version); '' by default."""
        return ""


def select_subjects(recs: list[Recording], subjects: list | None, where: str) -> list[Recording]:
    """The recordings of ``subjects`` (every recording when None).

    A requested subject matches a recording's subject id exactly, or, when the request is a number, an id whose
    trailing digits are that number (``2`` → ``Subject02``, ``sub-002``, ``S002``).

    Raises
    ------
    DataNotFoundError
        A requested subject has no recording (or a number matches two ids); the message lists what is present.
    """
    if subjects is None:
        return recs
    present = sorted({r.subject for r in recs})
    chosen: list[str] = []
    for s in subjects:
        s = str(s)
        if s in present:
            chosen.append(s)
            continue
        hits = [p for p in present if s.isdigit() and re.search(r"(\d+)$", p) and int(re.search(r"(\d+)$", p).group(1)) == int(s)]
        if len(hits) != 1:
            raise DataNotFoundError(f"{where}: subject {s!r} {'matches ' + str(hits) if hits else 'has no recording'}; "
                                    f"present: {present[:20]}{' …' if len(present) > 20 else ''}")
        chosen.append(hits[0])
    want = set(chosen)
    return [r for r in recs if r.subject in want]


def _has_default(cls, name: str) -> bool:
    f = cls.__dataclass_fields__[name]
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
