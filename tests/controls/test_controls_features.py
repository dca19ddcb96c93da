"""Handcrafted comparator families (paper 001 §3.4) on synthetic signals with known answers."""
import numpy as np
import pytest

from eegfm_bench.controls import features as F

FS = 200.0
T = np.arange(int(4 * FS)) / FS  # 4 s windows, as in the paper


def sine(f, n_windows=3, n_chans=2, amp=1.0, phase=0.0):
    x = amp * np.sin(2 * np.pi * f * T + phase)
    return np.broadcast_to(x, (n_windows, n_chans, T.size)).copy()


def noise(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_sine_10hz_puts_alpha_above_095_and_bands_sum_to_one():
    X = sine(10.0) + 0.05 * noise((3, 2, T.size))
    rel = F.relative_band_power(X, FS)
    assert rel.shape == (3, 2, 5)
    assert np.all(rel[..., 2] >= 0.95)  # alpha is index 2
    np.testing.assert_allclose(rel.sum(-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("f,band", [(2.0, 0), (6.0, 1), (20.0, 3), (38.0, 4)])
def test_each_band_captures_its_sine(f, band):
    rel = F.relative_band_power(sine(f), FS)
    assert np.all(rel[..., band] >= 0.95)


@pytest.mark.parametrize("f", [2.0, 5.0, 10.0, 15.0])
def test_hjorth_mobility_of_sine_is_angular_frequency_over_fs(f):
    act, mob, comp = F.hjorth(sine(f, amp=3.0))
    np.testing.assert_allclose(mob, 2 * np.pi * f / FS, rtol=0.01)
    np.testing.assert_allclose(comp, 1.0, rtol=0.01)
    np.testing.assert_allclose(act, 9.0 / 2, rtol=0.01)  # variance of a sine of amplitude 3


def test_hjorth_equals_antropy():
    import antropy

    X = noise((3, 4, T.size), seed=11)
    _, mob, comp = F.hjorth(X)
    m_ref, c_ref = antropy.hjorth_params(X, axis=-1)
    np.testing.assert_allclose(mob, m_ref, rtol=1e-12)
    np.testing.assert_allclose(comp, c_ref, rtol=1e-12)


@pytest.mark.parametrize("f", [20.0, 38.0])
def test_hjorth_mobility_is_the_first_difference_value_at_higher_frequency(f):
    # the first-difference derivative gives 2·sin(πf/fs); it departs from 2πf/fs by > 1 % above ≈ 0.078·fs
    _, mob, _ = F.hjorth(sine(f))
    np.testing.assert_allclose(mob, 2 * np.sin(np.pi * f / FS), rtol=2e-3)
    assert np.all(np.abs(mob / (2 * np.pi * f / FS) - 1) > 0.01)


def test_spectral_entropy_low_for_sine_high_for_white_noise():
    freqs, psd = F.welch_psd(np.concatenate([sine(10.0, 1, 1), noise((1, 1, T.size))]), FS)
    se = F.spectral_entropy(freqs, psd)
    assert se[0, 0] < 0.2
    assert se[1, 0] > 0.9


@pytest.mark.parametrize("n_chans", [2, 4, 19])
def test_feature_counts_match_the_paper(n_chans):
    X = noise((4, n_chans, T.size), seed=n_chans)
    ch = [f"C{i}" for i in range(n_chans)]
    fs_, names = F.simple_features(X, FS, ch)
    assert fs_.shape == (4, 9 * n_chans + 2) == (4, F.n_features("simple", n_chans))
    assert len(names) == len(set(names)) == fs_.shape[1]
    fe, names_e = F.enhanced_features(X, FS, ch)
    assert fe.shape == (4, 15 * n_chans + 6) == (4, F.n_features("enhanced", n_chans))
    assert len(names_e) == len(set(names_e)) == fe.shape[1]
    np.testing.assert_array_equal(fe[:, : fs_.shape[1]], fs_)  # enhanced extends simple
    assert np.all(np.isfinite(fe))


def test_without_study_summaries_gives_sleep_edf_counts():
    X = noise((3, 2, T.size))
    assert F.simple_features(X, FS, ["Fpz-Cz", "Pz-Oz"], study_summaries=False)[0].shape[1] == 18
    assert F.enhanced_features(X, FS, ["Fpz-Cz", "Pz-Oz"], study_summaries=False)[0].shape[1] == 34


def test_alpha_asymmetry_and_theta_summaries():
    X = 0.3 * noise((2, 4, T.size))
    X[:, 1] += np.sin(2 * np.pi * 10 * T)  # channel 1 carries much more alpha than channel 0
    X[:, :4] += 0.0
    fs_, names = F.simple_features(X, FS, ["Fp1", "Fp2", "F3", "F4"])
    assert names[-2] == "alpha_asym|Fp2-Fp1" and names[-1] == "theta_mean_first4"
    assert np.all(fs_[:, -2] > 1.0)  # ln ratio of relative alpha, strongly positive
    rel = F.relative_band_power(X, FS)
    np.testing.assert_allclose(fs_[:, -1], rel[:, :4, 1].mean(1))


@pytest.mark.parametrize("f,level", [(75.0, 0), (35.0, 1), (18.0, 2), (9.0, 3)])
def test_haar_energy_peaks_at_the_level_covering_the_frequency(f, level):
    # at 200 Hz: D1 50-100, D2 25-50, D3 12.5-25, D4 6.25-12.5 Hz (Haar filters leak, so "largest", > 0.5)
    e = F.haar_relative_energy(sine(f))
    assert np.all(e.argmax(-1) == level)
    assert np.all(e[..., level] > 0.5)
    assert np.all(e.sum(-1) <= 1.0 + 1e-12)


def test_coherence_identical_channels_near_one_independent_low():
    base = noise((3, 1, T.size), seed=1)
    same = np.concatenate([base, base + 0.01 * noise((3, 1, T.size), seed=2)], axis=1)
    indep = noise((3, 2, T.size), seed=3)
    pairs = F.default_coherence_pairs(2)
    assert pairs == [(0, 1)]
    assert np.all(F.mean_band_coherence(same, FS, pairs) > 0.99)
    assert np.all(F.mean_band_coherence(indep, FS, pairs) < 0.6)


def test_default_coherence_pairs_rule():
    p19 = F.default_coherence_pairs(19)
    assert len(p19) == 20
    assert p19[:18] == [(i, i + 1) for i in range(18)] and p19[18:] == [(0, 2), (1, 3)]
    assert len(F.default_coherence_pairs(64)) == 20
    assert len(F.default_coherence_pairs(5)) == 10  # all pairs when there are fewer than 20


def test_sample_entropy_and_dfa_known_regimes():
    white = noise((2, 1, T.size), seed=5)
    walk = np.cumsum(white, axis=-1)
    se_sine = F.sample_entropy(sine(10.0, 2, 1))
    se_white = F.sample_entropy(white)
    assert np.all(se_sine < 0.5) and np.all(se_white > 1.5)
    assert np.all(np.abs(F.dfa_exponent(white) - 0.5) < 0.2)
    assert np.all(np.abs(F.dfa_exponent(walk) - 1.5) < 0.25)


def test_short_window_raises_with_the_needed_length():
    X = noise((2, 3, int(1.0 * FS)))  # 1 s window, the 0.5 Hz delta edge needs 2 s
    with pytest.raises(ValueError, match=r"shorter than the 2 s.*fix: use windows of at least 2 s"):
        F.simple_features(X, FS, ["a", "b", "c"])


def test_bad_inputs_raise():
    ch = ["a", "b"]
    with pytest.raises(ValueError, match="Nyquist"):
        F.simple_features(noise((2, 2, 400)), 80.0, ch)
    flat = noise((2, 2, T.size))
    flat[1, 0] = 0.0
    with pytest.raises(ValueError, match="flat"):
        F.simple_features(flat, FS, ch)
    with pytest.raises(ValueError, match="ch_names"):
        F.simple_features(noise((2, 2, T.size)), FS, ["a"])
    with pytest.raises(ValueError, match="study_summaries=False"):
        F.simple_features(noise((2, 1, T.size)), FS, ["a"])
    with pytest.raises(ValueError, match="at least 2 channels"):
        F.enhanced_features(noise((2, 1, T.size)), FS, ["a"], study_summaries=False)
    with pytest.raises(TypeError):
        F.simple_features(np.ones((2, 2, T.size), dtype=int), FS, ch)
    with pytest.raises(ValueError, match="unknown feature family"):
        F.handcrafted_features(noise((2, 2, T.size)), FS, ch, family="fancy")
