"""Third-party deprecation chatter hidden the same way in the CLI and the Python API.

Ground floor: imports nothing from the package and nothing heavy. :data:`THIRD_PARTY_WARNINGS` is the one list of
what is hidden: deprecations raised inside dependencies (braindecode's montage names, Lightning's pytree check,
wfdb's pandas call) about their own code, which a user can neither act on nor silence otherwise. The CLI installs
the filters for its process (:func:`install_filters`); every callable of the public API (``eegfm_bench.<name>``)
runs inside :func:`quiet_third_party_warnings`, so a notebook sees what a command line shows and keeps its own
filters after the call. Warnings about the user's data or config are never in this list.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)

THIRD_PARTY_WARNINGS: tuple[dict, ...] = (
    {"category": FutureWarning, "module": r"braindecode\..*"},
    {"message": r".*Montage name 'standard_10(20|05)' is deprecated.*"},
    {"message": r".*isinstance\(treespec, LeafSpec\).*"},
    {"message": r".*inplace keyword in DataFrame.set_index.*"},
)
"""The ``warnings.filterwarnings`` arguments (action ``ignore``) of the hidden third-party warnings."""


def install_filters() -> None:
    """Add the :data:`THIRD_PARTY_WARNINGS` filters to the process's warning filters (the CLI's process)."""
    for kw in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", **kw)


@contextlib.contextmanager
def quiet_third_party_warnings() -> Iterator[None]:
    """Within the block, the :data:`THIRD_PARTY_WARNINGS` are hidden; the caller's filters are restored after it
    (``warnings.catch_warnings``: process-wide while the block runs, as every warning filter is)."""
    with warnings.catch_warnings():
        install_filters()
        yield


def quiet(fn: F) -> F:
    """``fn`` run inside :func:`quiet_third_party_warnings` (same name, docstring and signature)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with quiet_third_party_warnings():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
