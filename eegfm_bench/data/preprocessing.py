"""MNE preprocessing declared by each backbone and applied per recording.

Each backbone adapter declares a :class:`Preprocessing` (sampling rate, band, amplitude scaling, window
length) taken from its paper or braindecode's docs; the task adds the mains frequency. The applied
parameters are stored with every cached window set and every result (``applied_preprocessing``).

Order (per recording, on an ``mne.io.Raw`` in volts): mains notch → band-pass (FIR, MNE defaults) →
common average reference → resample to the backbone's rate → cut windows → multiply by ``scale``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import mne


@dataclass(frozen=True)
class Preprocessing:
    """Signal preprocessing a backbone expects.

    Parameters
    ----------
    sfreq : float
        Target sampling rate in Hz (raw data are resampled to it with ``mne.io.Raw.resample``).
    l_freq, h_freq : float or None
        Band-pass edges in Hz (``None`` disables that edge). ``h_freq`` is lowered to 0.45·min(native
        sfreq, target sfreq) when the data cannot carry it; the applied value is recorded.
    scale : float
        Multiplier from volts to the model's input unit (1e6 → µV; 1e4 → units of 100 µV = 0.1 mV as
        LaBraM and CBraMod expect).
    unit : str
        Name of the resulting unit, stored with results (e.g. ``"µV"``, ``"100 µV"``).
    window_s : float
        Window length in seconds.
    reference : str
        ``"average"`` (common average reference, paper 003 §3) or ``"none"``.
    source : str
        Where the values come from (paper / braindecode docs), stored with results.
    """

    sfreq: float
    l_freq: float | None = 0.5
    h_freq: float | None = 45.0
    scale: float = 1e6
    unit: str = "µV"
    window_s: float = 4.0
    reference: str = "average"
    source: str = ""

    @property
    def n_times(self) -> int:
        """Window length in samples at the target rate."""
        return int(round(self.window_s * self.sfreq))

    def to_dict(self) -> dict:
        """JSON-serialisable parameters."""
        return asdict(self)


def apply_preprocessing(raw: mne.io.BaseRaw, prep: Preprocessing, line_freq: float | None) -> tuple[mne.io.BaseRaw, dict]:
    """Notch, band-pass, re-reference and resample one recording in place (MNE throughout).

    Parameters
    ----------
    raw : mne.io.Raw
        Preloaded EEG-only recording in volts with canonical 10-05 channel names.
    prep : Preprocessing
        The backbone's declared preprocessing.
    line_freq : float or None
        Mains frequency in Hz (60 EEGMMIDB, 50 eegmat); ``None`` skips the notch.

    Returns
    -------
    raw : mne.io.Raw
        The processed recording (same object).
    applied : dict
        The parameters actually applied (after Nyquist capping), stored with the results.
    """
    native = float(raw.info["sfreq"])
    nyq_limit = 0.45 * min(native, prep.sfreq)
    h = prep.h_freq
    if h is not None and h > nyq_limit:
        h = round(nyq_limit, 2)
    applied = {"native_sfreq": native, "sfreq": prep.sfreq, "l_freq": prep.l_freq, "h_freq": h,
               "notch": None, "reference": prep.reference, "scale": prep.scale, "unit": prep.unit,
               "window_s": prep.window_s, "source": prep.source}
    if line_freq is not None and line_freq < native / 2:
        raw.notch_filter(line_freq, verbose="warning")
        applied["notch"] = line_freq
    if prep.l_freq is not None or h is not None:
        raw.filter(prep.l_freq, h, verbose="warning")
    if prep.reference == "average":
        raw.set_eeg_reference("average", projection=False, verbose="warning")
    elif prep.reference != "none":
        raise ValueError(f"unknown reference {prep.reference!r}; valid: 'average', 'none'")
    if abs(native - prep.sfreq) > 1e-6:
        raw.resample(prep.sfreq, verbose="warning")
    return raw, applied
