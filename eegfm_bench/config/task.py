"""The task declaration's schema (``task:`` in any config; :mod:`eegfm_bench.data.spec` parses it): where the
recordings are, how labels and windows are made, which channels are kept, and each source's own options.

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses; jsonargparse reads their ``Args:`` blocks for
``--help``. The window cache key hashes :meth:`TaskSpec.to_dict` (:func:`eegfm_bench.data.spec.spec_hash`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from eegfm_bench.config import ConfigRecord, typed


@dataclass(frozen=True)
class LabelsSpec(ConfigRecord):
    """Where the class of a window comes from.

    Args:
        events: annotation description -> class name (event-locked windows, or fixed windows labelled by overlap);
            a key may be a shell-style pattern (``sz*``; exact descriptions are matched first).
        target: participants.tsv / sessions / table column giving one class per recording (e.g. a diagnosis).
        map: value (of target, of the path's ``label`` group, of a braindecode / MOABB target) -> class name;
            a value mapped to null is not part of the task (its recordings are excluded and reported).
        min_overlap: fixed windows labelled by events: fraction of the window the event must cover.
        background: fixed windows labelled by events: the class of a window that overlaps no labelled event
            (e.g. ``interictal``); windows overlapping one by less than ``min_overlap`` are rejected as ambiguous.
        without_events: a recording with no labelled event: ``drop`` it (reported) or cut only ``background``
            windows from it.
    """

    events: Optional[dict[str, str]] = None
    target: Optional[str] = None
    map: Optional[dict[str, Optional[str]]] = None
    min_overlap: float = 0.5
    background: Optional[str] = None
    without_events: Literal["drop", "background"] = "drop"


@dataclass(frozen=True)
class BalanceSpec(ConfigRecord):
    """Subsample classes to fixed ratios (e.g. CHB-MIT's 1:3 ictal:interictal per subject).

    Args:
        ratios: class name -> relative weight.
        per: ``subject`` or ``recording`` (where the ratio holds).
        seed: seed of the subsampling (numpy ``default_rng``; not the papers' ``RandomState`` streams).
        subsample: the classes that may be subsampled (default: all). With ``[wake]`` and ratios
            ``{wake: 3, sleep: 1}``, wake is cut to at most 3 × sleep and sleep is never cut (paper 001's Sleep-EDF).
        max_windows: at most this many windows per group after the ratios (a random, not class-stratified draw;
            paper 001's 214 Sleep-EDF epochs per subject).
    """

    ratios: dict[str, float] = field(default_factory=dict)
    per: Literal["subject", "recording"] = "subject"
    seed: int = 0
    subsample: Optional[list[str]] = None
    max_windows: Optional[int] = None


@dataclass(frozen=True)
class SpanSpec(ConfigRecord):
    """Keep only the stretch of a recording around the events of some classes (fixed windows labelled by events).

    Args:
        around: class names whose events bound the span (e.g. ``[sleep]``).
        margin_s: seconds kept before the first and after the last of those events (Sleep-EDF: 30 min of wake on
            either side of the sleep period, as braindecode's ``crop_wake_mins=30``).
    """

    around: list[str] = field(default_factory=list)
    margin_s: float = 0.0


@dataclass(frozen=True)
class WindowsSpec(ConfigRecord):
    """How windows are cut (the window length is the model's declared ``window_s``).

    Args:
        mode: ``events`` (one window per labelled event) or ``fixed`` (back-to-back windows).
        tmin: events mode: start of the window after the event onset (s).
        tmax: events mode: end of the window after the onset (s); must equal tmin + the window length.
        stride_s: fixed mode: step between window starts (default: the window length, no overlap).
        overlap: events whose windows overlap: ``keep`` both, ``drop`` the later one, or ``error``.
        past_end: a window that runs past the end of the data: ``drop`` (reported) or ``error``.
        past_event: an event-locked window that runs past the end of its event (an annotation with a duration), into
            whatever follows: ``keep`` it (a finding, counted per recording), ``crop`` (the samples after the event's
            end are set to 0, so the window keeps its length and holds nothing of the next period; counted), ``drop``
            it (counted) or ``error``. Events without a duration (0 s) are not checked.
        reject_annotations: windows overlapping an annotation whose description starts with one of these are rejected.
        balance: subsample classes to fixed ratios.
        span: fixed windows labelled by events: keep only the stretch around some classes' events.
    """

    mode: Literal["events", "fixed"] = "fixed"
    tmin: float = 0.0
    tmax: Optional[float] = None
    stride_s: Optional[float] = None
    overlap: Literal["keep", "drop", "error"] = "keep"
    past_end: Literal["drop", "error"] = "drop"
    past_event: Literal["keep", "crop", "drop", "error"] = "keep"
    reject_annotations: list[str] = field(default_factory=lambda: ["BAD"])
    balance: Optional[BalanceSpec] = None
    span: Optional[SpanSpec] = None


@dataclass(frozen=True)
class ChannelsSpec(ConfigRecord):
    """Which channels are kept and how they are named.

    Args:
        include: keep only these, in this order (null: every EEG channel).
        exclude: drop these (by name as read or after renaming).
        rename: old name -> new name (applied first).
        aliases: map spellings to MNE's standard 10-05 names ("EEG Fp1-Ref", "FP1", old T3/T4/T5/T6).
        non_eeg: EOG / ECG / EMG / stim / misc channels: ``drop`` (reported) or ``error``.
        unknown: names without a 10-05 position: ``drop`` (reported), ``keep`` (no position) or ``error``.
        flat: flat channels: ``interpolate`` (spherical spline before the common average), ``drop_recording``,
            ``keep`` or ``error``.
        mixed_rates: channels sampled at other rates in one file: ``refuse`` or ``eeg_only`` (read only the
            channels at the EEG rate; the others are dropped and reported; nothing is resampled to join them).
        montage: recordings whose kept channels differ: ``same`` (error naming them) or ``intersect``.
        duplicates: one label on two channels of a file (MNE renames them ``F1-0``, ``F1-1``; or two spellings
            of one 10-05 name): ``keep_first`` (the first keeps the name, the others are dropped; a finding) or
            ``error``.
        min_reference_channels: a common average reference over fewer channels than this is a finding (an error
            under ``strict``): the average of a few channels carries each one's signal into the others.
    """

    include: Optional[list[str]] = None
    exclude: list[str] = field(default_factory=list)
    rename: dict[str, str] = field(default_factory=dict)
    aliases: bool = True
    non_eeg: Literal["drop", "error"] = "drop"
    unknown: Literal["drop", "keep", "error"] = "drop"
    flat: Literal["interpolate", "drop_recording", "keep", "error"] = "interpolate"
    mixed_rates: Literal["refuse", "eeg_only"] = "refuse"
    montage: Literal["same", "intersect"] = "same"
    duplicates: Literal["keep_first", "error"] = "keep_first"
    min_reference_channels: int = 8


@dataclass(frozen=True)
class TaskSpec(ConfigRecord):
    """A classification task declared in YAML (see the module docstring).

    Args:
        name: the task's name in result rows.
        source: a registered data source (:data:`eegfm_bench.data.sources.SOURCES`): ``files``, ``bids``,
            ``braindecode``, ``moabb``, ``eegmmidb``, or one a package registers (``SOURCES.register``, or an entry
            point in the group ``eegfm_bench.sources``); an unknown name is refused with the list of known ones.
        root: where the data are (relative paths are resolved against the data root).
        dataset: dataset name (default: the task name); names the dropout masks and the dataset-identity probe.
        classes: class names in label order (default: the sorted class names the labels produce).
        labels: where labels come from.
        windows: how windows are cut.
        channels: channel selection and naming.
        line_freq: mains frequency for the notch (Hz); null: no notch.
        description: one line for ``eegfm-bench tasks``.
        obtain: how to get the data (added to the error when files are missing).
        pretraining_aliases: names under which the dataset may appear in a model's pretraining corpora.
        regions: paper 003 Table 6 task type of the region perturbations (e.g. motor_imagery, eyes_open_closed).
        window_s: window length in seconds (default: the model's declared window).
        reference: ``average`` (common average reference) or ``none`` (default: the model's); bipolar or
            already-referenced montages need ``none``.
        strict: every ingestion finding is an error.
        confound: the default confound variations of the task (:mod:`eegfm_bench.runs.cv.confound`: ``offset``,
            ``band``, ``offset+band``, ``frontal``), run by every cv unless ``confound: off``; null: ``[offset+band]``
            for event-locked windows (``windows.mode: events``), none for fixed windows; ``[]``: none.
        files: source ``files``: ``glob`` (str or list), ``pattern`` (regex with groups subject / session / run /
            label on the path relative to root), ``table`` (CSV / TSV / JSON listing the files), ``subject`` (one
            subject), ``annotations`` (a companion annotation file per recording), ``reader_kwargs``
            (:mod:`eegfm_bench.data.sources.files`).
        bids: source ``bids``: BIDS entities (``task``, ``subjects``, ``sessions``, ``runs``, ``acquisitions``),
            ``datatype`` (eeg), ``extensions``, ``events_column``.
        braindecode: source ``braindecode``: ``cls`` (a braindecode dataset class), ``kwargs`` and ``target``.
        moabb: source ``moabb``: ``dataset`` (a MOABB dataset class), ``kwargs``, ``paradigm`` (optional),
            ``events`` (the dataset's event names to keep; default: labels.events).
        eegmmidb: source ``eegmmidb``: ``runs`` and optional ``run_labels`` (run -> class).
        source_options: the options of a source registered outside eegfm_bench (validated against its
            ``Source.options`` schema); a task YAML may also write them under the source's own name
            (``source: my_source`` with ``my_source: {...}``), which is moved here when the task is parsed.

    The source's own section (``files`` / ``bids`` / ...) is a mapping here, validated and filled by the source
    (its ``check_options``, against its schema: ``FilesOptions``, ``BIDSOptions``, ...); read it typed through
    :attr:`options`.
    """

    name: str
    source: str
    root: Optional[str] = None
    dataset: Optional[str] = None
    classes: Optional[list[str]] = None
    labels: LabelsSpec = field(default_factory=LabelsSpec)
    windows: WindowsSpec = field(default_factory=WindowsSpec)
    channels: ChannelsSpec = field(default_factory=ChannelsSpec)
    line_freq: Optional[float] = None
    description: str = ""
    obtain: str = ""
    pretraining_aliases: list[str] = field(default_factory=list)
    regions: Optional[str] = None
    window_s: Optional[float] = None
    reference: Optional[Literal["average", "none"]] = None
    strict: bool = False
    confound: Optional[list[str]] = None
    files: Optional[dict[str, Any]] = None
    bids: Optional[dict[str, Any]] = None
    braindecode: Optional[dict[str, Any]] = None
    moabb: Optional[dict[str, Any]] = None
    eegmmidb: Optional[dict[str, Any]] = None
    source_options: Optional[dict[str, Any]] = None

    @property
    def options(self) -> Optional[ConfigRecord]:
        """The source's own options (the ``files`` / ``bids`` / ``braindecode`` / ``moabb`` / ``eegmmidb`` mapping,
        validated and filled by the source's ``check_options``) as the source's typed frozen record
        (:attr:`Source.options <eegfm_bench.data.sources.Source.options>`: e.g.
        :class:`~eegfm_bench.config.task.FilesOptions`); None for a source without options, and for a
        source registered outside eegfm_bench (its :class:`~eegfm_bench.data.sources.Source` reads
        :attr:`source_section` typed as its own ``options``)."""
        schema = SOURCE_OPTIONS.get(self.source)
        return None if schema is None else typed(schema, getattr(self, self.source) or {})

    @property
    def source_section(self) -> dict:
        """The source's own options as a mapping: the built-in source's section (``files``, ``bids``, ...) or
        :attr:`source_options` for a source registered outside eegfm_bench ({} when none)."""
        return dict((getattr(self, self.source) if self.source in SOURCE_OPTIONS else self.source_options) or {})


@dataclass(frozen=True)
class FilesOptions(ConfigRecord):
    """Options of ``source: files``.

    Args:
        glob: glob pattern(s) relative to root (``**`` recurses).
        pattern: regex on the relative path with named groups subject / session / run / label.
        table: a CSV / TSV / JSON file (relative to root or absolute) listing the recordings, one row each.
        table_keys: JSON table: the keys of the object whose lists of records are read (default: the file is a list).
        path_template: table: the file of a row, formatted with its columns (default: the ``path`` column).
        columns: table: subject / session / run / label -> the column holding it.
        subject: the subject of every file (a one-subject folder).
        annotations: a companion annotation file per recording (glob relative to its folder, with ``{stem}`` and
            the pattern's groups).
        reader: a specific MNE reader, ``mne.io.read_raw_<reader>`` (e.g. ``egi`` for ``.raw`` EGI files), when
            ``mne.io.read_raw`` cannot tell the format from the extension.
        reader_kwargs: keyword arguments of the reader (e.g. ``encoding: latin1``).
    """

    glob: Union[str, list[str]] = "**/*"
    pattern: Optional[str] = None
    table: Optional[str] = None
    table_keys: Optional[list[str]] = None
    path_template: Optional[str] = None
    columns: dict[str, str] = field(default_factory=dict)
    subject: Optional[str] = None
    annotations: Optional[str] = None
    reader: Optional[str] = None
    reader_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BIDSOptions(ConfigRecord):
    """Options of ``source: bids`` (BIDS entities; null: every value present).

    Args:
        task: the BIDS task label(s).
        subjects: subject labels (without ``sub-``).
        sessions: session labels.
        runs: run labels.
        acquisitions: acquisition labels.
        datatype: the BIDS datatype folder.
        extensions: data file extensions to read (default: every EEG format mne-bids reads).
        events_column: the ``events.tsv`` column whose values become the annotation descriptions (default: what
            mne-bids reads, ``trial_type``); e.g. ``eventType`` for SzCORE-format seizure datasets (CHB-MIT, Siena).
    """

    task: Optional[Union[str, list[str]]] = None
    subjects: Optional[list[str]] = None
    sessions: Optional[list[str]] = None
    runs: Optional[list[str]] = None
    acquisitions: Optional[list[str]] = None
    datatype: str = "eeg"
    extensions: Optional[list[str]] = None
    events_column: Optional[str] = None


@dataclass(frozen=True)
class BraindecodeOptions(ConfigRecord):
    """Options of ``source: braindecode``.

    Args:
        cls: the braindecode dataset class (``braindecode.datasets.<cls>``), e.g. TUHAbnormal, NMT, CHBMIT, SIENA.
        kwargs: its constructor arguments (a relative ``path`` / ``root`` is resolved against the task's root).
        target: the description column giving each recording's class (e.g. ``pathological``; default: the
            dataset's ``target`` column when it has one).
    """

    cls: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    target: Optional[str] = None


@dataclass(frozen=True)
class MOABBOptions(ConfigRecord):
    """Options of ``source: moabb``.

    Args:
        dataset: the MOABB dataset class (``moabb.datasets.<dataset>``; ``FakeDataset`` for tests).
        kwargs: its constructor arguments.
        events: the dataset's event names to keep (default: labels.events' keys, else all).
    """

    dataset: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    events: Optional[list[str]] = None


@dataclass(frozen=True)
class EEGMMIDBOptions(ConfigRecord):
    """Options of ``source: eegmmidb``.

    Args:
        runs: run numbers (1-14).
        run_labels: run -> class, for recording-level tasks (e.g. eyes open / closed).
        events_by_run: run -> {annotation: new name}: the cues mean different things in different runs (T1 is the
            left fist in runs 4/8/12 but both fists in runs 6/10/14), so they are renamed per run before
            ``labels.events`` maps them to classes.
        default_subjects: the subjects when none are given and none are present locally (then downloaded).
    """

    runs: list[int] = field(default_factory=list)
    run_labels: Optional[dict[int, str]] = None
    events_by_run: Optional[dict[int, dict[str, str]]] = None
    default_subjects: list[int] = field(default_factory=lambda: list(range(1, 110)))


SOURCE_OPTIONS: dict[str, Optional[type]] = {"files": FilesOptions, "bids": BIDSOptions,
                                             "braindecode": BraindecodeOptions, "moabb": MOABBOptions,
                                             "eegmmidb": EEGMMIDBOptions}
"""Each source's options schema by source name (the ``options`` of :data:`eegfm_bench.data.sources.SOURCES`)."""
