"""A task declared in YAML: where the recordings are, how labels and windows are made, which channels are kept.

``task:`` in any config is a registered name (``eegmmidb_mi``; ``eegfm-bench tasks`` lists them) or a mapping of
:class:`TaskSpec` (typed: unknown keys are refused with close matches)::

    task:
      name: my_study                 # recorded in every row
      source: files                  # files | bids | braindecode | moabb | eegmmidb
      root: my_study                 # relative to the data root (EEGFM_DATA), or absolute
      files: {glob: "sub-*/*.vhdr", pattern: "sub-(?P<subject>\\w+)/.*_(?P<label>rest|task)\\.vhdr"}
      classes: [rest, task]          # label order (default: sorted class names)
      labels:
        events: {S1: rest, S2: task}    # annotation description -> class (event-locked or overlap-labelled)
        target: null                 # a participants.tsv / CSV column giving one class per recording
        map: {}                      # value of target / path label -> class name (default: the value itself);
                                     #   a value mapped to null is excluded (reported), e.g. {F: null}
        min_overlap: 0.5             # fixed windows labelled by events: share of the window an event must cover
        background: null             # fixed windows overlapping no labelled event get this class (e.g. interictal)
        without_events: drop         # recordings with no labelled event: drop (reported) | background
      windows:
        mode: events                 # events: one window per event from onset + tmin; fixed: back to back
        tmin: 0.0                    # s after the event onset (events mode)
        tmax: null                   # s; if set, tmax - tmin must equal the model's window length
        stride_s: null               # fixed mode: step between window starts (default: the window length)
        overlap: keep                # events whose windows overlap: keep | drop (the later one) | error
        past_end: drop               # a window running past the end of the data: drop | error
        past_event: keep             # a window longer than its event (into the next period): keep (reported) | crop
                                     #   (samples after the event's end set to 0) | drop | error
        reject_annotations: [BAD]    # windows overlapping annotations starting with these are rejected
        balance: null                # {ratios: {ictal: 1, interictal: 3}, per: subject, seed: 0, subsample: null,
                                     #  max_windows: null}
        span: null                   # {around: [sleep], margin_s: 1800}: only the stretch around these events
      channels:
        include: null                # keep only these (in this order); null: every EEG channel
        exclude: []                  # drop these (by name as read or after renaming)
        rename: {}                   # old name -> new name, before the 10-05 aliases
        aliases: true                # "EEG Fp1-Ref", "FP1", "T3" -> Fp1, Fp1, T7 (MNE standard_1005 spelling)
        non_eeg: drop                # EOG / ECG / EMG / stim / misc channels: drop (reported) | error
        unknown: drop                # names without a 10-05 position: drop (reported) | keep | error
        flat: interpolate            # flat channels: interpolate (spherical spline, before the CAR) | drop_recording | keep | error
        mixed_rates: refuse          # channels at other rates in one file: refuse | eeg_only (keep the EEG rate's)
        montage: same                # recordings with other channel sets: same (error) | intersect (reported)
        duplicates: keep_first       # one label twice in a file (MNE's F1-0, F1-1): keep_first (reported) | error
        min_reference_channels: 8    # a common average over fewer channels is a finding (strict: an error)
      line_freq: 50                  # mains notch (Hz); null: none
      window_s: null                 # window length (s); null: the model's declared window
      reference: null                # average | none; null: the model's (bipolar montages need none)
      strict: false                  # every ingestion finding is an error
      confound: null                 # the task's default confound variations (cv runs them unless confound: off);
                                     #   null: offset+band for event-locked windows, none for fixed ones

A mapping may start from a preset and override some of its settings: ``task: {preset: tuab, root: /data/tuab}``
(nested sections are merged key by key).

Every source yields recordings (subject, session, run, a file or a reader); the rest of the pipeline is shared
(:mod:`eegfm_bench.data.ingest`).
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from eegfm_bench.config import ConfigError, ConfigRecord, command_parser, parse_config, read_yaml, typed
from eegfm_bench.data.sources import SOURCES


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
        source: ``files``, ``bids``, ``braindecode``, ``moabb`` or ``eegmmidb``.
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
        confound: the default confound variations of the task (:mod:`eegfm_bench.runs.confound`: ``offset``,
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

    The source's own section (``files`` / ``bids`` / ...) is a mapping here, validated and filled by the source
    (its ``check_options``, against its schema: ``FilesOptions``, ``BIDSOptions``, ...); read it typed through
    :attr:`options`.
    """

    name: str
    source: Literal["files", "bids", "braindecode", "moabb", "eegmmidb"]
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

    @property
    def options(self) -> Optional[ConfigRecord]:
        """The source's own options (the ``files`` / ``bids`` / ``braindecode`` / ``moabb`` / ``eegmmidb`` mapping,
        validated and filled by the source's ``check_options``) as the source's typed frozen record
        (:attr:`Source.options <eegfm_bench.data.sources.Source.options>`: e.g.
        :class:`~eegfm_bench.data.sources.files.FilesOptions`); None for a source without options."""
        schema = SOURCES.get(self.source).options
        return None if schema is None else typed(schema, getattr(self, self.source) or {})


def _task_parser():
    return command_parser("task", TaskSpec, trainer=False)


def parse_task_spec(spec: Union[dict, str], where: str = "task") -> TaskSpec:
    """Validate a declared task (a mapping, or a YAML file path) and return it typed and frozen (defaults filled).

    The mapping is complete here (a preset's settings already merged with the overrides:
    :func:`~eegfm_bench.data.tasks.resolve_task_spec`); a changed copy of the result is
    ``dataclasses.replace(spec, windows=replace(spec.windows, tmin=1.0))``, its mapping ``spec.to_dict()``.

    Raises
    ------
    ConfigError
        Unknown keys (with close matches), wrong types, a source-specific section missing or unknown.
    """
    if isinstance(spec, str):
        spec = read_yaml(spec)
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a task name or a mapping, got a {type(spec).__name__}")
    try:
        raw = parse_config(_task_parser(), copy.deepcopy(spec), where=where)
    except ConfigError as err:
        raise ConfigError(str(err).replace("task:", f"{where}:", 1)) from None
    src = SOURCES.get(raw["source"])  # the source's own options are checked on the mapping (the parsing step)
    raw[raw["source"]] = src.check_options(raw.get(raw["source"]) or {}, f"{where}.{raw['source']}")
    out = typed(TaskSpec, raw)
    _check_task(out, where)
    return out


def _check_task(s: TaskSpec, where: str) -> None:
    """The checks across settings of a typed task: options of one source only, no ``root`` for MOABB, each channel
    listed once, event-locked windows with events.

    Raises
    ------
    ConfigError
    """
    for other in ("files", "bids", "braindecode", "moabb", "eegmmidb"):
        if other != s.source and getattr(s, other):
            raise ConfigError(f"{where}: `{other}` options are set but source is {s.source!r}; fix: remove "
                              f"`{other}` or set `source: {other}`")
    if s.source == "moabb" and s.root:
        raise ConfigError(f"{where}.root: MOABB keeps its files in its own folder (MNE_DATA), so `root` would be "
                          "ignored; fix: remove root and set MNE_DATA (or the dataset's path in moabb.kwargs)")
    for key, names in (("include", s.channels.include or []), ("exclude", s.channels.exclude or [])):
        low = [m.lower() for m in names]
        twice = [n for i, n in enumerate(names) if low.count(n.lower()) > 1 and low.index(n.lower()) == i]
        if twice:
            raise ConfigError(f"{where}.channels.{key} lists {twice} more than once; fix: list each channel once")
    if s.windows.mode == "events" and not (s.labels.events or s.source == "moabb"):
        raise ConfigError(f"{where}.windows.mode: events needs labels.events (annotation description -> class); "
                          "fix: add labels.events, or use windows.mode: fixed with recording-level labels")


NOT_WINDOW_KEYS = ("description", "obtain", "confound")
"""Task settings that change no window (documentation, and which confound variations a cv runs): left out of
:func:`spec_hash`, so editing them rebuilds nothing."""


def spec_hash(spec: TaskSpec) -> str:
    """sha256 (16 hex) of a resolved task spec (every setting that changes the windows; :data:`NOT_WINDOW_KEYS`
    left out): the hash of its :meth:`~eegfm_bench.config.ConfigRecord.to_dict` mapping."""
    blob = {k: v for k, v in spec.to_dict().items() if k not in NOT_WINDOW_KEYS}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def default_confound_variations(spec: Union[TaskSpec, dict]) -> list[str]:
    """The confound variations a cv of this task runs by default: the task's ``confound`` list when it
    declares one, else ``["offset+band"]`` for event-locked windows (paper 003 / NeuroAtlas's motor-imagery
    filtering: 1 s after the cue, 4-40 Hz) and none for fixed windows.

    ``spec`` is the typed task, or a declared task's complete mapping (a preset's settings merged with the
    overrides), which is parsed here.

    Raises
    ------
    ConfigError
        ``spec`` is a mapping that is no valid task (as :func:`parse_task_spec`).
    """
    if not isinstance(spec, TaskSpec):
        spec = parse_task_spec(spec)
    if spec.confound is not None:
        return list(spec.confound)
    return ["offset+band"] if spec.windows.mode == "events" else []
