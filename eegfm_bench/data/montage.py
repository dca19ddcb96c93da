"""Channel names and positions: normalisation to standard 10-05 names (MNE ``standard_1005`` montage).

Every dataset's channels are renamed to the canonical spelling of MNE's ``standard_1005`` montage
(``'FP1'``, ``'EEG Fp1'``, ``'Fp1.'`` → ``'Fp1'``) so that backbone channel contracts, region lists
(paper 003 App. D.3) and topomaps all match by name.
"""
from __future__ import annotations

import re
from functools import lru_cache

import mne
import numpy as np


class ChannelNameError(ValueError):
    """A channel name that is not a standard 10-05 electrode."""


@lru_cache(maxsize=1)
def standard_1005() -> mne.channels.DigMontage:
    """MNE's standard 10-05 montage (ships with MNE; no download).

    MNE ≥ 1.13 calls it ``colin27_1005`` (same 343 names and positions as the deprecated ``standard_1005``).
    """
    name = "colin27_1005" if "colin27_1005" in mne.channels.get_builtin_montages() else "standard_1005"
    return mne.channels.make_standard_montage(name)


@lru_cache(maxsize=1)
def _canonical() -> dict[str, str]:
    return {n.lower(): n for n in standard_1005().ch_names}


def canonical_name(name: str) -> str:
    """Canonical 10-05 spelling of one channel name.

    Strips common prefixes/suffixes (``'EEG '``, ``'-REF'``, ``'-LE'``, trailing dots) and matches
    case-insensitively against MNE's ``standard_1005`` montage. Old 10-20 names T3/T4/T5/T6 map to
    T7/T8/P7/P8 as in MNE.

    Raises
    ------
    ChannelNameError
        If the name is not a 10-05 electrode after normalisation.
    """
    n = name.strip()
    n = re.sub(r"^(EEG|eeg)[\s_-]+", "", n)
    n = re.sub(r"[-_ ](REF|Ref|ref|LE|AR|A1|A2|M1|M2)$", "", n)
    n = n.rstrip(".").strip()
    old = {"t3": "T7", "t4": "T8", "t5": "P7", "t6": "P8"}
    key = old.get(n.lower(), n).lower()
    canon = _canonical().get(key)
    if canon is None:
        raise ChannelNameError(
            f"channel {name!r} is not a standard 10-05 electrode (normalised to {n!r}); "
            "fix: drop it in the task's `exclude` list or rename it to its 10-05 name"
        )
    return canon


def canonical_names(names: list[str]) -> list[str]:
    """Vectorised :func:`canonical_name`; raises on duplicates after normalisation."""
    out = [canonical_name(n) for n in names]
    if len(set(out)) != len(out):
        dup = sorted({n for n in out if out.count(n) > 1})
        raise ChannelNameError(f"channels {dup} appear twice after normalisation; fix: drop the duplicates")
    return out


def positions(names: list[str]) -> np.ndarray:
    """3-D head positions in metres, shape ``(n_chans, 3)``, from MNE's ``standard_1005`` montage.

    Raises
    ------
    ChannelNameError
        Naming every channel without a position.
    """
    pos = standard_1005().get_positions()["ch_pos"]
    missing = [n for n in names if n not in pos]
    if missing:
        raise ChannelNameError(f"no 10-05 position for channels {missing}; fix: rename them with canonical_names()")
    return np.stack([pos[n] for n in names]).astype(np.float64)


def make_info(names: list[str], sfreq: float) -> mne.Info:
    """An ``mne.Info`` for EEG channels ``names`` at ``sfreq`` Hz with standard 10-05 positions (for topomaps)."""
    info = mne.create_info(list(names), sfreq, ch_types="eeg")
    info.set_montage(standard_1005(), on_missing="raise")
    return info
