"""Paired provenance views: the same windows under several EEG references (paper 000 §3, §4.2, App. E).

A *paired* design shows every window in K provenance views (e.g. the original reference, the common average and
Cz) so that provenance changes while physiology and label stay fixed. This module builds such views from signals
(:func:`make_reference_views`) and pairs long-format embeddings into the ``(n_windows, K, d)`` layout the audit
expects (:func:`pair_views`), refusing view sets that do not cover the same windows.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["make_reference_views", "pair_views", "PairedViews"]


def make_reference_views(X: np.ndarray, ch_names: Sequence[str],
                         views: Sequence[str] = ("original", "average", "Cz")) -> np.ndarray:
    """Re-reference every window into K paired reference views.

    The arithmetic is MNE's ``set_eeg_reference`` applied to every channel of the window:
    ``"average"`` subtracts the mean over all channels at each time sample (``ref_channels="average"``) and a
    channel name subtracts that channel from every channel (``ref_channels=[name]``; the reference channel itself
    becomes 0). ``"original"`` is the signal as recorded.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Windows in the units after preprocessing (e.g. volts); float32 or float64.
    ch_names : sequence of str, length n_chans
        Channel names in the order of ``X``'s second axis (exact, case-sensitive, as MNE requires).
    views : sequence of str
        View names, in output order: ``"original"``, ``"average"`` or any channel name (e.g. ``"Cz"``).

    Returns
    -------
    ndarray, shape (n_windows, K, n_chans, n_times)
        ``K = len(views)``, same dtype and units as ``X``.

    Raises
    ------
    ValueError
        If ``X`` is not 3-D, ``ch_names`` does not match ``n_chans`` or has duplicates, ``views`` is empty or
        repeats a name, or a view names a channel that ``ch_names`` lacks (the message names the channel and
        close matches).

    References
    ----------
    Paper 000 (PhysioTRACE) §4.2 and App. E: paired reference views of the same records.
    """
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"X must be (n_windows, n_chans, n_times), got shape {X.shape}; "
                         "fix: stack the windows of one montage into a 3-D array")
    if not np.issubdtype(X.dtype, np.floating):
        raise ValueError(f"X must be a float array, got {X.dtype}; fix: X.astype(np.float32)")
    ch_names = list(ch_names)
    if len(ch_names) != X.shape[1]:
        raise ValueError(f"{len(ch_names)} channel names for {X.shape[1]} channels; "
                         "fix: pass the ch_names of X's second axis, in order")
    if len(set(ch_names)) != len(ch_names):
        dup = sorted({c for c in ch_names if ch_names.count(c) > 1})
        raise ValueError(f"duplicate channel names {dup}; fix: rename channels before re-referencing")
    views = list(views)
    if not views:
        raise ValueError("views is empty; fix: pass e.g. views=('original', 'average', 'Cz')")
    if len(set(views)) != len(views):
        raise ValueError(f"views repeat a name: {views}; fix: list each view once")
    out = np.empty((X.shape[0], len(views)) + X.shape[1:], dtype=X.dtype)
    for k, view in enumerate(views):
        if view == "original":
            out[:, k] = X
        elif view == "average":
            out[:, k] = X - X.mean(axis=1, keepdims=True)
        elif view in ch_names:
            i = ch_names.index(view)
            out[:, k] = X - X[:, i:i + 1, :]
        else:
            close = difflib.get_close_matches(view, ch_names, n=3, cutoff=0.5)
            close += [c for c in ch_names if c.lower() == view.lower() and c not in close]
            raise ValueError(f"reference view {view!r} needs channel {view!r}, which this montage lacks"
                             + (f" (close: {close})" if close else "")
                             + "; fix: choose views among 'original', 'average' or a channel in ch_names")
    return out


@dataclass
class PairedViews:
    """Embeddings paired across provenance views.

    Attributes
    ----------
    emb : ndarray, shape (n_windows, K, d)
    views : tuple of str, length K
        View (provenance) label of each slot of axis 1.
    rows : ndarray of int, shape (n_windows, K)
        Row of the long-format input each entry came from.
    """

    emb: np.ndarray
    views: tuple
    rows: np.ndarray


def pair_views(emb: np.ndarray, provenance: Sequence, record: Sequence,
               views: Sequence | None = None) -> PairedViews:
    """Pair long-format rows into views of the same windows.

    Row ``j`` of view ``v`` for record ``r`` is the ``j``-th row (in input order) with provenance ``v`` and
    record ``r``; every view must hold exactly the same records with the same number of windows each.

    Parameters
    ----------
    emb : ndarray, shape (n_rows, d)
        One embedding per (window, view).
    provenance : array-like, shape (n_rows,)
        View label per row.
    record : array-like, shape (n_rows,)
        Record id per row.
    views : sequence, optional
        View order of the output (default: sorted labels).

    Returns
    -------
    PairedViews
        ``emb`` of shape ``(n_windows, K, d)``.

    Raises
    ------
    ValueError
        If there are fewer than two views, ``views`` names a label absent from ``provenance``, or the views do
        not cover the same records with the same window counts (the message names the first mismatching
        view and records).

    References
    ----------
    Paper 000 App. A.2–A.3: paired views hold physiology and label fixed while provenance changes.
    """
    emb = np.asarray(emb)
    prov = np.asarray(provenance)
    rec = np.asarray(record)
    if emb.ndim != 2 or prov.shape != (emb.shape[0],) or rec.shape != (emb.shape[0],):
        raise ValueError(f"pair_views needs emb (n_rows, d) with provenance and record of shape (n_rows,); got "
                         f"{emb.shape}, {prov.shape}, {rec.shape}")
    labels = np.unique(prov).tolist() if views is None else list(views)
    missing = [v for v in labels if not np.any(prov == v)]
    if missing:
        raise ValueError(f"views {missing} have no rows; fix: pass views among {sorted(set(prov.tolist()))}")
    if len(labels) < 2:
        raise ValueError(f"paired views need at least two provenance views, got {labels}; "
                         "fix: add a second reference view (e.g. 'average') or use the observational design")
    per_view = {}
    for v in labels:
        rows = np.flatnonzero(prov == v)
        r_ids, counts = np.unique(rec[rows], return_counts=True)
        per_view[v] = (rows, dict(zip(r_ids.tolist(), counts.tolist())))
    ref_v = labels[0]
    ref_counts = per_view[ref_v][1]
    for v in labels[1:]:
        counts = per_view[v][1]
        only_ref = sorted(set(ref_counts) - set(counts))
        only_v = sorted(set(counts) - set(ref_counts))
        diff_n = sorted(r for r in set(counts) & set(ref_counts) if counts[r] != ref_counts[r])
        if only_ref or only_v or diff_n:
            raise ValueError(
                f"views are not paired: view {v!r} vs {ref_v!r} — records only in {ref_v!r}: {only_ref[:5]}, "
                f"only in {v!r}: {only_v[:5]}, different window counts: {diff_n[:5]}; fix: compute every view "
                "from the same windows of the same records (e.g. with make_reference_views) before embedding")
    rec_order = sorted(ref_counts)
    index = np.empty((sum(ref_counts.values()), len(labels)), dtype=np.int64)
    for k, v in enumerate(labels):
        rows = per_view[v][0]
        by_rec = {}
        for j in rows:  # input order within each record
            by_rec.setdefault(rec[j].item() if hasattr(rec[j], "item") else rec[j], []).append(j)
        index[:, k] = np.concatenate([by_rec[r] for r in rec_order])
    return PairedViews(emb=emb[index], views=tuple(labels), rows=index)
