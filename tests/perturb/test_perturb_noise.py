"""Additive noise at a target SNR, pink spectrum, filtering (paper 003 App. D.1, D.4)."""
import numpy as np
import pytest
import scipy.linalg
import scipy.signal
import torch

from eegfm_bench.perturb.noise import (
    NOISE_METHODS,
    FilterSpec,
    add_noise,
    filtered_noise,
    pink_noise,
    signal_power,
    snr_db,
    substitute_with_noise,
)
from eegfm_bench.registry import UnknownNameError

SFREQ = 200.0
METHODS = [m for m in NOISE_METHODS if m != "auto"]  # "covariance", "spectral" and the "convolve" reference


def sinusoids(batch=3, n_chans=4, n_times=800, sfreq=SFREQ, dtype=np.float32):
    """Trial b, channel c: A_b sin(2 pi f_c t) + a DC offset of 50 µV (removed by the demeaning of D.1).

    Every f_c has an integer number of cycles in the window, so P_s = A_b^2 / 2 exactly.
    """
    t = np.arange(n_times) / sfreq
    amps = 10.0 * (1 + np.arange(batch))  # µV
    freqs = 5.0 * (1 + np.arange(n_chans))  # Hz
    x = amps[:, None, None] * np.sin(2 * np.pi * freqs[None, :, None] * t) + 50.0
    return x.astype(dtype), amps**2 / 2


def welch_slope(noise, sfreq, fmin, fmax):
    f, psd = scipy.signal.welch(noise, fs=sfreq, nperseg=400, axis=-1)
    psd = psd.reshape(-1, psd.shape[-1]).mean(axis=0)
    band = (f >= fmin) & (f <= fmax)
    return np.polyfit(np.log10(f[band]), np.log10(psd[band]), 1)[0]


def test_signal_power_is_the_d1_formula():
    x, expected = sinusoids(dtype=np.float64)
    np.testing.assert_allclose(signal_power(x), expected, rtol=1e-9)
    # over a subset of channels, and on a torch tensor
    np.testing.assert_allclose(signal_power(torch.from_numpy(x), picks=[1, 3]), expected, rtol=1e-9)


@pytest.mark.parametrize("kind,snr,method", [("white", s, "auto") for s in (10, 5, 0, -3, -5, -15)]
                         + [("pink", s, "auto") for s in (10, 5, 0, -3, -5)]
                         + [(k, s, m) for k in ("white", "pink") for s in (10, -5) for m in METHODS])
def test_snr_measured_back(kind, snr, method):
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    x, p_s = sinusoids()
    y = add_noise(x, snr, kind, filt, rng=7, method=method)
    assert y.dtype == np.float32 and y.shape == x.shape
    noise = y.astype(np.float64) - x
    np.testing.assert_allclose(snr_db(x, noise), snr, atol=0.1)
    # the noise power, independently: P_s / 10^(snr/10) with P_s = A^2 / 2
    np.testing.assert_allclose(signal_power(noise), p_s / 10 ** (snr / 10), rtol=0.02)


@pytest.mark.parametrize("method,shape", [("auto", (4, 8, 4000)), ("covariance", (16, 8, 1000)),
                                          ("spectral", (16, 8, 1000)), ("convolve", (16, 8, 1000))])
def test_pink_spectrum_has_slope_minus_one_in_the_pass_band(method, shape):
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    noise = filtered_noise("pink", shape, filt, rng=1, method=method)
    assert welch_slope(noise, SFREQ, 2.0, 30.0) == pytest.approx(-1.0, abs=0.1)
    white = filtered_noise("white", shape, filt, rng=1, method=method)
    assert welch_slope(white, SFREQ, 2.0, 30.0) == pytest.approx(0.0, abs=0.1)


def test_unfiltered_pink_noise_slope_and_zero_dc():
    noise = pink_noise((8, 8000), SFREQ, rng=3)
    assert welch_slope(noise, SFREQ, 1.0, 80.0) == pytest.approx(-1.0, abs=0.1)


def test_noise_is_band_passed_and_notched_like_the_data():
    filt = FilterSpec(SFREQ, 1.0, 70.0, 50.0)
    noise = filtered_noise("white", (4, 8, 4000), filt, rng=2)
    f, psd = scipy.signal.welch(noise, fs=SFREQ, nperseg=4000, axis=-1)
    psd = psd.reshape(-1, psd.shape[-1]).mean(axis=0)
    passband = np.median(psd[(f > 5) & (f < 40)])
    assert psd[np.argmin(np.abs(f - 50.0))] < 0.05 * passband  # notch
    assert psd[(f > 90)].max() < 1e-3 * passband  # low-pass at 70 Hz (transition band ends at 87.5 Hz)
    assert psd[(f > 0) & (f < 0.3)].max() < 0.05 * passband  # high-pass at 1 Hz


@pytest.mark.parametrize("filt", [FilterSpec(160.0, 0.5, 45.0, 60.0), FilterSpec(250.0, 1.0, None, (50.0, 100.0)),
                                  FilterSpec(250.0, None, 30.0, None)])
def test_fast_filter_equals_mne_filter_data_and_notch_filter(filt):
    pad = filt.pad_samples()
    rows = np.random.default_rng(0).standard_normal((3, 500 + 2 * pad))
    fast = filt.apply(rows)
    ref = filt.apply_mne(rows)[:, pad:-pad]
    assert fast.shape == (3, 500)
    np.testing.assert_allclose(fast, ref, atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("method", METHODS)
def test_no_filter_edge_effects_in_short_windows(method):
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)  # filter much longer than the 1-s window
    noise = filtered_noise("white", (400, 4, 200), filt, rng=4, method=method)
    var_t = noise.var(axis=(0, 1))
    np.testing.assert_allclose(var_t[:10].mean() / var_t[90:110].mean(), 1.0, atol=0.1)
    np.testing.assert_allclose(var_t[-10:].mean() / var_t[90:110].mean(), 1.0, atol=0.1)


@pytest.mark.parametrize("method", NOISE_METHODS)
def test_noise_does_not_depend_on_batch_size(method):
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    x = np.random.default_rng(5).standard_normal((6, 4, 300))
    whole = add_noise(x, 0.0, "pink", filt, np.random.default_rng(11), method=method)
    gen = np.random.default_rng(11)
    parts = np.concatenate([add_noise(x[:2], 0.0, "pink", filt, gen, method=method),
                            add_noise(x[2:], 0.0, "pink", filt, gen, method=method)])
    np.testing.assert_allclose(parts, whole, rtol=0, atol=1e-12)


def expected_welch(h, nperseg, fs):
    """Exact expectation of scipy's one-sided Welch PSD (hann, no detrend) of unit white noise through FIR ``h``.

    ``E[P(f)] ~ sum_tau r(tau) c_w(tau) cos(2 pi f tau)`` with ``r`` the autocovariance of the filtered noise
    (the autocorrelation of the MNE coefficients, computed here independently of the noise module's FFTs) and
    ``c_w`` the window's; DC and Nyquist are not doubled in a one-sided PSD. Up to a constant factor.
    """
    r = np.correlate(h, h, "full")  # lags -(L-1)..L-1
    n_taps = len(h)
    w = scipy.signal.get_window("hann", nperseg)
    lags = np.arange(-(nperseg - 1), nperseg)
    inside = np.abs(lags) <= n_taps - 1
    r_lags = np.where(inside, r[np.clip(lags + n_taps - 1, 0, 2 * n_taps - 2)], 0.0)
    f = np.arange(nperseg // 2 + 1) * fs / nperseg
    psd = (r_lags * np.correlate(w, w, "full")) @ np.cos(2 * np.pi * np.outer(lags, f) / fs)
    psd[1:-1] *= 2.0
    return f, psd


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("filt", [FilterSpec(SFREQ, 1.0, 70.0, 50.0), FilterSpec(250.0, None, 30.0, None)])
def test_white_noise_psd_is_the_filter_response(method, filt):
    """Welch PSD of generated white noise = its exact expectation from the MNE kernel, at every frequency.

    Tolerance: 512 traces of 1000 samples, Welch with 500-sample non-overlapping hann segments, averages K = 1024
    nearly independent periodograms, so each bin's relative standard error is 1 / sqrt(K) = 3.1% (4.4% at DC and
    Nyquist, one real degree of freedom). Every bin must lie within 20% (> 6 standard errors: no false failures
    over ~250 bins; it still catches a moved band edge, a missing notch, a tilt) and the RMS over bins within 6%
    (about 2 standard errors; catches small systematic errors). Bins whose expectation is below 1e-7 of the pass
    band are only required to stay below 1e-6 of it.
    """
    nperseg = 500
    noise = filtered_noise("white", (64, 8, 1000), filt, rng=2, method=method)
    f, psd = scipy.signal.welch(noise, fs=filt.sfreq, nperseg=nperseg, noverlap=0, detrend=False, axis=-1)
    psd = psd.reshape(-1, psd.shape[-1]).mean(axis=0)
    f_exp, expected = expected_welch(filt.kernel(), nperseg, filt.sfreq)
    np.testing.assert_allclose(f, f_exp)
    band = (f > 5) & (f < 25)
    psd, expected = psd / np.median(psd[band]), expected / np.median(expected[band])
    big = expected > 1e-7
    rel = psd[big] / expected[big] - 1.0
    assert np.abs(rel).max() < 0.2, f"worst bin {f[big][np.abs(rel).argmax()]} Hz: {rel[np.abs(rel).argmax()]:+.1%}"
    assert np.sqrt(np.mean(rel**2)) < 0.06
    assert np.all(psd[~big] < 1e-6)
    # and in plain words: flat in the pass band, ~0 in the stop bands and at the notch
    h_freq = filt.h_freq
    passband = (f > 3) & (f < 0.9 * h_freq) & (np.abs(f - 50.0) > 3 if filt.notch_freq else True)
    assert np.abs(psd[passband] - 1.0).max() < 0.2
    assert psd[f > h_freq + 0.25 * h_freq + 5].max() < 1e-4  # beyond MNE's transition band (25% of h_freq)
    if filt.notch_freq:
        # 0.4 Hz resolution: the hann main lobe spreads the 0.25 Hz-wide notch (expected ~0.08 of the pass band)
        assert psd[np.argmin(np.abs(f - 50.0))] < 0.1


def test_covariance_factor_is_the_reference_covariance():
    """``A A.T`` of the "covariance" method = the autocovariance of white noise through the MNE kernel."""
    from eegfm_bench.perturb.noise import _covariance_factor

    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    n_times = 300
    a_t = _covariance_factor(filt, "white", n_times).astype(np.float64)
    h = filt.kernel()
    r = np.correlate(h, h, "full")[len(h) - 1:len(h) - 1 + n_times]
    cov = a_t.T @ a_t
    np.testing.assert_allclose(cov / r[0], scipy.linalg.toeplitz(r) / r[0], atol=1e-6)


def test_unknown_method_raises():
    with pytest.raises(ValueError, match="method"):
        filtered_noise("white", (1, 1, 100), FilterSpec(SFREQ, 1.0, 40.0, None), 0, method="fast")


def test_seeded_and_reproducible():
    filt = FilterSpec(SFREQ, 1.0, 40.0, None)
    x, _ = sinusoids()
    np.testing.assert_array_equal(add_noise(x, 0, "white", filt, 3), add_noise(x, 0, "white", filt, 3))
    assert not np.allclose(add_noise(x, 0, "white", filt, 3), add_noise(x, 0, "white", filt, 4))
    with pytest.raises(TypeError, match="explicit seed"):
        add_noise(x, 0, "white", filt, None)


def test_torch_in_torch_out():
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    x, _ = sinusoids()
    y_t = add_noise(torch.from_numpy(x), -3, "white", filt, 9)
    assert isinstance(y_t, torch.Tensor) and y_t.dtype == torch.float32
    np.testing.assert_array_equal(y_t.numpy(), add_noise(x, -3, "white", filt, 9))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_snr_raises(bad):
    x, _ = sinusoids()
    with pytest.raises(ValueError, match="finite"):
        add_noise(x, bad, "white", FilterSpec(SFREQ, 1.0, 40.0, None), 0)


def test_errors():
    filt = FilterSpec(SFREQ, 1.0, 40.0, None)
    x, _ = sinusoids()
    with pytest.raises(UnknownNameError, match="white, pink"):
        add_noise(x, 0, "brown", filt, 0)
    flat = x.copy()
    flat[1] = 3.0  # constant trial: zero power after demeaning
    with pytest.raises(ValueError, match=r"trials \[1\]"):
        add_noise(flat, 0, "white", filt, 0)
    with pytest.raises(ValueError, match="batch, n_chans, n_times"):
        add_noise(x[0], 0, "white", filt, 0)
    with pytest.raises(ValueError, match="h_freq"):
        FilterSpec(SFREQ, 1.0, 150.0, None)


def test_picks_only_perturb_those_channels():
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    x, p_s = sinusoids(n_chans=6)
    y = add_noise(x, 5.0, "white", filt, 0, picks=[1, 4])
    np.testing.assert_array_equal(y[:, [0, 2, 3, 5]], x[:, [0, 2, 3, 5]])
    np.testing.assert_allclose(snr_db(x, y.astype(np.float64) - x, picks=[1, 4]), 5.0, atol=0.1)


def test_substitution_matches_median_rms_of_intact_channels():
    filt = FilterSpec(SFREQ, 1.0, 40.0, 50.0)
    x, _ = sinusoids(batch=2, n_chans=5, n_times=2000)
    x = x.astype(np.float64)
    x[:, 3] *= 4.0  # give the intact channels different RMS values
    y = substitute_with_noise(x, [1, 2], filt, 0)
    np.testing.assert_array_equal(y[:, [0, 3, 4]], x[:, [0, 3, 4]])
    intact_rms = np.sqrt((x[:, [0, 3, 4]] ** 2).mean(-1))
    sub = y[:, [1, 2]]
    np.testing.assert_allclose(np.sqrt((sub**2).mean(-1)), np.median(intact_rms, axis=1)[:, None] * [1, 1], rtol=1e-9)
    np.testing.assert_allclose(sub.mean(-1), 0.0, atol=1e-9)
    # none of the original signal remains
    for b in range(2):
        for c_new, c_old in ((0, 1), (1, 2)):
            assert abs(np.corrcoef(sub[b, c_new], x[b, c_old])[0, 1]) < 0.15
