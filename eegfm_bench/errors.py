"""The one user-error base class (one error policy; ground floor: it imports nothing of the package).

Every error a user can cause — a config key, a name, missing or bad data, a channel contract, an unsupported method —
derives from :class:`EEGFMError` (directly, or through the domain class that carries it: ``ConfigError``,
``IngestError``, ``ChannelContractError``, ...). The console script prints such an error as one block,
``eegfm-bench <command>: <Error>: <message>``, and exits with status 2; its message names the fix. Anything else is a
bug and keeps its traceback — except a built-in ``ValueError`` / ``FileNotFoundError`` / ``KeyError`` /
``RuntimeError`` raised by this package with a ``fix:`` in its message (:func:`is_user_error`): those were written
for the user too, and get the same one-line treatment.
"""
from __future__ import annotations


class EEGFMError(Exception):
    """Base of every error about the user's input; the message says what is wrong and how to fix it."""


class NotAResultFolderError(EEGFMError, FileNotFoundError):
    """A folder given to a command that reads results (``status``, ``report``, ``confound --cv``) holds none."""


class OutsideFolderError(EEGFMError, FileNotFoundError):
    """A result row names a file outside the folder it was read from (a results folder is self-contained: its rows
    name files by their path inside it); the message names the row's path, the folder and the fix."""


class UnsupportedMethodError(EEGFMError, ValueError):
    """A backbone has no implementation for the requested interpretability method (AttnLRP patch map, GradCAM
    layer); the message lists the methods it supports."""


def is_user_error(err: BaseException) -> bool:
    """Whether ``err`` is about the user's input: an :class:`EEGFMError` (or any exception class defined in
    ``eegfm_bench``), or a built-in error this package raised whose message names the fix (``fix:``)."""
    if any(getattr(c, "__module__", "").startswith("eegfm_bench") for c in type(err).__mro__):
        return True
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    raised_here = tb is not None and "eegfm_bench" in tb.tb_frame.f_code.co_filename
    return raised_here and isinstance(err, (ValueError, FileNotFoundError, KeyError, RuntimeError)) \
        and "fix:" in str(err)


__all__ = ["EEGFMError", "NotAResultFolderError", "OutsideFolderError", "UnsupportedMethodError", "is_user_error"]
