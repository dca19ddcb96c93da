"""Messages that name the cause (issue 34, item 6), from the console script on real-format files built here from the
staged EEG: a data root that does not exist, a recording in volts, a BIDS events file without ``trial_type``, and a
corrupted EDF opened with a reader option. Each gives one line naming the cause and the fix, and exit status 2."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import mne
import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.qc import IngestError
from eegfm_bench.data.windows import load_windows

PREP = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)
EEGMMIDB = "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0"
BAD_EDF = "formats/bad_inputs/eegmmidb_S001R01_corrupted_copy.edf"


def _ingest(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    """``eegfm-bench ingest ...`` as the console script runs it: ``(exit status, stdout, stderr)``."""
    from eegfm_bench.cli import main

    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "ingest", *args, "--cache-dir", str(tmp_path / "cache"),
                                      "--out", str(tmp_path / "report"), "--no-progress"])
    rc = main()
    out, err = capsys.readouterr()
    return rc, out, err


def _task_file(tmp_path: Path, spec: dict) -> str:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _eyes_task(root: Path, name: str, **files) -> dict:
    """A ``source: files`` task over ``<root>/Subject<NN>_eyes.edf`` (eyes-open runs: one class, fixed windows)."""
    return {"name": name, "source": "files", "root": str(root), "classes": ["eyes_open"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>Subject\d+)_(?P<label>eyes)\.edf$", **files},
            "labels": {"map": {"eyes": "eyes_open"}}, "windows": {"mode": "fixed"}, "line_freq": 60.0}


def _report(ws) -> dict:
    return json.loads(Path(ws.meta["ingest_report"]).with_suffix(".json").read_text())


# ------------------------------------------------------------------------------------------ 1. the data root
@pytest.mark.parametrize("how", ["--data-root", "EEGFM_DATA"])
def test_a_data_root_that_does_not_exist_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, how):
    nowhere = tmp_path / "nowhere"
    # the console script makes a relative EEGFM_DATA absolute in os.environ: set through monkeypatch, it is restored
    monkeypatch.setenv("EEGFM_DATA", os.path.abspath(os.environ.get("EEGFM_DATA", ".")))
    monkeypatch.chdir(tmp_path)  # the working directory must not stand in for the data root
    args = ["--task", "eegmmidb_eyes", "--subjects", "1"]
    if how == "--data-root":
        args += ["--data-root", str(nowhere)]
    else:
        monkeypatch.setenv("EEGFM_DATA", str(nowhere))
    rc, out, err = _ingest(monkeypatch, capsys, tmp_path, *args)
    origin = "--data-root / data_root" if how == "--data-root" else f"EEGFM_DATA={nowhere}"
    assert rc == 2, err
    assert err.splitlines()[0] == (
        f"eegfm-bench ingest: DataRootNotFoundError: task 'eegmmidb_eyes': the data root {nowhere} ({origin}) does "
        "not exist; fix: point --data-root (or data_root / EEGFM_DATA) at the folder that holds the datasets, e.g. "
        "EEGFM_DATA=../shared/data")
    assert "not under the data root" not in out and "EEGMMIDB" not in err and not (tmp_path / "cache").exists()


# ------------------------------------------------------------------------------------------ 2. volts
def _volts_copy(data_root: Path, folder: Path, subject: int, scale: float) -> Path:
    """``S<subject>R01`` (eyes open, 61 s) written again by MNE's EDF export with its samples × ``scale``."""
    raw = mne.io.read_raw_edf(data_root / EEGMMIDB / f"S{subject:03d}" / f"S{subject:03d}R01.edf", preload=True,
                              verbose="error")
    raw._data *= scale
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"Subject{subject:02d}_eyes.edf"
    mne.export.export_raw(path, raw, fmt="edf", overwrite=True, verbose="error")
    return path


def test_a_recording_in_volts_names_the_unit_and_the_scale(data_root, tmp_path, monkeypatch, capsys):
    root = tmp_path / "d"
    _volts_copy(data_root, root, 1, 1e-6)  # volts written where the file says µV: 1e6 times too small
    rc, _, err = _ingest(monkeypatch, capsys, tmp_path, "--task", _task_file(tmp_path, _eyes_task(root, "volts")))
    assert rc == 2, err
    line = err.splitlines()[0]
    assert line.startswith("eegfm-bench ingest: IngestError: task 'volts': no recording yielded a window "
                           "(Subject01_eyes: amplitudes look like volts stored under a µV unit: median absolute "
                           "amplitude 3.2e-05 µV over 64 channels (the file declares µV); ×1e6 would give 32 µV"), \
        line
    assert "(dropped, not rescaled)" in line and "flat" not in line

    # beside a genuine recording written the same way: the genuine one is kept as it is, the other dropped with a
    # finding in the ingest report, and strict refuses
    _volts_copy(data_root, root, 2, 1.0)
    ws = load_windows(_eyes_task(root, "volts"), PREP, cache_dir=tmp_path / "c", progress=False)
    assert set(ws.recording) == {"Subject02_eyes"} and len(ws) == 15
    rec = {r["recording"]: r for r in _report(ws)["recordings"]}
    assert rec["Subject01_eyes"]["status"] == "dropped" and rec["Subject01_eyes"]["flat"]
    assert any(f.startswith("amplitudes look like volts stored under a µV unit") and "fix: correct the unit" in f
               for f in rec["Subject01_eyes"]["findings"])
    assert not rec["Subject02_eyes"]["findings"] and 10 < rec["Subject02_eyes"]["rms_uv"] < 100
    with pytest.raises(IngestError, match=r"Subject01_eyes .*volts stored under a µV unit.*×1e6 would give 32 µV"):
        load_windows({**_eyes_task(root, "volts"), "strict": True}, PREP, cache_dir=tmp_path / "c", progress=False)


# ------------------------------------------------------------------------------------------ 3. BIDS events
@pytest.fixture
def bids_run(data_root, tmp_path):
    """EEGMMIDB S001R04 (motor imagery, T0/T1/T2) written as BIDS by mne-bids; returns (root, events.tsv)."""
    from mne_bids import BIDSPath, write_raw_bids

    raw = mne.io.read_raw_edf(data_root / EEGMMIDB / "S001" / "S001R04.edf", verbose="error")
    raw.info["line_freq"] = 60
    bp = BIDSPath(subject="001", task="mi", run="04", datatype="eeg", root=tmp_path / "bids")
    write_raw_bids(raw, bp, overwrite=True, verbose=False)
    return tmp_path / "bids", bp.copy().update(suffix="events", extension=".tsv").fpath


def _mi_bids(root: Path, events: dict) -> dict:
    return {"name": "mi_bids", "source": "bids", "root": str(root), "bids": {"task": "mi"},
            "classes": ["left", "right"], "labels": {"events": events}, "windows": {"mode": "events"},
            "line_freq": 60}


def test_a_bids_events_file_without_trial_type_names_the_column(bids_run, tmp_path, monkeypatch, capsys):
    root, tsv = bids_run
    df = pd.read_csv(tsv, sep="\t")
    assert list(df.columns) == ["onset", "duration", "trial_type", "value", "sample"]
    df.drop(columns="trial_type").to_csv(tsv, sep="\t", index=False)
    task = _task_file(tmp_path, _mi_bids(root, {"T1": "left", "T2": "right"}))
    rc, _, err = _ingest(monkeypatch, capsys, tmp_path, "--task", task)
    assert rc == 2, err
    assert err.splitlines()[0] == (
        f"eegfm-bench ingest: RecordingReadError: {tsv} has no trial_type column, the column labels.events reads "
        "(columns: ['onset', 'duration', 'value', 'sample']); mne-bids took the event descriptions from `value` "
        "(['1', '2', '3']), none of which labels.events maps (['T1', 'T2']). fix: bids.events_column: <the column "
        "holding the event names> (labels.events keyed by its values), or add a trial_type column to the events "
        "files")
    # labels.events keyed by what mne-bids read (the value codes) is a declaration, not a mistake: 15 cues
    ws = load_windows(_mi_bids(root, {"2": "left", "3": "right"}), PREP, cache_dir=tmp_path / "c", progress=False)
    assert len(ws) == 15 and np.bincount(ws.y).tolist() == [8, 7]


# ------------------------------------------------------------------------------------------ 4. a corrupted EDF
def test_a_reader_option_does_not_rescue_a_corrupted_edf(data_root, tmp_path, monkeypatch, capsys):
    root = tmp_path / "d"
    root.mkdir()
    shutil.copy(data_root / BAD_EDF, root / "Subject01_eyes.edf")
    spec = _eyes_task(root, "latin1", reader_kwargs={"encoding": "latin1"})
    rc, _, err = _ingest(monkeypatch, capsys, tmp_path, "--task", _task_file(tmp_path, spec))
    assert rc == 2, err
    assert err.splitlines()[0] == (
        f"eegfm-bench ingest: RecordingReadError: Subject01_eyes ({root / 'Subject01_eyes.edf'}): 61 of 61 EDF+ data "
        "records do not open with a time-keeping annotation ('+<onset>\\x14\\x14'): record 0 starts with "
        "b'\\x01\\x00\\x0e\\x00\\x13\\x00\\x11\\x00\\r\\x00\\xfc\\xff' (not text: 'utf-8' codec can't decode byte 0xfc "
        "in position 10: invalid start byte); the records are shifted or overwritten, so their samples are not the "
        "recording. MNE refuses it (\"Encountered invalid byte in at least one annotations channel\"); a reader "
        "option such as files.reader_kwargs encoding: latin1 only hides that decoding error. fix: restore the file "
        "from its source (compare its sha256), or leave it out")
    # the genuine file under the same reader option is read as it is
    shutil.copy(data_root / EEGMMIDB / "S001" / "S001R01.edf", root / "Subject01_eyes.edf")
    ws = load_windows(spec, PREP, cache_dir=tmp_path / "c", progress=False)
    assert len(ws) == 15 and not _report(ws)["recordings"][0]["findings"]
