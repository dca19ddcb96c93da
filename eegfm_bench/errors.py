"""The one user-error base class (DESIGN.md "one error policy", ground floor: it imports nothing of the package).

Every error a user can cause — a config key, a name, missing or bad data, a channel contract, an unsupported method —
derives from :class:`EEGFMError` (directly, or through the domain class that carries it: ``ConfigError``,
``IngestError``, ``ChannelContractError``, ...). The console script prints such an error as one block,
``eegfm-bench <command>: <Error>: <message>``, and exits with status 2; its message names the fix. Anything else is a
bug and keeps its traceback.
"""
from __future__ import annotations


class EEGFMError(Exception):
    """Base of every error about the user's input; the message says what is wrong and how to fix it."""


class UnsupportedMethodError(EEGFMError, ValueError):
    """A backbone has no implementation for the requested interpretability method (AttnLRP patch map, GradCAM
    layer); the message lists the methods it supports."""


__all__ = ["EEGFMError", "UnsupportedMethodError"]
