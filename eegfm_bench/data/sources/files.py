"""``source: files``: recordings are files any ``mne.io.read_raw`` reader opens, found by globs under ``root``.

Subject, session, run and a recording-level label come from a regular expression on the path relative to
``root`` (named groups ``subject``, ``session``, ``run``, ``label``) or from a table (CSV / TSV / JSON) that lists the
files: a ``path`` column (relative to ``root``) or a ``path_template`` built from the row (``signal/edf/{serial}.edf``),
and columns for subject / session / run / label (renamed through ``columns``; the label may also be the column
named by ``labels.target``). A JSON table is a list of records, or an object whose ``table_keys`` hold such lists
(e.g. CAUEEG's ``dementia.json`` with ``train_split`` / ``validation_split`` / ``test_split``).

``annotations`` names a companion file holding each recording's annotations (read with ``mne.read_annotations`` and
set on the recording), as a glob relative to the recording's folder formatted with the pattern's groups and
``{stem}``: ``"{stem}_sleepscoring.edf"`` (Sleep-HMC), ``"{subject}{session}E*-Hypnogram.edf"`` (Sleep-EDF). Exactly
one file must match.

A file the pattern does not match is an error naming it (never skipped quietly); so is a file listed twice.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import mne
import pandas as pd

from eegfm_bench.config import ConfigError
from eegfm_bench.data.sources.base import DataNotFoundError, Recording, RecordingReadError, Source, select_subjects
from eegfm_bench.config.task import FilesOptions


_COMPANION = {".vmrk", ".eeg", ".fdt", ".tsv", ".json", ".csv", ".txt", ".md", ".locs", ".elc", ".sfp", ".dat"}
_FIELDS = ("subject", "session", "run", "label")


class FilesSource(Source):
    """Files matched by globs under ``root`` (see the module docstring)."""

    name = "files"
    options = FilesOptions

    @classmethod
    def check_options(cls, opts, where):
        out = super().check_options(opts, where)
        groups: set = set()
        if out["pattern"] is not None:
            try:
                rx = re.compile(out["pattern"])
            except re.error as err:
                raise ConfigError(f"{where}.pattern {out['pattern']!r} is not a regular expression: {err}") from None
            groups = set(rx.groupindex)
            bad = groups - set(_FIELDS)
            if bad:
                raise ConfigError(f"{where}.pattern: unknown groups {sorted(bad)}; valid: {', '.join(_FIELDS)}")
        bad_cols = set(out["columns"]) - set(_FIELDS)
        if bad_cols:
            raise ConfigError(f"{where}.columns: unknown fields {sorted(bad_cols)}; valid: {', '.join(_FIELDS)}")
        if out["table"] is None and out["subject"] is None and "subject" not in groups:
            raise ConfigError(f"{where}: say where each file's subject comes from: a `pattern` with a (?P<subject>...) "
                              "group, a `table` with a subject column, or `subject: <id>` for a one-subject folder")
        if out["reader"] is not None:
            readers = sorted(n[len("read_raw_"):] for n in dir(mne.io) if n.startswith("read_raw_"))
            if out["reader"] not in readers:
                raise ConfigError(f"{where}.reader {out['reader']!r} is not an MNE reader; valid: {', '.join(readers)}")
        if out["table"] is None and (out["path_template"] or out["columns"] or out["table_keys"]):
            raise ConfigError(f"{where}: path_template / columns / table_keys need a `table`")
        return out

    def _files(self) -> list[Path]:
        globs = [self.opts.glob] if isinstance(self.opts.glob, str) else list(self.opts.glob)
        found: dict[Path, None] = {}
        for g in globs:
            named = g.lower().rsplit(".", 1)[-1] if "." in g.rsplit("/", 1)[-1] else ""
            for p in sorted(self.root.glob(g)):
                # companion files (.eeg of BrainVision, .fdt of EEGLAB, sidecars) unless the glob names the suffix
                if p.is_file() and (p.suffix.lower() not in _COMPANION or p.suffix.lower() == f".{named}"):
                    found[p] = None
        return list(found)

    def recordings(self, subjects=None) -> list[Recording]:
        """Every matched file (or table row) as a recording (sorted by path; table order for tables).

        Raises
        ------
        DataNotFoundError
            No file matches (names the root and the globs), or a table row's file is missing.
        ConfigError
            A file the pattern does not match, a table without the needed columns, a file listed twice.
        """
        if not self.root.is_dir():
            raise DataNotFoundError(f"task {self.spec.name!r}: root {self.root} does not exist; fix: point `root` "
                                    "(or data_root / EEGFM_DATA) at the folder that holds the files")
        rows = self._table_rows() if self.opts.table else None
        files = [self._row_path(r) for r in rows] if rows is not None else self._files()
        if not files:
            raise DataNotFoundError(f"task {self.spec.name!r}: no file under {self.root} matches {self.opts.glob!r}; "
                                    "fix: check `root` and `files.glob` (e.g. '**/*.edf')")
        rx = re.compile(self.opts.pattern) if self.opts.pattern else None
        target = self.spec.labels.target
        cols = {k: self.opts.columns.get(k, k) for k in _FIELDS}
        recs = []
        for i, f in enumerate(files):
            rel = f.relative_to(self.root).as_posix() if f.is_relative_to(self.root) else str(f)
            info: dict[str, str] = {}
            if rx is not None:
                m = rx.search(rel)
                if m is None:
                    raise ConfigError(f"task {self.spec.name!r}: {rel} does not match files.pattern "
                                      f"{self.opts.pattern!r}; fix: widen the pattern or narrow files.glob so "
                                      "that every file is matched (nothing is skipped silently)")
                info.update({k: v for k, v in m.groupdict().items() if v is not None})
            if rows is not None:
                r = rows[i]
                info.update({k: str(r[c]) for k, c in cols.items() if c in r and r[c] == r[c] and r[c] is not None})
                if target:
                    if target not in r:
                        raise ConfigError(f"labels.target {target!r} is not a column of {self.opts.table} "
                                          f"(columns: {sorted(r)})")
                    info["label"] = str(r[target])
                if not f.is_file():
                    raise DataNotFoundError(f"task {self.spec.name!r}: {f} (listed in {self.opts.table}) is missing; "
                                            "fix: restore it, or remove its row from the table")
            if self.opts.subject is not None:
                info.setdefault("subject", str(self.opts.subject))
            if "subject" not in info:
                raise ConfigError(f"task {self.spec.name!r}: no subject for {rel}; fix: a (?P<subject>...) group in "
                                  "files.pattern, a subject column in files.table (files.columns.subject), or "
                                  "files.subject")
            rec_id = re.sub(r"[^\w.-]+", "_", rel.rsplit(".", 1)[0])
            recs.append(Recording(info["subject"], rec_id, f, info.get("label"), info.get("session", ""),
                                  info.get("run", ""), json.dumps(info, sort_keys=True)))
        ids = [r.recording for r in recs]
        clash = {i for i in ids if ids.count(i) > 1}
        if clash:  # distinct files with one id (rec.edf + rec.fif, "a b" + "a_b"): the id keeps the extension
            recs = [r if r.recording not in clash else
                    Recording(r.subject, re.sub(r"[^\w.-]+", "_", Path(r.path).relative_to(self.root).as_posix()
                                                if Path(r.path).is_relative_to(self.root) else str(r.path)),
                              r.path, r.label, r.session, r.run, r.handle) for r in recs]
            ids = [r.recording for r in recs]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            paths = [str(r.path) for r in recs if r.recording in dup][:4]
            raise ConfigError(f"task {self.spec.name!r}: {paths} are listed more than once (the same file twice in "
                              "files.glob or files.table); fix: one entry per file")
        return select_subjects(recs, subjects, f"task {self.spec.name!r} under {self.root}")

    def _row_path(self, r: dict) -> Path:
        if self.opts.path_template:
            try:
                rel = self.opts.path_template.format(**r)
            except KeyError as err:
                raise ConfigError(f"files.path_template {self.opts.path_template!r} names column {err}, which "
                                  f"{self.opts.table} lacks (columns: {sorted(r)})") from None
        elif "path" in r:
            rel = str(r["path"])
        else:
            raise ConfigError(f"{self.opts.table} needs a `path` column (file paths relative to root) or set "
                              f"files.path_template; its columns: {sorted(r)}")
        p = Path(rel)
        return p if p.is_absolute() else self.root / p

    def _table_rows(self) -> list[dict]:
        path = Path(self.opts.table)
        path = path if path.is_absolute() else self.root / path
        if not path.is_file():
            raise DataNotFoundError(f"task {self.spec.name!r}: files.table {path} not found")
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text())
            if self.opts.table_keys:
                missing = [k for k in self.opts.table_keys if k not in data]
                if missing:
                    raise ConfigError(f"{path}: keys {missing} not found (it has {sorted(data)}); fix: files.table_keys")
                rows = [row for k in self.opts.table_keys for row in data[k]]
            elif isinstance(data, list):
                rows = data
            else:
                raise ConfigError(f"{path} is a JSON object; fix: name the keys whose lists of records to read in "
                                  f"files.table_keys (it has {sorted(data)})")
            return [{k: (str(v) if v is not None else None) for k, v in row.items()} for row in rows]
        sep = "\t" if path.suffix.lower() == ".tsv" else ","
        return pd.read_csv(path, sep=sep, dtype=str).to_dict("records")

    def _annotation_file(self, rec: Recording) -> Path | None:
        tmpl = self.opts.annotations
        if not tmpl:
            return None
        info = json.loads(rec.handle or "{}")
        try:
            pat = tmpl.format(stem=rec.path.stem, **info)
        except KeyError as err:
            raise ConfigError(f"files.annotations {tmpl!r} names {err}, which is not a pattern group of "
                              f"{rec.path.name} (groups: {sorted(info)}, plus stem)") from None
        hits = sorted(rec.path.parent.glob(pat))
        if len(hits) != 1:
            raise RecordingReadError(f"{rec.recording}: files.annotations {pat!r} matches {len(hits)} files in "
                                     f"{rec.path.parent} ({[h.name for h in hits][:4]}); fix: exactly one annotation "
                                     "file per recording")
        return hits[0]

    def companions(self, rec: Recording) -> list[Path]:
        ann = self._annotation_file(rec)
        return [ann] if ann else []

    def read(self, rec: Recording):
        reader = getattr(mne.io, f"read_raw_{self.opts.reader}") if self.opts.reader else mne.io.read_raw
        try:
            raw = reader(rec.path, preload=True, verbose="warning", **self.opts.reader_kwargs)
        except Exception as err:  # noqa: BLE001  (MNE raises bare Exception / ValueError / RuntimeError)
            if "yielded no channels" in str(err) or "no channels" in str(err).lower():
                raise RecordingReadError(
                    f"{rec.path} holds no signal channel (an annotation-only EDF+ file, such as a Sleep-EDF "
                    "hypnogram?). fix: narrow files.glob to the recordings and name this file in files.annotations "
                    "of the recording it belongs to") from err
            raise RecordingReadError(
                f"could not read {rec.path}: {type(err).__name__}: {err}\nfix: check the file is a continuous recording "
                "MNE reads (epoched EEGLAB files need mne.read_epochs_eeglab; annotation-only EDF+ files need "
                "files.annotations of the recording they belong to), that it is complete, and pass reader options "
                "in files.reader_kwargs") from err
        ann = self._annotation_file(rec)
        if ann is not None:
            try:
                a = mne.read_annotations(ann)
            except Exception as err:  # noqa: BLE001
                raise RecordingReadError(f"could not read the annotations {ann}: {type(err).__name__}: {err}") from err
            raw.set_annotations(raw.annotations + a if len(raw.annotations) else a, verbose="warning")
        return raw
