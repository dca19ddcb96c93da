"""``source: bids``: a BIDS dataset through mne-bids (``find_matching_paths`` + ``read_raw_bids``).

Recordings are the EEG files matching the BIDS entities (``task``, ``subjects``, ``sessions``, ``runs``,
``acquisitions``); ``read_raw_bids`` applies the sidecars (channel types from ``channels.tsv``, events from
``events.tsv`` as annotations). Labels come from ``labels.events`` (annotation description → class) or from
``labels.target``, a column of ``participants.tsv`` (one class per subject, e.g. a diagnosis) or of the subject's
``sessions.tsv`` (one per session).
"""
from __future__ import annotations

import fnmatch
from pathlib import Path

import mne
import pandas as pd
from mne_bids import find_matching_paths, get_bids_path_from_fname, get_entity_vals, read_raw_bids

from eegfm_bench.config import ConfigError
from eegfm_bench.data.sources.base import DataNotFoundError, Recording, RecordingReadError, Source, select_subjects
from eegfm_bench.config.task import BIDSOptions


_EEG_EXT = [".edf", ".bdf", ".vhdr", ".set", ".fif", ".eeg"]


class BIDSSource(Source):
    """A BIDS dataset (see the module docstring)."""

    name = "bids"
    options = BIDSOptions

    @classmethod
    def check_options(cls, opts, where):
        out = super().check_options(opts, where)
        for k in ("subjects", "sessions", "runs", "acquisitions"):  # BIDS labels are strings
            if out.get(k) is not None:
                vals = out[k] if isinstance(out[k], list) else [out[k]]
                out[k] = [str(v) for v in vals]
        if isinstance(out.get("task"), (int, float)):
            out["task"] = str(out["task"])
        return out

    def _paths(self):
        o = self.opts
        subs = o.subjects
        if subs:  # `subjects: [1, 2]` names sub-001 / sub-002 when those are the labels
            present = set(get_entity_vals(self.root, "subject"))
            by_value = {int(p): p for p in present if p.isdigit()}
            subs = [v if v in present or not v.isdigit() else by_value.get(int(v), v) for v in subs]
        exts = o.extensions or [e for e in _EEG_EXT if e != ".eeg"]
        runs = o.runs
        if runs:  # `runs: [4, 8]` names run-04 / run-08: numbers match the labels present by value
            present = {p.run for p in find_matching_paths(self.root, datatypes=o.datatype, suffixes=o.datatype)
                       if p.run}
            by_value = {int(p): p for p in present if p.isdigit()}
            runs = [r if r in present or not r.isdigit() else by_value.get(int(r), r) for r in runs]
        paths = find_matching_paths(self.root, subjects=subs, sessions=o.sessions, tasks=o.task,
                                    acquisitions=o.acquisitions, runs=runs, datatypes=o.datatype,
                                    suffixes=o.datatype, extensions=exts)
        return sorted(paths, key=lambda p: str(p.fpath))

    def recordings(self, subjects=None) -> list[Recording]:
        """The matching recordings, with recording-level labels from ``participants.tsv`` / ``sessions.tsv``.

        Raises
        ------
        DataNotFoundError
            The root is not a BIDS dataset or no file matches the entities (names them).
        ConfigError
            ``labels.target`` is not a column, or a subject has no value for it.
        """
        if not (self.root / "dataset_description.json").is_file():
            raise DataNotFoundError(f"task {self.spec.name!r}: {self.root} is not a BIDS dataset (no "
                                    "dataset_description.json); fix: point `root` at the BIDS root")
        paths = self._paths()
        if not paths:
            raise DataNotFoundError(f"task {self.spec.name!r}: no {self.opts.datatype} file in {self.root} matches "
                                    f"{ {k: v for k, v in self.opts.to_dict().items() if v} }; fix: check the entities")
        target = self.spec.labels.target
        labels = self._target_labels(target) if target else {}
        recs = []
        for p in paths:
            label = None
            if target:
                key = (p.subject, p.session or "")
                label = labels.get(key, labels.get((p.subject, "")))
                if label is None:
                    raise ConfigError(f"task {self.spec.name!r}: sub-{p.subject} has no {target!r} value in "
                                      "participants.tsv / sessions.tsv; fix: fill it in or select the subjects")
            rec_id = p.fpath.name.rsplit("_", 1)[0]

            recs.append(Recording(p.subject, rec_id, p.fpath, label, p.session or "", p.run or "", str(p.fpath)))
        if subjects is not None:
            subjects = [str(s).removeprefix("sub-") for s in subjects]
        return select_subjects(recs, subjects, f"task {self.spec.name!r} (BIDS {self.root})")

    def _target_labels(self, column: str) -> dict:
        out = {}
        part = self.root / "participants.tsv"
        cols = []
        if part.is_file():
            df = pd.read_csv(part, sep="\t", dtype=str)
            cols += list(df.columns)
            if column in df.columns:
                for sid, v in zip(df["participant_id"], df[column]):
                    if v == v and v not in ("n/a", ""):
                        out[(str(sid).removeprefix("sub-"), "")] = str(v)
        for ses in self.root.glob("sub-*/sub-*_sessions.tsv"):
            df = pd.read_csv(ses, sep="\t", dtype=str)
            cols += list(df.columns)
            if column in df.columns:
                sub = ses.name.split("_")[0].removeprefix("sub-")
                for s, v in zip(df["session_id"], df[column]):
                    if v == v and v not in ("n/a", ""):
                        out[(sub, str(s).removeprefix("ses-"))] = str(v)
        if not out:
            raise ConfigError(f"labels.target {column!r} is not a column of participants.tsv / sessions.tsv in "
                              f"{self.root} (columns: {sorted(set(cols))}); fix: name one of them")
        return out

    def companions(self, rec: Recording) -> list[Path]:
        """The sidecars that change what is read: ``events.tsv``, ``channels.tsv``, and ``participants.tsv`` /
        ``sessions.tsv`` when labels come from them."""
        stem = str(rec.handle).rsplit("_", 1)[0]
        out = [Path(stem + s) for s in ("_events.tsv", "_channels.tsv") if Path(stem + s).is_file()]
        if self.spec.labels.target:
            out += [p for p in [self.root / "participants.tsv", *self.root.glob(f"sub-{rec.subject}/*_sessions.tsv")]
                    if p.is_file()]
        return out

    def read(self, rec: Recording):
        try:
            raw = read_raw_bids(get_bids_path_from_fname(Path(rec.handle)), verbose="warning")
            raw.load_data()
        except Exception as err:  # noqa: BLE001
            raise RecordingReadError(f"could not read {rec.handle} with mne-bids: {type(err).__name__}: {err}\nfix: "
                                     "check the file and its sidecars (mne_bids.BIDSPath(...).fpath; "
                                     "bids-validator)") from err
        if self.opts.events_column:
            raw.set_annotations(self._events_from_column(rec, raw))
        elif self.spec.labels.events and not self.spec.labels.target:
            self._check_events_column(rec, raw)
        return raw

    def _check_events_column(self, rec: Recording, raw) -> None:
        """Refuse a recording whose ``events.tsv`` lacks the column ``labels.events`` is keyed by.

        mne-bids takes the descriptions from ``trial_type``; without it (or when it is all ``n/a``) it falls back to
        ``stim_type``, then ``value``, then ``n/a`` for every event. When none of the descriptions it produced is a
        key (or pattern) of ``labels.events``, the labels would silently vanish ("no labelled event"): refused here,
        naming the missing column and the columns present.

        Raises
        ------
        RecordingReadError
            The events file has no usable ``trial_type`` and no description maps to a class.
        """
        tsv = Path(str(rec.handle).rsplit("_", 1)[0] + "_events.tsv")
        if not tsv.is_file():
            return
        df = pd.read_csv(tsv, sep="\t", dtype=str, keep_default_na=False)
        tt = df["trial_type"] if "trial_type" in df.columns else None
        if tt is not None and (tt != "n/a").any():
            return
        events = self.spec.labels.events
        descs = sorted({str(d) for d in raw.annotations.description})
        if any(d in events or any(fnmatch.fnmatchcase(d, k) for k in events) for d in descs):
            return  # labels.events is keyed by what mne-bids read (e.g. the `value` codes): as declared
        why = "has no trial_type column" if tt is None else "has a trial_type column holding only n/a"
        used = next((c for c in ("stim_type", "value") if c in df.columns), None)
        got = (f"mne-bids took the event descriptions from `{used}` ({descs[:6]})" if used else
               "mne-bids named every event n/a")
        raise RecordingReadError(
            f"{tsv} {why}, the column labels.events reads (columns: {list(df.columns)}); {got}, none of which "
            f"labels.events maps ({sorted(events)}). fix: bids.events_column: <the column holding the event names> "
            "(labels.events keyed by its values), or add a trial_type column to the events files")

    def _events_from_column(self, rec: Recording, raw):
        col = self.opts.events_column
        tsv = Path(str(rec.handle).rsplit("_", 1)[0] + "_events.tsv")
        if not tsv.is_file():
            raise RecordingReadError(f"{rec.recording}: bids.events_column is set but {tsv} does not exist")
        df = pd.read_csv(tsv, sep="\t", dtype={col: str})
        if col not in df.columns:
            raise RecordingReadError(f"{tsv} has no column {col!r} (columns: {list(df.columns)}); fix: "
                                     "bids.events_column")
        dur = pd.to_numeric(df.get("duration", 0.0), errors="coerce").fillna(0.0)
        return mne.Annotations(pd.to_numeric(df["onset"]).to_numpy(), dur.to_numpy(), df[col].astype(str).tolist(),
                               orig_time=raw.annotations.orig_time)
