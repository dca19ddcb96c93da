"""Ingestion checks on real files built from the staged EEG: every kind of bad input gives its message and its entry
in the ingest report (issue 11, point 3), and the window cache is keyed by content (point 4)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mne
import numpy as np
import pytest

from eegfm_bench.data.montage import standard_1005
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.qc import IngestError, file_sha256
from eegfm_bench.data.windows import load_windows

PREP = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)
EEGMMIDB = "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0"


def _report(ws) -> dict:
    return json.loads(Path(ws.meta["ingest_report"]).with_suffix(".json").read_text())


def _rec(ws, name: str) -> dict:
    return {r["recording"]: r for r in _report(ws)["recordings"]}[name]


def _files_task(root, name="t", **over) -> dict:
    """A ``source: files`` task over ``<root>/<subject>_<label>.edf``."""
    spec = {"name": name, "source": "files", "root": str(root),
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>[A-Za-z]+\d+)_(?P<label>[a-z]+)\.edf$"},
            "classes": ["rest"], "windows": {"mode": "fixed"}}
    for k, v in over.items():
        spec[k] = {**spec[k], **v} if isinstance(v, dict) and isinstance(spec.get(k), dict) else v
    return spec


def _export(raw: mne.io.BaseRaw, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    mne.export.export_raw(path, raw, fmt="edf", overwrite=True, verbose="error")
    return path


@pytest.fixture
def eegmat_raw(data_root):
    def read(subject: int = 0, kind: int = 1, seconds: float | None = 40.0):
        raw = mne.io.read_raw_edf(data_root / "eegmat" / f"Subject{subject:02d}_{kind}.edf", preload=True,
                                  verbose="error")
        if seconds:
            raw.crop(0, seconds, include_tmax=False)
        return raw
    return read


# ------------------------------------------------------------------------------------------ reading
def test_truncated_edf_is_a_finding_with_both_durations(data_root, tmp_path):
    b = (data_root / EEGMMIDB / "S001" / "S001R01.edf").read_bytes()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "S1_rest.edf").write_bytes(b[: len(b) // 2])
    ws = load_windows(_files_task(tmp_path / "d"), PREP, cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "S1_rest")
    assert r["header_duration_s"] == 61.0 and r["read_duration_s"] == 30.0
    assert any(f.startswith("truncated: the header declares 61 s") for f in r["findings"])
    assert any("Number of records from the header does not match the file size" in w for w in r["warnings"])
    assert len(ws) == 7  # 30 s -> 7 windows of 4 s, not 15
    with pytest.raises(IngestError, match="truncated"):
        load_windows(_files_task(tmp_path / "d", strict=True), PREP, cache_dir=tmp_path / "c", progress=False)


def test_mixed_sampling_rates_refused_or_only_eeg_rate_kept(data_root, tmp_path):
    src = data_root / "formats" / "mne-python" / "edf" / "test_uneven_samp.edf"
    (tmp_path / "d").mkdir()
    shutil.copy(src, tmp_path / "d" / "S1_rest.edf")
    base = _files_task(tmp_path / "d", channels={"unknown": "keep", "non_eeg": "drop"}, reference="none",
                       window_s=2.0)
    with pytest.raises(IngestError, match=r"different rates: 1 channel\(s\) at 100 Hz .*1 channel\(s\) at 12.8 Hz"):
        load_windows(base, PREP, cache_dir=tmp_path / "c", progress=False)
    ws = load_windows({**base, "channels": {**base["channels"], "mixed_rates": "eeg_only"}},
                      Preprocessing(sfreq=100.0, l_freq=None, h_freq=None, window_s=2.0, reference="none"),
                      cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "S1_rest")
    assert r["native_sfreq"] == {"100": ["3Hz +5/-5 V"], "12.8": ["0.2Hz Blk 1/0uV"]}
    assert r["dropped"] == {"0.2Hz Blk 1/0uV": "sampled at 12.8 Hz, not the EEG rate 100 Hz (mixed_rates: eeg_only)"}
    assert ws.ch_names == ["3Hz +5/-5 V"] and ws.sfreq == 100.0 and len(ws) == 55  # 110 s / 2 s


def test_flat_channel_is_interpolated_before_the_car(eegmat_raw, tmp_path):
    raw = eegmat_raw()
    raw._data[raw.ch_names.index("EEG Fz")] = 0.0
    _export(raw, tmp_path / "d" / "Subject00_rest.edf")
    _export(eegmat_raw(1), tmp_path / "d" / "Subject01_rest.edf")
    task = _files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]})
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "Subject00_rest")
    assert r["flat"] == ["Fz"] and r["interpolated"] == ["Fz"] and _rec(ws, "Subject01_rest")["flat"] == []
    assert any("interpolated flat / marked-bad channels ['Fz']" in a for a in r["actions"])
    s0 = ws.recording == "Subject00_rest"
    X = np.asarray(ws.X)[s0]
    fz, f3, f4 = (ws.ch_names.index(c) for c in ("Fz", "F3", "F4"))
    corr_interp = np.corrcoef(X[:, fz].ravel(), (X[:, f3] + X[:, f4]).ravel())[0, 1]
    # kept flat, the common average turns it into minus the mean of the other channels
    kept = load_windows({**task, "channels": {**task["channels"], "flat": "keep"}}, PREP, cache_dir=tmp_path / "c",
                        progress=False)
    Xk = np.asarray(kept.X)[kept.recording == "Subject00_rest"]
    assert np.abs(Xk.sum(axis=1)).max() < 1e-2
    np.testing.assert_allclose(Xk[:, fz], -np.delete(Xk, fz, axis=1).sum(axis=1), atol=1e-2)
    corr_kept = np.corrcoef(Xk[:, fz].ravel(), (Xk[:, f3] + Xk[:, f4]).ravel())[0, 1]
    assert corr_interp > 0.5 > corr_kept
    assert any(f.startswith("flat channels") for f in _rec(kept, "Subject00_rest")["findings"])
    gone = load_windows({**task, "channels": {**task["channels"], "flat": "drop_recording"}}, PREP,
                        cache_dir=tmp_path / "c", progress=False)
    assert set(gone.recording) == {"Subject01_rest"}
    assert _rec(gone, "Subject00_rest")["reason"] == "flat / marked-bad channels ['Fz'] (channels.flat: drop_recording)"
    assert _report(gone)["subjects"]["Subject00"]["status"] == "dropped"
    with pytest.raises(IngestError, match=r"flat / marked-bad channels \['Fz'\]"):
        load_windows({**task, "channels": {**task["channels"], "flat": "error"}}, PREP, cache_dir=tmp_path / "c",
                     progress=False)


def test_saturated_and_nonfinite_channels_are_reported(eegmat_raw, tmp_path):
    raw = eegmat_raw()
    c3 = raw.ch_names.index("EEG C3")
    lim = np.percentile(np.abs(raw._data[c3]), 90)
    raw._data[c3] = np.clip(raw._data[c3], -lim, lim)  # clipped at the rail: ~10 % of samples at +-lim
    _export(raw, tmp_path / "d" / "Subject00_rest.edf")
    ws = load_windows(_files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]}), PREP,
                      cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "Subject00_rest")
    assert set(r["saturated"]) == {"C3"} and 0.03 < r["saturated"]["C3"] < 0.1
    assert any(f.startswith("saturated channels") for f in r["findings"])


# ------------------------------------------------------------------------------------------ channels
def test_channels_renamed_dropped_unknown_and_non_eeg(data_root, tmp_path):
    src = data_root / "formats" / "mne-testing-data" / "EDF" / "chtypes_edf.edf"
    (tmp_path / "d").mkdir()
    shutil.copy(src, tmp_path / "d" / "S1_rest.edf")
    task = _files_task(tmp_path / "d", window_s=1.0, channels={"rename": {"POL T1": "FT9", "POL T2": "FT10"}})
    ws = load_windows(task, Preprocessing(sfreq=100.0, l_freq=1.0, h_freq=30.0, window_s=1.0), cache_dir=tmp_path / "c",
                      progress=False)
    r = _rec(ws, "S1_rest")
    assert r["renamed"]["EEG Fp1-Ref"] == "Fp1" and r["renamed"]["POL T1"] == "FT9" and "FT10" in ws.ch_names
    assert {c for c, why in r["dropped"].items() if why.startswith("not EEG")} == {"ECG ECG1", "ECG ECG2", "SaO2 X9",
                                                                                  "SaO2 X10"}
    assert r["dropped"]["POL DC01"] == "no standard 10-05 name/position (channels.unknown: drop)"
    assert any("channels without a 10-05 name dropped" in f for f in r["findings"])
    assert all(c in standard_1005().ch_names for c in ws.ch_names)
    assert len(r["channels_as_read"]) == len(r["channels_kept"]) + len(r["dropped"])  # nothing lost silently
    with pytest.raises(IngestError, match="is not EEG"):
        load_windows({**task, "channels": {"non_eeg": "error"}}, Preprocessing(sfreq=100.0, window_s=1.0),
                     cache_dir=tmp_path / "c", progress=False)


def test_montage_same_refuses_and_intersect_reports(eegmat_raw, tmp_path):
    a, b = eegmat_raw(0), eegmat_raw(1)
    b.drop_channels(["EEG O2"])
    _export(a, tmp_path / "d" / "Subject00_rest.edf")
    _export(b, tmp_path / "d" / "Subject01_rest.edf")
    task = _files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]})
    with pytest.raises(IngestError, match="channels.montage: intersect"):
        load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    ws = load_windows({**task, "channels": {**task["channels"], "montage": "intersect"}}, PREP, cache_dir=tmp_path / "c",
                      progress=False)
    assert "O2" not in ws.ch_names and len(ws.ch_names) == 18
    assert _rec(ws, "Subject00_rest")["dropped"]["O2"] == "not in every recording (channels.montage: intersect)"


# ------------------------------------------------------------------------------------------ events and windows
def _mi_copy(data_root, dest: Path, subject: int, run: int, keep_annotations: bool = True) -> Path:
    raw = mne.io.read_raw_edf(data_root / EEGMMIDB / f"S{subject:03d}" / f"S{subject:03d}R{run:02d}.edf",
                              preload=True, verbose="error")
    if not keep_annotations:
        raw.set_annotations(None)
    return _export(raw, dest / f"S{subject}_r{run:02d}.edf")


def _mi_task(root, **over) -> dict:
    spec = {"name": "mi_files", "source": "files", "root": str(root),
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>S\d+)_r(?P<run>\d+)\.edf$"},
            "classes": ["left", "right"], "labels": {"events": {"T1": "left", "T2": "right"}},
            "windows": {"mode": "events"}, "line_freq": 60}
    spec.update(over)
    return spec


def test_run_without_events_and_subject_without_windows_are_reported(data_root, tmp_path):
    _mi_copy(data_root, tmp_path / "d", 1, 4)
    _mi_copy(data_root, tmp_path / "d", 1, 8, keep_annotations=False)
    _mi_copy(data_root, tmp_path / "d", 2, 4, keep_annotations=False)
    ws = load_windows(_mi_task(tmp_path / "d"), PREP, cache_dir=tmp_path / "c", progress=False)
    rep = _report(ws)
    r = _rec(ws, "S1_r08")
    assert r["status"] == "dropped" and r["reason"] == "no labelled event"
    assert any(f.startswith("no event of ['T1', 'T2'] in the recording") for f in r["findings"])
    assert rep["subjects"]["S2"]["status"] == "dropped" and "S2_r04: no labelled event" in rep["subjects"]["S2"]["reason"]
    assert rep["subjects"]["S1"]["status"] == "kept" and len(ws) == 15 == rep["totals"]["windows_kept"]
    assert _rec(ws, "S1_r04")["events"] == {"left": 8, "right": 7}
    assert _rec(ws, "S1_r04")["events_unmapped"] == {"T0": 15}
    md = Path(ws.meta["ingest_report"]).read_text()
    assert "| S2 | dropped |" in md and "no labelled event" in md


def test_overlapping_events_and_windows_past_the_end(data_root, tmp_path):
    raw = mne.io.read_raw_edf(data_root / EEGMMIDB / "S001" / "S001R04.edf", preload=True, verbose="error")
    T = raw.times[-1]
    raw.set_annotations(mne.Annotations([1.0, 3.0, 10.0, 20.0, T - 2.0], [0.0] * 5, ["T1", "T2", "T1", "T2", "T2"]))
    _export(raw, tmp_path / "d" / "S1_r04.edf")
    keep = load_windows(_mi_task(tmp_path / "d"), PREP, cache_dir=tmp_path / "c", progress=False)
    r = _rec(keep, "S1_r04")
    assert r["overlapping_events"] == 1 and len(keep) == 4
    assert r["windows_rejected"] == {"runs past the end of the data": 1}
    drop = load_windows(_mi_task(tmp_path / "d", windows={"mode": "events", "overlap": "drop"}), PREP,
                        cache_dir=tmp_path / "c", progress=False)
    assert len(drop) == 3 and _rec(drop, "S1_r04")["windows_rejected"] == {
        "overlaps the previous event's window": 1, "runs past the end of the data": 1}
    with pytest.raises(IngestError, match="overlaps the previous event's window"):
        load_windows(_mi_task(tmp_path / "d", windows={"mode": "events", "overlap": "error"}), PREP,
                     cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(IngestError, match="runs past"):
        load_windows(_mi_task(tmp_path / "d", windows={"mode": "events", "past_end": "error"}), PREP,
                     cache_dir=tmp_path / "c", progress=False)


def test_fixed_windows_labelled_by_overlap_background_and_balance(eegmat_raw, tmp_path):
    raw = eegmat_raw(0, 1, seconds=120.0)
    # a 'seizure' from 20 to 30 s: windows [20,24) [24,28) fully inside; [28,32) covers 2 s = 50 %
    raw.set_annotations(mne.Annotations([20.0], [10.0], ["sz_foc"]))
    _export(raw, tmp_path / "d" / "Subject00_rec.edf")
    task = {"name": "sz", "source": "files", "root": str(tmp_path / "d"),
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>Subject\d+)_"}, "classes": ["interictal", "ictal"],
            "labels": {"events": {"sz*": "ictal"}, "min_overlap": 0.5, "background": "interictal"},
            "windows": {"mode": "fixed"}, "channels": {"exclude": ["EEG A2-A1", "ECG ECG"]}}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert np.bincount(ws.y).tolist() == [27, 3]  # 30 windows; [16,20) touches the onset only at its end
    t = task | {"labels": {**task["labels"], "min_overlap": 0.6}}
    ws2 = load_windows(t, PREP, cache_dir=tmp_path / "c", progress=False)
    assert np.bincount(ws2.y).tolist() == [27, 2]
    assert _rec(ws2, "Subject00_rec")["windows_rejected"] == {"overlaps a labelled event by less than 60% (ambiguous)": 1}
    bal = load_windows(task | {"windows": {"mode": "fixed", "balance": {"ratios": {"ictal": 1, "interictal": 3}}}},
                       PREP, cache_dir=tmp_path / "c", progress=False)
    assert np.bincount(bal.y).tolist() == [9, 3]
    assert _rec(bal, "Subject00_rec")["windows_rejected"] == {
        "subsampled to 1:3 ictal:interictal per subject (windows.balance)": 18}


def test_label_mapped_to_null_excludes_the_recording(eegmat_raw, tmp_path):
    for s in (0, 1):
        for kind, lab in ((1, "rest"), (2, "task")):
            _export(eegmat_raw(s, kind, 16.0), tmp_path / "d" / f"Subject{s:02d}_{lab}.edf")
    task = _files_task(tmp_path / "d", classes=["rest"], labels={"map": {"task": None}},
                       channels={"exclude": ["EEG A2-A1", "ECG ECG"]})
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert set(ws.recording) == {"Subject00_rest", "Subject01_rest"} and len(ws) == 8
    assert _rec(ws, "Subject01_task")["reason"] == "label 'task' is not part of this task (labels.map: task: null)"


# ------------------------------------------------------------------------------------------ cache
def test_same_size_edit_with_restored_mtime_rebuilds(eegmat_raw, tmp_path):
    path = _export(eegmat_raw(0, 1, 16.0), tmp_path / "d" / "Subject00_rest.edf")
    task = _files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]})
    ws1 = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    X1 = np.asarray(ws1.X).copy()
    st = path.stat()
    b = bytearray(path.read_bytes())
    hdr = int(b[184:192].decode())
    b[hdr + 2000: hdr + 2400] = bytes(400)  # zero 200 samples of the data records: same size
    path.write_bytes(bytes(b))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    ws2 = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert ws2.meta["cache_key"] != ws1.meta["cache_key"]
    assert _rec(ws2, "Subject00_rest")["sha256"] == file_sha256(path)
    assert not np.array_equal(np.asarray(ws2.X), X1)
    # unchanged file: the memo answers without re-reading (same key, same folder)
    assert load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False).meta["cache_key"] == ws2.meta["cache_key"]


def test_preprocessing_provenance_is_kept_per_recording(eegmat_raw, tmp_path):
    _export(eegmat_raw(0), tmp_path / "d" / "Subject00_rest.edf")
    _export(eegmat_raw(1).resample(250.0, verbose="error"), tmp_path / "d" / "Subject01_rest.edf")
    ws = load_windows(_files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]}), PREP,
                      cache_dir=tmp_path / "c", progress=False)
    per = ws.meta["preprocessing_per_recording"]
    assert per["Subject00_rest"]["native_sfreq"] == 500.0 and per["Subject01_rest"]["native_sfreq"] == 250.0
    assert ws.meta["preprocessing"]["native_sfreq"] == [250.0, 500.0]  # differing values listed, never the last one
    assert ws.meta["preprocessing"]["sfreq"] == 80.0
    assert _rec(ws, "Subject01_rest")["native_sfreq"] == {"250": _rec(ws, "Subject01_rest")["channels_as_read"]}


def test_a_nan_burst_rejects_only_the_windows_around_it(eegmat_raw, tmp_path):
    _export(eegmat_raw(0, 1, 40.0), tmp_path / "d" / "Subject00_rest.edf")
    # EDF cannot hold NaN: a NaN burst (10.0-10.2 s at 500 Hz, as a broken acquisition leaves) is put in the read data
    import eegfm_bench.data.sources.files as F

    real = F.FilesSource.read

    def with_nan(self, rec):
        r = real(self, rec)
        r._data[r.ch_names.index("EEG C3"), 5000:5100] = np.nan
        return r

    F.FilesSource.read = with_nan
    try:
        ws = load_windows(_files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]}), PREP,
                          cache_dir=tmp_path / "c", progress=False)
    finally:
        F.FilesSource.read = real
    r = _rec(ws, "Subject00_rest")
    # BAD_nonfinite spans 9.0-11.2 s: windows [8,12) only; the other 9 of 10 are kept
    assert r["windows_rejected"] == {"overlaps a BAD_nonfinite annotation": 1} and len(ws) == 9
    assert r["nonfinite"] == ["C3"] and any("100 samples in 1 stretch" in f for f in r["findings"])
    assert np.isfinite(np.asarray(ws.X)).all()


def test_channels_marked_bad_in_the_file_are_reported_and_interpolated(eegmat_raw, tmp_path):
    raw = eegmat_raw()
    raw.info["bads"] = ["EEG Cz", "EEG C3"]
    raw.save(tmp_path / "Subject00_rest_raw.fif", verbose="error")
    task = {"name": "fif", "source": "files", "root": str(tmp_path), "classes": ["rest"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>Subject\d+)_(?P<label>rest)_raw\.fif$"},
            "windows": {"mode": "fixed"}, "channels": {"exclude": ["EEG A2-A1", "ECG ECG"]}}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "Subject00_rest_raw")
    assert r["marked_bad"] == ["Cz", "C3"] and set(r["interpolated"]) == {"Cz", "C3"}
    X = np.asarray(ws.X)
    assert np.abs(X.sum(axis=1)).max() < 1e-2  # every channel, the interpolated ones included, is in the average


def test_exclude_takes_10_05_names_and_reports_entries_that_match_nothing(eegmat_raw, tmp_path):
    _export(eegmat_raw(0, 1, 16.0), tmp_path / "d" / "Subject00_rest.edf")
    task = _files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG", "Fp1", "Fpz1"]})
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "Subject00_rest")
    assert "Fp1" not in ws.ch_names and r["dropped"]["EEG Fp1"] == "excluded by channels.exclude"
    assert any("channels.exclude lists ['Fpz1']" in f for f in r["findings"])


def test_implausible_amplitude_is_a_finding(eegmat_raw, tmp_path):
    raw = eegmat_raw(0, 1, 16.0)
    raw._data *= 1e3  # millivolts written as volts: ~10 mV RMS
    _export(raw, tmp_path / "d" / "Subject00_rest.edf")
    ws = load_windows(_files_task(tmp_path / "d", channels={"exclude": ["EEG A2-A1", "ECG ECG"]}), PREP,
                      cache_dir=tmp_path / "c", progress=False)
    r = _rec(ws, "Subject00_rest")
    assert r["rms_uv"] > 500 and any(f.startswith("implausible amplitude") for f in r["findings"])


def test_a_declared_class_without_windows_is_refused(data_root, tmp_path):
    _mi_copy(data_root, tmp_path / "d", 1, 4)
    with pytest.raises(IngestError, match=r"class\(es\) \['right'\] got no window.*annotations mapped to no class: "
                                          r"\{'T0': 15, 'T2': 7\}"):
        load_windows(_mi_task(tmp_path / "d", labels={"events": {"T1": "left", "T9": "right"}}), PREP,
                     cache_dir=tmp_path / "c", progress=False)


def test_a_fold_without_training_windows_of_a_class_is_refused(eegmat_raw, tmp_path):
    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.data.splits import SplitSpec, make_split

    for s in range(4):
        _export(eegmat_raw(s, 1, 16.0), tmp_path / "d" / f"Subject{s:02d}_{'rest' if s < 3 else 'task'}.edf")
    ws = load_windows(_files_task(tmp_path / "d", classes=["rest", "task"], channels={"exclude": ["EEG A2-A1", "ECG ECG"]}),
                      PREP, cache_dir=tmp_path / "c", progress=False)
    split = make_split(ws.y, ws.subject, SplitSpec("loso", 4, 0, 1), "t")
    fold = next(f.fold for f in split.folds if "Subject03" in f.test)
    with pytest.raises(ValueError, match=r"no training window of class\(es\) \['task'\]"):
        EEGDataModule(task="eegmat", backbone="eegnet", fold=fold, ws=ws, split=split)
