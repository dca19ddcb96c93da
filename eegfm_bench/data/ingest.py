"""From a declared task to windows: channel policy, ingestion checks, preprocessing, labels, windows.

:class:`DeclaredTask` is a task built from a :class:`~eegfm_bench.config.task.TaskSpec` (the registered tasks are
declared the same way). :func:`ingest_recording` reads one recording through its source and applies, recording every
step in its :class:`~eegfm_bench.data.qc.RecordingQC`:

1. **Reading** with every reader warning captured (MNE's truncation, mixed-rate and annotation warnings included);
   the duration the EDF/BDF header declares vs what the file holds (a truncated file is a finding, never silent);
   the native sampling rate of every channel: channels at other rates are refused (``mixed_rates: refuse``) or
   read without them (``eeg_only``: only the channels at the EEG rate are read, so nothing is resampled to join
   them).
2. **Channels**: ``rename``, non-EEG channels (EOG, ECG, EMG, stim, misc, by type or name) dropped or refused,
   ``include`` / ``exclude``, the 10-05 aliases (``EEG Fp1-Ref`` → ``Fp1``, old ``T3`` → ``T7``), names without a
   10-05 position dropped / kept / refused, positions from MNE's ``standard_1005``.
3. **Signal checks** on the kept channels: flat (peak-to-peak < 0.1 µV), saturated (> 1 % of samples at the rail),
   non-finite. Flat channels are interpolated before the common average (so they do not spread into every other
   channel), or drop the recording, or are kept, or refuse.
4. **Preprocessing** (:func:`~eegfm_bench.data.preprocessing.apply_preprocessing`), the applied values kept *per
   recording*.
5. **Labels and windows**: event-locked (one window from onset + ``tmin`` per labelled event; events past the end and
   overlapping events handled by the declared policy) or fixed-length (labelled by the recording's class or by the
   event covering at least ``min_overlap`` of the window); windows overlapping ``BAD`` annotations and windows with
   non-finite samples rejected, each with its reason.

``strict: true`` turns every finding into an :class:`~eegfm_bench.data.qc.IngestError`.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import mne
import numpy as np

from eegfm_bench.config import ConfigError
from eegfm_bench.data.montage import ChannelNameError, canonical_name, standard_1005
from eegfm_bench.data.qc import (IngestError, RecordingQC, capture_warnings, channel_signal_checks,
                                 edf_annotation_damage, edf_header)
from eegfm_bench.data.sources import SOURCES, Recording, RecordingReadError, existing_data_root, resolve_data_root
from eegfm_bench.data.spec import parse_task_spec, spec_hash
from eegfm_bench.config.task import ChannelsSpec, TaskSpec
from eegfm_bench.perturb.regions import register_task_regions

BIOSEMI_ABC = re.compile(r"^[A-H]([1-9]|[1-2][0-9]|3[0-2])$")
"""BioSemi ABC-layout channel names (A1-A32 ... H1-H32), which collide with some 10-05 names."""

NON_EEG_TYPES = {"eog", "ecg", "emg", "stim", "misc", "resp", "bio", "syst", "gsr", "temperature", "chpi", "exci",
                 "ias", "dipole", "gof", "ref_meg", "mag", "grad", "seeg", "dbs", "ecog", "fnirs_cw_amplitude"}
NON_EEG_NAME = re.compile(r"(^|[^A-Za-z])(ECG|EKG|EOG|HEOG|VEOG|EMG|RESP|PHOTIC|STI|STATUS|TRIGGER|EVENT|SPO2|SAO2|"
                          r"PULSE|HR|PLETH|EDA|GSR|TEMP|MARKER|ANNOTATIONS?|BURSTS|SUPPR|IBI)([^A-Za-z]|$)", re.I)


@dataclass(frozen=True)
class DeclaredTask:
    """A classification task built from a declared :class:`~eegfm_bench.config.task.TaskSpec`.

    Attributes
    ----------
    spec : TaskSpec
        The resolved spec (typed, frozen, defaults filled; :meth:`~eegfm_bench.config.ConfigRecord.to_dict` gives
        its mapping).
    name, dataset, description : str
    class_names : tuple of str
        Label order.
    line_freq : float or None
        Mains frequency of the notch (Hz).
    pretraining_aliases : tuple of str
    """

    spec: TaskSpec = field(hash=False, compare=False)
    name: str = ""
    dataset: str = ""
    class_names: tuple[str, ...] = ()
    line_freq: float | None = None
    description: str = ""
    pretraining_aliases: tuple[str, ...] = ()
    native_sfreq: float | None = None

    @classmethod
    def from_spec(cls, spec: dict, where: str = "task") -> "DeclaredTask":
        """The task of a declared mapping (a preset's settings already merged with the overrides), validated.

        Raises
        ------
        ConfigError
            As :func:`~eegfm_bench.data.spec.parse_task_spec`; classes that cannot be inferred, or names used in
            labels / windows.balance / windows.span that ``classes`` does not list.
        """
        s = parse_task_spec(spec, where)
        classes = tuple(s.classes) if s.classes else tuple(sorted(_declared_classes(s)))
        if not classes and s.source != "moabb":
            raise ConfigError(f"{where}: the classes cannot be inferred from the labels; fix: list them in `classes:`")
        if classes:
            named = dict.fromkeys(_declared_classes(s))
            b = s.windows.balance
            if b is not None:
                named.update(dict.fromkeys((b.ratios or {}) | dict.fromkeys(b.subsample or [])))
            if s.windows.span is not None:
                named.update(dict.fromkeys(s.windows.span.around or []))
            unknown = [c for c in named if c not in classes]
            if unknown:
                raise ConfigError(f"{where}: classes {unknown} are used in labels / windows.balance but not listed in "
                                  f"classes {list(classes)}; fix: add them to `classes:` or correct the spelling")
        if s.regions:
            register_task_regions(s.name, s.regions)
        return cls(s, s.name, s.dataset or s.name, classes, s.line_freq, s.description, tuple(s.pretraining_aliases))

    @property
    def key(self) -> str:
        """Hash of the resolved spec (part of the window cache key)."""
        return spec_hash(self.spec)

    def source(self, data_root=None):
        """The task's :class:`~eegfm_bench.data.sources.Source` over its ``root``.

        A relative ``root`` names a folder under the data root (:func:`~eegfm_bench.data.sources.resolve_data_root`,
        made absolute against the working directory once). When no such folder exists there but one exists relative
        to the working directory (a path that already spells out the data root, e.g. ``../shared/data/formats``), that
        one is used and a line says so: a relative path is never joined to the data root twice.

        Raises
        ------
        DataRootNotFoundError
            A relative ``root`` under a data root that is not a folder
            (:func:`~eegfm_bench.data.sources.existing_data_root`): never replaced by the working directory.
        """
        root = Path(self.spec.root).expanduser() if self.spec.root else Path(".")
        cls = SOURCES.get(self.spec.source)
        if not root.is_absolute():
            base = existing_data_root(data_root, f"task {self.name!r}") if cls.reads_root else \
                resolve_data_root(data_root)
            if not (base / root).exists() and root.exists():
                print(f"task {self.name}: root {root} is not under the data root {base}; using {root.absolute()} "
                      "(relative to the working directory)")
                root = root.absolute()
            else:
                root = base / root
        src = cls(self.spec, root)
        if self.spec.source == "moabb" and not self.spec.labels.events:
            labels = replace(self.spec.labels, events=src.default_events())
            object.__setattr__(self, "spec", replace(self.spec, labels=labels))
            src.spec = self.spec
            if not self.class_names:
                object.__setattr__(self, "class_names", tuple(sorted(set(labels.events.values()))))
        return src

    def recordings(self, root=None, subjects=None, download=None) -> list[Recording]:
        """The recordings of the task (``root``: the data root)."""
        return self.source(root).recordings(subjects)


def _declared_classes(s: TaskSpec) -> set[str]:
    lab = s.labels
    out = set()
    if lab.events:
        out |= set(lab.events.values())
    if lab.map:
        out |= {v for v in lab.map.values() if v is not None}
    if lab.background:
        out.add(lab.background)
    if s.source == "eegmmidb" and s.options.run_labels:
        out |= set(s.options.run_labels.values())
    return out


# ============================================================================================ one recording
def _native_rates(raw, qc: RecordingQC) -> dict[str, float]:
    """Native sampling rate of each channel (EDF/BDF: samples per record / record length; other formats: one)."""
    extras = getattr(raw, "_raw_extras", None)
    rates = {}
    if extras and isinstance(extras[0], dict) and "n_samps" in extras[0] and "record_length" in extras[0]:
        ex = extras[0]
        rec_len = float(np.atleast_1d(ex["record_length"])[0])
        sel = ex.get("sel", np.arange(len(ex["n_samps"])))
        n_samps = np.asarray(ex["n_samps"])[sel] if len(ex["n_samps"]) > len(raw.ch_names) else ex["n_samps"]
        for name, n in zip(raw.ch_names, n_samps):
            rates[name] = float(n) / rec_len if rec_len else float(raw.info["sfreq"])
    else:
        rates = {c: float(raw.info["sfreq"]) for c in raw.ch_names}
    qc.native_sfreq = {}
    for c, r in rates.items():
        qc.native_sfreq.setdefault(f"{r:g}", []).append(c)
    return rates


def _same_channel(entry: str, name: str, ch: ChannelsSpec) -> bool:
    """Whether a ``channels.exclude`` entry names channel ``name``: as read, or by its 10-05 name (any case)."""
    if entry.lower() == name.lower():
        return True
    if not ch.aliases:
        return False
    try:
        return canonical_name(name).lower() == entry.lower()
    except ChannelNameError:
        return False


def _excluded(names, ch: ChannelsSpec) -> set[str]:
    return {c for c in names if any(_same_channel(e, c, ch) for e in ch.exclude)}


def _is_non_eeg(name: str, ch_type: str) -> bool:
    return ch_type in NON_EEG_TYPES or bool(NON_EEG_NAME.search(name))


MNE_RUNNING_NUMBER = re.compile(r"^(?P<stem>.+)-(?P<n>\d+)$")
"""How MNE renames a label that appears on several channels of a file: ``F1`` twice becomes ``F1-0``, ``F1-1``
(``mne._fiff.meas_info._unique_channel_names``)."""


def duplicate_labels(names: list[str]) -> dict[str, list[str]]:
    """Labels that a file holds on several channels, from MNE's running-number renaming.

    Parameters
    ----------
    names : list of str
        Channel names as MNE read them.

    Returns
    -------
    dict of str to list of str
        ``{stem: [stem-0, stem-1, ...]}`` in channel order, for every stem whose ``-0`` and ``-1`` are both present
        and which is not itself a channel (a lone ``A2-1`` or a bipolar ``C3-1`` is not a duplicate).
    """
    groups: dict[str, list[tuple[int, str]]] = {}
    for c in names:
        m = MNE_RUNNING_NUMBER.match(c)
        if m:
            groups.setdefault(m.group("stem"), []).append((int(m.group("n")), c))
    out = {}
    for stem, members in groups.items():
        nums = {n for n, _ in members}
        if {0, 1} <= nums and stem not in names:
            order = [c for c in names if c in {m for _, m in members}]
            out[stem] = order
    return out


def _resolve_duplicate_labels(raw, types: dict, policy: str, rec: Recording, qc: RecordingQC) -> dict:
    """Apply ``channels.duplicates`` to labels the file holds twice (MNE's ``F1-0``, ``F1-1``): the first keeps the
    label, the others are dropped (``keep_first``, a finding), or refuse (``error``). Returns the updated types."""
    dups = duplicate_labels(list(raw.ch_names))
    if not dups:
        return types
    desc = "; ".join(f"{stem} on {len(m)} channels (MNE named them {', '.join(m)})" for stem, m in dups.items())
    if policy == "error":
        raise IngestError(f"{rec.recording}: the file holds one label on several channels: {desc}; fix: channels."
                          "rename them apart (e.g. {F1-1: F2} if the second is mislabelled), channels.exclude the wrong "
                          "one, or channels.duplicates: keep_first")
    gone = [c for m in dups.values() for c in m[1:]]
    raw.drop_channels(gone)
    raw.rename_channels({m[0]: stem for stem, m in dups.items()})
    for stem, m in dups.items():
        for c in m[1:]:
            qc.dropped[c] = f"a second channel labelled {stem} (channels.duplicates: keep_first)"
        qc.renamed[m[0]] = stem
    qc.find(f"duplicate channel labels: {desc}; kept the first of each, dropped {gone} (channels.duplicates: "
            "keep_first)")
    first = {m[0]: stem for stem, m in dups.items()}
    return {first.get(c, c): t for c, t in types.items() if c not in gone}


def ingest_recording(task: DeclaredTask, source, rec: Recording, qc: RecordingQC):
    """Read one recording and apply the channel policy and checks (steps 1-3 of the module docstring).

    Returns
    -------
    mne.io.Raw or None
        EEG channels only, 10-05 names where known, positions set, preloaded, volts; ``None`` when the recording is
        dropped (``qc.status``/``qc.reason`` say why).

    Raises
    ------
    IngestError
        A refusing policy (``mixed_rates: refuse``, ``non_eeg: error``, ``unknown: error``, ``flat: error``), or any
        finding under ``strict: true``.
    RecordingReadError
        The reader failed (the message names the file and the fix).
    """
    raw = _read_checked(source, rec, qc)
    raw, types = _one_rate(task, rec, raw, qc)
    canon = _channel_policy(task, rec, raw, qc, types)
    if canon is None:
        return None
    _apply_channels(task, raw, canon, qc)
    if not _signal_checks(task, rec, raw, qc):
        return None
    if task.spec.strict:
        serious = [w for w in qc.warnings if not any(b in w for b in BENIGN_WARNINGS)]
        if qc.findings or serious:
            raise IngestError(f"{rec.recording} ({rec.path}): " + "; ".join(qc.findings + [f"reader: {w}" for w in serious])
                              + ". fix: repair or exclude the recording, or set strict: false to accept these "
                                "findings (each is written to the ingest report)")
    return raw


def _read_checked(source, rec: Recording, qc: RecordingQC):
    """Step 1: the recording as the source reads it, its format, channels, rate and duration recorded, and a file
    shorter than its EDF header declares reported as truncated.

    Raises
    ------
    RecordingReadError
        A file without any signal channel (an annotation-only EDF+), or an EDF+/BDF+ file whose data records do not
        open with their time-keeping annotation (:func:`~eegfm_bench.data.qc.edf_annotation_damage`: shifted or
        overwritten records, whatever reader option, e.g. ``encoding: latin1``, would open it).
    """
    hdr = edf_header(source.header_path(rec)) if source.header_path(rec) else None
    damage = edf_annotation_damage(source.header_path(rec), hdr) if hdr else None
    if damage:
        raise RecordingReadError(
            f"{rec.recording} ({source.header_path(rec)}): {damage}. MNE refuses it (\"Encountered invalid byte in at "
            "least one annotations channel\"); a reader option such as files.reader_kwargs encoding: latin1 only hides "
            "that decoding error. fix: restore the file from its source (compare its sha256), or leave it out")
    with capture_warnings(qc):
        raw = source.read(rec)
    if len(raw.ch_names) == 0:
        raise RecordingReadError(
            f"{rec.path} holds no signal channel (an annotation-only EDF+ file, such as a Sleep-EDF hypnogram, with "
            f"{len(raw.annotations)} annotations). fix: narrow the glob to the recordings and name this file in "
            "files.annotations of the recording it belongs to")
    qc.format = type(raw).__name__
    qc.channels_as_read = list(raw.ch_names)
    qc.sfreq_read = float(raw.info["sfreq"])
    qc.read_duration_s = round(raw.n_times / raw.info["sfreq"], 3)
    if hdr and hdr["declared_s"] is not None:
        qc.header_duration_s = round(hdr["declared_s"], 3)
        if qc.read_duration_s + 1e-6 < hdr["declared_s"] - max(1.0 / raw.info["sfreq"], 1e-3):
            qc.find(f"truncated: the header declares {hdr['declared_s']:g} s ({hdr['n_records']} records) but the file "
                    f"holds {qc.read_duration_s:g} s; only the data present were used")
    return raw


def _one_rate(task: DeclaredTask, rec: Recording, raw, qc: RecordingQC):
    """Step 2a: channels sampled at different rates are refused (``mixed_rates: refuse``) or the file is read again
    with only the channels at the EEG rate (``eeg_only``, EDF/BDF). Returns ``(raw, {channel: type})``.

    Raises
    ------
    IngestError
        ``mixed_rates: refuse``, or ``eeg_only`` on a file that is not EDF/BDF.
    """
    ch = task.spec.channels
    rates = _native_rates(raw, qc)
    types = dict(zip(raw.ch_names, raw.get_channel_types()))
    excluded = _excluded(raw.ch_names, ch)
    eeg_like = [c for c in raw.ch_names if not _is_non_eeg(c, types[c]) and c not in excluded]
    if not (len({round(rates[c], 6) for c in eeg_like}) > 1 or len({round(r, 6) for r in rates.values()}) > 1):
        return raw, types
    by = {}
    for c in raw.ch_names:
        by.setdefault(rates[c], []).append(c)
    desc = "; ".join(f"{len(v)} channel(s) at {k:g} Hz ({', '.join(v[:4])}{'…' if len(v) > 4 else ''})"
                     for k, v in sorted(by.items(), reverse=True))
    eeg_rate = max({rates[c] for c in eeg_like} or {raw.info["sfreq"]},
                   key=lambda r: sum(rates[c] == r for c in eeg_like))
    if ch.mixed_rates == "refuse":
        raise IngestError(f"{rec.recording} ({rec.path}): channels are sampled at different rates: {desc}; MNE would "
                          "resample the slower ones to the fastest. fix: channels.mixed_rates: eeg_only (read only "
                          f"the channels at the EEG rate, {eeg_rate:g} Hz), or exclude the others")
    keep = [c for c in raw.ch_names if rates[c] == eeg_rate]
    gone = [c for c in raw.ch_names if c not in keep]
    if rec.path is None or rec.path.suffix.lower() not in (".edf", ".bdf"):
        raise IngestError(f"{rec.recording}: mixed_rates: eeg_only needs an EDF/BDF file; fix: exclude {gone}")
    with capture_warnings(qc):
        raw = mne.io.read_raw_edf(rec.path, include=keep, preload=True, verbose="warning")
        if task.spec.source == "eegmmidb":
            mne.datasets.eegbci.standardize(raw)
    for c in gone:
        qc.dropped[c] = f"sampled at {rates[c]:g} Hz, not the EEG rate {eeg_rate:g} Hz (mixed_rates: eeg_only)"
    qc.act(f"read only the {len(keep)} channels at {eeg_rate:g} Hz; dropped {gone}")
    qc.find(f"mixed sampling rates in one file: {desc}")
    qc.sfreq_read = float(raw.info["sfreq"])
    return raw, dict(zip(raw.ch_names, raw.get_channel_types()))


def _channel_policy(task: DeclaredTask, rec: Recording, raw, qc: RecordingQC, types: dict) -> dict | None:
    """Step 2b: which channels stay and their 10-05 names (``channels.rename``, ``duplicates``, ``exclude``,
    ``non_eeg``, ``aliases``, ``unknown``, ``include``), each dropped channel in ``qc.dropped`` with why. Returns
    ``{name as read: 10-05 name}`` in the final order, or ``None`` when no EEG channel is left (the recording is
    dropped).

    Raises
    ------
    IngestError
        A refusing policy (``non_eeg: error``, ``unknown: error``, ``duplicates: error``), BioSemi ABC names under
        ``aliases``, or an ``include`` channel the recording lacks.
    """
    ch = task.spec.channels
    if ch.rename:
        ren = {a: b for a, b in ch.rename.items() if a in raw.ch_names}
        if ren:
            raw.rename_channels(ren)
            qc.renamed.update(ren)
            types = {ren.get(c, c): t for c, t in types.items()}
    types = _resolve_duplicate_labels(raw, types, ch.duplicates, rec, qc)
    drop = _excluded_or_non_eeg(rec, raw, qc, types, ch)
    names = [c for c in raw.ch_names if c not in drop]
    _refuse_biosemi_abc(rec, names, ch)
    canon = _canonical_names(rec, names, drop, qc, ch)
    if ch.include is not None:
        canon = _included(rec, canon, drop, ch.include)
    for c, why in drop.items():
        qc.dropped[c] = why
    if not canon:
        qc.find(f"no EEG channel left after the channel policy (read: {list(raw.ch_names)})")
        qc.drop("no EEG channel left after the channel policy")
        return None
    return canon  # the channels in ``drop`` leave with the reordering (_apply_channels): one copy of the data, not two


def _excluded_or_non_eeg(rec: Recording, raw, qc: RecordingQC, types: dict, ch: ChannelsSpec) -> dict[str, str]:
    """``{channel: why}`` for the channels ``channels.exclude`` names and the non-EEG ones (``non_eeg: drop``);
    an ``exclude`` entry that matches no channel is a finding.

    Raises
    ------
    IngestError
        A non-EEG channel under ``non_eeg: error``.
    """
    drop: dict[str, str] = {}
    excluded = _excluded(raw.ch_names, ch)
    unmatched = [e for e in ch.exclude if not any(_same_channel(e, c, ch) for c in raw.ch_names)]
    if unmatched:
        qc.find(f"channels.exclude lists {unmatched}, which no channel of this recording matches (as read or by its "
                "10-05 name)")
    for c in raw.ch_names:
        if c in excluded:
            drop[c] = "excluded by channels.exclude"
        elif _is_non_eeg(c, types.get(c, "eeg")):
            if ch.non_eeg == "error":
                raise IngestError(f"{rec.recording}: channel {c!r} ({types.get(c)}) is not EEG; fix: channels.non_eeg: "
                                  f"drop, or channels.exclude: [{c!r}]")
            drop[c] = f"not EEG ({types.get(c) if types.get(c) != 'eeg' else 'by name'})"
    return drop


def _refuse_biosemi_abc(rec: Recording, names: list[str], ch: ChannelsSpec) -> None:
    """Refuse BioSemi ABC labels (A1..D32) read as 10-05 names: several collide with 10-05 names at other places.

    Raises
    ------
    IngestError
        16 or more ABC labels, some of them 10-05 names, under ``channels.aliases``.
    """
    abc = [c for c in names if BIOSEMI_ABC.match(c)]
    collide = [c for c in abc if c.lower() in {n.lower() for n in standard_1005().ch_names}]
    if ch.aliases and len(abc) >= 16 and collide:
        raise IngestError(
            f"{rec.recording}: {len(abc)} channels are named like BioSemi's ABC layout ({', '.join(abc[:6])}, …): "
            f"looking them up as 10-05 names would put {', '.join(collide[:6])} at the wrong places. fix: channels.rename "
            "them to "
            "their 10-05 names (your cap's ABC-to-10-20 table), or channels.aliases: false with channels.unknown: keep "
            "(no positions)")


def _canonical_names(rec: Recording, names: list[str], drop: dict, qc: RecordingQC, ch: ChannelsSpec) -> dict[str, str]:
    """``{name as read: 10-05 name}`` of ``names`` (``aliases``: T3 → T7, FP1 → Fp1); a channel without one is
    refused, dropped or kept under its own name (``channels.unknown``), and a second spelling of one 10-05 name
    refused or dropped (``channels.duplicates``). Adds the dropped ones to ``drop``.

    Raises
    ------
    IngestError
        ``unknown: error`` or ``duplicates: error``.
    """
    canon: dict[str, str] = {}
    for c in names:
        new = c
        if ch.aliases:
            try:
                new = canonical_name(c)
            except ChannelNameError:
                new = None
        elif c not in standard_1005().ch_names:
            new = None
        if new is None:
            if ch.unknown == "error":
                raise IngestError(f"{rec.recording}: channel {c!r} has no standard 10-05 name; fix: channels.rename it, "
                                  "channels.exclude it, or channels.unknown: drop | keep")
            if ch.unknown == "drop":
                drop[c] = "no standard 10-05 name/position (channels.unknown: drop)"
                continue
            new = c
        first = next((k for k, v in canon.items() if v == new), None)
        if first is not None:  # two spellings of one 10-05 name (FP1 and Fp1, T3 and T7)
            if ch.duplicates == "error":
                raise IngestError(f"{rec.recording}: channels {first!r} and {c!r} are both {new} after renaming; fix: "
                                  "channels.exclude one of them, rename them apart, or channels.duplicates: keep_first")
            drop[c] = f"a second {new} (as {first!r}, kept; channels.duplicates: keep_first)"
            qc.find(f"channels {first!r} and {c!r} are both {new}: kept the first, dropped {c!r} "
                    "(channels.duplicates: keep_first)")
            continue
        canon[c] = new
    return canon


def _included(rec: Recording, canon: dict[str, str], drop: dict, include: list[str]) -> dict[str, str]:
    """``canon`` reduced to ``channels.include``, in its order (the others added to ``drop``).

    Raises
    ------
    IngestError
        An included channel the recording lacks.
    """
    wanted = list(include)
    got = {v.lower(): k for k, v in canon.items()} | {k.lower(): k for k in canon}
    missing = [w for w in wanted if w.lower() not in got]
    if missing:
        raise IngestError(f"{rec.recording}: channels.include lists {missing}, which the recording lacks (it has "
                          f"{sorted(canon.values())}); fix: remove them from include, or exclude this recording")
    order = [got[w.lower()] for w in wanted]
    for c in list(canon):
        if c not in order:
            drop[c] = "not in channels.include"
            canon.pop(c)
    return {c: canon[c] for c in order}


def _apply_channels(task: DeclaredTask, raw, canon: dict[str, str], qc: RecordingQC) -> None:
    """Step 2c: the kept channels (only those: the others leave here) in their order under their 10-05 names, typed EEG, with 10-05 positions; what was
    dropped as non-EEG or without a 10-05 name said."""
    ch = task.spec.channels
    raw.reorder_channels(list(canon))  # keeps only these, in this order (MNE picks them: one copy of the data)
    ren = {c: n for c, n in canon.items() if c != n}
    if ren:
        raw.rename_channels(ren)
        qc.renamed.update(ren)
    raw.set_channel_types({c: "eeg" for c in raw.ch_names}, on_unit_change="ignore")
    with capture_warnings(qc):
        raw.set_montage(standard_1005(), on_missing="ignore" if ch.unknown == "keep" else "raise")
    qc.channels_kept = list(raw.ch_names)
    non_eeg_dropped = [c for c, why in qc.dropped.items() if why.startswith("not EEG")]
    if non_eeg_dropped:
        qc.act(f"dropped non-EEG channels {non_eeg_dropped}")
    unknown = [c for c, why in qc.dropped.items() if why.startswith("no standard 10-05")]
    if unknown:
        qc.find(f"channels without a 10-05 name dropped: {unknown}")


def _signal_checks(task: DeclaredTask, rec: Recording, raw, qc: RecordingQC) -> bool:
    """Step 3: non-finite, saturated, flat and marked-bad channels and the amplitude's plausibility, then the
    ``channels.flat`` policy for the flat / bad ones. Returns ``False`` when the recording is dropped.

    Raises
    ------
    IngestError
        Flat or marked-bad channels under ``channels.flat: error``.
    """
    data = raw._data if raw.preload else raw.get_data()  # read only until _mark_nonfinite (no copy of a loaded raw)
    channel_signal_checks(data, list(raw.ch_names), qc)
    good = [i for i, c in enumerate(raw.ch_names) if c not in qc.flat and c not in qc.nonfinite]
    # the median channel RMS of the finite, non-flat channels, one row at a time (no copy of the recording), before
    # _mark_nonfinite zeroes samples of every channel
    rms_uv = float(np.median([np.sqrt(np.mean(np.square(data[i]))) for i in good])) * 1e6 if good else None
    unit = amplitude_unit_mismatch(data, getattr(raw, "_orig_units", None) or {})
    if unit is not None:
        qc.find(unit)
        if task.spec.strict:
            raise IngestError(f"{rec.recording} ({rec.path}): {unit}")
        qc.drop(unit.split(". The recording", 1)[0] + " (dropped, not rescaled)")
        return False
    if qc.nonfinite:
        _mark_nonfinite(raw, data, qc)
    if qc.saturated:
        qc.find(f"saturated channels (share of samples at the rail): {qc.saturated}")
    if rms_uv is not None:
        qc.rms_uv = round(rms_uv, 2)
        if not (PLAUSIBLE_RMS_UV[0] <= rms_uv <= PLAUSIBLE_RMS_UV[1]):
            qc.find(f"implausible amplitude: median channel RMS {rms_uv:.3g} µV (scalp EEG is typically "
                    f"{PLAUSIBLE_RMS_UV[0]:g}-{PLAUSIBLE_RMS_UV[1]:g} µV): check the file's units and contents")
    marked = [b for b in raw.info["bads"] if b in raw.ch_names and b not in qc.flat]
    if marked:
        qc.marked_bad = list(marked)
        qc.find(f"channels marked bad in the file (info['bads'] / channels.tsv): {marked}")
    to_fix = list(qc.flat) + marked
    if qc.flat:
        qc.find(f"flat channels (peak-to-peak < 0.1 µV): {qc.flat}")
    if to_fix:
        return _flat_policy(task.spec.channels.flat, rec, raw, qc, to_fix)
    return True


def _flat_policy(policy: str, rec: Recording, raw, qc: RecordingQC, to_fix: list[str]) -> bool:
    """``channels.flat`` on the flat / marked-bad channels: ``error``, ``drop_recording``, ``interpolate``
    (spherical spline, before the common average) or ``keep``. Returns ``False`` when the recording is dropped.

    Raises
    ------
    IngestError
        ``flat: error``.
    """
    what = f"flat / marked-bad channels {to_fix}"
    if policy == "error":
        raise IngestError(f"{rec.recording}: {what}; fix: channels.flat: interpolate | drop_recording | keep, or "
                          "exclude them")
    if policy == "drop_recording":
        qc.drop(f"{what} (channels.flat: drop_recording)")
        return False
    if policy == "interpolate":
        pos = raw.get_montage().get_positions()["ch_pos"] if raw.get_montage() else {}
        if not all(c in pos for c in to_fix) or len(to_fix) >= len(raw.ch_names) - 2:
            qc.drop(f"{what} cannot be interpolated (no positions or too few good channels)")
            return False
        raw.info["bads"] = list(to_fix)
        with capture_warnings(qc):
            raw.interpolate_bads(reset_bads=True, mode="accurate", verbose="warning")
        qc.interpolated = list(to_fix)
        qc.act(f"interpolated {what} (spherical spline) before the common average")
    elif policy == "keep":
        raw.info["bads"] = []  # kept means kept: in the reference and in the model's input
        qc.act(f"kept {what} as they are (channels.flat: keep), in the common average too")
    return True


PLAUSIBLE_RMS_UV = (0.5, 500.0)
"""Median channel RMS (µV) outside this range is reported as implausible (wrong units, garbage bytes)."""

UNIT_SCALES = ((1e6, "1e6", "volts stored under a µV unit"),)
"""Unit mistakes recognised by their scale: samples whose median absolute amplitude is implausible for scalp EEG
(outside :data:`PLAUSIBLE_RMS_UV`) but becomes plausible when multiplied by the factor. Only the volts-as-µV
mistake: nothing else makes EEG a million times too small, whereas a signal a million times too large may be an
honest one in volts (a test signal, a trigger): that stays an "implausible amplitude" finding."""


def amplitude_unit_mismatch(data: np.ndarray, orig_units: dict | None = None) -> str | None:
    """Whether a recording's amplitudes look like the wrong unit (volts written where the file says µV), from their
    scale alone.

    The statistic is the median over the finite channels of each channel's median absolute deviation from its
    median (flat channels included: a recording in volts read as µV is flat everywhere). When it lies outside
    :data:`PLAUSIBLE_RMS_UV` but one of :data:`UNIT_SCALES` brings it inside, the amplitudes are in that other unit.
    Nothing is rescaled: the caller drops or refuses the recording.

    Parameters
    ----------
    data : ndarray, shape (n_chans, n_times)
        The samples as read, volts (MNE applied the file's unit).
    orig_units : dict of str to str, optional
        The unit the file declares per channel (MNE's ``raw._orig_units``), named in the message.

    Returns
    -------
    str or None
        One line naming the unit, the amplitude found, the factor that would give µV and the fix; None when the
        scale is plausible (or cannot be told: no finite channel, or nothing brings it into range).
    """
    rows = [r for r in np.asarray(data) if r.size and np.isfinite(r).all()]
    if not rows:
        return None
    amp_uv = float(np.median([np.median(np.abs(r - np.median(r))) for r in rows])) * 1e6
    lo, hi = PLAUSIBLE_RMS_UV
    if lo <= amp_uv <= hi or amp_uv == 0.0:
        return None
    for factor, shown, what in UNIT_SCALES:
        if lo <= amp_uv * factor <= hi:
            declared = sorted({str(u) for u in (orig_units or {}).values()})
            said = f"the file declares {'/'.join(declared)}" if declared else "read as volts"
            return (f"amplitudes look like {what}: median absolute amplitude {amp_uv:.3g} µV over {len(rows)} "
                    f"channels ({said}); ×{shown} would give {amp_uv * factor:.3g} µV, typical of scalp EEG. The "
                    "recording is not rescaled; fix: correct the unit (EDF: the physical dimension; BrainVision: the "
                    "channel's unit) or the scaling where the file was written")
    return None

BENIGN_WARNINGS = ("Unable to map the following column(s) to to MNE", "Unable to map the following column(s)",
                   "Channel locations not available")
"""Reader warnings that do not concern the data (mne-bids on extra participants.tsv columns, missing digitisation):
recorded in the report, never a ``strict`` error."""

NONFINITE_MARGIN_S = 1.0
"""Seconds of BAD annotation added on each side of a non-finite stretch (the filters spread it)."""


def _mark_nonfinite(raw, data: np.ndarray, qc: RecordingQC) -> None:
    """Set non-finite samples to 0 on every channel and annotate each stretch (± ``NONFINITE_MARGIN_S``) as
    ``BAD_nonfinite``, so that only the windows overlapping them are rejected (NaN would spread through the filters
    into every window)."""
    bad_t = ~np.isfinite(data).all(axis=0)
    idx = np.flatnonzero(bad_t)
    starts = idx[np.r_[True, np.diff(idx) > 1]]
    ends = idx[np.r_[np.diff(idx) > 1, True]] + 1
    sf = float(raw.info["sfreq"])
    raw._data[:, bad_t] = 0.0
    onsets = [max(0.0, a / sf - NONFINITE_MARGIN_S) for a in starts]
    durs = [min(raw.times[-1], b / sf + NONFINITE_MARGIN_S) - o for o, b in zip(onsets, ends)]
    shift = raw.first_time if raw.annotations.orig_time is not None else 0.0
    raw.set_annotations(raw.annotations + mne.Annotations(np.array(onsets) + shift, durs,
                                                          ["BAD_nonfinite"] * len(onsets),
                                                          orig_time=raw.annotations.orig_time))
    qc.find(f"non-finite samples in {qc.nonfinite}: {int(bad_t.sum())} samples in {len(starts)} stretch(es), set to 0 "
            f"and annotated BAD_nonfinite (± {NONFINITE_MARGIN_S:g} s); the windows overlapping them are rejected")


def recording_label(task: DeclaredTask, rec: Recording, qc: RecordingQC) -> str | None:
    """The class name of a recording-labelled recording (``labels.map`` applied), or None.

    A value that ``labels.map`` maps to null is not part of the task: the recording is marked dropped in ``qc``
    (reported) and None is returned.

    Raises
    ------
    IngestError
        The label maps to no declared class (names it and the fix).
    """
    if rec.label is None:
        return None
    m = task.spec.labels.map or {}
    key = str(rec.label)
    if key in m and m[key] is None:
        qc.label = None
        qc.drop(f"label {key!r} is not part of this task (labels.map: {key}: null)")
        return None
    lab = m.get(key, key)
    if lab not in task.class_names:
        raise IngestError(f"{rec.recording}: label {rec.label!r} maps to {lab!r}, not one of the classes "
                          f"{list(task.class_names)}; fix: add it to labels.map (a class, or null to exclude it) or to "
                          "classes")
    qc.label = lab
    return lab


def event_class(events_map: dict[str, str], description: str) -> str | None:
    """The class of an annotation: ``labels.events`` by exact description first, then by shell-style pattern."""
    d = str(description)
    if d in events_map:
        return events_map[d]
    for pat, c in events_map.items():
        if any(ch in pat for ch in "*?[") and fnmatch.fnmatchcase(d, pat):
            return c
    return None


def _bad_intervals(raw, prefixes) -> list[tuple[float, float, str]]:
    out = []
    shift = raw.first_time if raw.annotations.orig_time is not None else 0.0
    for a in raw.annotations:
        if any(str(a["description"]).upper().startswith(p.upper()) for p in prefixes):
            on = float(a["onset"]) - shift
            out.append((on, on + float(a["duration"]), str(a["description"])))
    return out


def _empty(raw, n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((0, len(raw.ch_names), n)), np.empty(0, dtype=np.int64)


def cut_windows(task: DeclaredTask, raw, rec: Recording, window_s: float, qc: RecordingQC,
                label: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Windows of a preprocessed recording (step 5 of the module docstring).

    Every rejected window is counted in ``qc.windows_rejected`` under its reason; a recording that yields no
    window is marked dropped with the reason.

    Returns
    -------
    X : ndarray, shape (n_windows, n_chans, n_times), volts
    y : ndarray of int64, shape (n_windows,)
        Indices into ``task.class_names``.

    Raises
    ------
    IngestError
        ``tmax`` inconsistent with the window, or a refusing policy (``past_end: error``, ``overlap: error``).
    """
    cut = _Cut.of(task, raw, window_s, qc)
    if task.spec.windows.mode == "events":
        placed = _event_windows(task, raw, rec, window_s, qc, cut)
    else:
        placed = _fixed_windows(task, raw, rec, window_s, qc, label, cut)
    if placed is None:
        return _empty(raw, cut.n)
    starts, ys, crop_at = placed
    if not starts:
        if qc.status == "kept":
            qc.drop("no window: " + (", ".join(f"{v} {k}" for k, v in qc.windows_rejected.items())
                                     or f"the recording ({cut.T / cut.sfreq:.2f} s) is shorter than one window"))
        return _empty(raw, cut.n)
    X = np.stack([cut.data[:, s:s + cut.n] for s in starts])
    for k, at in crop_at.items():
        X[k, :, at:] = 0.0
    return X, np.asarray(ys, dtype=np.int64)


@dataclass
class _Cut:
    """What every window of one recording is cut against: the samples (volts), the window length in samples, the
    class indices, the rejection annotations and the event descriptions mapped to classes."""

    sfreq: float
    n: int
    data: np.ndarray
    T: int
    cls_idx: dict
    rej: list
    bad: list
    events_map: dict
    descs: list
    mapped: dict

    @classmethod
    def of(cls, task: DeclaredTask, raw, window_s: float, qc: RecordingQC) -> "_Cut":
        """The recording's cut settings; annotations that map to no class (and are not rejections) are counted in
        ``qc.events_unmapped``."""
        w, lab = task.spec.windows, task.spec.labels
        sfreq = float(raw.info["sfreq"])
        data = raw.get_data()
        rej = w.reject_annotations or []
        events_map = lab.events or {}
        descs = [str(d) for d in raw.annotations.description]
        mapped = {d: event_class(events_map, d) for d in set(descs)}
        for d in sorted(set(descs)):
            if mapped[d] is None and not any(d.upper().startswith(p.upper()) for p in rej):
                qc.events_unmapped[d] = descs.count(d)
        return cls(sfreq, int(round(window_s * sfreq)), data, data.shape[1],
                   {c: i for i, c in enumerate(task.class_names)}, rej, _bad_intervals(raw, rej) if rej else [],
                   events_map, descs, mapped)

    def overlaps_bad(self, s: int) -> str | None:
        """Why the window starting at sample ``s`` is rejected (it overlaps a rejection annotation), or None."""
        a, b = s / self.sfreq, (s + self.n) / self.sfreq
        return next((f"overlaps a {d} annotation" for lo, hi, d in self.bad if lo < b and hi > a), None)


def _event_windows(task: DeclaredTask, raw, rec: Recording, window_s: float, qc: RecordingQC, cut: _Cut):
    """``windows.mode: events``: one window per labelled event, ``tmin`` after its onset; windows past the data,
    overlapping the previous one, overlapping a rejection annotation or running past their event follow the
    ``past_end`` / ``overlap`` / ``past_event`` policies. Returns ``(starts, labels, crop_at)``, or None when the
    recording has no labelled event (dropped).

    Raises
    ------
    IngestError
        ``tmax`` inconsistent with the window, or a refusing policy.
    """
    w = task.spec.windows
    if w.tmax is not None and abs((w.tmax - w.tmin) - window_s) > 1e-6:
        raise IngestError(f"task {task.name!r}: windows.tmax - tmin = {w.tmax - w.tmin:g} s but the window is "
                          f"{window_s:g} s; fix: set tmax: {w.tmin + window_s:g}, or remove tmax")
    present = {d: i + 1 for i, d in enumerate(sorted(d for d, c in cut.mapped.items() if c is not None))}
    if not present:
        qc.find(f"no event of {sorted(cut.events_map)} in the recording (annotations: {sorted(set(cut.descs)) or 'none'})")
        qc.drop("no labelled event")
        return None
    with capture_warnings(qc):
        ev, ids = mne.events_from_annotations(raw, event_id=present, verbose="warning")
    inv = {v: cut.mapped[k] for k, v in ids.items()}
    ann = raw.annotations
    sel = np.flatnonzero([str(d) in present for d in ann.description])  # the rows of ev, in annotation order
    durations, onsets = np.asarray(ann.duration, float)[sel], np.asarray(ann.onset, float)[sel]
    order = np.argsort(ev[:, 0], kind="stable")
    ev, durations, onsets = ev[order], durations[order], onsets[order]
    nexts = _next_onsets(onsets, np.asarray(ann.onset, float), [str(d) for d in ann.description], cut.rej)
    starts: list[int] = []
    ys: list[int] = []
    crop_at: dict[int, int] = {}
    last_end = -1
    for e, dur, on, nxt in zip(ev, durations, onsets, nexts):
        c = inv[e[2]]
        s = _event_window(task, raw, rec, window_s, qc, cut, e, dur, on, nxt, c, last_end)
        if s is None:
            continue
        if isinstance(s, tuple):  # cropped at the end of its event (windows.past_event: crop)
            s, crop_at[len(starts)] = s
        starts.append(s)
        ys.append(cut.cls_idx[c])
        last_end = s + cut.n
    _past_event_lines(qc, w, window_s, durations, crop_at, cut.n)
    if qc.overlapping_events and w.overlap == "keep":
        qc.act(f"kept {qc.overlapping_events} windows that overlap the previous event's window (windows.overlap: keep)")
        qc.find(f"{qc.overlapping_events} events overlap the previous event's window (kept; windows.overlap: keep)")
    return starts, ys, crop_at


def _event_window(task: DeclaredTask, raw, rec: Recording, window_s: float, qc: RecordingQC, cut: _Cut, e, dur: float,
                  on: float, nxt, c: str, last_end: int):
    """The start sample of one event's window, ``(start, crop sample)`` when it is cropped at its event's end, or
    None when it is rejected (counted in ``qc`` with why).

    Raises
    ------
    IngestError
        ``past_end: error``, ``overlap: error`` or ``past_event: error``.
    """
    w, sfreq, n = task.spec.windows, cut.sfreq, cut.n
    if dur > 0 and nxt is not None and on + dur > nxt + 1.0 / sfreq:
        qc.past_event["event overruns the next annotation"] = \
            qc.past_event.get("event overruns the next annotation", 0) + 1
    qc.events[c] = qc.events.get(c, 0) + 1
    s = int(e[0] - raw.first_samp + round(w.tmin * sfreq))
    if s < 0 or s + n > cut.T:
        if w.past_end == "error":
            raise IngestError(f"{rec.recording}: the window of the {c} event at {e[0] / sfreq:.2f} s runs past "
                              "the data; fix: windows.past_end: drop")
        qc.reject("runs past the end of the data")
        qc.find("windows run past the end of the data (rejected; windows.past_end: drop)")
        return None
    if s < last_end:
        qc.overlapping_events += 1
        if w.overlap == "error":
            raise IngestError(f"{rec.recording}: the {c} event at {e[0] / sfreq:.2f} s overlaps the previous "
                              "event's window; fix: windows.overlap: keep | drop")
        if w.overlap == "drop":
            qc.reject("overlaps the previous event's window")
            return None
    why = cut.overlaps_bad(s)
    if why:
        qc.reject(why)
        return None
    if dur > 0 and w.tmin + window_s > dur + 1.0 / sfreq:  # the window runs into what follows the event
        policy = w.past_event
        if policy == "error":
            raise IngestError(f"{rec.recording}: the window of the {c} event at {on:.2f} s ends "
                              f"{w.tmin + window_s:g} s after its onset, but the event lasts {dur:g} s; fix: "
                              f"a window of at most {dur - w.tmin:g} s (window_s), or windows.past_event: "
                              "keep | crop | drop")
        qc.past_event["window longer than its event"] = qc.past_event.get("window longer than its event", 0) + 1
        if policy == "drop":
            qc.reject("runs past the end of its event (windows.past_event: drop)")
            return None
        if policy == "crop":
            return s, max(0, int(round((dur - w.tmin) * sfreq)))
    return s


def _fixed_windows(task: DeclaredTask, raw, rec: Recording, window_s: float, qc: RecordingQC, label: str | None,
                   cut: _Cut):
    """Fixed windows every ``stride_s`` labelled by the recording's label, or by the events that cover them
    (:func:`_covering_event_labels`). Returns ``(starts, labels, {})``, or None when the recording is dropped.

    Raises
    ------
    IngestError
        Neither a recording label nor ``labels.events``.
    """
    w = task.spec.windows
    stride = int(round((w.stride_s or window_s) * cut.sfreq))
    cand = list(range(0, cut.T - cut.n + 1, stride))
    tail = cut.T - (cand[-1] + cut.n if cand else 0)
    starts: list[int] = []
    ys: list[int] = []
    if label is not None:
        for s in cand:
            why = cut.overlaps_bad(s)
            if why:
                qc.reject(why)
                continue
            starts.append(s)
            ys.append(cut.cls_idx[label])
    elif cut.events_map:
        placed = _covering_event_labels(task, raw, window_s, qc, cut, cand)
        if placed is None:
            return None
        starts, ys = placed
    else:
        raise IngestError(f"{rec.recording}: no recording label and no labels.events; fix: declare labels.events, "
                          "labels.target or a path label")
    if tail > 0 and cand:
        qc.act(f"the last {tail / cut.sfreq:.2f} s (shorter than a window) are not used")
    return starts, ys, {}


def _covering_event_labels(task: DeclaredTask, raw, window_s: float, qc: RecordingQC, cut: _Cut, cand: list[int]):
    """Fixed windows labelled by the annotation that covers most of them (at least ``labels.min_overlap``; else
    ``labels.background`` or rejected as ambiguous), optionally only within ``windows.span`` around some events.
    Returns ``(starts, labels)``, or None when the recording has no labelling event (dropped)."""
    w, lab, sfreq, n = task.spec.windows, task.spec.labels, cut.sfreq, cut.n
    shift = raw.first_time if raw.annotations.orig_time is not None else 0.0
    ann = [(float(a["onset"]) - shift, float(a["duration"]), cut.mapped[str(a["description"])])
           for a in raw.annotations if cut.mapped.get(str(a["description"])) is not None]
    for _, _, c in ann:
        qc.events[c] = qc.events.get(c, 0) + 1
    background = lab.background
    if not ann and not (background and lab.without_events == "background"):
        qc.find(f"no event of {sorted(cut.events_map)} in the recording (annotations: {sorted(set(cut.descs)) or 'none'})")
        qc.drop(f"no event of {sorted(cut.events_map)} to label the windows")
        return None
    need = lab.min_overlap * window_s
    lo_hi = None
    if w.span and w.span.around:
        around = [(on, on + dur) for on, dur, c in ann if c in w.span.around]
        if around:
            m = float(w.span.margin_s)
            lo_hi = (min(a for a, _ in around) - m, max(b for _, b in around) + m)
            qc.act(f"kept only {lo_hi[0]:.0f}-{lo_hi[1]:.0f} s: the events of {w.span.around} ± {m:g} s "
                   "(windows.span)")
        else:
            qc.find(f"no event of {w.span.around} to place windows.span; the whole recording is used")
    starts: list[int] = []
    ys: list[int] = []
    for s in cand:
        a, b = s / sfreq, (s + n) / sfreq
        if lo_hi is not None and (a < lo_hi[0] or b > lo_hi[1]):
            qc.reject(f"outside the span around {w.span.around} (windows.span)")
            continue
        cover: dict[str, float] = {}
        for on, dur, c in ann:
            ov = min(b, on + max(dur, 0.0)) - max(a, on)
            if ov > 0 or (dur == 0 and a <= on < b):
                cover[c] = cover.get(c, 0.0) + max(ov, 0.0)
        if not cover and background:
            c = background
        else:
            best = max(cover.items(), key=lambda kv: kv[1]) if cover else None
            if best is None or best[1] + 1e-9 < need:
                qc.reject(f"no labelled event covers {lab.min_overlap:.0%} of the window"
                          if best is None or not background else
                          f"overlaps a labelled event by less than {lab.min_overlap:.0%} (ambiguous)")
                continue
            c = best[0]
        why = cut.overlaps_bad(s)
        if why:
            qc.reject(why)
            continue
        starts.append(s)
        ys.append(cut.cls_idx[c])
    return starts, ys


def _next_onsets(onsets: np.ndarray, all_onsets: np.ndarray, descs: list[str], reject: list[str]) -> list:
    """For each event onset (s), the onset of the next annotation after it (any description but the rejection
    prefixes, e.g. ``BAD``), or None."""
    keep = np.array([not any(d.upper().startswith(p.upper()) for p in reject) for d in descs], dtype=bool)
    others = np.sort(all_onsets[keep]) if len(all_onsets) else all_onsets
    out = []
    for on in onsets:
        i = np.searchsorted(others, on, side="right")
        out.append(float(others[i]) if i < len(others) else None)
    return out


def _past_event_lines(qc: RecordingQC, w: dict, window_s: float, durations: np.ndarray, crop_at: dict, n: int) -> None:
    """The report lines of ``windows.past_event`` and of events that overrun the next annotation (paper-agnostic:
    a window that outlasts its event holds part of whatever follows, e.g. EEGMMIDB's next rest period)."""
    over = qc.past_event.get("window longer than its event", 0)
    if over:
        d = durations[durations > 0]
        span = f"{d.min():g}" if d.min() == d.max() else f"{d.min():g}-{d.max():g}"
        what = (f"{over} window(s) run past the end of their event: the events last {span} s, the windows end "
                f"{w.tmin + window_s:g} s after the onset")
        if w.past_event == "keep":
            qc.find(what + " (kept, holding part of what follows; windows.past_event: keep | crop | drop)")
        elif w.past_event == "drop":
            qc.act(what + " (dropped; windows.past_event: drop)")
        else:
            cut = sorted({n - c for c in crop_at.values()})
            qc.act(what + f" (the last {cut[0] if len(cut) == 1 else f'{cut[0]}-{cut[-1]}'} samples of each set to 0; "
                   "windows.past_event: crop)")
    k = qc.past_event.get("event overruns the next annotation", 0)
    if k:
        qc.find(f"{k} event(s) last past the onset of the next annotation (overlapping annotations: check the "
                "events' durations)")


def balance_windows(task: DeclaredTask, y: np.ndarray, groups: np.ndarray, qcs: dict[str, RecordingQC],
                    recordings: np.ndarray) -> np.ndarray:
    """Indices of the windows kept by ``windows.balance`` (every row when it is unset).

    Per group (subject or recording), with ratios ``r_c`` and counts ``n_c``: ``u = min(n_c / r_c)`` over the classes
    that are not subsampled (over every class when ``subsample`` is unset), and each subsampled class keeps
    ``min(n_c, floor(u · r_c))`` windows drawn without replacement; then ``max_windows`` caps the group by a random
    draw. Windows of classes outside ``ratios`` are dropped. Every dropped window is counted under its reason in
    its recording's report.

    Parameters
    ----------
    y : ndarray of int64, shape (n_windows,)
    groups : ndarray of str, shape (n_windows,)
        The unit within which the ratio holds (``balance.per``).
    qcs : dict of str to RecordingQC
    recordings : ndarray of str, shape (n_windows,)

    Returns
    -------
    ndarray of int64
        Sorted indices of the kept windows.
    """
    b = task.spec.windows.balance
    if not b or (not b.ratios and not b.max_windows):
        return np.arange(len(y))
    ratios = {task.class_names.index(c): float(r) for c, r in (b.ratios or {}).items()}
    sub = set(range(len(task.class_names))) if b.subsample is None else {task.class_names.index(c) for c in b.subsample}
    rng = np.random.default_rng(b.seed)
    ratio_txt = (":".join(f"{float(r):g}" for r in (b.ratios or {}).values()) + " "
                 + ":".join(b.ratios or {}))
    keep: list[int] = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        if not ratios:
            gk = idx
        else:
            counts = {c: int(np.sum(y[idx] == c)) for c in ratios}
            fixed = [c for c in ratios if c not in sub and ratios[c] > 0] or [c for c in ratios if ratios[c] > 0]
            unit = min(counts[c] / ratios[c] for c in fixed)
            gk_list: list[int] = []
            for c, r in ratios.items():
                ci = idx[y[idx] == c]
                if c in sub:
                    k = min(len(ci), int(np.floor(unit * r + 1e-9)))
                    chosen = np.sort(rng.choice(ci, size=k, replace=False)) if len(ci) else ci
                else:
                    chosen = ci
                gk_list.extend(chosen.tolist())
                for j in np.setdiff1d(ci, chosen):
                    qcs[str(recordings[j])].reject(f"subsampled to {ratio_txt} per {b.per} (windows.balance)")
            for j in idx[~np.isin(y[idx], list(ratios))]:
                qcs[str(recordings[j])].reject("class not in windows.balance.ratios")
            gk = np.sort(np.asarray(gk_list, dtype=np.int64))
        if b.max_windows and len(gk) > b.max_windows:
            chosen = np.sort(rng.choice(gk, size=int(b.max_windows), replace=False))
            for j in np.setdiff1d(gk, chosen):
                qcs[str(recordings[j])].reject(f"over the cap of {b.max_windows} windows per {b.per} "
                                               "(windows.balance.max_windows)")
            gk = chosen
        keep.extend(np.asarray(gk).tolist())
    return np.sort(np.asarray(keep, dtype=np.int64))
