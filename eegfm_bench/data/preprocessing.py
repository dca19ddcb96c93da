"""MNE preprocessing declared by each backbone and applied per recording.

Each backbone adapter declares a :class:`Preprocessing` (sampling rate, band, amplitude scaling, window
length) taken from its paper or braindecode's docs; the task adds the mains frequency. The applied
parameters are stored with every cached window set and every result (``applied_preprocessing``).

Order (per recording, on an ``mne.io.Raw`` in volts): mains notch → band-pass (FIR, MNE defaults) → resample to
the backbone's rate (polyphase) → cut windows → multiply by ``scale``; then, once every channel selection is done
(montage intersection, :mod:`eegfm_bench.data.windows`), the common average reference over the *final* channel set
(:func:`reference_windows`). The reference is linear and per sample, so applying it to the windows equals applying
it to the continuous recording over the same channels; applying it last is what keeps one reference per window set
(the "The same signal gives the same window" contract, docs/guide/architecture.md).

**Why polyphase.** ``mne.io.Raw.resample``'s default FFT method resamples the whole recording at once, so each
output sample depends on the recording's length: an EEGMMIDB run cut to 11,680 samples and resampled from 160 to
128 Hz gives windows that correlate 0.90-0.97 with the full run's. Polyphase filtering (``method="polyphase"``,
``scipy.signal.resample_poly`` with a Kaiser window) computes each output sample from the input samples around it.
MNE derives its up / down factors from the lengths (``final_len / n_times`` reduced), so a recording whose length is
not a multiple of the rate ratio's denominator (5 for 160 → 128 Hz, 4 for 160 → 200 Hz) would get another,
length-dependent ratio; the last ``n_times mod down`` samples (fewer than ``down``: under 31 ms at 160 Hz) are
therefore dropped first, with a line in the ingest report, and the factors are then exactly the rates' ratio. A
window away from the recording's edges is then the same whatever the length of the file it was cut from (measured
on EEGMMIDB runs cut to 9,999-15,001 samples: largest difference 3e-19 V at 128, 200 and 256 Hz, correlation
1.000000). The method is recorded in the preprocessing provenance and enters the window cache key.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction

import mne
import numpy as np


@dataclass(frozen=True)
class Preprocessing:
    """Signal preprocessing a backbone expects.

    Parameters
    ----------
    sfreq : float
        Target sampling rate in Hz (raw data are resampled to it with ``mne.io.Raw.resample``, ``resample`` method).
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
    resample : {"polyphase", "fft"}
        ``mne.io.Raw.resample`` method. ``polyphase`` (default) makes a window independent of the recording's
        length (module docstring); ``fft`` is MNE's default, kept for comparison with pipelines that use it.
    """

    sfreq: float
    l_freq: float | None = 0.5
    h_freq: float | None = 45.0
    scale: float = 1e6
    unit: str = "µV"
    window_s: float = 4.0
    reference: str = "average"
    source: str = ""
    resample: str = "polyphase"

    @property
    def n_times(self) -> int:
        """Window length in samples at the target rate."""
        return int(round(self.window_s * self.sfreq))

    def to_dict(self) -> dict:
        """JSON-serialisable parameters."""
        return asdict(self)


def apply_preprocessing(raw: mne.io.BaseRaw, prep: Preprocessing, line_freq: float | None) -> tuple[mne.io.BaseRaw, dict]:
    """Notch, band-pass and resample one recording in place (MNE throughout); the reference comes later.

    The common average reference is *not* applied here: it is computed over the window set's final channels by
    :func:`reference_windows` (module docstring), so that no later channel selection leaves a common-mode offset.

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
        The parameters actually applied (after Nyquist capping), stored with the results; ``reference`` is the
        declared one (applied by :func:`reference_windows`).

    Raises
    ------
    ValueError
        An unknown ``prep.reference`` or ``prep.resample``.
    """
    raw, applied = filter_native(raw, prep, line_freq)
    return resample_to(raw, prep, applied), applied


def capped_band(prep: Preprocessing, native: float) -> tuple[float | None, float | None]:
    """The band-pass ``(l_freq, h_freq)`` in Hz that :func:`filter_native` applies to a recording at ``native`` Hz:
    ``h_freq`` capped at 0.45 × the lower of the native and the target rate (below both Nyquist frequencies)."""
    h = prep.h_freq
    nyq_limit = 0.45 * min(native, prep.sfreq)
    if h is not None and h > nyq_limit:
        h = round(nyq_limit, 2)
    return prep.l_freq, h


def filter_native(raw: mne.io.BaseRaw, prep: Preprocessing, line_freq: float | None) -> tuple[mne.io.BaseRaw, dict]:
    """The part of :func:`apply_preprocessing` at the native rate: :func:`notch_native` then
    :func:`bandpass_native`, in place. A recording read once for several preprocessings shares the notch, and the
    band-pass among those with the same band (:func:`~eegfm_bench.data.windows.load_window_sets`).

    Returns
    -------
    raw : mne.io.Raw
        The same object, filtered.
    applied : dict
        The parameters applied so far (see :func:`apply_preprocessing`).

    Raises
    ------
    ValueError
        An unknown ``prep.reference`` or ``prep.resample``.
    """
    notch = notch_native(raw, line_freq)
    return bandpass_native(raw, prep, notch)


def notch_native(raw: mne.io.BaseRaw, line_freq: float | None) -> float | None:
    """The notch at the mains frequency ``line_freq`` (Hz; MNE's ``notch_filter``, in place), when it lies below the
    native Nyquist frequency; returns the notch applied (Hz) or ``None``. The same for every preprocessing."""
    if line_freq is not None and line_freq < float(raw.info["sfreq"]) / 2:
        raw.notch_filter(line_freq, verbose="warning")
        return line_freq
    return None


def bandpass_native(raw: mne.io.BaseRaw, prep: Preprocessing, notch: float | None) -> tuple[mne.io.BaseRaw, dict]:
    """The band-pass :func:`capped_band` at the native rate (MNE's ``filter``, in place) after the notch ``notch``
    (Hz or ``None``); returns ``(raw, applied)`` as :func:`filter_native`.

    Raises
    ------
    ValueError
        An unknown ``prep.reference`` or ``prep.resample``.
    """
    native = float(raw.info["sfreq"])
    l_freq, h = capped_band(prep, native)
    applied = {"native_sfreq": native, "sfreq": prep.sfreq, "l_freq": l_freq, "h_freq": h,
               "notch": notch, "reference": prep.reference, "scale": prep.scale, "unit": prep.unit,
               "window_s": prep.window_s, "source": prep.source, "resample": None}
    if prep.reference not in ("average", "none"):
        raise ValueError(f"unknown reference {prep.reference!r}; valid: 'average', 'none'")
    if prep.resample not in ("polyphase", "fft"):
        raise ValueError(f"unknown resample method {prep.resample!r}; valid: 'polyphase', 'fft'")
    if l_freq is not None or h is not None:
        raw.filter(l_freq, h, verbose="warning")
    return raw, applied


def resample_to(raw: mne.io.BaseRaw, prep: Preprocessing, applied: dict) -> mne.io.BaseRaw:
    """The rest of :func:`apply_preprocessing`: resample a filtered recording to ``prep.sfreq`` (in place; polyphase
    at exactly the rates' ratio, after trimming the samples that do not fill the ratio's denominator, so the result
    does not depend on the recording's length). Records ``resample`` / ``resample_trimmed_samples`` in ``applied``."""
    native = float(raw.info["sfreq"])
    if abs(native - prep.sfreq) > 1e-6:
        if prep.resample == "polyphase":
            down = rate_ratio(native, prep.sfreq).denominator
            extra = raw.n_times % down
            if extra:
                raw.crop(tmax=raw.times[raw.n_times - extra - 1], include_tmax=True)
                applied["resample_trimmed_samples"] = int(extra)
        raw.resample(prep.sfreq, method=prep.resample, verbose="warning")
        applied["resample"] = prep.resample
    return raw


def rate_ratio(native: float, target: float) -> Fraction:
    """``target / native`` as a fraction ``up / down`` (rates in Hz, to 1e-6 Hz).

    Raises
    ------
    ValueError
        A ratio that needs a denominator over 10,000 (no polyphase resampler at a sensible cost; fix: resample with
        ``resample: fft`` or pick a target rate with a simple ratio).
    """
    fr = Fraction(round(target * 1e6)) / Fraction(round(native * 1e6))
    if fr.denominator > 10_000:
        raise ValueError(f"resampling {native:g} Hz to {target:g} Hz needs the ratio {fr}; fix: `resample: fft` in the "
                         "backbone's preprocessing, or a target rate with a simpler ratio to the native rate")
    return fr


def reference_windows(X: np.ndarray, reference: str) -> np.ndarray:
    """Apply the common average reference to windows over all their channels (in place).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Windows of one channel set (any unit; the reference keeps it).
    reference : {"average", "none"}
        ``average``: subtract the mean over the channel axis at every sample (common average reference, paper
        003 §3); ``none``: unchanged.

    Returns
    -------
    ndarray
        ``X`` (the same array), each window's channel mean 0 at every sample for ``average``.

    Raises
    ------
    ValueError
        An unknown ``reference``.

    Notes
    -----
    Re-referencing an average-referenced montage over a subset ``S`` of its channels gives exactly the average
    reference over ``S`` (``(x - m_all)_S - mean_S(x - m_all) = x_S - mean_S(x)``), so a later channel selection can
    call this again without knowing what came before.
    """
    if reference == "average":
        x64 = X.astype(np.float64)
        x64 -= x64.mean(axis=1, keepdims=True)
        X[...] = x64  # one rounding to X's dtype, after the subtraction in float64
    elif reference != "none":
        raise ValueError(f"unknown reference {reference!r}; valid: 'average', 'none'")
    return X
