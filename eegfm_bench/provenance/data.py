"""Data side of the provenance audit: paired reference views of real windows, and metadata provenance.

Two kinds of provenance enter :func:`~eegfm_bench.provenance.audit.audit_embeddings` (paper 000 §3, Table 23):

* **Induced (paired)** — :func:`make_paired_views` shows every window of a :class:`~eegfm_bench.data.windows.WindowSet`
  under K EEG references (default: the reference the data were *recorded* with, the common average and Cz),
  so that provenance changes while the subject, recording, window and label stay fixed (paper 000 §4.2,
  App. E: the paired NMT audit). For ``eegmat`` the recorded reference is linked ears (A1+A2); the data
  layer applies a common average reference by default, so the windows must be loaded with
  ``Preprocessing(reference="none")`` for the ``"original"`` view to be the recorded one (checked here).
* **Observational** — :func:`subject_metadata` / :func:`metadata_provenance` map each window's subject to a
  column of the dataset's subject table (site, device, dataset, recording year), e.g. ``eegmat``'s
  ``subject-info.csv`` column ``"Recording year"`` (paper 000 §4.3: device metadata as provenance groups).

:func:`subject_split` assigns whole subjects to train / val / test, the identity-disjoint split the audit
requires (paper 000 §3: "an identity-disjoint train/test split").

Re-referencing after the data layer's notch, band-pass and resampling is exact: those are per-channel linear
time-invariant operations and re-referencing is a fixed linear mix of channels, so the two commute.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from eegfm_bench.data.tasks import get_task, resolve_data_root
from eegfm_bench.data.windows import WindowSet

from .views import make_reference_views

__all__ = ["REFERENCE_VIEWS", "RECORDED_REFERENCE", "METADATA_TABLES", "PairedWindows", "make_paired_views",
           "subject_metadata", "metadata_provenance", "subject_split"]

#: Default K = 3 paired views (paper 000 App. E uses three reference views of each NMT record).
REFERENCE_VIEWS: tuple[str, ...] = ("original", "average", "Cz")

#: The reference each dataset was recorded with (what the ``"original"`` view is), from its SOURCE.md.
RECORDED_REFERENCE: dict[str, str] = {
    "eegmat": "linked ears (A1+A2)",
}

#: Per-subject metadata tables: dataset → (path under the data root, subject-id column).
METADATA_TABLES: dict[str, tuple[str, str]] = {
    "eegmat": ("eegmat/subject-info.csv", "Subject"),
}


@dataclass
class PairedWindows:
    """Windows of one task shown under K provenance views (paired: same windows in every view).

    Attributes
    ----------
    X : ndarray, shape (n_windows, K, n_chans, n_times), float32
        Signals of every view, in the WindowSet's unit (``meta["unit"]``, µV for the data layer's default scale).
    views : tuple of str, length K
        View (provenance) label of each slot of axis 1, e.g. ``("original", "average", "Cz")``.
    y : ndarray of int64, shape (n_windows,)
        Target per window (the same in every view).
    subject, recording : ndarray of str, shape (n_windows,)
        Identity and record per window (the same in every view).
    window_index : ndarray of int64, shape (n_windows,)
        Index of the window within its recording.
    ch_names : list of str, length n_chans
    sfreq : float
        Sampling rate in Hz.
    meta : dict
        Task, unit, the recorded reference (what ``"original"`` is), the WindowSet's preprocessing and cache key.
    """

    X: np.ndarray
    views: tuple
    y: np.ndarray
    subject: np.ndarray
    recording: np.ndarray
    window_index: np.ndarray
    ch_names: list
    sfreq: float
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def n_views(self) -> int:
        return len(self.views)

    @property
    def provenance(self) -> np.ndarray:
        """View label per (window, view), shape (n_windows, K) — identical rows (the audit's paired layout)."""
        return np.tile(np.array(self.views, dtype=str), (len(self), 1))

    def long_format(self) -> WindowSet:
        """The views as one long WindowSet: row ``i * K + k`` is window ``i`` in view ``k``.

        Returns
        -------
        WindowSet
            ``X`` of shape (n_windows * K, n_chans, n_times) (a view of :attr:`X`, no copy), ``provenance`` the
            view label per row, ``y`` / ``subject`` / ``recording`` / ``window_index`` repeated K times, so the
            data layer's :class:`~eegfm_bench.data.datamodule.WindowDataset` can batch it (encoder training,
            embedding extraction). Reshape embeddings of these rows with ``.reshape(n_windows, K, d)``.
        """
        n, K = len(self), self.n_views
        rep = lambda a: np.repeat(a, K)  # noqa: E731
        return WindowSet(X=self.X.reshape((n * K,) + self.X.shape[2:]), y=rep(self.y), subject=rep(self.subject),
                         recording=rep(self.recording), window_index=rep(self.window_index),
                         provenance=np.tile(np.array(self.views, dtype=str), n), ch_names=list(self.ch_names),
                         sfreq=self.sfreq, class_names=list(self.meta.get("class_names", [])),
                         meta={**self.meta, "layout": "window-major long format (row = window * K + view)"})


def make_paired_views(ws: WindowSet, views: Sequence[str] = REFERENCE_VIEWS) -> PairedWindows:
    """Build K paired reference views of every window of a WindowSet.

    Parameters
    ----------
    ws : WindowSet
        Windows ``X`` (n_windows, n_chans, n_times) in µV (or the unit in ``ws.meta["preprocessing"]``). When
        ``views`` contains ``"original"`` they must have been loaded with ``Preprocessing(reference="none")``
        (``ws.meta["preprocessing"]["reference"] == "none"``), so that "original" is the reference the data
        were recorded with (linked ears for ``eegmat``).
    views : sequence of str
        ``"original"``, ``"average"`` or a channel name (re-reference to that channel, which becomes 0);
        see :func:`~eegfm_bench.provenance.views.make_reference_views`. Default K = 3:
        ``("original", "average", "Cz")``.

    Returns
    -------
    PairedWindows
        ``X`` (n_windows, K, n_chans, n_times) float32, same unit; labels, subjects, records and window indices
        are those of ``ws`` (one per window, shared by all K views).

    Raises
    ------
    ValueError
        If ``"original"`` is requested but the windows were common-average referenced by the data layer (the
        original view would duplicate ``"average"``; fix: ``Preprocessing(reference="none")``) or their
        reference is not recorded in ``ws.meta``; or from :func:`make_reference_views` (unknown channel,
        repeated or empty views).

    References
    ----------
    Paper 000 (PhysioTRACE) §4.2, App. E: paired reference views of the same records.
    """
    views = tuple(views)
    prep = (ws.meta or {}).get("preprocessing") or {}
    if "original" in views:
        if "reference" not in prep:
            raise ValueError("cannot tell which reference the 'original' view would be: ws.meta['preprocessing'] "
                             "has no 'reference'; fix: load the windows with load_windows(task, "
                             "Preprocessing(..., reference='none')) (its meta records the reference)")
        if prep["reference"] != "none":
            raise ValueError(f"the windows were re-referenced by the data layer (reference={prep['reference']!r}), "
                             "so the 'original' view would not be the recorded reference (for 'average' it "
                             "duplicates the 'average' view); fix: load them with "
                             "dataclasses.replace(prep, reference='none')")
    X = make_reference_views(np.asarray(ws.X), ws.ch_names, views)
    dataset = ws.meta.get("dataset", ws.meta.get("task", ""))
    meta = {"task": ws.meta.get("task"), "dataset": dataset, "views": list(views),
            "recorded_reference": RECORDED_REFERENCE.get(dataset, "as recorded (not documented for this dataset)"),
            "unit": prep.get("unit"), "preprocessing": prep, "cache_key": ws.meta.get("cache_key"),
            "class_names": list(ws.class_names)}
    return PairedWindows(X=X, views=views, y=np.asarray(ws.y), subject=np.asarray(ws.subject),
                         recording=np.asarray(ws.recording), window_index=np.asarray(ws.window_index),
                         ch_names=list(ws.ch_names), sfreq=float(ws.sfreq), meta=meta)


def subject_metadata(task: str, column: str, data_root=None) -> dict[str, str]:
    """One column of a dataset's per-subject metadata table, as ``{subject id: value}``.

    Parameters
    ----------
    task : str
        Registered task (its dataset selects the table in :data:`METADATA_TABLES`), e.g. ``"eegmat"``.
    column : str
        Column name, e.g. ``"Recording year"`` (site, device, dataset or era provenance).
    data_root : path, optional
        See :func:`~eegfm_bench.data.tasks.resolve_data_root` (default ``$EEGFM_DATA``).

    Returns
    -------
    dict
        Subject id (as in ``WindowSet.subject``, e.g. ``"Subject03"``) → value as str (e.g. ``"2010"``).

    Raises
    ------
    ValueError
        If the dataset has no registered metadata table, the column does not exist (the message lists the
        columns), a value is missing, or a subject id repeats.
    FileNotFoundError
        If the table is not under the data root.

    References
    ----------
    Paper 000 §2 ("Physiological benchmarks and metadata"), §4.3, Table 23 (minimal provenance schema).
    """
    dataset = get_task(task).dataset
    if dataset not in METADATA_TABLES:
        raise ValueError(f"dataset {dataset!r} (task {task!r}) has no per-subject metadata table; registered: "
                         f"{sorted(METADATA_TABLES)}; fix: add (path, subject column) to METADATA_TABLES")
    rel, id_col = METADATA_TABLES[dataset]
    path = resolve_data_root(data_root) / rel
    if not path.is_file():
        raise FileNotFoundError(f"metadata table {path} not found; fix: put the dataset's {Path(rel).name} there "
                                "or point data_root/EEGFM_DATA at the folder that holds it")
    df = pd.read_csv(path, dtype=str)
    if column not in df.columns or column == id_col:
        raise ValueError(f"{path.name} has no provenance column {column!r}; columns: "
                         f"{[c for c in df.columns if c != id_col]}")
    if df[id_col].duplicated().any():
        raise ValueError(f"{path.name} repeats subjects {df[id_col][df[id_col].duplicated()].tolist()[:5]}")
    empty = df[id_col][df[column].isna()].tolist()
    if empty:
        raise ValueError(f"{path.name}: column {column!r} is empty for subjects {empty[:5]}; fix: fill them or "
                         "drop those subjects before the audit")
    return dict(zip(df[id_col].str.strip(), df[column].str.strip()))


def metadata_provenance(ws: WindowSet, column: str, data_root=None) -> np.ndarray:
    """Observational provenance per window from a subject-level metadata column.

    Parameters
    ----------
    ws : WindowSet
        Windows whose ``subject`` ids appear in the dataset's metadata table.
    column : str
        E.g. ``"Recording year"`` for ``eegmat``.
    data_root : path, optional

    Returns
    -------
    ndarray of str, shape (n_windows,)
        The column's value for each window's subject (e.g. ``"2011"``).

    Raises
    ------
    ValueError
        If a subject of ``ws`` is not in the table (names them), or from :func:`subject_metadata`.
    """
    task = ws.meta.get("task")
    if not task:
        raise ValueError("ws.meta has no 'task'; fix: load the windows with eegfm_bench.data.windows.load_windows")
    table = subject_metadata(task, column, data_root)
    missing = sorted(set(np.unique(ws.subject).tolist()) - set(table))
    if missing:
        raise ValueError(f"subjects {missing[:5]} are not in the {task} metadata table; fix: use the dataset's "
                         "complete subject table")
    return np.array([table[s] for s in np.asarray(ws.subject).tolist()], dtype=str)


def subject_split(subject: Sequence, n_val: int, n_test: int, seed: int = 0,
                  n_train: int | None = None) -> tuple[np.ndarray, dict]:
    """Identity-disjoint train / val / test assignment of whole subjects (seeded permutation).

    Parameters
    ----------
    subject : array-like, shape (n_windows,)
        Subject id per window.
    n_val, n_test : int
        Validation and held-out subjects (each >= 1).
    seed : int
        Seed of the permutation of the sorted subject ids.
    n_train : int, optional
        Training subjects (default: all the rest); subjects beyond ``n_train + n_val + n_test`` are "unused".

    Returns
    -------
    split : ndarray of str, shape (n_windows,)
        ``"train"``, ``"val"``, ``"test"`` or ``"unused"`` per window (the audit's ``split`` argument).
    subjects : dict
        ``{"train": [...], "val": [...], "test": [...]}`` sorted subject ids.

    Raises
    ------
    ValueError
        If a part would be empty or the parts need more subjects than there are.

    References
    ----------
    Paper 000 §3 (identity-disjoint split), App. I (intervals condition on the split).
    """
    subject = np.asarray(subject).astype(str)
    uniq = np.unique(subject)
    n_train = uniq.size - n_val - n_test if n_train is None else n_train
    if min(n_train, n_val, n_test) < 1 or n_train + n_val + n_test > uniq.size:
        raise ValueError(f"cannot split {uniq.size} subjects into train/val/test = {n_train}/{n_val}/{n_test}; "
                         "fix: every part needs >= 1 subject and the parts at most the subjects available")
    perm = np.random.default_rng(seed).permutation(uniq)
    parts = {"train": perm[:n_train], "val": perm[n_train:n_train + n_val],
             "test": perm[n_train + n_val:n_train + n_val + n_test]}
    split = np.full(subject.shape, "unused", dtype="<U6")
    for name, subs in parts.items():
        split[np.isin(subject, subs)] = name
    return split, {k: sorted(v.tolist()) for k, v in parts.items()}
