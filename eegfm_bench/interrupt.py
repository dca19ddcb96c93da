"""Ctrl-C (SIGINT) and SIGTERM as an instruction: stop at the next safe point, keep what is finished, exit 130
(ground floor: it imports nothing of the package).

The console script installs :func:`stop_on_signals` around every command. The first signal is recorded
(:func:`stop_requested`) and raised as :class:`StopRequested` (a ``KeyboardInterrupt``, so no ``except
Exception`` of a cell or unit catches it):

* inside a :func:`deferred` section — a cv cell, whose fit has Lightning write checkpoints in place — the signal is
  only recorded, and raised at the section's next safe point: the next batch end of the fit
  (:class:`eegfm_bench.callbacks.stop.StopAtSafePoint`), where Lightning's own handling takes over
  (``trainer.interrupted``; ``last.ckpt`` of the last finished epoch is intact and a rerun resumes from it), or the
  boundary before the next cell;
* outside them at once — every file the package writes is published by an atomic rename (:mod:`eegfm_bench.locks`),
  so a stop between two statements leaves the old file or the new one;
* and, should a library swallow that ``KeyboardInterrupt`` (a finalizer: ``Exception ignored in ...``), at the next
  boundary between cells, folds or units of the command loops (:func:`check_stop`): a recorded stop is never lost.

The command loop that stops writes what is finished (the rows of the finished cells, the summary) and raises
:class:`StopRequested` with what it kept; the console script prints one line — the signal, what was kept, the
command that resumes — and exits with status 130. A second signal stops at once, without the safe point.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_STOPPED = 130
"""The exit status of a stopped command (128 + SIGINT, the shell's convention)."""


class StopRequested(KeyboardInterrupt):
    """A stop asked for by SIGINT / SIGTERM, raised at a safe point.

    Attributes
    ----------
    kept : str or None
        What the stopped command kept (set by the loop that stopped: e.g. ``the rows of 2 of 6 cells in
        results/x/results.csv``).
    """

    def __init__(self, message: str = "", kept: Optional[str] = None):
        super().__init__(message)
        self.kept = kept


_STATE = {"signal": None, "deferred": 0}


def stop_requested() -> Optional[str]:
    """The name of the signal that asked this process to stop (``SIGINT``, ``SIGTERM``), or None."""
    return _STATE["signal"]


def check_stop() -> None:
    """A safe point: raise :class:`StopRequested` if a stop was asked for (even if its first ``KeyboardInterrupt``
    was swallowed by a library).

    Raises
    ------
    StopRequested
        A signal of :data:`STOP_SIGNALS` arrived.
    """
    if _STATE["signal"] is not None:
        raise StopRequested(f"stopped by {_STATE['signal']}")


def _on_signal(signum, frame) -> None:
    name = signal.Signals(signum).name
    if _STATE["signal"] is not None:  # a second signal: at once
        raise StopRequested(f"stopped by a second {name}")
    _STATE["signal"] = name
    if _STATE["deferred"] == 0:
        raise StopRequested(f"stopped by {name}")


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A critical section: a first signal inside it is only recorded; the section's safe points
    (:func:`check_stop`) raise it."""
    _STATE["deferred"] += 1
    try:
        yield
    finally:
        _STATE["deferred"] -= 1


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as stop requests for the ``with`` block (the console script's command), then put
    the previous handlers back (also those Lightning changes while it shuts a fit down)."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _STATE.update(signal=None, deferred=0)
    for s in STOP_SIGNALS:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def reset() -> None:
    """Forget a recorded stop (a new command in the same process)."""
    _STATE.update(signal=None, deferred=0)


__all__ = ["EXIT_STOPPED", "STOP_SIGNALS", "StopRequested", "check_stop", "deferred", "reset", "stop_on_signals",
           "stop_requested"]
