"""Real-data loading: shapes, labels, channel names, CAR, the on-disk cache, and bad inputs."""

import mne
import numpy as np
import pytest

from eegfm_bench.data.montage import ChannelNameError, canonical_name, canonical_names
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.tasks import DataNotFoundError, Recording, RecordingReadError, get_task
from eegfm_bench.data.windows import EntryWindows, NonFiniteWindowError, WindowSet, load_windows
from eegfm_bench.registry import UnknownNameError

PREP = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)


def test_canonical_names():
    assert canonical_names(["EEG Fp1", "EEG T3", "Fc5.", "FCZ", "EEG T6"]) == ["Fp1", "T7", "FC5", "FCz", "P8"]
    with pytest.raises(ChannelNameError, match="not a standard 10-05"):
        canonical_name("ECG ECG")


def test_unknown_task_lists_valid_names():
    with pytest.raises(UnknownNameError, match="eegmmidb_mi") as e:
        get_task("eegmmidb_motor")
    assert "Did you mean" in str(e.value)


def test_eyes_windows_labels_car_and_cache_hit(data_root, tmp_path, monkeypatch):
    ws = load_windows("eegmmidb_eyes", PREP, data_root=data_root, subjects=[1, 2], cache_dir=tmp_path, progress=False)
    # runs 1 and 2 last 61 s: 15 non-overlapping 4 s windows each, 2 subjects
    assert ws.X.shape == (60, 64, 320)
    assert ws.X.dtype == np.float32
    assert np.bincount(ws.y).tolist() == [30, 30]
    assert sorted(set(ws.subject)) == ["S001", "S002"]
    assert ws.ch_names[:4] == ["FC5", "FC3", "FC1", "FCz"] and "Iz" in ws.ch_names
    # common average reference: the channel mean is zero at every sample (float32 precision, µV)
    assert np.abs(np.asarray(ws.X).mean(axis=1)).max() < 1e-3
    # plausible EEG amplitude in µV after band-pass
    assert 2 < np.abs(ws.X).mean() < 200
    assert ws.meta["preprocessing"]["notch"] == 60.0 and ws.meta["preprocessing"]["reference"] == "average"
    # second run: served from the cache, no EDF read
    def boom(*a, **k):
        raise AssertionError("EDF read on a cached run")
    monkeypatch.setattr(mne.io, "read_raw_edf", boom)
    ws2 = load_windows("eegmmidb_eyes", PREP, data_root=data_root, subjects=[1, 2], cache_dir=tmp_path, progress=False)
    assert isinstance(ws2.X, EntryWindows)  # read from the per-recording entries
    np.testing.assert_array_equal(np.asarray(ws2.X), np.asarray(ws.X))


def test_mi_one_window_per_cue(data_root, tmp_path):
    ws = load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[1], cache_dir=tmp_path, progress=False)
    # S001 runs 4/8/12 hold 8+7, 8+7, 7+8 T1/T2 cues (PhysioNet annotations)
    assert len(ws) == 45
    assert np.bincount(ws.y).tolist() == [23, 22]
    assert ws.X.shape[1:] == (64, 320)


def test_eegmat_channels_and_labels(data_root, tmp_path):
    ws = load_windows("eegmat", PREP, data_root=data_root, subjects=[0], cache_dir=tmp_path, progress=False)
    assert ws.ch_names == ["Fp1", "Fp2", "F3", "F4", "F7", "F8", "T7", "T8", "C3", "C4", "P7", "P8", "P3", "P4",
                           "O1", "O2", "Fz", "Cz", "Pz"]
    # rest ~182 s -> 45 windows; arithmetic 62 s -> 15 windows
    assert np.bincount(ws.y).tolist() == [45, 15]
    assert ws.meta["preprocessing"]["notch"] == 50.0 and ws.meta["preprocessing"]["native_sfreq"] == 500.0


def test_missing_data_root_says_where_and_how(tmp_path):
    with pytest.raises(DataNotFoundError, match=f"the data root {tmp_path / 'nowhere'} .* does not exist; fix:"):
        load_windows("eegmmidb_mi", PREP, data_root=tmp_path / "nowhere", cache_dir=tmp_path, progress=False)
    with pytest.raises(DataNotFoundError) as e:  # a data root without the dataset: where it goes and how to get it
        load_windows("eegmmidb_mi", PREP, data_root=tmp_path, cache_dir=tmp_path, progress=False)
    msg = str(e.value)
    assert "MNE-eegbci-data" in msg and "load_data" in msg and "EEGFM_DATA" in msg
    with pytest.raises(DataNotFoundError, match="physionet.org/content/eegmat"):
        load_windows("eegmat", PREP, data_root=tmp_path, cache_dir=tmp_path, progress=False)


def test_missing_subject_files_are_named(data_root, tmp_path):
    with pytest.raises(DataNotFoundError, match="S099R04.edf"):
        load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[99], cache_dir=tmp_path, progress=False)


def test_corrupted_edf_is_a_clear_error(data_root):
    bad = data_root / "formats" / "bad_inputs" / "eegmmidb_S001R01_corrupted_copy.edf"
    src = get_task("eegmmidb_eyes").source(data_root)
    with pytest.raises(RecordingReadError, match="corrupted") as e:
        src.read(Recording("S001", "S001R01", bad, "eyes_open", run="1"))
    assert str(bad) in str(e.value)


def test_nan_window_is_rejected_and_reported(data_root, tmp_path, monkeypatch):
    import json

    import eegfm_bench.data.windows as W

    real = W.resample_to  # the last preprocessing step before the windows are cut

    def poisoned(raw, prep, applied):
        raw = real(raw, prep, applied)
        raw._data[3, 100] = np.nan  # sample 100 at 80 Hz: inside window 0 of each recording
        return raw

    monkeypatch.setattr(W, "resample_to", poisoned)
    ws = load_windows("eegmmidb_eyes", PREP, data_root=data_root, subjects=[1], cache_dir=tmp_path / "nan", progress=False)
    assert len(ws) == 28 and np.isfinite(np.asarray(ws.X)).all()  # 15 + 15 windows, window 0 of each rejected
    rep = json.loads(open(ws.meta["ingest_report"].replace(".md", ".json")).read())
    r1 = {r["recording"]: r for r in rep["recordings"]}["S001R01"]
    assert r1["windows_rejected"] == {"non-finite samples after preprocessing": 1} and r1["windows_kept"] == 14
    assert any("NaN/Inf" in f for f in r1["findings"])
    with pytest.raises(NonFiniteWindowError, match="S001R01.*NaN"):
        load_windows({"preset": "eegmmidb_eyes", "strict": True}, PREP, data_root=data_root, subjects=[1],
                     cache_dir=tmp_path / "nan_strict", progress=False)


def test_select_channels_re_references_over_the_kept_channels():
    """Known answer: channels C3, Cz, C4, Pz hold a, 2a, 5a, 10a (a = 1, -2, 4 per sample); average-referenced over
    the four (mean 4.5a) they are -3.5a, -2.5a, 0.5a, 5.5a. Keeping [C4, C3] re-references over those two (mean 3a):
    exactly [2a, -2a] (without the re-reference [0.5a, -3.5a]); a set that is not average-referenced is only
    selected."""
    from eegfm_bench.data.windows import WindowSet, select_channels

    a = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    raw = np.stack([np.outer([1, 2, 5, 10], a).astype(np.float32)] * 2)  # (2 windows, 4 channels, 3 samples)
    car = raw - raw.mean(axis=1, keepdims=True)
    names = ["C3", "Cz", "C4", "Pz"]
    n = len(raw)

    def ws(X, ref):
        return WindowSet(X, np.zeros(n, np.int64), np.array(["S1"] * n), np.array(["r"] * n), np.arange(n),
                         np.array(["d"] * n), list(names), 128.0, ["x", "y"], {"reference": {"reference": ref}})

    np.testing.assert_array_equal(car[0, :, 0], [-3.5, -2.5, 0.5, 5.5])
    sub = select_channels(ws(car, "average"), ["c4", "C3"])
    assert sub.ch_names == ["C4", "C3"] and sub.meta["reference"] == {"reference": "average", "channels": ["c4", "C3"]}
    np.testing.assert_array_equal(sub.X, np.stack([np.outer([2, -2], a)] * 2).astype(np.float32))
    np.testing.assert_array_equal(select_channels(ws(car, "average"), names[::-1]).X, car[:, ::-1])  # all: as is
    kept = select_channels(ws(raw, "none"), ["C4", "C3"])
    np.testing.assert_array_equal(kept.X, raw[:, [2, 0]])
    assert kept.meta["reference"] == {"reference": "none", "channels": []}


def test_a_window_set_prints_as_one_line():
    """``repr`` (a notebook cell's output) says what the set is, not its arrays: 720 windows printed the whole float
    array before."""
    n = 6
    ws = WindowSet(np.zeros((n, 3, 400), np.float32), np.array([0, 1, 1, 0, 1, 1]), np.array(["S1"] * 3 + ["S2"] * 3),
                   np.array(["R1", "R1", "R2", "R3", "R3", "R3"]), np.arange(n), np.full(n, "eegmmidb"), ["C3", "Cz", "C4"],
                   200.0, ["left", "right"], {"task": "eegmmidb_mi"})
    assert repr(ws) == ("WindowSet(task='eegmmidb_mi', X=(6, 3, 400) (windows, channels, samples), sfreq=200 Hz, "
                        "2 s windows, classes {left: 2, right: 4}, 2 subjects, 3 recordings)")
    ws.y = np.array([0, 1, 2, 2, -1, 1])  # labels outside the class names are counted, not dropped, and do not raise
    assert "classes {label -1: 1, left: 1, right: 2, label 2: 2}" in repr(ws)
    ws.sfreq = 0.0
    assert "sfreq=0 Hz, sfreq 0: no window length" in repr(ws)
