"""Additive white and pink noise at a target SNR, and noise substitution (paper 003 App. D.1, D.4, D.5).

All functions are pure: they take the window batch ``x`` of shape ``(batch, n_chans, n_times)`` (numpy or
torch, in the units of the preprocessed data, µV in this project) and an explicit seed or
``numpy.random.Generator``, and return a new array of the same type, dtype (and device) as ``x``.
The noise is computed in float64 and cast back at the end.

The noise passes through the *same* band-pass and notch filters as the clean data (App. D.1), so it lies in
the recording bandwidth. The filters are MNE's defaults (FIR, ``firwin``, zero phase, ``filter_length='auto'``),
designed with ``mne.filter.create_filter`` exactly as ``mne.filter.filter_data`` and
``mne.filter.notch_filter`` design them; the preprocessing must use these MNE defaults for the noise to match
the data's band. To avoid filter edge effects on short windows, each noise trace is generated longer than the
window (by half the filter length on both sides) and only the filter's steady-state output, the central
``n_times`` samples, is kept, as if the noise had been filtered with the continuous recording before
windowing. That output is computed as one vectorised FFT convolution with the MNE coefficients; it equals
``filter_data`` followed by ``notch_filter`` on the same samples (:meth:`FilterSpec.apply_mne`, checked in the
tests), at a fraction of the cost.

Reproducibility across batch sizes: noise is drawn trial after trial from the Generator, so applying a
function to a batch of ``a + b`` trials gives the same result as applying it to the first ``a`` and then
the next ``b`` trials with the same Generator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import mne
import numpy as np
import scipy.fft
import scipy.signal

from eegfm_bench.perturb._array import as_rng, to_numpy
from eegfm_bench.registry import UnknownNameError

NOISE_KINDS = ("white", "pink")

# rows x samples filtered at once (float64): bounds the memory of the FFT convolution
_FILTER_CHUNK = 4_000_000


@dataclass(frozen=True)
class FilterSpec:
    """The band-pass and notch filters of a dataset's preprocessing, applied to the noise (App. D.1).

    Parameters
    ----------
    sfreq : float
        Sampling rate of the windows, Hz.
    l_freq : float or None
        High-pass edge, Hz (``None``: no high-pass), as passed to ``mne.filter.filter_data``.
    h_freq : float or None
        Low-pass edge, Hz (``None``: no low-pass).
    notch_freq : float, sequence of float or None
        Notch frequencies, Hz (``None``: no notch), as passed to ``mne.filter.notch_filter``.

    Raises
    ------
    ValueError
        If ``sfreq`` is not a positive finite number, an edge is not in ``(0, sfreq / 2)``,
        ``l_freq >= h_freq``, or a notch frequency is not in ``(0, sfreq / 2)``.
    """

    sfreq: float
    l_freq: float | None
    h_freq: float | None
    notch_freq: float | tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sfreq) and self.sfreq > 0):
            raise ValueError(f"sfreq must be a positive number of Hz, got {self.sfreq}")
        nyq = self.sfreq / 2.0
        for name in ("l_freq", "h_freq"):
            f = getattr(self, name)
            if f is not None and not (math.isfinite(f) and 0 < f < nyq):
                raise ValueError(f"{name}={f} Hz is outside (0, {nyq}) Hz for sfreq={self.sfreq} Hz")
        if self.l_freq is not None and self.h_freq is not None and self.l_freq >= self.h_freq:
            raise ValueError(f"l_freq={self.l_freq} Hz must be below h_freq={self.h_freq} Hz")
        if self.notch_freq is not None:
            notch = tuple(float(f) for f in np.atleast_1d(self.notch_freq))
            bad = [f for f in notch if not (math.isfinite(f) and 0 < f < nyq)]
            if bad or not notch:
                raise ValueError(f"notch frequencies {bad or notch} Hz are outside (0, {nyq}) Hz")
            object.__setattr__(self, "notch_freq", notch)

    def as_dict(self) -> dict[str, Any]:
        """The filter settings as a JSON-serialisable dict (for result rows)."""
        return {"sfreq": self.sfreq, "l_freq": self.l_freq, "h_freq": self.h_freq,
                "notch_freq": list(self.notch_freq) if self.notch_freq is not None else None}

    def kernel(self) -> np.ndarray:
        """The combined zero-phase FIR kernel: MNE's band-pass convolved with MNE's notch band-stop.

        The coefficients are those ``mne.filter.filter_data`` and ``mne.filter.notch_filter`` apply with
        their defaults (``filter_length='auto'``, ``fir_design='firwin'``, hamming window; the notch with
        ``notch_widths=f/200`` and ``trans_bandwidth=1`` Hz), designed with ``mne.filter.create_filter``.

        Returns
        -------
        numpy.ndarray, shape (n_taps,)
            Odd length, symmetric; ``[1.0]`` when there is no filter.
        """
        return _combined_kernel(self)

    def pad_samples(self) -> int:
        """Samples added on each side of a noise trace so that the kept part has no filter edge effects.

        Half the combined kernel length (half of MNE's band-pass plus half of its notch band-stop),
        0 when there is no filter.
        """
        return len(self.kernel()) // 2

    def apply(self, rows: np.ndarray) -> np.ndarray:
        """Filter ``rows`` and keep only the samples free of edge effects.

        Equivalent to ``mne.filter.filter_data`` followed by ``mne.filter.notch_filter`` (see
        :meth:`apply_mne`) and cropping ``pad_samples()`` samples at both ends, computed as one FFT
        convolution with :meth:`kernel` over all rows at once (MNE filters row by row in Python, which is
        about 50 times slower on window batches).

        Parameters
        ----------
        rows : numpy.ndarray, shape (n_rows, n_samples)
            Traces; ``n_samples > 2 * pad_samples()``.

        Returns
        -------
        numpy.ndarray of float64, shape (n_rows, n_samples - 2 * pad_samples())
        """
        h = self.kernel()
        rows = np.asarray(rows, dtype=np.float64)
        if rows.shape[-1] <= len(h) - 1:
            raise ValueError(f"{rows.shape[-1]} samples are too few for a {len(h)}-tap filter")
        if len(h) == 1:
            return rows.copy()
        return scipy.signal.fftconvolve(rows, h[None, :], mode="valid", axes=-1)

    def apply_mne(self, rows: np.ndarray) -> np.ndarray:
        """Reference path: ``mne.filter.filter_data`` then ``mne.filter.notch_filter`` (full length, float64).

        Its central part (``pad_samples()`` samples cropped at both ends) equals :meth:`apply`.
        """
        out = np.asarray(rows, dtype=np.float64)
        if self.l_freq is not None or self.h_freq is not None:
            out = mne.filter.filter_data(out, self.sfreq, self.l_freq, self.h_freq, verbose=False)
        if self.notch_freq is not None:
            out = mne.filter.notch_filter(out, self.sfreq, np.asarray(self.notch_freq), verbose=False)
        return out


@lru_cache(maxsize=32)
def _fir_kernels(filt: FilterSpec) -> tuple[np.ndarray, ...]:
    kernels = []
    if filt.l_freq is not None or filt.h_freq is not None:
        kernels.append(mne.filter.create_filter(None, filt.sfreq, filt.l_freq, filt.h_freq, verbose=False))
    if filt.notch_freq is not None:
        # the band-stop mne.filter.notch_filter designs: notch_widths=f/200, trans_bandwidth=1 Hz
        freqs = np.asarray(filt.notch_freq)
        widths, tb_2 = freqs / 200.0, 0.5
        kernels.append(mne.filter.create_filter(None, filt.sfreq, freqs + widths / 2 + tb_2,
                                                freqs - widths / 2 - tb_2, l_trans_bandwidth=tb_2,
                                                h_trans_bandwidth=tb_2, verbose=False))
    for h in kernels:
        if len(h) % 2 != 1 or not np.allclose(h, h[::-1]):
            raise RuntimeError("MNE returned a FIR filter that is not odd-length symmetric (zero phase)")
    return tuple(kernels)


@lru_cache(maxsize=32)
def _combined_kernel(filt: FilterSpec) -> np.ndarray:
    h = np.ones(1)
    for k in _fir_kernels(filt):
        h = np.convolve(h, k)
    h.setflags(write=False)
    return h


def check_noise_kind(kind: str) -> str:
    """Return ``kind`` if it is ``"white"`` or ``"pink"``; raise :class:`UnknownNameError` listing them otherwise."""
    if kind not in NOISE_KINDS:
        raise UnknownNameError(f"unknown noise kind {kind!r}. Valid noise kinds: {', '.join(NOISE_KINDS)}.")
    return kind


def check_snr_db(snr_db: float) -> float:
    """``snr_db`` as a float; raise ``ValueError`` if it is not a finite number (dB)."""
    try:
        snr = float(snr_db)
    except (TypeError, ValueError) as err:
        raise ValueError(f"SNR must be a finite number of dB, got {snr_db!r}") from err
    if not math.isfinite(snr):
        raise ValueError(f"SNR must be a finite number of dB, got {snr_db!r}; fix: use e.g. 10, 0 or -5 (dB)")
    return snr


def _check_picks(picks: Sequence[int] | None, n_chans: int) -> np.ndarray:
    if picks is None:
        return np.arange(n_chans)
    idx = np.asarray(list(picks), dtype=int)
    if idx.size == 0:
        raise ValueError("picks is empty: no channel to perturb")
    if len(set(idx.tolist())) != idx.size or idx.min() < 0 or idx.max() >= n_chans:
        raise ValueError(f"picks must be distinct channel indices in [0, {n_chans}), got {idx.tolist()}")
    return idx


def signal_power(x: Any, picks: Sequence[int] | None = None) -> np.ndarray:
    """Per-trial signal power ``P_s`` of paper 003 App. D.1.

    ``P_s = 1 / (C T) * sum_{c,t} (X_{c,t} - mean_t X_c)^2``: the mean over channels and samples of the
    channel-demeaned signal, computed separately for every trial.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Signal, µV.
    picks : sequence of int or None
        Channels to average over (default: all).

    Returns
    -------
    numpy.ndarray, shape (batch,)
        Power per trial, µV² (float64).
    """
    arr, _ = to_numpy(x)
    sel = arr[:, _check_picks(picks, arr.shape[1])].astype(np.float64)
    sel = sel - sel.mean(axis=-1, keepdims=True)
    return np.mean(sel**2, axis=(1, 2))


def snr_db(signal: Any, noise: Any, picks: Sequence[int] | None = None) -> np.ndarray:
    """Per-trial SNR ``10 log10(P_s / P_n)`` in dB, both powers as in App. D.1 (:func:`signal_power`).

    Parameters
    ----------
    signal, noise : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Clean signal and the noise added to it (e.g. ``x_noisy - x``), µV.
    picks : sequence of int or None
        Channels to measure over (default: all).

    Returns
    -------
    numpy.ndarray, shape (batch,)
        SNR per trial, dB.
    """
    return 10.0 * np.log10(signal_power(signal, picks) / signal_power(noise, picks))


def white_noise(shape: tuple[int, ...], rng: np.random.Generator | int) -> np.ndarray:
    """Unfiltered white noise, i.i.d. N(0, 1) per channel and sample (App. D.1).

    Parameters
    ----------
    shape : tuple of int
        Output shape, e.g. ``(batch, n_chans, n_samples)``.
    rng : numpy.random.Generator or int
        Generator or explicit seed.

    Returns
    -------
    numpy.ndarray of float64, shape ``shape``
    """
    return as_rng(rng).standard_normal(shape)


def pink_noise(shape: tuple[int, ...], sfreq: float, rng: np.random.Generator | int) -> np.ndarray:
    """Unfiltered pink (1/f power) noise along the last axis (App. D.1).

    White noise is transformed with the real FFT along time, its magnitude spectrum is multiplied by
    ``1 / sqrt(f)`` (f in Hz), and it is transformed back. The 1/f law is undefined at f = 0, so the DC bin
    is set to zero. For speed the white noise is drawn at the next FFT-friendly length
    (``scipy.fft.next_fast_len``) and the first ``shape[-1]`` samples of the result are kept.

    Parameters
    ----------
    shape : tuple of int
        Output shape, time last, e.g. ``(batch, n_chans, n_samples)``.
    sfreq : float
        Sampling rate, Hz (sets the frequency axis of the 1/f law).
    rng : numpy.random.Generator or int
        Generator or explicit seed.

    Returns
    -------
    numpy.ndarray of float64, shape ``shape``
        Arbitrary scale (the caller rescales to the target SNR).
    """
    n = shape[-1]
    n_fft = scipy.fft.next_fast_len(n, real=True)
    spec = scipy.fft.rfft(white_noise((*shape[:-1], n_fft), rng), axis=-1)
    freqs = scipy.fft.rfftfreq(n_fft, d=1.0 / sfreq)
    gain = np.zeros_like(freqs)
    gain[1:] = 1.0 / np.sqrt(freqs[1:])
    return scipy.fft.irfft(spec * gain, n=n_fft, axis=-1)[..., :n]


def filtered_noise(kind: str, shape: tuple[int, int, int], filt: FilterSpec,
                   rng: np.random.Generator | int) -> np.ndarray:
    """White or pink noise passed through the dataset's band-pass and notch (App. D.1), unscaled.

    The traces are generated ``2 * filt.pad_samples()`` samples longer than the window, filtered, and
    cropped to the central ``n_times`` samples (no filter edge effects).

    Parameters
    ----------
    kind : {"white", "pink"}
        Noise colour.
    shape : (batch, n_chans, n_times)
        Output shape.
    filt : FilterSpec
        The dataset's preprocessing filters.
    rng : numpy.random.Generator or int
        Generator or explicit seed.

    Returns
    -------
    numpy.ndarray of float64, shape (batch, n_chans, n_times)

    Raises
    ------
    UnknownNameError
        If ``kind`` is not ``"white"`` or ``"pink"``.
    """
    check_noise_kind(kind)
    gen = as_rng(rng)
    batch, n_chans, n_times = shape
    pad = filt.pad_samples()
    n_total = n_times + 2 * pad
    full = (batch, n_chans, n_total)
    raw = white_noise(full, gen) if kind == "white" else pink_noise(full, filt.sfreq, gen)
    rows = raw.reshape(batch * n_chans, n_total)
    out = np.empty((batch * n_chans, n_times))
    step = max(1, _FILTER_CHUNK // n_total)
    for start in range(0, rows.shape[0], step):
        out[start:start + step] = filt.apply(rows[start:start + step])
    return out.reshape(batch, n_chans, n_times)


def add_noise(x: Any, snr_db: float, kind: str, filt: FilterSpec, rng: np.random.Generator | int,
              picks: Sequence[int] | None = None) -> Any:
    """Add filtered white or pink noise at a target SNR (paper 003 App. D.1; with ``picks``, App. D.5).

    For every trial, the noise (see :func:`filtered_noise`) is scaled by one factor so that
    ``10 log10(P_s / P_n) = snr_db``, where ``P_s`` is the App. D.1 power of the trial's signal
    (:func:`signal_power`) and ``P_n`` the same quantity for the noise, both over the channels in ``picks``.
    Channels outside ``picks`` are returned unchanged.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Clean windows, µV.
    snr_db : float
        Target SNR, dB (paper levels: 10, 5, 0, -3, -5, and -15 for white noise).
    kind : {"white", "pink"}
        Noise colour.
    filt : FilterSpec
        The dataset's preprocessing filters, applied to the noise before scaling.
    rng : numpy.random.Generator or int
        Generator or explicit seed for the noise.
    picks : sequence of int or None
        Channels that receive noise and over which ``P_s`` and ``P_n`` are computed (default: all).

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        ``x`` plus noise, same type, dtype and device as ``x``.

    Raises
    ------
    ValueError
        If ``snr_db`` is not finite, ``picks`` is empty or invalid, or a trial has zero or non-finite
        signal power over ``picks`` (its SNR is undefined).
    UnknownNameError
        If ``kind`` is unknown.
    """
    snr = check_snr_db(snr_db)
    check_noise_kind(kind)
    arr, restore = to_numpy(x)
    idx = _check_picks(picks, arr.shape[1])
    sel = arr[:, idx].astype(np.float64)
    p_s = signal_power(sel)
    bad = np.flatnonzero(~np.isfinite(p_s) | (p_s <= 0))
    if bad.size:
        raise ValueError(
            f"trials {bad.tolist()} have zero or non-finite signal power over the perturbed channels, "
            "so their SNR is undefined; fix: drop flat or non-finite windows before the sweep"
        )
    noise = filtered_noise(kind, sel.shape, filt, rng)
    scale = np.sqrt(p_s / (10.0 ** (snr / 10.0) * signal_power(noise)))
    out = arr.astype(np.float64, copy=True)
    out[:, idx] = sel + noise * scale[:, None, None]
    return restore(out)


def substitute_with_noise(x: Any, picks: Sequence[int], filt: FilterSpec, rng: np.random.Generator | int) -> Any:
    """Replace channels by filtered white noise scaled to the intact channels (paper 003 App. D.4).

    For every trial and every channel in ``picks``: white noise is filtered like the data, normalised to
    zero mean and unit variance over the window, then multiplied by the median, over the intact channels
    (those not in ``picks``), of their root mean square ``sqrt(mean_t x_c(t)^2)``. The substituted channels
    carry none of the original signal.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Clean windows, µV.
    picks : sequence of int
        Channels to substitute.
    filt : FilterSpec
        The dataset's preprocessing filters.
    rng : numpy.random.Generator or int
        Generator or explicit seed for the noise.

    Returns
    -------
    numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Same type, dtype and device as ``x``.

    Raises
    ------
    ValueError
        If ``picks`` is empty, covers every channel (no intact channel to scale to), or a trial's median
        intact RMS is zero or non-finite.
    """
    arr, restore = to_numpy(x)
    idx = _check_picks(picks, arr.shape[1])
    intact = np.setdiff1d(np.arange(arr.shape[1]), idx)
    if intact.size == 0:
        raise ValueError("substitution covers every channel: no intact channel to scale the noise to")
    rms = np.sqrt(np.mean(arr[:, intact].astype(np.float64) ** 2, axis=-1))
    target = np.median(rms, axis=1)
    bad = np.flatnonzero(~np.isfinite(target) | (target <= 0))
    if bad.size:
        raise ValueError(
            f"trials {bad.tolist()} have a zero or non-finite median RMS over the intact channels; "
            "fix: drop flat or non-finite windows before the sweep"
        )
    noise = filtered_noise("white", (arr.shape[0], idx.size, arr.shape[2]), filt, rng)
    noise = noise - noise.mean(axis=-1, keepdims=True)
    noise = noise / noise.std(axis=-1, keepdims=True)
    out = arr.astype(np.float64, copy=True)
    out[:, idx] = noise * target[:, None, None]
    return restore(out)
