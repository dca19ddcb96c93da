"""Additive white and pink noise at a target SNR, and noise substitution (paper 003 App. D.1, D.4, D.5).

All functions are pure: they take the window batch ``x`` of shape ``(batch, n_chans, n_times)`` (numpy or
torch, in the units of the preprocessed data, µV in this project) and an explicit seed or
``numpy.random.Generator``, and return a new array of the same type, dtype (and device) as ``x``.

The noise passes through the *same* band-pass and notch filters as the clean data (App. D.1), so it lies in
the recording bandwidth. The filters are MNE's defaults (FIR, ``firwin``, zero phase, ``filter_length='auto'``),
designed with ``mne.filter.create_filter`` exactly as ``mne.filter.filter_data`` and
``mne.filter.notch_filter`` design them; the preprocessing must use these MNE defaults for the noise to match
the data's band. To avoid filter edge effects on short windows, the noise is the filter's steady-state output,
as if it had been filtered with the continuous recording before windowing.

Two equivalent ways of generating it (:func:`filtered_noise`):

* ``method="convolve"`` (reference): each trace is drawn ``len(h) - 1`` samples longer than the window (pink:
  white noise whose FFT magnitude is multiplied by ``1 / sqrt(f)``, inverse FFT, at the FFT length
  ``n_fft = next_fast_len(n_times + len(h) - 1)``), convolved with the combined FIR ``h`` and cropped to the
  ``n_times`` samples free of edge effects. It equals ``filter_data`` followed by ``notch_filter`` on the same
  samples (:meth:`FilterSpec.apply_mne`, checked in the tests).
* ``method="spectral"`` (default, ~10x faster): the spectrum is drawn directly — one complex Gaussian per
  rFFT bin of length ``n_fft``, times ``|H(f)|`` (the FIR's exact magnitude response at the bins, the DFT of
  ``h``) and, for pink noise, ``1 / sqrt(f)`` — one inverse FFT, the first ``n_times`` samples kept. No
  padding, no separate convolution; computed in float32.

Why the two are the same random process (not an approximation): in the reference path the filtered samples
never wrap around the length-``n_fft`` FFT circle (``n_fft >= n_times + len(h) - 1``), so they equal a
circular convolution of a length-``n_fft`` circular white (or pink) process with ``h``, i.e. an inverse FFT of
``Z(k) * G(k) * H(k)`` with ``Z`` the FFT of white noise and ``G`` the pink gain. ``Z`` is a circularly
symmetric complex Gaussian per bin (real at DC and Nyquist), independent across bins, so multiplying it by the
unit-modulus phase ``H(k) / |H(k)|`` (the linear phase of a symmetric FIR, with sign flips in the stop bands)
does not change its distribution. Both paths therefore produce zero-mean Gaussian vectors with the same
covariance; only the random numbers differ. The tests check the magnitude response against Welch PSDs.

Resampled data. The data were notched and band-passed at their *native* rate and then resampled
(MNE's FFT resampling: an ideal low-pass at the lower of the two Nyquist frequencies). With ``native_sfreq`` set and
different from ``sfreq``, the noise takes the same path: its magnitude response at the windows' rFFT bins is the
native-rate FIR's ``|H(f)|`` (evaluated at those frequencies) times 1 below ``min(native, sfreq) / 2`` and 0 above,
so no noise power lies where the data have none (designing the filters at the windows' rate instead put 1.1 % of
the noise power above the data's band for LaBraM on EEGMMIDB: 160 Hz native, 200 Hz windows). The ``"spectral"``
and ``"covariance"`` methods use that response; ``"convolve"`` (the reference path for data filtered at the
windows' rate) refuses resampled data.

Reproducibility across batch sizes: noise is drawn trial after trial from the Generator, so applying a
function to a batch of ``a + b`` trials gives the same result as applying it to the first ``a`` and then
the next ``b`` trials with the same Generator. The same seed gives the same noise (per ``method``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import scipy.fft
import scipy.linalg
import scipy.signal

from eegfm_bench.perturb.arrays import as_rng, to_numpy
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
    native_sfreq : float or None
        The rate the data were filtered at before being resampled to ``sfreq`` (``None``: the same as ``sfreq``);
        the filters are designed at this rate and the noise follows the data's resampling (module docstring).

    Raises
    ------
    ValueError
        If ``sfreq`` is not a positive finite number, an edge is not in ``(0, rate / 2)`` of the design rate,
        ``l_freq >= h_freq``, or a notch frequency is not in ``(0, rate / 2)``.
    """

    sfreq: float
    l_freq: float | None
    h_freq: float | None
    notch_freq: float | tuple[float, ...] | None = None
    native_sfreq: float | None = None

    @property
    def design_sfreq(self) -> float:
        """The rate the filters are designed at (the data's native rate when it differs)."""
        return float(self.native_sfreq) if self.native_sfreq else float(self.sfreq)

    @property
    def resampled(self) -> bool:
        """Whether the data were filtered at another rate than the windows'."""
        return bool(self.native_sfreq) and abs(float(self.native_sfreq) - float(self.sfreq)) > 1e-9

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sfreq) and self.sfreq > 0):
            raise ValueError(f"sfreq must be a positive number of Hz, got {self.sfreq}")
        if self.native_sfreq is not None and not (math.isfinite(self.native_sfreq) and self.native_sfreq > 0):
            raise ValueError(f"native_sfreq must be a positive number of Hz, got {self.native_sfreq}")
        nyq = self.design_sfreq / 2.0
        for name in ("l_freq", "h_freq"):
            f = getattr(self, name)
            if f is not None and not (math.isfinite(f) and 0 < f < nyq):
                raise ValueError(f"{name}={f} Hz is outside (0, {nyq}) Hz for sfreq={self.design_sfreq} Hz")
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
        out = {"sfreq": self.sfreq, "l_freq": self.l_freq, "h_freq": self.h_freq,
               "notch_freq": list(self.notch_freq) if self.notch_freq is not None else None}
        if self.resampled:
            out["native_sfreq"] = self.native_sfreq
        return out

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
        if self.resampled:
            raise ValueError("FilterSpec.apply filters at the windows' rate; these data were filtered at "
                             f"{self.native_sfreq} Hz and resampled to {self.sfreq} Hz (use filtered_noise with "
                             "method 'spectral' or 'covariance')")
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
        import mne  # reason: heavy (MNE, ~1 s); only the reference path and the kernel design need it, not parsing

        out = np.asarray(rows, dtype=np.float64)
        if self.l_freq is not None or self.h_freq is not None:
            out = mne.filter.filter_data(out, self.sfreq, self.l_freq, self.h_freq, verbose=False)
        if self.notch_freq is not None:
            out = mne.filter.notch_filter(out, self.sfreq, np.asarray(self.notch_freq), verbose=False)
        return out


@lru_cache(maxsize=32)
def _fir_kernels(filt: FilterSpec) -> tuple[np.ndarray, ...]:
    import mne  # reason: heavy (MNE, ~1 s); condition parsing (``eegfm-bench report``) must not load it

    kernels = []
    fs = filt.design_sfreq
    if filt.l_freq is not None or filt.h_freq is not None:
        kernels.append(mne.filter.create_filter(None, fs, filt.l_freq, filt.h_freq, verbose=False))
    if filt.notch_freq is not None:
        # the band-stop mne.filter.notch_filter designs: notch_widths=f/200, trans_bandwidth=1 Hz
        freqs = np.asarray(filt.notch_freq)
        widths, tb_2 = freqs / 200.0, 0.5
        kernels.append(mne.filter.create_filter(None, fs, freqs + widths / 2 + tb_2,
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
    return _trial_power(arr if picks is None else arr[:, _check_picks(picks, arr.shape[1])])


def _trial_power(arr: np.ndarray) -> np.ndarray:
    """:func:`signal_power` of a validated 3-D array, all channels, accumulated in float64."""
    return np.var(arr, axis=-1, dtype=np.float64).mean(axis=1)


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


NOISE_METHODS = ("auto", "covariance", "spectral", "convolve")

# "auto" uses "covariance" up to this many samples per window (its N x N eigendecomposition is cached)
_COVARIANCE_MAX_TIMES = 1024


@lru_cache(maxsize=64)
def _amplitude(filt: FilterSpec, kind: str, n_times: int) -> tuple[int, np.ndarray]:
    """FFT length ``n_fft`` of the reference path and the amplitude ``|H(f_k)| G(f_k)`` at its rFFT bins.

    ``n_fft = next_fast_len(n_times + len(h) - 1)``; ``|H|`` is the exact DFT of the combined MNE kernel at
    the bins (``n_fft >= len(h)``); ``G = 1 / sqrt(f)`` for pink noise (0 at DC), 1 for white. float64,
    read-only.
    """
    h = filt.kernel()
    if not filt.resampled:
        n_fft = scipy.fft.next_fast_len(n_times + len(h) - 1, real=True)
        amp = np.abs(scipy.fft.rfft(h, n=n_fft))
    else:  # the native-rate FIR's response at the windows' bins, then the resampling's ideal low-pass
        taps = int(math.ceil(len(h) * filt.sfreq / filt.design_sfreq))
        n_fft = scipy.fft.next_fast_len(n_times + taps - 1, real=True)
        freqs = scipy.fft.rfftfreq(n_fft, d=1.0 / filt.sfreq)
        n = np.arange(len(h))
        amp = np.empty(freqs.size)
        for start in range(0, freqs.size, 256):  # |sum_n h[n] exp(-2 pi i f n / fs_native)|, in blocks
            f = freqs[start:start + 256, None]
            amp[start:start + 256] = np.abs(np.exp(-2j * np.pi * f * n[None, :] / filt.design_sfreq) @ h)
        amp[freqs >= min(filt.design_sfreq, filt.sfreq) / 2.0] = 0.0
    if kind == "pink":
        freqs = scipy.fft.rfftfreq(n_fft, d=1.0 / filt.sfreq)
        amp[0] = 0.0
        amp[1:] /= np.sqrt(freqs[1:])
    amp.setflags(write=False)
    return n_fft, amp


@lru_cache(maxsize=64)
def _spectral_gain(filt: FilterSpec, kind: str, n_times: int) -> tuple[int, np.ndarray]:
    """:func:`_amplitude` as float32, with an extra ``sqrt(2)`` at DC and Nyquist.

    There the FFT of real white noise is real with the full variance ``E|Z|^2``, where the drawn spectrum keeps
    only the real part of a unit complex Gaussian (half of ``E|Z|^2``).
    """
    n_fft, amp = _amplitude(filt, kind, n_times)
    gain = amp.copy()
    gain[0] *= math.sqrt(2.0)
    if n_fft % 2 == 0:
        gain[-1] *= math.sqrt(2.0)
    gain = gain.astype(np.float32)
    gain.setflags(write=False)
    return n_fft, gain


NOISE_VERSION = 2
"""Version of the noise realisations, part of every sweep cell's hash. 2: the covariance method's factor is the
symmetric square root (version 1 used ``V sqrt(Lambda)``, whose eigenvector basis LAPACK may return rotated or
sign-flipped within near-degenerate eigenspaces depending on the BLAS thread count, so the same seed gave another
noise realisation with 1 and 2 threads: measured max |Δ| 145 µV on 566 µV windows)."""


@lru_cache(maxsize=16)
def _covariance_factor(filt: FilterSpec, kind: str, n_times: int) -> np.ndarray:
    """``A.T`` (float32, ``(n_times, n_times)``) with ``A A.T`` the exact covariance of the reference noise window.

    The reference path's ``n_times`` kept samples are a stationary Gaussian vector whose autocovariance at lag
    ``tau < n_times`` is ``irfft(|H|^2 G^2, n_fft)[tau]`` (no circular aliasing reaches those lags, see the
    module docstring); ``A = V sqrt(Lambda) V.T``, the symmetric (principal) square root of that Toeplitz matrix
    (eigenvalues that are negative by rounding, ~1e-16 of the largest, are set to 0). The principal square root is
    unique, so the realisation does not depend on which eigenvector basis LAPACK returns for (near-)degenerate
    eigenvalues (that basis changes with the BLAS thread count); ``V sqrt(Lambda)`` alone does not have that
    property.
    """
    n_fft, amp = _amplitude(filt, kind, n_times)
    acov = scipy.fft.irfft(amp**2, n=n_fft)[:n_times]
    lam, vec = scipy.linalg.eigh(scipy.linalg.toeplitz(acov))
    root = (vec * np.sqrt(np.clip(lam, 0.0, None))) @ vec.T
    factor_t = np.ascontiguousarray(root.T, dtype=np.float32)
    factor_t.setflags(write=False)
    return factor_t


def _resolve_method(method: str, filt: FilterSpec, n_times: int) -> str:
    if method not in NOISE_METHODS:
        raise ValueError(f"unknown noise method {method!r}; valid: {', '.join(NOISE_METHODS)}")
    if method != "auto":
        return method
    # cost per trace: covariance draws n_times normals and does n_times^2 multiply-adds; spectral draws n_fft
    # normals (drawing a normal costs several hundred multiply-adds) and one FFT
    n_pad = len(filt.kernel()) - 1
    return "covariance" if n_times <= min(_COVARIANCE_MAX_TIMES, n_pad) else "spectral"


def _spectral_noise(kind: str, shape: tuple[int, int, int], filt: FilterSpec, gen: np.random.Generator) -> np.ndarray:
    batch, n_chans, n_times = shape
    n_fft, gain = _spectral_gain(filt, kind, n_times)
    n_bins = gain.shape[0]
    # one unit complex Gaussian per bin, drawn trial after trial (batch-size independent)
    spec = gen.standard_normal((batch, n_chans, 2 * n_bins), dtype=np.float32).view(np.complex64)
    spec[..., 0].imag = 0.0  # DC and Nyquist bins of a real signal are real
    if n_fft % 2 == 0:
        spec[..., -1].imag = 0.0
    spec *= gain
    return scipy.fft.irfft(spec, n=n_fft, axis=-1, overwrite_x=True)[..., :n_times]


def _covariance_noise(kind: str, shape: tuple[int, int, int], filt: FilterSpec,
                      gen: np.random.Generator) -> np.ndarray:
    factor_t = _covariance_factor(filt, kind, shape[-1])
    # n_times unit normals per trace, drawn trial after trial (batch-size independent)
    return gen.standard_normal(shape, dtype=np.float32) @ factor_t


def _convolved_noise(kind: str, shape: tuple[int, int, int], filt: FilterSpec, gen: np.random.Generator) -> np.ndarray:
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


def filtered_noise(kind: str, shape: tuple[int, int, int], filt: FilterSpec,
                   rng: np.random.Generator | int, method: str = "auto") -> np.ndarray:
    """White or pink noise passed through the dataset's band-pass and notch (App. D.1), unscaled.

    The steady-state filter output (no edge effects), generated as described in the module docstring.

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
    method : {"auto", "covariance", "spectral", "convolve"}
        ``"convolve"``: the reference path, white/pink noise convolved with the MNE coefficients, float64.
        ``"spectral"``: spectrum drawn directly and shaped by the FIR's magnitude response, one inverse FFT,
        float32. ``"covariance"``: ``n_times`` unit normals per trace times a square root of the exact
        covariance matrix of the reference window, float32. ``"auto"`` (default): ``"covariance"`` when
        ``n_times <= min(1024, len(h) - 1)``, else ``"spectral"`` (whichever draws fewer random numbers per
        trace for similar arithmetic); the choice depends only on ``filt`` and ``n_times``, never on the batch.
        All are the same random process; different random numbers for the same seed.

    Returns
    -------
    numpy.ndarray, shape (batch, n_chans, n_times)
        float32 (``"covariance"``, ``"spectral"``) or float64 (``"convolve"``), arbitrary scale.

    Raises
    ------
    UnknownNameError
        If ``kind`` is not ``"white"`` or ``"pink"``.
    ValueError
        If ``method`` is unknown.
    """
    check_noise_kind(kind)
    gen = as_rng(rng)
    shape = tuple(int(v) for v in shape)
    method = _resolve_method(method, filt, shape[-1])
    if method == "convolve" and filt.resampled:
        raise ValueError(f"method 'convolve' filters at the windows' rate, but these data were filtered at "
                         f"{filt.native_sfreq} Hz and resampled to {filt.sfreq} Hz; fix: method 'spectral' or "
                         "'covariance' (or 'auto')")
    if method == "covariance":
        return _covariance_noise(kind, shape, filt, gen)
    if method == "spectral":
        return _spectral_noise(kind, shape, filt, gen)
    return _convolved_noise(kind, shape, filt, gen)


def add_noise(x: Any, snr_db: float, kind: str, filt: FilterSpec, rng: np.random.Generator | int,
              picks: Sequence[int] | None = None, method: str = "auto", power_picks: Sequence[int] | None = None,
              power_over_picks: bool = True) -> Any:
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
        Channels that receive noise, over which ``P_n`` is computed (default: all).
    method : {"auto", "covariance", "spectral", "convolve"}
        How the filtered noise is generated (:func:`filtered_noise`); the scaling is exact either way
        (``P_n`` is measured on the generated noise, in float64).
    power_picks : sequence of int or None
        With ``power_over_picks=False``: the channels of ``P_s`` (None: every channel, the whole montage).
    power_over_picks : bool
        ``P_s`` over ``picks`` (default, App. D.1 / the region-power basis of D.5) or over ``power_picks``.

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
    every = picks is None or (idx.size == arr.shape[1] and np.array_equal(idx, np.arange(arr.shape[1])))
    sel = arr if every else arr[:, idx]
    if power_over_picks:
        p_s = _trial_power(sel)
    else:
        p_s = _trial_power(arr if power_picks is None else arr[:, _check_picks(power_picks, arr.shape[1])])
    bad = np.flatnonzero(~np.isfinite(p_s) | (p_s <= 0))
    if bad.size:
        raise ValueError(
            f"trials {bad.tolist()} have zero or non-finite signal power over the perturbed channels, "
            "so their SNR is undefined; fix: drop flat or non-finite windows before the sweep"
        )
    noise = filtered_noise(kind, sel.shape, filt, rng, method=method)
    # P_n of the generated noise itself (float64 accumulation): the per-trial SNR is exact, whatever the method
    scale = np.sqrt(p_s / (10.0 ** (snr / 10.0) * _trial_power(noise)))
    out_dtype = np.result_type(arr.dtype, noise.dtype)
    noise *= scale.astype(noise.dtype)[:, None, None]
    if every:
        return restore(np.add(arr, noise, dtype=out_dtype))
    out = arr.astype(out_dtype, copy=True)
    out[:, idx] += noise
    return restore(out)


def substitute_with_noise(x: Any, picks: Sequence[int], filt: FilterSpec, rng: np.random.Generator | int,
                          method: str = "auto") -> Any:
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
    method : {"auto", "covariance", "spectral", "convolve"}
        How the filtered noise is generated (:func:`filtered_noise`).

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
    noise = filtered_noise("white", (arr.shape[0], idx.size, arr.shape[2]), filt, rng, method=method)
    noise = noise.astype(np.float64)
    noise = noise - noise.mean(axis=-1, keepdims=True)
    noise = noise / noise.std(axis=-1, keepdims=True)
    out = arr.astype(np.float64, copy=True)
    out[:, idx] = noise * target[:, None, None]
    return restore(out)
