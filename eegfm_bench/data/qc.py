"""Ingestion checks and their report: nothing is dropped, truncated, resampled or changed without a line.

For every recording :class:`RecordingQC` records the path(s), the sha256 of the file's contents, the native
sampling rate of every channel, the duration the header declares vs the duration read, the channels kept,
renamed, dropped (with the reason) and interpolated, flat / saturated / non-finite channels, the events found per
class and those not mapped to a class, overlapping events, the windows kept and rejected (with the reason), the
warnings the readers emitted (MNE hides many under ``verbose="error"``: they are captured here instead), and whether
the recording was kept. :class:`IngestReport` adds the per-subject outcome and writes ``ingest_report.json`` /
``ingest_report.md``; :meth:`IngestReport.summary` is the short summary a command prints.

``strict`` (a task setting) turns every finding into an :class:`IngestError` naming the recording and the fix.

File hashes (:func:`file_sha256`) are computed once per file version and remembered in ``<cache>/sha256.jsonl``
under (real path, size, mtime, ctime, inode): an edit that keeps the size and even restores the mtime still changes
the ctime, so a changed file is always re-hashed and its windows rebuilt.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import mne
import numpy as np
import yaml

from eegfm_bench.atomic import atomic_write_text


class IngestError(ValueError):
    """A recording failed an ingestion check under ``strict: true`` (or a check that always refuses)."""


# ============================================================================================ file hashes


def companion_files(path: str | os.PathLike) -> list[Path]:
    """The files one recording is made of: BrainVision ``.vhdr`` + its ``DataFile`` / ``MarkerFile``, EEGLAB
    ``.set`` + a same-stem ``.fdt``, else the file itself."""
    p = Path(path)
    out = [p]
    if p.suffix.lower() == ".vhdr" and p.is_file():
        text = p.read_text(errors="replace")
        for key in ("DataFile", "MarkerFile"):
            m = re.search(rf"^{key}=(.+)$", text, re.M)
            if m and (p.parent / m.group(1).strip()).is_file():
                out.append(p.parent / m.group(1).strip())
    elif p.suffix.lower() == ".set":
        fdt = p.with_suffix(".fdt")
        if fdt.is_file():
            out.append(fdt)
    return out


_SHA_MEMO: dict[str, dict] = {}  # memo file -> {file-version key: digest}, read incrementally
_SHA_MEMO_POS: dict[str, int] = {}  # bytes of the memo file already read


def _sha_memo(cache_dir: str | os.PathLike) -> tuple[Path, dict]:
    """The digest memo of ``cache_dir``: ``sha256.jsonl`` (one ``{"k": key, "sha256": digest}`` line per file
    version, appended by every process) read from where this process stopped last time, plus a legacy
    ``sha256.json`` read once. Linear in the files hashed (a whole-file rewrite per digest was quadratic)."""
    path = Path(cache_dir) / "sha256.jsonl"
    memo = _SHA_MEMO.setdefault(str(path), {})
    if str(path) not in _SHA_MEMO_POS:
        legacy = Path(cache_dir) / "sha256.json"
        if legacy.is_file():
            with contextlib.suppress(ValueError, OSError):
                memo.update(json.loads(legacy.read_text()))
        _SHA_MEMO_POS[str(path)] = 0
    if path.is_file():
        with open(path, "rb") as fh:
            fh.seek(_SHA_MEMO_POS[str(path)])
            tail = fh.read()
        end = tail.rfind(b"\n") + 1  # complete lines only: a concurrent writer may be mid-line
        for line in tail[:end].splitlines():
            with contextlib.suppress(ValueError, KeyError):
                rec = json.loads(line)
                memo[rec["k"]] = rec["sha256"]
        _SHA_MEMO_POS[str(path)] += end
    return path, memo


def file_sha256(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """sha256 (hex) of a recording's bytes (every companion file, in order), remembered per file version.

    The memo ``<cache_dir>/sha256.jsonl`` is keyed by (real path, size, mtime_ns, ctime_ns, inode) of every file;
    any change re-hashes. Processes append one line per new digest (``O_APPEND``: concurrent writers never lose
    a line) and each reads only what was appended since its last read. Without ``cache_dir`` nothing is remembered.
    """
    files = companion_files(path)
    stamps = []
    for f in files:
        st = f.stat()
        stamps.append(f"{os.path.realpath(f)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}")
    key = "||".join(stamps)
    memo_path, memo = _sha_memo(cache_dir) if cache_dir else (None, {})
    if key in memo:
        return memo[key]
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    if memo_path is not None:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"k": key, "sha256": digest}) + "\n").encode()
        fd = os.open(memo_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)  # one write of one line
        finally:
            os.close(fd)
        memo[key] = digest
    return digest


# ============================================================================================ headers
def edf_header(path: str | os.PathLike) -> dict | None:
    """The declared record count, record duration and per-signal samples of an EDF / BDF header.

    Returns
    -------
    dict or None
        ``n_records`` (declared; -1 = unknown), ``record_s``, ``n_signals``, ``labels``, ``samples_per_record``,
        ``declared_s`` (n_records × record_s) and ``file_records`` (what the file size holds); ``None`` for other
        formats or an unreadable header.
    """
    p = Path(path)
    if p.suffix.lower() not in (".edf", ".bdf"):
        return None
    try:
        with open(p, "rb") as f:
            fixed = f.read(256)
            n_sig = int(fixed[252:256].decode("ascii", "replace").strip())
            sig = f.read(256 * n_sig)
        n_records = int(fixed[236:244].decode("ascii", "replace").strip() or -1)
        record_s = float(fixed[244:252].decode("ascii", "replace").strip())
        header_bytes = int(fixed[184:192].decode("ascii", "replace").strip())
    except (ValueError, OSError):
        return None
    labels = [sig[i * 16:(i + 1) * 16].decode("latin-1").strip() for i in range(n_sig)]
    off = 216 * n_sig
    spr = [int(sig[off + i * 8: off + (i + 1) * 8].decode("ascii", "replace").strip() or 0) for i in range(n_sig)]
    bytes_per = 3 if p.suffix.lower() == ".bdf" else 2
    rec_bytes = sum(spr) * bytes_per
    file_records = (p.stat().st_size - header_bytes) / rec_bytes if rec_bytes else float("nan")
    return {"n_records": n_records, "record_s": record_s, "n_signals": n_sig, "labels": labels,
            "samples_per_record": spr, "declared_s": n_records * record_s if n_records > 0 else None,
            "file_records": file_records, "header_bytes": header_bytes, "bytes_per_sample": bytes_per,
            "reserved": fixed[192:236].decode("latin-1").strip()}


EDF_TIMEKEEPING = re.compile(rb"^([+-]\d+(?:\.\d+)?)\x14\x14")
"""The time-keeping annotation that opens the annotation signal of every EDF+/BDF+ data record (EDF+ spec §2.2.4):
``+<onset in seconds>`` then two bytes 20."""


def edf_annotation_damage(path: str | os.PathLike, hdr: dict | None = None) -> str | None:
    """Whether the data records of an EDF+/BDF+ file are damaged, from their time-keeping annotations.

    Every data record of an EDF+ file opens its annotation signal with a time-keeping annotation, ASCII
    ``+<onset>`` then two bytes 0x14 (:data:`EDF_TIMEKEEPING`). A record that holds something else there is shifted
    or overwritten (e.g. EEG samples where the text should be), so its samples cannot be trusted either. MNE refuses
    such a file with "Encountered invalid byte in at least one annotations channel"; a reader ``encoding`` (e.g.
    ``latin1``) decodes the garbage and opens it anyway.

    Parameters
    ----------
    path : path
        The file.
    hdr : dict, optional
        Its :func:`edf_header` (read when not given).

    Returns
    -------
    str or None
        One clause naming how many records are damaged, the first one and its bytes, and the decoding error;
        None for an intact file, a plain EDF/BDF (no annotation signal) or another format.
    """
    hdr = hdr if hdr is not None else edf_header(path)
    if not hdr or hdr["reserved"][:4] not in ("EDF+", "BDF+") or hdr["n_records"] <= 0:
        return None
    ann = [i for i, lab in enumerate(hdr["labels"]) if lab in ("EDF Annotations", "BDF Annotations")]
    if not ann:
        return None
    bps, spr = hdr["bytes_per_sample"], hdr["samples_per_record"]
    rec_bytes = sum(spr) * bps
    start, size = sum(spr[:ann[0]]) * bps, spr[ann[0]] * bps
    bad: list[tuple[int, bytes]] = []
    with open(path, "rb") as f:
        for k in range(hdr["n_records"]):
            f.seek(hdr["header_bytes"] + k * rec_bytes + start)
            chunk = f.read(size)
            if len(chunk) < size:
                break  # a truncated file: reported by the duration check
            if not EDF_TIMEKEEPING.match(chunk):
                bad.append((k, chunk[:12]))
    if not bad:
        return None
    k, head = bad[0]
    try:
        head.decode("utf-8")
        decoding = "it decodes as text but is not a time-keeping annotation"
    except UnicodeDecodeError as err:
        decoding = f"not text: {err}"
    return (f"{len(bad)} of {hdr['n_records']} EDF+ data records do not open with a time-keeping annotation "
            f"('+<onset>\\x14\\x14'): record {k} starts with {head!r} ({decoding}); the records are shifted or "
            "overwritten, so their samples are not the recording")


# ============================================================================================ the records
@dataclass
class RecordingQC:
    """What ingestion found and did for one recording (one entry of the ingest report)."""

    recording: str
    subject: str
    session: str = ""
    run: str = ""
    path: str = ""
    files: list[str] = field(default_factory=list)
    sha256: str = ""
    format: str = ""
    native_sfreq: dict[str, list[str]] = field(default_factory=dict)  # rate (Hz, as str) -> channels
    sfreq_read: float | None = None
    header_duration_s: float | None = None
    read_duration_s: float | None = None
    channels_as_read: list[str] = field(default_factory=list)
    channels_kept: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # channel -> reason
    interpolated: list[str] = field(default_factory=list)
    flat: list[str] = field(default_factory=list)
    marked_bad: list[str] = field(default_factory=list)  # bad in the file (info['bads'], channels.tsv status)
    rms_uv: float | None = None  # median channel RMS of the kept channels, µV
    saturated: dict[str, float] = field(default_factory=dict)  # channel -> fraction of samples at the rail
    nonfinite: list[str] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)  # class -> events found
    events_unmapped: dict[str, int] = field(default_factory=dict)  # annotation description -> count
    overlapping_events: int = 0
    label: str | None = None
    windows_kept: int = 0
    windows_rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    windows_per_class: dict[str, int] = field(default_factory=dict)
    preprocessing: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)  # {"reference", "n_channels", "channels"}: over the final channels
    past_event: dict[str, int] = field(default_factory=dict)  # windows longer than their event / events overrunning
    warnings: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # what deserves attention (strict: each is an error)
    actions: list[str] = field(default_factory=list)  # what ingestion changed
    status: str = "kept"
    reason: str = ""

    def find(self, msg: str) -> None:
        """Record a finding (a problem with the data), once."""
        if msg not in self.findings:
            self.findings.append(msg)

    def act(self, msg: str) -> None:
        """Record something ingestion changed (dropped, renamed, interpolated, ...)."""
        if msg not in self.actions:
            self.actions.append(msg)

    def reject(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rejected windows under ``reason``."""
        if n:
            self.windows_rejected[reason] = self.windows_rejected.get(reason, 0) + int(n)

    def drop(self, reason: str) -> None:
        """The whole recording contributes nothing (the reason goes in the report)."""
        self.status, self.reason = "dropped", reason

    def to_dict(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def capture_warnings(qc: RecordingQC) -> Iterator[None]:
    """Record every Python warning and every MNE log message at warning level or above into ``qc.warnings``
    (MNE's ``verbose="error"`` would hide them: truncation, mixed rates, annotations outside the data, ...)."""
    records: list[str] = []

    class _H(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = _H(level=logging.WARNING)
    logger = logging.getLogger("mne")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught, mne.utils.use_log_level("warning"):
            warnings.simplefilter("always")
            yield
    finally:
        logger.removeHandler(handler)
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, FutureWarning)):
            continue
        records.append(str(w.message))
    for msg in dict.fromkeys(" ".join(m.split()) for m in records):
        if msg not in qc.warnings:
            qc.warnings.append(msg)


def channel_signal_checks(data: np.ndarray, names: list[str], qc: RecordingQC, *, flat_v: float = 1e-7,
                          rail_fraction: float = 0.01) -> None:
    """Flat, saturated and non-finite channels of ``data`` ``(n_chans, n_times)`` in volts (into ``qc``).

    Parameters
    ----------
    flat_v : float
        A channel whose peak-to-peak amplitude is below this (V; 1e-7 V = 0.1 µV) is flat.
    rail_fraction : float
        A channel with more than this fraction of its samples at its own maximum or minimum value is saturated
        (clipped at the amplifier's or the file's range).
    """
    finite = np.isfinite(data)
    for i, name in enumerate(names):
        row = data[i]
        if not finite[i].all():
            qc.nonfinite.append(name)
            continue
        ptp = float(row.max() - row.min()) if row.size else 0.0
        if ptp < flat_v:
            qc.flat.append(name)
            continue
        top = float(np.mean(row >= row.max() - 1e-12 * max(1.0, abs(row.max()))))
        bot = float(np.mean(row <= row.min() + 1e-12 * max(1.0, abs(row.min()))))
        frac = max(top, bot)
        if frac > rail_fraction:
            qc.saturated[name] = round(frac, 4)


# ============================================================================================ the report
@dataclass
class IngestReport:
    """Every recording's :class:`RecordingQC` plus the outcome per subject.

    Attributes
    ----------
    task : str
    recordings : list of RecordingQC
    settings : dict
        The task's resolved spec (source, labels, windows, channels) the report was made under, as a mapping
        (:meth:`TaskSpec.to_dict <eegfm_bench.config.ConfigRecord.to_dict>`; the same when read back from
        ``ingest_report.json``).
    """

    task: str
    recordings: list[RecordingQC] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    source_warnings: list[str] = field(default_factory=list)
    skipped_subjects: dict[str, str] = field(default_factory=dict)  # found by the source but not usable: why

    def subjects(self) -> dict[str, dict]:
        """Per subject: ``status`` (kept / dropped), ``reason``, recordings kept / dropped, windows per class."""
        out: dict[str, dict] = {}
        for r in self.recordings:
            s = out.setdefault(r.subject, {"recordings_kept": 0, "recordings_dropped": 0, "windows": 0,
                                           "windows_per_class": {}, "reasons": []})
            if r.status == "kept":
                s["recordings_kept"] += 1
                s["windows"] += r.windows_kept
                for c, n in r.windows_per_class.items():
                    s["windows_per_class"][c] = s["windows_per_class"].get(c, 0) + n
            else:
                s["recordings_dropped"] += 1
                s["reasons"].append(f"{r.recording}: {r.reason}")
        for s in out.values():
            kept = s["windows"] > 0
            s["status"] = "kept" if kept else "dropped"
            s["reason"] = "" if kept else ("; ".join(s["reasons"]) or "no window")
        for subj, why in self.skipped_subjects.items():
            out.setdefault(subj, {"recordings_kept": 0, "recordings_dropped": 0, "windows": 0, "windows_per_class": {},
                                  "reasons": [why], "status": "dropped", "reason": why})
        return out

    def totals(self) -> dict:
        subj = self.subjects()
        rejected: dict[str, int] = {}
        for r in self.recordings:
            for k, v in r.windows_rejected.items():
                rejected[k] = rejected.get(k, 0) + v
        return {"recordings": len(self.recordings),
                "recordings_kept": sum(r.status == "kept" for r in self.recordings),
                "subjects": len(subj), "subjects_kept": sum(s["status"] == "kept" for s in subj.values()),
                "windows_kept": sum(r.windows_kept for r in self.recordings), "windows_rejected": rejected,
                "findings": sum(len(r.findings) for r in self.recordings),
                "warnings": sum(len(r.warnings) for r in self.recordings),
                "windows_past_event": sum(r.past_event.get("window longer than its event", 0) for r in self.recordings),
                "events_overrunning": sum(r.past_event.get("event overruns the next annotation", 0)
                                          for r in self.recordings),
                "reference": _reference_summary(self.recordings)}

    def to_dict(self) -> dict:
        return {"task": self.task, "settings": self.settings, "totals": self.totals(), "subjects": self.subjects(),
                "source_warnings": self.source_warnings, "skipped_subjects": self.skipped_subjects,
                "recordings": [r.to_dict() for r in self.recordings]}

    def summary(self) -> list[str]:
        """A few lines for the console: totals, then every dropped subject / recording and every finding."""
        t = self.totals()
        rej = ", ".join(f"{v} {k}" for k, v in sorted(t["windows_rejected"].items())) or "none"
        lines = [f"ingest {self.task}: {t['recordings_kept']}/{t['recordings']} recordings and {t['subjects_kept']}/"
                 f"{t['subjects']} subjects kept, {t['windows_kept']} windows (rejected: {rej}); {t['findings']} "
                 f"finding(s), {t['warnings']} reader warning(s)"
                 + (f"; reference: {t['reference']}" if t.get("reference") else "")
                 + (f"; {t['windows_past_event']} window(s) longer than their event" if t["windows_past_event"] else "")]
        for w in self.source_warnings:
            lines.append(f"  dataset: {w}")
        for s, v in self.subjects().items():
            if v["status"] != "kept":
                lines.append(f"  subject {s} dropped: {v['reason']}")
        for r in self.recordings:
            for f in r.findings:
                lines.append(f"  {r.recording}: {f}")
            if r.status != "kept" and not any(r.reason in ln for ln in lines):
                lines.append(f"  {r.recording} dropped: {r.reason}")
        return lines

    def to_markdown(self) -> str:
        """The report as markdown: totals, the settings, one row per subject and per recording, reader warnings."""
        t = self.totals()
        rej = ", ".join(f"{k}: {v}" for k, v in t["windows_rejected"].items()) or "none"
        settings = {k: v for k, v in self.settings.items() if v not in (None, [], {}, "")}
        L = [f"# Ingestion report: {self.task}", "",
             f"{t['recordings_kept']} of {t['recordings']} recordings and {t['subjects_kept']} of {t['subjects']} "
             f"subjects kept; {t['windows_kept']} windows kept; rejected windows: {rej}; {t['findings']} finding(s); "
             f"{t['warnings']} reader warning(s).", ""]
        if self.source_warnings:
            L += ["Dataset warnings (while listing the recordings):", ""] + [f"- {w}" for w in self.source_warnings] + [""]
        L += ["sha256: of the file's bytes (`sha256sum` gives the same) for one-file recordings; for a recording made of "
              "several files (BrainVision .vhdr/.eeg/.vmrk, EEGLAB .set/.fdt, BIDS sidecars, annotation files) the "
              "sha256 of their digests in order — the files are listed in the .json.", "",
              "<details><summary>Task settings</summary>", "", "```yaml",
              yaml.safe_dump(settings, sort_keys=False, allow_unicode=True).rstrip(), "```", "", "</details>", "",
              "## Subjects", "", "| subject | status | recordings kept / dropped | windows | per class | reason |",
              "|---|---|---|---|---|---|"]
        for s, v in self.subjects().items():
            L.append(f"| {s} | {v['status']} | {v['recordings_kept']} / {v['recordings_dropped']} | {v['windows']} | "
                     f"{', '.join(f'{c}: {n}' for c, n in v['windows_per_class'].items())} | {v['reason']} |")
        L += ["", "## Recordings", "",
              "| recording | status | label | sha256 | native rate (Hz) | duration header / read (s) | channels kept | "
              "renamed | dropped | flat / saturated / non-finite | events per class | unmapped events | windows kept | "
              "windows rejected | findings | actions |", "|" + "---|" * 16]
        for r in self.recordings:
            rates = "; ".join(f"{k}: {len(v)} ch" for k, v in r.native_sfreq.items())
            dur = f"{_f(r.header_duration_s)} / {_f(r.read_duration_s)}"
            bad = " / ".join([", ".join(r.flat) or "–", ", ".join(f"{c} ({v:.0%})" for c, v in r.saturated.items()) or "–",
                              ", ".join(r.nonfinite) or "–"])
            L.append(f"| {r.recording} | {r.status}{' (' + r.reason + ')' if r.reason else ''} | {r.label or '–'} | "
                     f"`{r.sha256[:12]}` | "
                     f"{rates} | {dur} | {len(r.channels_kept)} | {_short(r.renamed)} | "
                     f"{', '.join(f'{c} ({why})' for c, why in r.dropped.items()) or '–'} | {bad} | "
                     f"{', '.join(f'{c}: {n}' for c, n in r.events.items()) or '–'} | "
                     f"{', '.join(f'{c}: {n}' for c, n in r.events_unmapped.items()) or '–'} | {r.windows_kept} | "
                     f"{', '.join(f'{k}: {v}' for k, v in r.windows_rejected.items()) or '–'} | "
                     f"{'; '.join(r.findings) or '–'} | {'; '.join(r.actions) or '–'} |")
        warned = [r for r in self.recordings if r.warnings]
        if warned:
            L += ["", "## Reader warnings", ""]
            for r in warned:
                L += [f"- **{r.recording}**: " + " | ".join(r.warnings)]
        pp = [r for r in self.recordings if r.preprocessing]
        if pp:
            L += ["", "## Preprocessing per recording", "",
                  "The common average reference is computed last, over the window set's final channels (after every "
                  "channel selection); the column lists the channels it was computed over. Resampling is polyphase "
                  "unless the column says otherwise (a window does not depend on the recording's length).", "",
                  "| recording | native Hz | → Hz (resampling) | band (Hz) | notch | reference (channels) | "
                  "scale → unit | window (s) |", "|---|---|---|---|---|---|---|---|"]
            for r in pp:
                p = r.preprocessing
                ref = r.reference or {}
                if ref.get("reference") == "average":
                    chans = ref.get("channels") or []
                    shown = ", ".join(chans) if len(chans) <= 8 else ", ".join(chans[:6]) + f", … ({len(chans)})"
                    ref_txt = f"average over {ref.get('n_channels')} ({shown})"
                else:
                    ref_txt = ref.get("reference") or p.get("reference")
                L.append(f"| {r.recording} | {p.get('native_sfreq')} | {p.get('sfreq')} ({p.get('resample') or 'none'}) "
                         f"| {p.get('l_freq')}–{p.get('h_freq')} | {p.get('notch')} | {ref_txt} | {p.get('scale')} → "
                         f"{p.get('unit')} | {p.get('window_s')} |")
        return "\n".join(L) + "\n"

    def write(self, folder: str | os.PathLike) -> tuple[Path, Path]:
        """``ingest_report.json`` and ``ingest_report.md`` in ``folder`` (atomic)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for name, text in (("ingest_report.json", json.dumps(self.to_dict(), indent=1, default=str)),
                           ("ingest_report.md", self.to_markdown())):
            p = folder / name
            atomic_write_text(p, text)
            out.append(p)
        return out[0], out[1]

    @classmethod
    def from_dict(cls, saved: dict) -> "IngestReport":
        """The report of its :meth:`to_dict` mapping (``ingest_report.json`` read back)."""
        rep = cls(saved["task"], settings=saved.get("settings", {}), source_warnings=saved.get("source_warnings", []),
                  skipped_subjects=saved.get("skipped_subjects", {}))
        rep.recordings = [RecordingQC(**r) for r in saved.get("recordings", [])]
        return rep


def _reference_summary(recs: list[RecordingQC]) -> str:
    """``average over 19 channels`` (the channel counts of the kept recordings' references), ``none``, or ''."""
    refs = [r.reference for r in recs if r.status == "kept" and r.reference]
    if not refs:
        return ""
    if all(x.get("reference") != "average" for x in refs):
        return "none"
    n = sorted({int(x.get("n_channels") or 0) for x in refs if x.get("reference") == "average"})
    return f"average over {n[0] if len(n) == 1 else f'{n[0]}-{n[-1]}'} channels"


def _short(renamed: dict[str, str], n: int = 4) -> str:
    if not renamed:
        return "–"
    items = [f"{a}→{b}" for a, b in renamed.items()]
    return ", ".join(items) if len(items) <= n else f"{len(items)}: " + ", ".join(items[:n]) + ", … (all in the .json)"


def _f(v: Any) -> str:
    return "–" if v is None else f"{float(v):.1f}"
