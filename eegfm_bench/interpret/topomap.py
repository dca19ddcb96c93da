"""Topographic maps of per-channel values (relevance, attention) with ``mne.viz.plot_topomap``.

Positions come from MNE's standard 10-05 montage (:func:`eegfm_bench.data.montage.make_info`); a channel
without a position is an error that names it (no silent dropping).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import mne
import numpy as np
from matplotlib.figure import Figure

from eegfm_bench.atomic import atomic_path
from eegfm_bench.data.montage import make_info, standard_1005


class TopomapError(ValueError):
    """Channels without 10-05 positions, or values that do not match the channels."""


def check_positions(ch_names: Sequence[str]) -> None:
    """Raise :class:`TopomapError` naming every channel without a standard 10-05 position."""
    pos = standard_1005().get_positions()["ch_pos"]
    missing = [c for c in ch_names if c not in pos]
    if missing:
        raise TopomapError(f"no 10-05 position for channels {missing}; a topomap needs positions for every channel; "
                           "fix: rename them to canonical 10-05 names (eegfm_bench.data.montage.canonical_names) or "
                           "drop them from the task")


def plot_topomap_grid(rows: dict[str, np.ndarray], ch_names: Sequence[str] | dict[str, Sequence[str]],
                      path: str | Path, *, col_titles: Sequence[str] | None = None, title: str | None = None,
                      cmap: str = "Reds", shared_scale: str = "row", unit: str = "") -> Path:
    """A grid of topomaps: one row per entry of ``rows``, one column per map.

    Parameters
    ----------
    rows : dict of str → ndarray, shape (n_cols, n_chans) or (n_chans,)
        Row label → per-channel values (e.g. blocks × channels of attention, or one relevance map).
    ch_names : sequence of str, or dict of row label → sequence of str
        Channel names of the last axis (one montage, or one per row when channels were removed).
    path : path
        PNG to write.
    col_titles : sequence of str, optional
        Column titles (e.g. ``block 0`` …).
    shared_scale : {"row", "all", "map"}
        Colour limits shared by each row, by the whole grid, or per map.
    unit : str
        Colour-bar label.

    Returns
    -------
    Path

    Raises
    ------
    TopomapError
        A channel without a position, or a row whose last axis does not match its channel names.
    """
    if shared_scale not in ("row", "all", "map"):
        raise ValueError(f"shared_scale must be 'row', 'all' or 'map', got {shared_scale!r}")
    data = {k: np.atleast_2d(np.asarray(v, dtype=float)) for k, v in rows.items()}
    names = {k: list(ch_names[k] if isinstance(ch_names, dict) else ch_names) for k in data}
    infos = {}
    for k, v in data.items():
        check_positions(names[k])
        if v.shape[-1] != len(names[k]):
            raise TopomapError(f"row {k!r} has {v.shape[-1]} values per map but {len(names[k])} channel names")
        key = tuple(names[k])
        if key not in infos:
            infos[key] = make_info(names[k], 100.0)
    n_rows, n_cols = len(data), max(v.shape[0] for v in data.values())
    fig = Figure(figsize=(1.9 * n_cols + 1.2, 2.0 * n_rows + 0.5))  # no pyplot: the user's backend is left alone
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    all_vals = np.concatenate([v.ravel() for v in data.values()])
    for r, (label, v) in enumerate(data.items()):
        info = infos[tuple(names[label])]
        lo_row, hi_row = np.nanmin(v), np.nanmax(v)
        im = None
        for c in range(n_cols):
            ax = axes[r, c]
            if c >= v.shape[0]:
                ax.axis("off")
                continue
            if shared_scale == "all":
                vlim = (np.nanmin(all_vals), np.nanmax(all_vals))
            elif shared_scale == "row":
                vlim = (lo_row, hi_row)
            else:
                vlim = (np.nanmin(v[c]), np.nanmax(v[c]))
            if vlim[0] == vlim[1]:
                vlim = (vlim[0] - 1e-12, vlim[1] + 1e-12)
            im, _ = mne.viz.plot_topomap(v[c], info, axes=ax, show=False, cmap=cmap, vlim=vlim, contours=0,
                                         sensors=True)
            if r == 0 and col_titles is not None and c < len(col_titles):
                ax.set_title(col_titles[c], fontsize=8)
        axes[r, 0].text(-0.25, 0.5, label, transform=axes[r, 0].transAxes, rotation=90, va="center", ha="center",
                        fontsize=8)
        if im is not None and shared_scale != "map":
            cb = fig.colorbar(im, ax=axes[r, :].tolist(), shrink=0.7, pad=0.01)
            cb.ax.tick_params(labelsize=6)
            if unit:
                cb.set_label(unit, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp_file:
        fig.savefig(tmp_file, format=Path(path).suffix[1:], dpi=120, bbox_inches="tight")
    return path
