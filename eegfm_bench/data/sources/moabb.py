"""``source: moabb``: a MOABB dataset's continuous recordings and event ids (paradigm-independent).

``moabb.datasets.<dataset>(**kwargs).get_data(subjects)`` gives every subject's sessions and runs as ``mne.io.Raw``;
events come from the raw's annotations or, when it has none, from its stim channel through the dataset's
``event_id``. The windows and labels are then the task's own (``labels.events`` defaults to every event name of the
dataset, kept as the class name), so a MOABB dataset goes through the same channel policy, checks and
preprocessing as every other source. MOABB downloads missing data into ``MNE_DATA``; with ``EEGFM_OFFLINE=1``
network access is refused. ``moabb.datasets.fake.FakeDataset`` (``dataset: FakeDataset``) needs no download.
"""
from __future__ import annotations

from pathlib import Path

import mne

from eegfm_bench.config import ConfigError, close_matches
from eegfm_bench.data.sources.base import DataNotFoundError, Recording, RecordingReadError, Source, download_allowed
from eegfm_bench.data.sources.braindecode import no_network
from eegfm_bench.config.task import MOABBOptions


class MOABBSource(Source):
    """A MOABB dataset (see the module docstring)."""

    name = "moabb"
    reads_root = False
    options = MOABBOptions

    @classmethod
    def check_options(cls, opts, where):
        out = super().check_options(opts, where)
        import moabb.datasets as md  # reason: heavy optional dependency, imported only by this source
        names = sorted({n for n in dir(md) if not n.startswith("_")} | {"FakeDataset"})
        if out["dataset"] not in names:
            raise ConfigError(f"{where}.dataset {out['dataset']!r} is not a MOABB dataset."
                              f"{close_matches(out['dataset'], names)}")
        return out

    def __init__(self, spec, root):
        super().__init__(spec, root)
        self._ds, self._raws = None, {}

    def dataset(self):
        if self._ds is None:
            import moabb.datasets as md  # reason: heavy optional dependency, imported only by this source
            from moabb.datasets import fake  # reason: as above
            cls = fake.FakeDataset if self.opts.dataset == "FakeDataset" else getattr(md, self.opts.dataset)
            self._ds = cls(**self.opts.kwargs)
        return self._ds

    def _subject(self, s):
        """The subject's ``{session: {run: Raw}}``; only the last subject read stays in memory (recordings are read
        subject by subject), so a build holds one subject's data at a time, not the dataset's."""
        if s not in self._raws:
            self._raws.clear()
            with no_network(not download_allowed(), f"moabb.datasets.{self.opts.dataset}"):
                try:
                    self._raws[s] = self.dataset().get_data([s])[s]
                except Exception as err:  # noqa: BLE001
                    where = mne.get_config("MNE_DATA") or str(Path.home() / "mne_data")
                    raise DataNotFoundError(f"task {self.spec.name!r}: MOABB {self.opts.dataset} subject {s}: "
                                            f"{type(err).__name__}: {err}\nMOABB looks for its files under {where} "
                                            "(MNE_DATA; a task `root` does not apply to MOABB). fix: download it once "
                                            "with network access, or unset EEGFM_OFFLINE") from err
        return self._raws[s]

    def recordings(self, subjects=None) -> list[Recording]:
        ds = self.dataset()
        subs = list(ds.subject_list) if subjects is None else [type(ds.subject_list[0])(s) for s in subjects]
        unknown = sorted(set(map(str, subs)) - set(map(str, ds.subject_list)))
        if unknown:
            raise DataNotFoundError(f"task {self.spec.name!r}: subjects {unknown} are not in MOABB "
                                    f"{self.opts.dataset} ({ds.subject_list})")
        recs = []
        for s in subs:  # MOABB lists a subject's sessions and runs only by loading them: one subject at a time
            for ses, runs in self._subject(s).items():
                for run in runs:
                    recs.append(Recording(str(s), f"{s}-{ses}-{run}", None, None, str(ses), str(run), f"{s}|{ses}|{run}"))
        self._raws.clear()
        return recs

    def read(self, rec: Recording):
        s, ses, run = rec.handle.split("|")
        ds = self.dataset()
        sid = type(ds.subject_list[0])(s)
        try:
            raw = self._subject(sid)[ses][run].copy()
        except KeyError as err:
            raise RecordingReadError(f"MOABB {self.opts.dataset}: no session/run {ses}/{run} for subject {s}") from err
        names = set(raw.annotations.description)
        if not names & set(ds.event_id):
            stim = [c for c, t in zip(raw.ch_names, raw.get_channel_types()) if t == "stim"]
            if stim:
                ev = mne.find_events(raw, stim_channel=stim, shortest_event=0, verbose="warning")
                inv = {v: k for k, v in ds.event_id.items()}
                ev = ev[[e[2] in inv for e in ev]]
                raw.set_annotations(raw.annotations + mne.Annotations(
                    ev[:, 0] / raw.info["sfreq"] - raw.first_time, 0.0, [inv[e[2]] for e in ev]))
        return raw

    def default_events(self) -> dict[str, str]:
        ds = self.dataset()
        keep = self.opts.events or list(ds.event_id)
        return {k: k for k in keep}

    def fingerprint(self, rec: Recording) -> str:
        return f"moabb:{self.opts.dataset}:{self.opts.kwargs}:{rec.handle}"
