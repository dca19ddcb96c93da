"""A perturbed view of test windows whose noise depends only on (seed, condition, window)
(docs/guide/architecture.md, "Distributed correctness").

:class:`PerturbedWindows` serves rows of a :class:`~eegfm_bench.data.windows.WindowSet` under one App. D condition
(:mod:`eegfm_bench.perturb.conditions`). Each window draws its noise from its own ``numpy`` Generator, seeded with
the perturbation seed, the condition string and the window's identity ``(recording, window index)``
(:func:`window_uids`; :class:`~eegfm_bench.perturb.rng.WindowRNG`, the ``rng`` every condition's ``apply``
receives); dropout masks and regions are dataset-level (the same for every window). So a window gets
the same perturbation whatever the batch size, the order, the number of DataLoader workers or DDP ranks, and
whichever other windows share its batch: a sweep gives the same rows on 1 or N devices.

Batches are built with ``__getitems__`` (one vectorised call per batch: the filtering runs on the whole batch), and
returned as the DataModule's dicts: ``x`` float32 ``(n_chans_out, n_times)``, ``y``, ``index`` (WindowSet row) and
``error`` (empty, or the error of a condition whose ``apply`` raised, so that the sweep records the failure and
goes on with the other conditions instead of crashing the test loop).

**Prefetch.** With ``num_workers=0`` the perturbation would run between forward passes. :meth:`PerturbedWindows.prefetch`
computes a condition's windows in a background thread instead (numpy's FFT and random draws release the GIL), and
the sweep chains its datasets (``next``): when a condition's first batch is served, the next condition starts
computing and the previous one's windows are released, so the perturbation overlaps the forward passes with at most
three conditions' windows in memory. The values are the same either way (the same per-window generators).
"""
from __future__ import annotations

import hashlib
import traceback
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from eegfm_bench.perturb.conditions import Condition, PerturbContext, format_condition
from eegfm_bench.perturb.rng import WindowRNG


def window_uids(recording: Sequence[str], window_index: Sequence[int]) -> np.ndarray:
    """A stable 64-bit identity per window: the first 8 bytes of sha256(``"<recording>#<window_index>"``).

    Returns
    -------
    ndarray of uint64, shape (n_windows,)
        Independent of the window's position in a WindowSet, so subsets of the data perturb a window alike.
    """
    out = np.empty(len(recording), dtype=np.uint64)
    for i, (r, w) in enumerate(zip(recording, window_index)):
        out[i] = int.from_bytes(hashlib.sha256(f"{r}#{int(w)}".encode()).digest()[:8], "little")
    return out


def output_channels(condition: Condition, ch_names: Sequence[str], ctx: PerturbContext) -> list[str]:
    """The channels a condition's output holds: ``ch_names`` minus the removed ones for ``*_removed`` conditions.

    Raises
    ------
    Exception
        Whatever resolving the condition's mask or region on this montage raises (names the fix).
    """
    if not condition.needs_variable_channels:
        return list(ch_names)
    details = condition.details(ch_names, ctx)
    dropped = set(details.get("dropped", details.get("channels", [])))
    return [c for c in ch_names if c not in dropped]


class PerturbedWindows(Dataset):
    """Rows ``rows`` of a WindowSet under one condition, as DataModule batch dicts.

    Parameters
    ----------
    ws : WindowSet
        Clean windows ``(n_windows, n_chans, n_times)`` in the model's input unit.
    rows : ndarray of int
        WindowSet rows to serve (a fold's test windows).
    condition : Condition
    ctx : PerturbContext
        Dataset, task, filters and perturbation seed.

    Attributes
    ----------
    ch_names : list of str
        Channel names of the perturbed windows (fewer than ``ws.ch_names`` for ``*_removed`` conditions).
    error : str
        Non-empty when the condition could not be applied at all (its message and traceback).
    """

    def __init__(self, ws, rows: np.ndarray, condition: Condition, ctx: PerturbContext):
        self.ws, self.rows = ws, np.asarray(rows, dtype=np.int64)
        self.condition, self.ctx = condition, ctx
        self.uids = window_uids(np.asarray(ws.recording)[self.rows], np.asarray(ws.window_index)[self.rows])
        self.error = ""
        self.ch_names = list(ws.ch_names)
        try:  # the output montage, from the condition's record of what it drops (nothing is applied here)
            self.ch_names = output_channels(condition, list(ws.ch_names), ctx)
        except Exception as err:  # noqa: BLE001  (recorded; the sweep marks this condition failed)
            self.error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        self._shape = (len(self.ch_names), ws.n_times)
        self._future = None
        self.next: "PerturbedWindows | None" = None
        self.prev: "PerturbedWindows | None" = None
        self.executor = None
        self._started = False

    def prefetch(self, executor) -> None:
        """Start computing every window of this condition in ``executor`` (a thread pool); idempotent."""
        if self._future is None and not self.error and len(self.rows):
            self._future = executor.submit(self._perturb_all)

    def release(self) -> None:
        """Drop the prefetched windows (the condition is done)."""
        self._future = None

    def _perturb_all(self, chunk: int = 64) -> np.ndarray:
        parts = [self._perturb_positions(np.arange(s, min(s + chunk, len(self.rows))))
                 for s in range(0, len(self.rows), chunk)]
        return np.concatenate(parts)

    def _perturb_positions(self, pos: np.ndarray) -> np.ndarray:
        rows = self.rows[pos]
        order = np.argsort(rows, kind="stable")  # read the memmap in row order
        X = np.empty((len(rows), len(self.ws.ch_names), self.ws.n_times), dtype=np.float32)
        X[order] = np.asarray(self.ws.X[rows[order]], dtype=np.float32)
        X, _ = self._apply(X, self.uids[pos])
        return np.ascontiguousarray(X, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.rows)

    def _apply(self, X: np.ndarray, uids: np.ndarray):
        rng = WindowRNG.for_windows(self.ctx.seed, format_condition(self.condition), uids)
        return self.condition.perturb(X, list(self.ws.ch_names), rng, self.ctx)

    def __getitems__(self, positions: Sequence[int]) -> list[dict]:
        pos = np.asarray(positions, dtype=np.int64)
        rows = self.rows[pos]
        if not self._started:  # this condition starts: compute the next one meanwhile, free the previous one
            self._started = True
            if self.next is not None and self.executor is not None:
                self.next.prefetch(self.executor)
            if self.prev is not None:
                self.prev.release()
        error, X = self.error, None
        if not error:
            try:
                X = self._future.result()[pos] if self._future is not None else self._perturb_positions(pos)
            except Exception as err:  # noqa: BLE001
                error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        if error:
            X = np.zeros((len(rows),) + tuple(self._shape), dtype=np.float32)
        y = np.asarray(self.ws.y)[rows]
        return [{"x": torch.from_numpy(X[i]), "y": torch.tensor(int(y[i])), "index": torch.tensor(int(rows[i])),
                 "error": error} for i in range(len(rows))]

    def __getitem__(self, i: int) -> dict:
        return self.__getitems__([i])[0]
