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

    Strips common prefixes/suffixes (``'EEG '``, ``'-REF'``, ``'-LE'``, ``'-AVG'``, ``'-M1'``, trailing dots) and matches
    case-insensitively against MNE's ``standard_1005`` montage. Old 10-20 names T3/T4/T5/T6 map to
    T7/T8/P7/P8 as in MNE.

    Raises
    ------
    ChannelNameError
        If the name is not a 10-05 electrode after normalisation.
    """
    n = name.strip()
    n = re.sub(r"^(EEG|eeg)[\s_-]+", "", n)
    stripped = re.sub(r"[-_ ](REF|Ref|ref|LE|AR|A1|A2|M1|M2|AVG|Avg|avg)$", "", n)
    if stripped.upper() not in ("A1", "A2", "M1", "M2") or n.upper().endswith(("-REF", " REF", "_REF")):
        n = stripped  # but "A2-A1" is an ear-to-ear derivation, not electrode A2
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


# --------------------------------------------------------------------------------------- bipolar montages
class MissingElectrodesError(ChannelNameError):
    """A montage lacks electrodes that a derivation or a channel contract needs.

    Attributes
    ----------
    missing : list of str
        The missing electrode names (canonical 10-05 spelling), in the order they are needed.
    """

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = list(missing)


BIOT_BIPOLAR_16: tuple[tuple[str, str], ...] = (
    ("Fp1", "F7"), ("F7", "T7"), ("T7", "P7"), ("P7", "O1"),
    ("Fp2", "F8"), ("F8", "T8"), ("T8", "P8"), ("P8", "O2"),
    ("Fp1", "F3"), ("F3", "C3"), ("C3", "P3"), ("P3", "O1"),
    ("Fp2", "F4"), ("F4", "C4"), ("C4", "P4"), ("P4", "O2"),
)
"""The 16 longitudinal bipolar (double-banana, TCP) derivations in BIOT's channel-token order.

Source: braindecode 1.8.1 ``braindecode/models/biot.py`` ``BIOT_CHANNEL_ORDER`` (from github.com/ycq091044/BIOT,
README and ``datasets/TUAB/process.py``): FP1-F7, F7-T7, T7-P7, P7-O1, FP2-F8, F8-T8, T8-P8, P8-O2, FP1-F3, F3-C3,
C3-P3, P3-O1, FP2-F4, F4-C4, C4-P4, P4-O2 (T7/T8/P7/P8 are the modern names of T3/T4/T5/T6). Each pair is
(anode, cathode): the derivation is ``V(anode) - V(cathode)``."""

BIOT_BIPOLAR_18: tuple[tuple[str, str], ...] = BIOT_BIPOLAR_16 + (("C3", "A2"), ("C4", "A1"))
""":data:`BIOT_BIPOLAR_16` followed by the two SHHS differential channels C3-A2 and C4-A1, the 18-token order of
BIOT's ``shhs-prest-18chs`` and ``six-datasets-18chs`` checkpoints (same source)."""


def bipolar_names(pairs) -> list[str]:
    """Names ``"Fp1-F7"`` of bipolar derivations ``[(anode, cathode), ...]``."""
    return [f"{a}-{c}" for a, c in pairs]


def bipolar_matrix(ch_names: list[str], pairs) -> np.ndarray:
    """Derivation matrix ``D`` with ``bipolar = D @ monopolar``, shape ``(n_pairs, n_chans)``.

    Row ``k`` holds ``+1`` at the anode of pair ``k`` and ``-1`` at its cathode, so each derivation is an exact
    named subtraction (paper 001 §3.1: "We construct and order the first 16 by named subtraction").

    Parameters
    ----------
    ch_names : list of str
        The monopolar montage (canonical 10-05 names; matched case-insensitively).
    pairs : sequence of (str, str)
        ``(anode, cathode)`` electrode names, e.g. :data:`BIOT_BIPOLAR_16`.

    Returns
    -------
    ndarray of float64, shape (n_pairs, n_chans)

    Raises
    ------
    MissingElectrodesError
        Naming every electrode the pairs need that ``ch_names`` lacks, and the derivations that need them.
    ValueError
        If ``ch_names`` holds a name twice (case-insensitively): the subtraction would be ambiguous.
    """
    lower = [c.lower() for c in ch_names]
    if len(set(lower)) != len(lower):
        dup = sorted({c for c in ch_names if lower.count(c.lower()) > 1})
        raise ValueError(f"bipolar_matrix: channels {dup} appear twice; fix: drop the duplicates")
    index = {c: i for i, c in enumerate(lower)}
    missing: list[str] = []
    for a, c in pairs:
        for e in (a, c):
            if e.lower() not in index and e not in missing:
                missing.append(e)
    if missing:
        need = [f"{a}-{c}" for a, c in pairs if a in missing or c in missing]
        raise MissingElectrodesError(
            f"the montage lacks electrodes {missing} needed for the bipolar derivations {need} (it has "
            f"{list(ch_names)}); fix: use a dataset that records them, or drop those derivations", missing)
    D = np.zeros((len(pairs), len(ch_names)), dtype=np.float64)
    for k, (a, c) in enumerate(pairs):
        D[k, index[a.lower()]] += 1.0
        D[k, index[c.lower()]] -= 1.0
    return D


def bipolar_derivations(x, ch_names: list[str], pairs):
    """Bipolar derivations of monopolar signals by named subtraction.

    Parameters
    ----------
    x : ndarray or torch.Tensor, shape (..., n_chans, n_times)
        Monopolar signals in any unit (the derivations keep it).
    ch_names : list of str
        Names of ``x``'s channel axis.
    pairs : sequence of (str, str)
        ``(anode, cathode)`` pairs, e.g. :data:`BIOT_BIPOLAR_16`.

    Returns
    -------
    same type as ``x``, shape (..., n_pairs, n_times)
        ``out[..., k, :] = x[..., anode_k, :] - x[..., cathode_k, :]`` exactly (a gather and a subtraction,
        no matrix product, so no rounding beyond the subtraction itself).

    Raises
    ------
    MissingElectrodesError
        See :func:`bipolar_matrix`.
    """
    bipolar_matrix(ch_names, pairs)  # validates and names missing electrodes
    index = {c.lower(): i for i, c in enumerate(ch_names)}
    anodes = [index[a.lower()] for a, _ in pairs]
    cathodes = [index[c.lower()] for _, c in pairs]
    return x[..., anodes, :] - x[..., cathodes, :]
