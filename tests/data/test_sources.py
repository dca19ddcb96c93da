"""Data sources declared in YAML, on real files built in the tests from the staged EEG (issue 11): BIDS (events and
participants.tsv labels) run through ``eegfm-bench cv``, a TUH-layout folder read by braindecode's TUHAbnormal, a
MOABB fake dataset, ``source: files`` over every format sample, recording-level folds, and every preset."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mne
import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.qc import IngestError
from eegfm_bench.data.tasks import get_task, preset_names, preset_spec
from eegfm_bench.data.windows import load_windows

PREP = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)
EEGMMIDB = "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0"
REPO = Path(__file__).resolve().parents[2]
TINY_RUN = {"model": "eegnet", "regime": "full", "heads": ["flatten"], "backbone_kwargs": {"F1": 4, "D": 1,
                                                                                          "kernel_length": 16}}


def _report(ws) -> dict:
    return json.loads(Path(ws.meta["ingest_report"]).with_suffix(".json").read_text())


def _cv(tmp_path, task, **over) -> tuple[pd.DataFrame, Path]:
    from eegfm_bench.cli import main

    out = tmp_path / "out"
    cfg = {"experiment": "byo", "task": task, "out_dir": str(out),
           "data": {"batch_size": 16, "cache_dir": str(tmp_path / "cache")},
           "split": {"scheme": "kfold", "k": 2, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 1, "patience": 1, "enable_progress_bar": False}, "runs": [TINY_RUN]}
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(cfg.get(k), dict) else v
    path = tmp_path / "cv.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["cv", "--config", str(path), "--no-progress"]) == 0
    return pd.read_csv(out / "results.csv"), out


# ------------------------------------------------------------------------------------------ BIDS
@pytest.fixture
def bids_mi(data_root, tmp_path):
    """Staged EEGMMIDB runs 4 and 8 of subjects 1-4 written as BIDS by mne-bids (T0/T1/T2 in events.tsv)."""
    from mne_bids import BIDSPath, write_raw_bids

    root = tmp_path / "bids_mi"
    for s in (1, 2, 3, 4):
        for run in (4, 8):
            raw = mne.io.read_raw_edf(data_root / EEGMMIDB / f"S{s:03d}" / f"S{s:03d}R{run:02d}.edf", verbose="error")
            raw.info["line_freq"] = 60
            write_raw_bids(raw, BIDSPath(subject=f"{s:03d}", task="mi", run=f"{run:02d}", datatype="eeg", root=root),
                           overwrite=True, verbose=False)
    return root


def test_bids_events_give_the_same_windows_as_the_native_reader_and_run_through_cv(bids_mi, data_root, tmp_path):
    task = {"name": "mi_bids", "source": "bids", "root": str(bids_mi), "bids": {"task": "mi"},
            "classes": ["left_fist_imagery", "right_fist_imagery"],
            "labels": {"events": {"T1": "left_fist_imagery", "T2": "right_fist_imagery"}},
            "windows": {"mode": "events"}, "line_freq": 60}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    native = load_windows({"preset": "eegmmidb_mi", "eegmmidb": {"runs": [4, 8]}}, PREP, data_root=data_root,
                          subjects=[1, 2, 3, 4], cache_dir=tmp_path / "c", progress=False)
    assert len(ws) == len(native) == 4 * 2 * 15  # 15 T1/T2 cues per run
    np.testing.assert_array_equal(ws.y, native.y)
    np.testing.assert_allclose(np.asarray(ws.X), np.asarray(native.X), atol=1e-4)
    assert sorted(set(ws.subject)) == ["001", "002", "003", "004"] and ws.ch_names == native.ch_names
    rows, out = _cv(tmp_path, task)
    bacc = rows[(rows.metric == "balanced_accuracy") & (rows.condition == "clean")]
    assert len(bacc) == 1 and bacc["task"].iloc[0] == "mi_bids" and 0.0 <= bacc["value"].iloc[0] <= 1.0
    md = (out / "ingest_report.md").read_text()
    assert "# Ingestion report: mi_bids" in md and "8 of 8 recordings and 4 of 4 subjects kept" in md


def test_bids_participants_column_labels_recordings_through_cv(data_root, tmp_path):
    """eegmat rest recordings as BIDS; the class of each subject is participants.tsv's count_quality."""
    from mne_bids import BIDSPath, write_raw_bids

    info = pd.read_csv(data_root / "eegmat" / "subject-info.csv")
    root = tmp_path / "bids_mat"
    subjects = list(range(8))
    for s in subjects:
        raw = mne.io.read_raw_edf(data_root / "eegmat" / f"Subject{s:02d}_1.edf", verbose="error")
        raw.info["line_freq"] = 50
        write_raw_bids(raw, BIDSPath(subject=f"{s:02d}", task="rest", datatype="eeg", root=root), overwrite=True,
                       verbose=False)
    part = pd.read_csv(root / "participants.tsv", sep="\t")
    q = dict(zip(info["Subject"].str.replace("Subject", ""), info["Count quality"].astype(str)))
    part["count_quality"] = [q[p.removeprefix("sub-")] for p in part["participant_id"]]
    part.to_csv(root / "participants.tsv", sep="\t", index=False)
    task = {"name": "mat_quality", "source": "bids", "root": str(root), "bids": {"task": "rest"},
            "classes": ["bad_counter", "good_counter"], "labels": {"target": "count_quality",
                                                                   "map": {"0": "bad_counter", "1": "good_counter"}},
            "windows": {"mode": "fixed"}, "channels": {"exclude": ["EEG A2-A1"]}, "line_freq": 50}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    for s in subjects:
        want = {"0": 0, "1": 1}[q[f"{s:02d}"]]
        assert set(ws.y[ws.subject == f"{s:02d}"]) == {want}
    rep = _report(ws)
    assert {r["label"] for r in rep["recordings"]} == {"bad_counter", "good_counter"}
    assert any("ECG" in c for r in rep["recordings"] for c, why in r["dropped"].items() if why.startswith("not EEG"))
    rows, out = _cv(tmp_path, task)
    assert set(rows["task"]) == {"mat_quality"} and (out / "ingest_report.json").is_file()
    # one label per subject and one validation subject: the best epoch is chosen on val/loss, and the rows say so
    assert set(rows["selected_on"].astype(str)) == {"val/loss"}


def test_bids_missing_target_column_names_the_columns(bids_mi, tmp_path):
    task = {"name": "x", "source": "bids", "root": str(bids_mi), "classes": ["a", "b"], "labels": {"target": "grp"},
            "windows": {"mode": "fixed"}}
    with pytest.raises(ConfigError, match="'grp' is not a column of participants.tsv"):
        load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)


# ------------------------------------------------------------------------------------------ braindecode / MOABB
def test_tuh_layout_read_by_braindecode_tuhabnormal(data_root, tmp_path):
    """eegmat files placed in TUH Abnormal's v3.0.1 layout; labels from the path (braindecode's `pathological`)."""
    root = tmp_path / "tuab"
    layout = [("train", "normal", 0), ("train", "abnormal", 1), ("eval", "normal", 2), ("eval", "abnormal", 3)]
    for split, kind, s in layout:
        d = root / "v3.0.1" / "edf" / split / kind / "01_tcp_ar"
        d.mkdir(parents=True)
        shutil.copy(data_root / "eegmat" / f"Subject{s:02d}_1.edf", d / f"aaaaaa{s:02d}_s001_t000.edf")
    task = {"preset": "tuab", "root": str(root), "channels": {"include": None, "exclude": ["EEG A2-A1"]},
            "braindecode": {"kwargs": {"on_missing_files": "warn"}}}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert ws.class_names == ["normal", "abnormal"]
    lab = {s: set(ws.y[ws.subject == s].tolist()) for s in np.unique(ws.subject)}
    assert lab == {"aaaaaa00": {0}, "aaaaaa01": {1}, "aaaaaa02": {0}, "aaaaaa03": {1}}
    assert len(ws.ch_names) == 19 and "T7" in ws.ch_names  # eegmat's "EEG T3" under the 10-05 name
    assert get_task(task).spec.options.cls == "TUHAbnormal"
    assert any("Expected 2993 files but found 4 files" in w for w in _report(ws)["source_warnings"])


def test_moabb_fake_dataset(tmp_path, monkeypatch):
    from eegfm_bench.data.sources import moabb as msrc

    held, real = [], msrc.MOABBSource._subject
    monkeypatch.setattr(msrc.MOABBSource, "_subject",
                        lambda self, s: (real(self, s), held.append(len(self._raws)))[0])
    task = {"name": "fake_mi", "source": "moabb", "classes": ["left_hand", "right_hand"],
            "moabb": {"dataset": "FakeDataset", "kwargs": {"event_list": ["left_hand", "right_hand"], "n_subjects": 3,
                                                           "n_sessions": 1, "n_runs": 1, "n_events": 20, "seed": 7,
                                                           "duration": 100, "channels": ["C3", "Cz", "C4"]}},
            "labels": {"events": {"left_hand": "left_hand", "right_hand": "right_hand"}},
            "windows": {"mode": "events"}, "reference": "none"}
    ws = load_windows(task, Preprocessing(sfreq=64.0, l_freq=1.0, h_freq=30.0, window_s=2.0), cache_dir=tmp_path / "c",
                      progress=False)
    rep = _report(ws)
    n_events = sum(sum(r["events"].values()) for r in rep["recordings"])
    assert len(ws) + sum(sum(r["windows_rejected"].values()) for r in rep["recordings"]) == n_events == 60
    assert ws.ch_names == ["C3", "Cz", "C4"] and sorted(set(ws.subject)) == ["1", "2", "3"]
    assert held and max(held) == 1  # one subject's raws in memory at a time, not the dataset's
    with pytest.raises(Exception, match="Did you mean 'FakeDataset'"):
        get_task({**task, "moabb": {"dataset": "FakeDatset"}})


# ------------------------------------------------------------------------------------------ files over every format
FORMATS = [("mne-python/edf/test.edf", None, "RawEDF"), ("mne-python/edf/test.bdf", None, "RawBDF"),
           ("mne-python/brainvision/test.vhdr", None, "RawBrainVision"),
           ("mne-testing-data/EEGLAB/test_raw_chanloc.set", None, "RawEEGLAB"),
           ("mne-testing-data/GDF/test_1ch.gdf", None, "RawGDF"), ("mne-python/egi/test_egi.raw", "egi", "RawEGI"),
           ("mne-python/brainvision/test_bin_raw.fif", None, "Raw"),
           ("mne-testing-data/BDF/test_bdf_stim_channel.bdf", None, "RawBDF"),
           ("mne-testing-data/EDF/test_utf8_annotations.edf", None, "RawEDF")]


@pytest.mark.parametrize("rel, reader, fmt", FORMATS, ids=[f[0].rsplit("/", 1)[1] for f in FORMATS])
def test_files_source_reads_every_format_sample(data_root, tmp_path, rel, reader, fmt):
    root = data_root / "formats"
    raw = mne.io.read_raw(root / rel, verbose="error") if reader is None else mne.io.read_raw_egi(root / rel,
                                                                                                 verbose="error")
    win = min(1.0, (raw.n_times - 1) / raw.info["sfreq"] / 2)
    task = {"name": "fmt", "source": "files", "root": str(root), "classes": ["sample"],
            "files": {"glob": rel, "subject": "s1", "reader": reader, "pattern": r"\.(?P<label>\w+)$"},
            "labels": {"map": {rel.rsplit(".", 1)[1]: "sample"}}, "windows": {"mode": "fixed"},
            "channels": {"unknown": "keep", "flat": "keep"}, "reference": "none", "window_s": win}
    if rel.endswith("edf/test.edf"):  # BioSemi ABC names (A1...H32): 10-05 look-ups would misplace A1, C3, ...
        with pytest.raises(IngestError, match="BioSemi's ABC layout"):
            load_windows(task, Preprocessing(sfreq=100.0, l_freq=None, h_freq=None, window_s=win),
                         cache_dir=tmp_path / "c0", progress=False)
        task["channels"]["aliases"] = False
    prep = Preprocessing(sfreq=100.0, l_freq=None, h_freq=None, window_s=win)
    if rel.endswith("test_1ch.gdf"):  # its only channel is an ECG: nothing to read, said so
        with pytest.raises(IngestError, match="no recording yielded a window.*no EEG channel left"):
            load_windows(task, prep, cache_dir=tmp_path / "c", progress=False)
        return
    ws = load_windows(task, prep, cache_dir=tmp_path / "c", progress=False)
    r = _report(ws)["recordings"][0]
    assert r["format"] == fmt and len(ws) >= 1 and ws.sfreq == 100.0
    assert len(r["sha256"]) == 64 and sum(len(v) for v in r["native_sfreq"].values()) == len(r["channels_as_read"])
    assert len(r["channels_as_read"]) == len(r["channels_kept"]) + len(r["dropped"])
    if rel.endswith(".vhdr"):
        assert any(f.endswith(".eeg") for f in r["files"]) and any(f.endswith(".vmrk") for f in r["files"])
    if rel.endswith(".set"):
        assert any(f.endswith(".fdt") for f in r["files"])


def test_files_pattern_must_match_every_file(data_root, tmp_path):
    task = {"name": "x", "source": "files", "root": str(data_root / "eegmat"), "classes": ["rest", "task"],
            "files": {"glob": "*.edf", "pattern": r"^Subject0(?P<subject>\d)_"}, "windows": {"mode": "fixed"}}
    with pytest.raises(ConfigError, match=r"Subject10_1.edf does not match files.pattern"):
        load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)


# ------------------------------------------------------------------------------------------ folds by recording
def test_group_by_recording_folds_train(tmp_path):
    rows, out = _cv(tmp_path, "eegmat", data={"subjects": [0, 1, 2], "max_windows_per_subject": 3},
                    split={"group_by": "recording", "k": 3})
    split = json.loads((out / "splits.json").read_text())
    assert split["spec"]["group_by"] == "recording" and len(split["groups"]) == 6
    assert set(rows["fold_unit"]) == {"recording"} and not (out / "failures.json").is_file()
    assert rows[rows.metric == "balanced_accuracy"]["n_windows"].iloc[0] == 6  # 2 test recordings x 3 windows


# ------------------------------------------------------------------------------------------ presets
@pytest.mark.parametrize("name", preset_names())
def test_every_preset_parses_with_its_label_definition(name):
    spec = preset_spec(name)
    t = get_task(name)
    assert t.name == name and t.class_names and t.description and spec.get("obtain") or name.startswith(("eegmmidb",))
    assert t.spec.source in ("files", "bids", "braindecode", "moabb", "eegmmidb")


def test_presets_carry_the_papers_label_definitions():
    chb = get_task("chbmit").spec
    assert chb.labels.min_overlap == 0.5 and chb.labels.background == "interictal"
    assert chb.windows.balance.ratios == {"ictal": 1, "interictal": 3} and chb.labels.without_events == "drop"
    sl = get_task("sleep_edf_wake_sleep").spec
    assert sl.windows.balance.subsample == ["wake"] and sl.windows.balance.max_windows == 214
    assert sl.reference == "none" and sl.channels.include == ["Fpz-Cz", "Pz-Oz"]
    assert get_task("sleep_edf_5stage").class_names == ("W", "N1", "N2", "N3", "REM")
    assert get_task("ds004504_ad_vs_hc").spec.labels.map == {"A": "AD", "C": "HC", "F": None}
    assert get_task("ds004504_ad_vs_ftd").spec.labels.map == {"A": "AD", "F": "FTD", "C": None}
    assert get_task("tuab").spec.labels.map == {"False": "normal", "True": "abnormal"}
    assert (REPO / "configs" / "data" / "tuab.yaml").is_file()  # the presets are also under configs/data/


def test_the_data_guide_lists_every_preset():
    guide = (REPO / "docs" / "guide" / "data.md").read_text()
    table = guide[guide.index("### Presets"):guide.index("## Data\n")]
    assert {n for n in preset_names() if f"| `{n}` |" not in table} == set()


def test_unknown_task_key_and_preset_are_refused_with_close_matches():
    with pytest.raises(ConfigError, match="Did you mean 'labels'"):
        get_task({"preset": "eegmat", "label": {}})
    with pytest.raises(Exception, match="Did you mean 'tuab'"):
        get_task("tuabb")
    with pytest.raises(ConfigError, match=r"classes \['ictl'\] are used"):
        get_task({"preset": "chbmit", "labels": {"events": {"sz*": "ictl"}}})


def test_bids_entities_given_as_numbers(bids_mi, tmp_path):
    task = {"name": "mi_bids", "source": "bids", "root": str(bids_mi), "bids": {"task": "mi", "runs": [4],
                                                                                "subjects": [1, 2]},
            "classes": ["left", "right"], "labels": {"events": {"T1": "left", "T2": "right"}},
            "windows": {"mode": "events"}, "line_freq": 60}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert sorted(set(ws.recording)) == ["sub-001_task-mi_run-04", "sub-002_task-mi_run-04"] and len(ws) == 30


def test_eegmmidb_subjects_without_the_runs_are_in_the_report(data_root, tmp_path):
    ws = load_windows("eegmmidb_eyes", PREP, data_root=data_root, cache_dir=tmp_path / "c", progress=False)
    rep = _report(ws)
    skipped = rep["skipped_subjects"]
    on_disk = sorted(p.name for p in (data_root / "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0").glob("S*"))
    assert set(skipped) | set(ws.subject) == set(on_disk) and not set(skipped) & set(ws.subject)
    assert all("not on disk" in why for why in skipped.values())
    assert all(rep["subjects"][s]["status"] == "dropped" for s in skipped)


def test_an_annotation_only_edf_matched_by_the_glob_says_what_it_is(data_root, tmp_path):
    task = {"name": "hyp", "source": "files", "root": str(data_root / "formats" / "mne-testing-data" / "EDF"),
            "files": {"glob": "SC4001EC-Hypnogram.edf", "subject": "SC4001"}, "classes": ["W"],
            "labels": {"events": {"Sleep stage W": "W"}}, "windows": {"mode": "fixed"}}
    from eegfm_bench.data.sources import RecordingReadError

    with pytest.raises(RecordingReadError, match="annotation-only EDF"):
        load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)


def test_one_stem_in_two_formats_gives_two_recordings(data_root, tmp_path):
    raw = mne.io.read_raw_edf(data_root / "eegmat" / "Subject00_1.edf", preload=True, verbose="error").crop(0, 16)
    (tmp_path / "d").mkdir()
    mne.export.export_raw(tmp_path / "d" / "S0_rest.edf", raw, fmt="edf", verbose="error")
    raw.save(tmp_path / "d" / "S0_rest.fif", verbose="error")
    task = {"name": "two", "source": "files", "root": str(tmp_path / "d"), "classes": ["rest"],
            "files": {"glob": ["*.edf", "*.fif"], "pattern": r"^(?P<subject>S\d+)_(?P<label>rest)\."},
            "windows": {"mode": "fixed"}, "channels": {"exclude": ["EEG A2-A1", "ECG ECG"]}}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert sorted(set(ws.recording)) == ["S0_rest.edf", "S0_rest.fif"]


def test_validation_groups_are_stratified_when_labels_are_per_subject():
    import warnings

    from eegfm_bench.data.splits import SplitSpec, make_split

    groups = np.repeat([f"s{i}" for i in range(12)], 5)
    y = np.repeat(np.arange(12) % 2, 5)  # one class per subject
    split = make_split(y, groups, SplitSpec("kfold", 3, 0, 2), "t")
    label = {f"s{i}": i % 2 for i in range(12)}
    assert all(sorted(label[g] for g in f.val) == [0, 1] for f in split.folds)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        make_split(y, groups, SplitSpec("kfold", 3, 0, 1), "t")
    assert any("validation group(s) hold one class" in str(x.message) for x in w)
