"""Paired reference views (paper 000 §4.2, App. E): re-referencing math and pairing checks."""
import mne
import numpy as np
import pytest

from eegfm_bench.provenance.views import make_reference_views, pair_views

CH = ["Fz", "Cz", "Pz", "C3", "C4"]


def _windows(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, len(CH), 50)) * 1e-5).astype(np.float32)


def test_reference_views_match_mne():
    X = _windows()
    out = make_reference_views(X, CH, views=("original", "average", "Cz"))
    assert out.shape == (3, 3, 5, 50) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, 0], X)
    info = mne.create_info(CH, sfreq=100.0, ch_types="eeg")
    for w in range(X.shape[0]):
        for k, ref in ((1, "average"), (2, ["Cz"])):
            raw = mne.io.RawArray(X[w].astype(np.float64), info, verbose="error")
            raw, _ = mne.set_eeg_reference(raw, ref_channels=ref, projection=False, verbose="error")
            np.testing.assert_allclose(out[w, k], raw.get_data(), rtol=0, atol=1e-11)
    # the average view has zero channel mean; Cz becomes identically zero in the Cz view
    np.testing.assert_allclose(out[:, 1].mean(axis=1), 0, atol=1e-11)
    assert np.all(out[:, 2, CH.index("Cz")] == 0)


def test_reference_view_missing_channel_names_it():
    X = _windows()
    with pytest.raises(ValueError, match=r"needs channel 'CZ'.*close: \['Cz'"):
        make_reference_views(X, CH, views=("original", "CZ"))
    with pytest.raises(ValueError, match="lacks"):
        make_reference_views(X[:, [0, 2, 3, 4]], ["Fz", "Pz", "C3", "C4"])
    with pytest.raises(ValueError, match="channel names for"):
        make_reference_views(X, CH[:4])


def test_pair_views_pairs_by_record_and_order():
    rng = np.random.default_rng(1)
    rec = np.array([7, 7, 3])  # three windows: two of record 7, one of record 3
    emb_v = {v: rng.standard_normal((3, 4)) for v in ("a", "b")}
    # long format, shuffled across views
    rows = [(v, i) for v in ("b", "a") for i in range(3)]
    emb = np.stack([emb_v[v][i] for v, i in rows])
    prov = np.array([v for v, _ in rows])
    record = np.array([rec[i] for _, i in rows])
    pv = pair_views(emb, prov, record, views=("a", "b"))
    assert pv.views == ("a", "b") and pv.emb.shape == (3, 2, 4)
    # record 3 first (sorted), then record 7's windows in input order
    for k, v in enumerate(("a", "b")):
        np.testing.assert_array_equal(pv.emb[:, k], emb_v[v][[2, 0, 1]])


def test_unpaired_views_raise():
    rng = np.random.default_rng(2)
    emb = rng.standard_normal((5, 4))
    prov = np.array(["a", "a", "a", "b", "b"])
    record = np.array([1, 2, 3, 1, 2])  # view b lacks record 3
    with pytest.raises(ValueError, match=r"views are not paired.*only in 'a': \[3\]"):
        pair_views(emb, prov, record)
    with pytest.raises(ValueError, match="at least two provenance views"):
        pair_views(emb[:3], prov[:3], record[:3])
