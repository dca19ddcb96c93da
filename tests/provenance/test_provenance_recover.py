"""Recover (paper 000 §3.1, App. C): LPI in bits with identity-aware and naive intervals."""
import numpy as np
import pytest

from eegfm_bench.provenance.recover import linear_provenance_information


def _data(seed, shift, subject_offset=0.0, n_subj=60, win=8, d=10, subject_level_prov=False):
    rng = np.random.default_rng(seed)
    subject = np.repeat(np.arange(n_subj), win)
    n = subject.size
    groups = np.array(["orig", "avg", "Cz"])
    prov = (rng.integers(0, 3, n_subj)[subject] if subject_level_prov else rng.integers(0, 3, n))
    centers = rng.standard_normal((3, d)) * shift
    z = rng.standard_normal((n, d)) + centers[prov] + subject_offset * rng.standard_normal((n_subj, d))[subject]
    split = np.where(subject < 30, "train", np.where(subject < 40, "val", "test"))
    return z, groups[prov], subject, split


def _lpi(z, p, subject, split, **kw):
    m = {s: split == s for s in ("train", "val", "test")}
    return linear_provenance_information(z[m["train"]], p[m["train"]], z[m["val"]], p[m["val"]], z[m["test"]],
                                         p[m["test"]], subject[m["test"]], n_boot=300, **kw)


def test_lpi_is_zero_for_independent_provenance():
    z, p, subject, split = _data(0, shift=0.0)
    r = _lpi(z, p, subject, split)
    assert abs(r.lpi_bits) < 0.02
    assert r.low <= 0 <= r.high
    # baseline is the training-prevalence log-loss: close to log2 3 for three near-balanced groups
    assert r.baseline_bits == pytest.approx(np.log2(3), abs=0.02)
    assert r.probe_bits == pytest.approx(r.baseline_bits - r.lpi_bits, abs=1e-12)


def test_lpi_approaches_the_baseline_when_provenance_is_decodable():
    z, p, subject, split = _data(1, shift=4.0)
    r = _lpi(z, p, subject, split)
    assert r.probe_accuracy == 1.0
    # a perfect calibrated probe gains the whole baseline log-loss (≈ log2 3 bits per window)
    assert r.lpi_bits == pytest.approx(r.baseline_bits, abs=1e-3)
    assert r.baseline_bits == pytest.approx(np.log2(3), abs=0.02)
    assert r.low > 1.5 and r.unit == "window"


def test_identity_aware_interval_is_wider_than_naive():
    # provenance fixed per subject and subject offsets: windows of a subject are not independent
    z, p, subject, split = _data(2, shift=1.0, subject_offset=1.5, subject_level_prov=True)
    r = _lpi(z, p, subject, split)
    assert r.to_dict()["width_ratio"] > 2.0
    assert r.n_clusters == 20 and r.n_test == 160


def test_single_provenance_group_raises():
    z, p, subject, split = _data(3, shift=1.0)
    p = np.full_like(p, "orig")
    with pytest.raises(ValueError, match="single group"):
        _lpi(z, p, subject, split)
