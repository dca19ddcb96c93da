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
import difflib
import hashlib
import json
from typing import Union

from eegfm_bench.config import ConfigError, command_parser, load_typed, read_yaml
from eegfm_bench.data.sources import SOURCES
from eegfm_bench.config.task import TaskSpec


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
    spec = _plugin_section(spec, where)

    def prepare(raw: dict) -> dict:  # the source's own options are checked on the mapping (the parsing step)
        src, key = SOURCES.get(raw["source"]), _section_key(raw["source"])
        raw[key] = src.check_options(raw.get(key) or {}, f"{where}.{raw['source']}")
        return raw

    try:
        out = load_typed(_task_parser(), TaskSpec, copy.deepcopy(spec), prepare=prepare, where=where)
    except ConfigError as err:
        raise ConfigError(str(err).replace("task:", f"{where}:", 1)) from None
    _check_task(out, where)
    return out


_BUILTIN_SECTIONS = ("files", "bids", "braindecode", "moabb", "eegmmidb")
"""The sources whose options have a field of their own in :class:`TaskSpec` (the others use ``source_options``)."""


def _section_key(source: str) -> str:
    """The :class:`TaskSpec` field holding ``source``'s options."""
    return source if source in _BUILTIN_SECTIONS else "source_options"


def _plugin_section(spec: dict, where: str) -> dict:
    """Check ``source:`` against the source registry and move a plug-in source's section (written under its own
    name) to ``source_options``.

    Raises
    ------
    ConfigError
        The source is not registered (one line: the known sources and how to register one), or its options are
        written twice (under its name and under ``source_options``).
    """
    name = spec.get("source")
    if name is None or not isinstance(name, str):
        return spec  # missing / not a string: the parser's message
    if name not in SOURCES:
        close = difflib.get_close_matches(name, SOURCES.names(), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"{where}.source: unknown data source {name!r}.{hint} Known sources: "
                          f"{', '.join(SOURCES.names())}; fix: name one of these, or register yours "
                          "(eegfm_bench.data.sources.SOURCES.register, or an entry point in the group "
                          "`eegfm_bench.sources` of an installed package)")
    if name in _BUILTIN_SECTIONS or name not in spec:
        return spec
    if spec.get("source_options") is not None:
        raise ConfigError(f"{where}: the options of source {name!r} are given twice (`{name}` and `source_options`); "
                          f"fix: keep one")
    out = {k: v for k, v in spec.items() if k != name}
    out["source_options"] = spec[name]
    return out


def _check_task(s: TaskSpec, where: str) -> None:
    """The checks across settings of a typed task: options of one source only, no ``root`` for MOABB, each channel
    listed once, event-locked windows with events.

    Raises
    ------
    ConfigError
    """
    for other in _BUILTIN_SECTIONS:
        if other != s.source and getattr(s, other):
            raise ConfigError(f"{where}: `{other}` options are set but source is {s.source!r}; fix: remove "
                              f"`{other}` or set `source: {other}`")
    if s.source in _BUILTIN_SECTIONS and s.source_options:
        raise ConfigError(f"{where}: `source_options` are set but source {s.source!r} reads `{s.source}`; fix: move "
                          f"them to `{s.source}`")
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
