"""Fidelity of the perturbations to paper 003 App. D (issue 12 items 1, 2, 4, 5), on the staged EEGMMIDB windows."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.signal

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.windows import load_windows
from eegfm_bench.perturb.channels import channel_key, dropout_mask
from eegfm_bench.perturb.conditions import PerturbContext, parse_condition
from eegfm_bench.perturb.evaluate import perturb_context
from eegfm_bench.perturb.noise import FilterSpec, filtered_noise

# Table 5, "Movement-PN Motor-Imagery-PN Eyes (64 ch)" (paper 003 App. D.2)
TABLE5_PN = {
    0.1: "FC1, FCZ, C2, C6, CP6, P3, P6, PO8, O2",
    0.3: "FC3, FC1, FCZ, C2, C6, CP3, CP2, CP6, FP1, F1, P7, P3, P2, P6, PO7, PO4, PO8, OZ, O2",
    0.5: "FC3, FC1, FCZ, C2, C6, CP3, CP2, CP4, CP6, FP1, AF3, F3, F1, F4, F6, FT8, T8, T10, TP7, P7, P3, P2, P6, P8, "
         "PO7, PO3, PO4, PO8, O1, OZ, O2",
}
PREP = Preprocessing(sfreq=160.0, l_freq=1.0, h_freq=40.0, window_s=4.0)


@pytest.fixture
def mi(data_root):
    return load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[1, 2], progress=False)


def _ctx(ws, **kw):
    return perturb_context(ws.meta, "eegmmidb_mi", 0, **kw)[0]


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_paper_masks_reproduce_table5_physionet_rows(mi, p):
    got = dropout_mask(mi.ch_names, p, 0, "eegmmidb", rule="paper").dropped
    assert [channel_key(c) for c in got] == TABLE5_PN[p].split(", ")
    hashed = dropout_mask(mi.ch_names, p, 0, "eegmmidb", rule="hashed").dropped
    assert [channel_key(c) for c in hashed] != TABLE5_PN[p].split(", ")  # the other rule is not the paper's
    assert _ctx(mi).mask == "paper"  # the sweep's default


def _reconstruction_r2(survivors: np.ndarray, target: np.ndarray) -> float:
    """R² of the best linear reconstruction of ``target`` (n_samples,) from ``survivors`` (n_samples, k)."""
    coef, *_ = np.linalg.lstsq(survivors, target, rcond=None)
    resid = target - survivors @ coef
    return 1.0 - resid.var() / target.var()


def _removed_r2(x: np.ndarray, ch_names, ctx) -> float:
    """R² of reconstructing the removed channels' sum from the survivors after ``dropout_p=0.3_removed``."""
    cond = parse_condition("dropout_p=0.3_removed")
    dropped = dropout_mask(ch_names, 0.3, 0, "eegmmidb", rule="paper").dropped
    gone = [list(ch_names).index(c) for c in dropped]
    out, names = cond.perturb(x, ch_names, 0, ctx)
    assert len(names) == len(ch_names) - len(dropped)
    return _reconstruction_r2(out.transpose(1, 0, 2).reshape(len(names), -1).T, x[:, gone].sum(axis=1).ravel())


def test_removed_channels_are_not_recoverable_after_re_referencing(mi):
    x = np.asarray(mi.X[:8], dtype=np.float64)
    old = _removed_r2(x, mi.ch_names, _ctx(mi, order="after_reference"))
    new = _removed_r2(x, mi.ch_names, _ctx(mi))
    assert 1 - old < 1e-9  # the old order: exactly minus the survivors' sum (a leak, whatever the brain does)
    assert 1 - new > 100 * max(1 - old, 1e-12) and new < 0.99  # what is left is EEG's spatial correlation only
    # spatially independent channels (CAR-referenced, as stored): nothing left to reconstruct
    rng = np.random.default_rng(0)
    iid = rng.standard_normal((8, 64, 640))
    iid -= iid.mean(axis=1, keepdims=True)
    assert 1 - _removed_r2(iid, mi.ch_names, _ctx(mi, order="after_reference")) < 1e-9
    assert _removed_r2(iid, mi.ch_names, _ctx(mi)) < 0.05
    out, _ = parse_condition("dropout_p=0.3_removed").perturb(x, mi.ch_names, 0, _ctx(mi))
    assert np.abs(out.sum(axis=1)).max() < 1e-6  # the survivors are re-referenced: they sum to zero again


def test_zero_padding_is_applied_after_the_re_reference(mi):
    x = np.asarray(mi.X[:4], dtype=np.float64)
    ctx = _ctx(mi)
    out, names = parse_condition("region=primary_zero").perturb(x, mi.ch_names, 0, ctx)
    zeroed = parse_condition("region=primary_zero").zeroed_channels(mi.ch_names, ctx)
    zi = [names.index(c) for c in zeroed]
    keep = [i for i in range(64) if i not in zi]
    assert np.all(out[:, zi] == 0) and np.abs(out[:, keep].sum(axis=1)).max() < 1e-6
    # average over the present channels only: equals a CAR of the signal with the region removed
    ref = x[:, keep] - x[:, keep].mean(axis=1, keepdims=True)
    np.testing.assert_allclose(out[:, keep], ref, atol=1e-9)
    old, _ = parse_condition("region=primary_zero").perturb(x, mi.ch_names, 0, _ctx(mi, order="after_reference"))
    np.testing.assert_allclose(old[:, keep], x[:, keep])  # the old order leaves the survivors as they were


def test_noise_is_referenced_like_the_signal(mi):
    x = np.asarray(mi.X[:4], dtype=np.float64)
    out, _ = parse_condition("white_snr=0dB").perturb(x, mi.ch_names, 0, _ctx(mi))
    assert np.abs(out.sum(axis=1)).max() < 1e-6  # common average reference holds after the noise
    clean, _ = parse_condition("clean").perturb(x, mi.ch_names, 0, _ctx(mi))
    assert clean is x


def test_noise_follows_the_datas_filter_path_when_resampled(data_root):
    """LaBraM's preprocessing on EEGMMIDB: filtered at 160 Hz, resampled to 200 Hz: no noise above 80 Hz."""
    prep = Preprocessing(sfreq=200.0, l_freq=0.1, h_freq=75.0, window_s=4.0, scale=1e4, unit="100 µV")
    ws = load_windows("eegmmidb_mi", prep, data_root=data_root, subjects=[1], progress=False)
    ctx = perturb_context(ws.meta, "eegmmidb_mi", 0)[0]
    assert ctx.filter.native_sfreq == 160.0 and ctx.filter.h_freq == 72.0

    def above(sig, f0=80.0):
        f, pxx = scipy.signal.welch(sig, fs=200.0, nperseg=256, axis=-1)
        pxx = pxx.reshape(-1, pxx.shape[-1]).mean(0)
        return pxx[f > f0].sum() / pxx.sum()

    data_frac = above(np.asarray(ws.X[:20], dtype=np.float64))
    new = above(filtered_noise("white", (20, 8, 800), ctx.filter, 0, method="spectral"))
    new_cov = above(filtered_noise("white", (20, 8, 800), ctx.filter, 0, method="covariance"))
    old_filt = FilterSpec(200.0, 0.1, 72.0, None)  # designed at the windows' rate: the old path
    old = above(filtered_noise("white", (20, 8, 800), old_filt, 0, method="spectral"))
    assert data_frac < 1e-4 and new < 1e-4 and new_cov < 1e-4
    assert old > 0.005  # ~1.1 % of the noise power sat above the data's band
    with pytest.raises(ValueError, match="resampled"):
        filtered_noise("white", (1, 1, 800), ctx.filter, 0, method="convolve")


def test_region_noise_basis_and_order_are_in_the_sweep_hash(mi):
    a = _ctx(mi).as_dict()
    assert a["region_power"] == "montage" and a["order"] == "before_reference" and a["mask"] == "paper"
    assert _ctx(mi, region_power="region").as_dict() != a
    with pytest.raises(ValueError, match="valid"):
        PerturbContext("d", "t", FilterSpec(160.0, None, None), 0, order="sideways")


def test_covariance_noise_does_not_depend_on_the_blas_thread_count(tmp_path):
    """The same seed gives the same noise with 1 and 2 BLAS threads (the symmetric square root is unique; the old
    V·sqrt(Λ) factor changed with the eigenvector basis LAPACK returned: 145 µV apart on the eegmmidb sweep)."""
    import subprocess
    import sys

    code = ("import numpy as np, sys; from eegfm_bench.perturb.noise import FilterSpec, filtered_noise; "
            "np.save(sys.argv[1], filtered_noise('white', (4, 3, 320), FilterSpec(160.0, 0.5, 45.0, 60.0), 7, "
            "method='covariance'))")
    out = {}
    for n in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / f"n{n}.npy")], check=True, env=env)
        out[n] = np.load(tmp_path / f"n{n}.npy")
    assert np.abs(out["1"] - out["2"]).max() < 1e-3 * np.abs(out["1"]).max()
