"""``source: braindecode``: any braindecode dataset class by name over a local copy (TUHAbnormal, NMT, CHBMIT, ...).

The class is built with ``kwargs`` (the local ``path`` / ``root``, ``recording_ids``, ...); each of its recordings
(``dataset.datasets[i]``: an ``mne.io.Raw`` and a ``description``) becomes one :class:`Recording`: subject,
session and run from the description, a recording-level label from the description column ``target`` (e.g.
TUAB's ``pathological``) mapped through ``labels.map``. With ``EEGFM_OFFLINE=1`` every network connection is
refused while the class is built, so nothing is downloaded: a class that would fetch files fails with a message
naming where the local copy goes.
"""
from __future__ import annotations

import contextlib
import inspect
import socket
from pathlib import Path

from eegfm_bench.config import ConfigError, close_matches
from eegfm_bench.data.sources.base import (DataNotFoundError, Recording, RecordingReadError, Source, download_allowed,
                                      select_subjects)
from eegfm_bench.config.task import BraindecodeOptions


def _bd():
    """``braindecode.datasets``, imported on first use: it loads torch (about 1 GB and seconds), which no other
    source needs, and every ingestion worker process imports the sources."""
    import braindecode.datasets as bd  # reason: heavy optional dependency (torch), imported only by this source
    return bd


@contextlib.contextmanager
def no_network(enabled: bool, what: str):
    """Refuse every socket connection inside the block when ``enabled`` (offline mode)."""
    if not enabled:
        yield
        return
    real, real_dns = socket.socket.connect, socket.getaddrinfo

    def refuse(*a, **k):
        raise OSError(f"network access refused while building {what} (EEGFM_OFFLINE=1)")

    socket.socket.connect = refuse
    socket.getaddrinfo = refuse  # name lookups first: no retries against an unreachable host
    try:
        yield
    finally:
        socket.socket.connect, socket.getaddrinfo = real, real_dns


class BraindecodeSource(Source):
    """A braindecode dataset over local files (see the module docstring)."""

    name = "braindecode"
    options = BraindecodeOptions

    @classmethod
    def check_options(cls, opts, where):
        out = super().check_options(opts, where)
        names = [n for n in dir(_bd()) if not n.startswith("_") and isinstance(getattr(_bd(), n), type)]
        if out["cls"] not in names:
            raise ConfigError(f"{where}.cls {out['cls']!r} is not a braindecode dataset class.{close_matches(out['cls'], names)} "
                              f"Available: {', '.join(sorted(names))}")
        return out

    def __init__(self, spec, root):
        super().__init__(spec, root)
        self._ds = None

    def dataset(self):
        if self._ds is None:
            kw = dict(self.opts.kwargs)
            for key in ("path", "root"):
                if key in kw and kw[key] is not None and not str(kw[key]).startswith("/"):
                    kw[key] = str(self.root / kw[key])
            if not any(k in kw for k in ("path", "root")) and "path" in _params(getattr(_bd(), self.opts.cls)):
                kw["path"] = str(self.root)
            elif not any(k in kw for k in ("path", "root")) and "root" in _params(getattr(_bd(), self.opts.cls)):
                kw["root"] = str(self.root)
            with no_network(not download_allowed(), f"braindecode.datasets.{self.opts.cls}"):
                try:
                    self._ds = getattr(_bd(), self.opts.cls)(**kw)
                except Exception as err:  # noqa: BLE001
                    raise DataNotFoundError(
                        f"task {self.spec.name!r}: braindecode.datasets.{self.opts.cls}({kw}) failed: "
                        f"{type(err).__name__}: {err}\nfix: put the dataset's files under {self.root} (or set "
                        f"braindecode.kwargs.path / root), in the layout {self.opts.cls} reads") from err
        return self._ds

    def recordings(self, subjects=None) -> list[Recording]:
        ds = self.dataset()
        target = self.opts.target
        recs = []
        for i, d in enumerate(ds.datasets):
            desc = d.description
            sub = str(desc.get("subject", i))
            col = target if target is not None else ("target" if "target" in desc else None)
            label = None
            if col is not None:
                if col not in desc:
                    raise ConfigError(f"braindecode.target {col!r} is not a description column of {self.opts.cls} "
                                      f"(columns: {list(desc.index)})")
                label = str(desc[col])
            ses, run = str(desc.get("session", "")), str(desc.get("run", desc.get("segment", "")))
            path = desc.get("path")
            rec_id = f"{sub}_s{ses}_r{run}_{i}" if not path else f"{sub}_{str(path).rsplit('/', 1)[-1].rsplit('.', 1)[0]}"
            recs.append(Recording(sub, rec_id, Path(path) if path else None, label, ses, run, str(i)))
        return select_subjects(recs, subjects, f"task {self.spec.name!r} ({self.opts.cls})")

    def read(self, rec: Recording):
        try:
            raw = self.dataset().datasets[int(rec.handle)].raw
            raw.load_data()
            return raw.copy()
        except Exception as err:  # noqa: BLE001
            raise RecordingReadError(f"could not read {rec.recording} from {self.opts.cls}: {err}") from err

    def fingerprint(self, rec: Recording) -> str:
        return "" if rec.path else f"{self.opts.cls}:{rec.handle}"


def _params(cls) -> set:
    with contextlib.suppress(TypeError, ValueError):
        return set(inspect.signature(cls.__init__).parameters)
    return set()
