"""Handcrafted comparator features (paper 001 §3.4, Control 1 of §4.2.1).

Two families, computed per window from ``X`` of shape ``(n_windows, n_chans, n_times)``:

* **simple** — ``9·N_ch + 2`` features: relative band power in δ 0.5–4, θ 4–8, α 8–13, β 13–30 and
  γ 30–45 Hz (Welch, :func:`scipy.signal.welch`); Hjorth activity, mobility and complexity
  (the formulas of :func:`antropy.hjorth_params`); normalised Shannon spectral entropy of the Welch spectrum; and two
  study-defined, channel-index-based summaries (an alpha-asymmetry proxy and mean θ over the first four
  channels). ``study_summaries=False`` drops the two summaries (the paper's Sleep-EDF ``9·N_ch`` variant).
* **enhanced** — ``15·N_ch + 6`` features: the simple family plus, per channel, sample entropy
  (:func:`antropy.sample_entropy`), a window-scale DFA exponent (:func:`antropy.detrended_fluctuation`) and
  relative Haar wavelet energy of detail levels D1–D4 (:func:`pywt.wavedec`); and four global summaries, the
  mean magnitude-squared coherence (:func:`scipy.signal.coherence`) over at most 20 channel pairs in the
  δ, θ, α and β bands. Without the study summaries it has ``15·N_ch + 4`` features (the paper's 34-feature
  two-channel Sleep-EDF comparator).

The paper's exact formulas live in its Supplementary S1, which is not available; every study-defined choice
below (Welch segment, entropy range, asymmetry formula, coherence pairs and bands, wavelet levels) is stated
in the docstring that makes it, and the counts match §3.4 exactly.

Input units: whatever the preprocessing produced (µV, or z-scores after per-channel normalisation); only
Hjorth activity carries the units (squared). Everything else is scale-free.
"""
from __future__ import annotations

import importlib
from typing import Sequence

import numpy as np
from scipy import signal as _sig
from scipy import stats as _st
from tqdm.auto import tqdm

BANDS: tuple[tuple[str, float, float], ...] = (
    ("delta", 0.5, 4.0),
    ("theta", 4.0, 8.0),
    ("alpha", 8.0, 13.0),
    ("beta", 13.0, 30.0),
    ("gamma", 30.0, 45.0),
)
"""Frequency bands of paper 001 §3.4 as ``(name, low Hz, high Hz)``, half-open ``[low, high)``."""

COHERENCE_BANDS: tuple[str, ...] = ("delta", "theta", "alpha", "beta")
"""Bands whose pair-averaged magnitude-squared coherence forms the four global enhanced summaries."""

FAMILIES = ("simple", "enhanced")
WAVELET_LEVELS = 4
MAX_COHERENCE_PAIRS = 20


# ----------------------------------------------------------------------------------------------- checks
def _require(module: str, pip_name: str):
    """Import an optional dependency of the enhanced family (antropy loads numba: seconds), or say how to install
    it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"the enhanced handcrafted family needs {pip_name}; fix: pip install {pip_name}") from e


def _check_input(X: np.ndarray, sfreq: float, ch_names: Sequence[str] | None, welch_seconds: float,
                 bands: Sequence[tuple[str, float, float]]) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"X must be (n_windows, n_chans, n_times), got shape {X.shape}; "
                         "fix: stack windows as a 3-D array (add a leading axis for a single window)")
    if not np.issubdtype(X.dtype, np.floating):
        raise TypeError(f"X must be a float array, got {X.dtype}; fix: X.astype(np.float64)")
    n_windows, n_chans, n_times = X.shape
    if n_windows == 0 or n_chans == 0:
        raise ValueError(f"X has no windows or no channels (shape {X.shape})")
    if ch_names is not None and len(ch_names) != n_chans:
        raise ValueError(f"{len(ch_names)} ch_names for {n_chans} channels in X; "
                         "fix: pass the window batch's ch_names in channel-axis order")
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[:5, :2].tolist()
        raise ValueError(f"X contains NaN/inf (first (window, channel) pairs: {bad}); "
                         "fix: reject or repair those windows during preprocessing")
    f_low = min(b[1] for b in bands)
    f_high = max(b[2] for b in bands)
    if f_low <= 0:
        raise ValueError(f"lowest band edge must be > 0 Hz, got {f_low}")
    if sfreq / 2 <= f_high:
        raise ValueError(f"sfreq {sfreq} Hz has Nyquist {sfreq / 2} Hz, not above the highest band edge "
                         f"{f_high} Hz; fix: resample to > {2 * f_high:g} Hz (the paper uses 200 Hz)")
    need_s = 1.0 / f_low
    dur_s = n_times / sfreq
    if dur_s + 1e-9 < need_s:
        raise ValueError(
            f"window of {dur_s:.3g} s ({n_times} samples at {sfreq:g} Hz) is shorter than the {need_s:.3g} s "
            f"that the lowest band edge ({f_low:g} Hz) needs for a Welch resolution of {f_low:g} Hz; "
            f"fix: use windows of at least {need_s:.3g} s (the paper uses 4 s) or raise the lowest band edge")
    if welch_seconds + 1e-9 < need_s:
        raise ValueError(f"welch_seconds={welch_seconds} gives {1 / welch_seconds:.3g} Hz resolution, coarser than "
                         f"the {f_low:g} Hz lowest band edge; fix: welch_seconds >= {need_s:.3g}")
    if welch_seconds > dur_s + 1e-9:
        raise ValueError(f"welch_seconds={welch_seconds} is longer than the {dur_s:.3g} s window; "
                         f"fix: welch_seconds <= {dur_s:.3g}")
    flat = np.var(X, axis=-1) == 0
    if flat.any():
        bad = np.argwhere(flat)[:5].tolist()
        raise ValueError(f"{int(flat.sum())} flat (zero-variance) window-channels, e.g. (window, channel) {bad}: "
                         "Hjorth parameters and relative powers are undefined there; "
                         "fix: drop flat channels/windows (e.g. zero-padded dropped channels) before extraction")
    return X.astype(np.float64, copy=False)


# ------------------------------------------------------------------------------------- building blocks
def welch_psd(X: np.ndarray, sfreq: float, welch_seconds: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Welch power spectral density of every window and channel.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Signals (µV or z-scores).
    sfreq : float
        Sampling rate in Hz.
    welch_seconds : float
        Segment length in s (Hann window, 50 % overlap, mean over segments). 2 s gives 0.5 Hz resolution,
        the finest the δ lower edge (0.5 Hz) needs; a 4 s window then averages three segments.

    Returns
    -------
    freqs : ndarray, shape (n_freqs,)
        Frequencies in Hz.
    psd : ndarray, shape (n_windows, n_chans, n_freqs)
        Power spectral density in units²/Hz.
    """
    nperseg = int(round(welch_seconds * sfreq))
    return _sig.welch(X, fs=sfreq, window="hann", nperseg=nperseg, noverlap=nperseg // 2, axis=-1)


def _band_masks(freqs: np.ndarray, bands: Sequence[tuple[str, float, float]]) -> list[np.ndarray]:
    masks = []
    for name, lo, hi in bands:
        m = (freqs >= lo) & (freqs < hi)
        if not m.any():
            raise ValueError(f"band {name} [{lo}, {hi}) Hz holds no Welch frequency bin at "
                             f"{freqs[1] - freqs[0]:.3g} Hz resolution; fix: increase welch_seconds")
        masks.append(m)
    return masks


def relative_band_power(X: np.ndarray, sfreq: float, *, bands: Sequence[tuple[str, float, float]] = BANDS,
                        welch_seconds: float = 2.0) -> np.ndarray:
    """Relative band power by Welch's method (paper 001 §3.4).

    Power in each half-open band ``[low, high)`` divided by the power over the union of the bands
    (0.5–45 Hz by default), so the bands of one channel sum to 1.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Signals (µV or z-scores).
    sfreq : float
        Sampling rate in Hz.
    bands : sequence of (name, low Hz, high Hz)
        Bands, default :data:`BANDS`.
    welch_seconds : float
        Welch segment length in s (see :func:`welch_psd`).

    Returns
    -------
    ndarray, shape (n_windows, n_chans, n_bands)
        Relative power, in [0, 1].

    Raises
    ------
    ValueError
        If the window is shorter than ``1 / lowest band edge`` s, the Nyquist frequency is not above the
        highest band edge, a band holds no frequency bin, or a channel is flat.
    """
    X = _check_input(X, sfreq, None, welch_seconds, bands)
    freqs, psd = welch_psd(X, sfreq, welch_seconds)
    return _relative_from_psd(freqs, psd, bands)


def _relative_from_psd(freqs, psd, bands):
    masks = _band_masks(freqs, bands)
    bp = np.stack([psd[..., m].sum(-1) for m in masks], axis=-1)
    return bp / bp.sum(-1, keepdims=True)


def hjorth(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hjorth activity, mobility and complexity (Hjorth 1970; paper 001 §3.4).

    Activity is the variance; mobility ``sqrt(var(x') / var(x))`` with ``x'`` the first difference, in
    radians per sample (a sine of frequency f sampled at fs gives ``2·sin(π f / fs)``, within 1 % of
    ``2π f / fs`` below ≈ 0.078·fs, i.e. 15.6 Hz at 200 Hz); complexity is ``mobility(x') / mobility(x)``
    (dimensionless, 1 for a sine). The same formulas as :func:`antropy.hjorth_params` (checked equal in the
    tests), written out in numpy because importing antropy compiles its Numba kernels (≈ 20 s), which only the
    enhanced family needs.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Signals (µV or z-scores).

    Returns
    -------
    activity : ndarray, shape (n_windows, n_chans)
        Variance, in input units squared (µV² for µV input).
    mobility : ndarray, shape (n_windows, n_chans)
        rad/sample.
    complexity : ndarray, shape (n_windows, n_chans)
        Dimensionless.
    """
    X = np.asarray(X, dtype=np.float64)
    dx = np.diff(X, axis=-1)
    ddx = np.diff(dx, axis=-1)
    v0, v1, v2 = np.var(X, axis=-1), np.var(dx, axis=-1), np.var(ddx, axis=-1)
    mobility = np.sqrt(v1 / v0)
    complexity = np.sqrt(v2 / v1) / mobility
    return v0, mobility, complexity


def spectral_entropy(freqs: np.ndarray, psd: np.ndarray, fmin: float = 0.5, fmax: float = 45.0) -> np.ndarray:
    """Normalised Shannon spectral entropy (Inouye et al. 1991; paper 001 §3.4).

    Shannon entropy (:func:`scipy.stats.entropy`) of the Welch spectrum restricted to ``[fmin, fmax)`` Hz
    and normalised to a distribution, divided by ``log(n_bins)`` so a flat spectrum gives 1 and a single
    line gives 0. The range is the union of the five bands, which keeps filter roll-off and mains lines
    (50/60 Hz) out of the estimate.

    Parameters
    ----------
    freqs : ndarray, shape (n_freqs,)
        Hz.
    psd : ndarray, shape (..., n_freqs)
        Power spectral density.

    Returns
    -------
    ndarray, shape psd.shape[:-1]
        Entropy in [0, 1].
    """
    m = (freqs >= fmin) & (freqs < fmax)
    p = psd[..., m]
    return _st.entropy(p, axis=-1) / np.log(m.sum())


def default_coherence_pairs(n_chans: int, max_pairs: int = MAX_COHERENCE_PAIRS) -> list[tuple[int, int]]:
    """Study-defined channel pairs for the coherence summaries (at most ``max_pairs``; paper 001 §3.4).

    Channel-index-based, like the paper's other study-defined summaries: neighbours in channel order
    ``(0, 1), (1, 2), …`` first, then pairs two apart ``(0, 2), (1, 3), …``, and so on, until ``max_pairs``
    pairs are taken. 19 channels give the 18 neighbour pairs plus (0, 2) and (1, 3); 2 channels give (0, 1).

    Raises
    ------
    ValueError
        If ``n_chans < 2``.
    """
    if n_chans < 2:
        raise ValueError(f"coherence needs at least 2 channels, got {n_chans}; "
                         "fix: use the simple family for single-channel data")
    pairs = []
    for lag in range(1, n_chans):
        for i in range(n_chans - lag):
            pairs.append((i, i + lag))
            if len(pairs) == max_pairs:
                return pairs
    return pairs


def mean_band_coherence(X: np.ndarray, sfreq: float, pairs: Sequence[tuple[int, int]], *,
                        bands: Sequence[str] = COHERENCE_BANDS, welch_seconds: float = 2.0) -> np.ndarray:
    """Magnitude-squared coherence averaged over frequency bins of each band and over channel pairs.

    Uses :func:`scipy.signal.coherence` (Welch cross-spectra, same segments as :func:`welch_psd`). With the
    three 2 s segments of a 4 s window, independent channels already give a coherence of about 1/3 (the
    estimator's bias for few segments); the summary is comparative across windows, not an absolute coupling.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
    sfreq : float
        Hz.
    pairs : sequence of (int, int)
        Channel-index pairs.
    bands : sequence of str
        Names from :data:`BANDS`.

    Returns
    -------
    ndarray, shape (n_windows, n_bands)
        Mean coherence in [0, 1].
    """
    i = np.array([p[0] for p in pairs])
    j = np.array([p[1] for p in pairs])
    nperseg = int(round(welch_seconds * sfreq))
    freqs, coh = _sig.coherence(X[:, i], X[:, j], fs=sfreq, window="hann", nperseg=nperseg,
                                noverlap=nperseg // 2, axis=-1)
    lookup = {b[0]: b for b in BANDS}
    masks = _band_masks(freqs, [lookup[b] for b in bands])
    return np.stack([coh[..., m].mean(-1).mean(-1) for m in masks], axis=-1)


def haar_relative_energy(X: np.ndarray, levels: int = WAVELET_LEVELS) -> np.ndarray:
    """Study-defined Haar wavelet energy (Mallat 1989; paper 001 §3.4).

    Each window-channel is demeaned and decomposed by :func:`pywt.wavedec` (``'haar'``, ``levels`` levels);
    the energy (sum of squared coefficients) of detail levels D1…D``levels`` is divided by the total energy
    of all coefficients (the signal energy, by orthonormality). The approximation share is ``1 − sum`` and is
    not returned. At 200 Hz the four details cover ≈ 50–100, 25–50, 12.5–25 and 6.25–12.5 Hz.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
    levels : int
        Decomposition depth.

    Returns
    -------
    ndarray, shape (n_windows, n_chans, levels)
        Relative energy of D1 … D``levels``, in [0, 1].

    Raises
    ------
    ValueError
        If the window is too short for ``levels`` Haar levels.
    """
    pywt = _require("pywt", "PyWavelets")
    n_times = X.shape[-1]
    if pywt.dwt_max_level(n_times, "haar") < levels:
        raise ValueError(f"{n_times} samples allow only {pywt.dwt_max_level(n_times, 'haar')} Haar levels, "
                         f"{levels} requested; fix: use longer windows")
    x = X - X.mean(-1, keepdims=True)
    coeffs = pywt.wavedec(x, "haar", level=levels, axis=-1)  # [cA_L, cD_L, ..., cD_1]
    energy = np.stack([np.sum(c ** 2, axis=-1) for c in coeffs], axis=-1)
    total = energy.sum(-1, keepdims=True)
    details = energy[..., 1:][..., ::-1]  # D1 ... D_L
    return details / total


def _per_channel_loop(X: np.ndarray, fn, desc: str, progress: bool) -> np.ndarray:
    n_w, n_c, _ = X.shape
    out = np.empty((n_w, n_c))
    for w in tqdm(range(n_w), desc=desc, disable=not progress, leave=False):
        for c in range(n_c):
            out[w, c] = fn(np.ascontiguousarray(X[w, c]))
    return out


def sample_entropy(X: np.ndarray, order: int = 2, *, progress: bool = False) -> np.ndarray:
    """Sample entropy per window and channel (Richman & Moorman 2000; paper 001 §3.4).

    :func:`antropy.sample_entropy` with embedding dimension ``order``, tolerance ``0.2·SD`` of the
    window-channel and the Chebyshev distance (antropy's Numba path for windows < 5000 samples).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)

    Returns
    -------
    ndarray, shape (n_windows, n_chans)
        Nats.

    Raises
    ------
    ValueError
        If some window-channel has no template match (entropy undefined or infinite).
    """
    antropy = _require("antropy", "antropy")
    out = _per_channel_loop(X, lambda x: antropy.sample_entropy(x, order=order), "sample entropy", progress)
    if not np.all(np.isfinite(out)):
        bad = np.argwhere(~np.isfinite(out))[:5].tolist()
        raise ValueError(f"sample entropy undefined (no template matches) for {int((~np.isfinite(out)).sum())} "
                         f"window-channels, e.g. (window, channel) {bad}; fix: drop those windows (near-constant "
                         "or clipped signal)")
    return out


def dfa_exponent(X: np.ndarray, *, progress: bool = False) -> np.ndarray:
    """Window-scale detrended fluctuation analysis exponent (Peng et al. 1995; paper 001 §3.4).

    :func:`antropy.detrended_fluctuation`: box sizes from 4 samples to 10 % of the window, spaced by a factor
    1.2. On a 4 s window this is a short-window summary, not evidence of long-range temporal scaling (§3.4).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)

    Returns
    -------
    ndarray, shape (n_windows, n_chans)
        Dimensionless scaling exponent α.
    """
    antropy = _require("antropy", "antropy")
    return _per_channel_loop(X, antropy.detrended_fluctuation, "DFA", progress)


# ------------------------------------------------------------------------------------------ families
def n_features(family: str, n_chans: int, *, study_summaries: bool = True) -> int:
    """Feature count of a family: ``9·N_ch + 2`` (simple) or ``15·N_ch + 6`` (enhanced), paper 001 §3.4.

    Without the two study-defined summaries: ``9·N_ch`` and ``15·N_ch + 4``.

    Raises
    ------
    ValueError
        For an unknown family.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown feature family {family!r}; fix: use one of {FAMILIES}")
    base = 9 * n_chans + (2 if study_summaries else 0)
    return base if family == "simple" else base + 6 * n_chans + len(COHERENCE_BANDS)


def simple_features(X: np.ndarray, sfreq: float, ch_names: Sequence[str], *, study_summaries: bool = True,
                    welch_seconds: float = 2.0) -> tuple[np.ndarray, list[str]]:
    """Simple handcrafted family, ``9·N_ch + 2`` features per window (paper 001 §3.4).

    Per channel (feature-major blocks, channels in input order): relative power in δ, θ, α, β, γ
    (:func:`relative_band_power`), Hjorth activity, mobility, complexity (:func:`hjorth`) and normalised
    spectral entropy (:func:`spectral_entropy`). Then the two study-defined, channel-index-based summaries:

    * ``alpha_asym``: ``ln(rel α of channel 1) − ln(rel α of channel 0)`` (a right-minus-left proxy when the
      first two channels form a homologous pair, e.g. Fp2/Fp1 — the paper defines it by index, not by name);
    * ``theta_mean_first4``: mean relative θ over channels 0…min(4, N_ch)−1.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Windows (µV, or z-scores after per-channel normalisation).
    sfreq : float
        Sampling rate in Hz; must exceed 90 Hz (γ upper edge 45 Hz).
    ch_names : sequence of str, length n_chans
        Channel names, used for the feature names.
    study_summaries : bool
        Append the two summaries (False: the paper's Sleep-EDF ``9·N_ch`` variant).
    welch_seconds : float
        Welch segment length in s; at least 2 s for the 0.5 Hz δ edge.

    Returns
    -------
    F : ndarray, shape (n_windows, 9·n_chans + 2)
        Features (float64).
    names : list of str
        One name per column, e.g. ``"relpow_alpha|O1"``.

    Raises
    ------
    ValueError
        If the window is shorter than 2 s (the 0.5 Hz δ edge), sfreq ≤ 90 Hz, X is not 3-D or not finite,
        a channel is flat, ``len(ch_names) != n_chans``, or ``study_summaries`` with fewer than 2 channels.
    """
    F, names, _ = _simple(X, sfreq, ch_names, study_summaries, welch_seconds)
    return F, names


def _simple(X, sfreq, ch_names, study_summaries, welch_seconds):
    X = _check_input(X, sfreq, ch_names, welch_seconds, BANDS)
    n_w, n_c, _ = X.shape
    if study_summaries and n_c < 2:
        raise ValueError("the alpha-asymmetry summary needs at least 2 channels, got 1; "
                         "fix: study_summaries=False")
    freqs, psd = welch_psd(X, sfreq, welch_seconds)
    rel = _relative_from_psd(freqs, psd, BANDS)  # (n_w, n_c, 5)
    act, mob, comp = hjorth(X)
    sent = spectral_entropy(freqs, psd, BANDS[0][1], BANDS[-1][2])
    blocks = [rel[..., k] for k in range(len(BANDS))] + [act, mob, comp, sent]
    kinds = [f"relpow_{b[0]}" for b in BANDS] + ["hjorth_activity", "hjorth_mobility", "hjorth_complexity",
                                                 "spectral_entropy"]
    F = np.concatenate(blocks, axis=1)
    names = [f"{k}|{ch}" for k in kinds for ch in ch_names]
    if study_summaries:
        a = rel[..., 2]
        asym = np.log(a[:, 1]) - np.log(a[:, 0])
        theta4 = rel[:, : min(4, n_c), 1].mean(-1)
        F = np.concatenate([F, asym[:, None], theta4[:, None]], axis=1)
        names += [f"alpha_asym|{ch_names[1]}-{ch_names[0]}", "theta_mean_first4"]
    return F, names, X


def enhanced_features(X: np.ndarray, sfreq: float, ch_names: Sequence[str], *, study_summaries: bool = True,
                      welch_seconds: float = 2.0, coherence_pairs: Sequence[tuple[str, str]] | None = None,
                      max_pairs: int = MAX_COHERENCE_PAIRS, sampen_order: int = 2,
                      progress: bool = False) -> tuple[np.ndarray, list[str]]:
    """Enhanced handcrafted family, ``15·N_ch + 6`` features per window (paper 001 §3.4).

    The simple family (:func:`simple_features`) followed by, per channel, sample entropy
    (:func:`sample_entropy`), the DFA exponent (:func:`dfa_exponent`) and relative Haar energy of D1–D4
    (:func:`haar_relative_energy`), then the mean magnitude-squared coherence in δ, θ, α, β over at most
    ``max_pairs`` channel pairs (:func:`mean_band_coherence`, pairs from :func:`default_coherence_pairs`
    unless given by name).

    Sample entropy dominates the cost (≈ 1.3 ms per window-channel of 800 samples on an idle core). Measured
    for 300 windows of 4 s at 200 Hz, one thread: 19 channels ≈ 16 s, 64 channels ≈ 35–60 s (the upper value
    on a loaded 2-core machine); the first call in a process adds 13–20 s for antropy's Numba compilation.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
        Windows (µV or z-scores).
    sfreq : float
        Hz, > 90.
    ch_names : sequence of str, length n_chans
    study_summaries : bool
        Keep the simple family's two study-defined summaries (False gives ``15·N_ch + 4``).
    welch_seconds : float
        Welch / coherence segment length in s.
    coherence_pairs : sequence of (str, str), optional
        Channel-name pairs; default :func:`default_coherence_pairs`.
    max_pairs : int
        Cap on the number of pairs (the paper: 20).
    sampen_order : int
        Sample-entropy embedding dimension.
    progress : bool
        Show tqdm bars for the per-channel loops.

    Returns
    -------
    F : ndarray, shape (n_windows, 15·n_chans + 6)
    names : list of str

    Raises
    ------
    ValueError
        Everything :func:`simple_features` raises; fewer than 2 channels; unknown or too many coherence
        pairs; undefined sample entropy.
    """
    F0, names, X = _simple(X, sfreq, ch_names, study_summaries, welch_seconds)
    n_c = X.shape[1]
    if coherence_pairs is None:
        pairs = default_coherence_pairs(n_c, max_pairs)
    else:
        idx = {ch: k for k, ch in enumerate(ch_names)}
        missing = sorted({c for p in coherence_pairs for c in p} - set(idx))
        if missing:
            raise ValueError(f"coherence pairs name channels {missing} not in ch_names {list(ch_names)}")
        if not 0 < len(coherence_pairs) <= max_pairs:
            raise ValueError(f"{len(coherence_pairs)} coherence pairs given; the family allows 1..{max_pairs}")
        if any(a == b for a, b in coherence_pairs):
            raise ValueError("a coherence pair names the same channel twice (coherence 1 by construction)")
        pairs = [(idx[a], idx[b]) for a, b in coherence_pairs]
    se = sample_entropy(X, sampen_order, progress=progress)
    dfa = dfa_exponent(X, progress=progress)
    wav = haar_relative_energy(X, WAVELET_LEVELS)
    coh = mean_band_coherence(X, sfreq, pairs, welch_seconds=welch_seconds)
    blocks = [se, dfa] + [wav[..., k] for k in range(WAVELET_LEVELS)]
    kinds = ["sample_entropy", "dfa_alpha"] + [f"haar_rel_energy_D{k + 1}" for k in range(WAVELET_LEVELS)]
    F = np.concatenate([F0] + blocks + [coh], axis=1)
    names = names + [f"{k}|{ch}" for k in kinds for ch in ch_names] + [f"msc_{b}|mean{len(pairs)}pairs"
                                                                       for b in COHERENCE_BANDS]
    return F, names


def handcrafted_features(X: np.ndarray, sfreq: float, ch_names: Sequence[str], family: str = "simple",
                         **kwargs) -> tuple[np.ndarray, list[str]]:
    """Dispatch to :func:`simple_features` or :func:`enhanced_features` by ``family`` (paper 001 §3.4).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_chans, n_times)
    sfreq : float
        Hz.
    ch_names : sequence of str
    family : {"simple", "enhanced"}
    **kwargs
        Passed to the family's function.

    Returns
    -------
    F : ndarray, shape (n_windows, n_features(family, n_chans))
    names : list of str

    Raises
    ------
    ValueError
        For an unknown family, and everything the family's function raises.
    """
    if family == "simple":
        return simple_features(X, sfreq, ch_names, **kwargs)
    if family == "enhanced":
        return enhanced_features(X, sfreq, ch_names, **kwargs)
    raise ValueError(f"unknown feature family {family!r}; fix: use one of {FAMILIES}")
