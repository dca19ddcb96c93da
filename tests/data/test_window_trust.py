"""Windows that depend only on their own signal (issue 22), on real files built from the staged EEG.

One reference over the final channel set (pooled montages, ``include``, a model that reads a subset), windows
independent of the recording's length (polyphase resampling), event durations honoured (``windows.past_event``),
no channel lost or doubled silently (duplicate labels), relative paths resolved once, provenance in the rows, the
per-recording window cache, and bad inputs refused before any data is read.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import mne
import numpy as np
import pytest
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.qc import IngestError
from eegfm_bench.data.windows import load_windows

from eegfm_testutils import requires_data

EEGMMIDB = "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0"
PREP = Preprocessing(sfreq=128.0, l_freq=0.5, h_freq=45.0, scale=1e6, unit="µV", window_s=4.0)


def _report(ws) -> dict:
    return {r["recording"]: r for r in json.loads(Path(ws.meta["ingest_report"]).with_suffix(".json")
                                                  .read_text())["recordings"]}


def _mmidb(data_root, s: int, r: int) -> Path:
    return data_root / EEGMMIDB / f"S{s:03d}" / f"S{s:03d}R{r:02d}.edf"


# ------------------------------------------------------------------------------------------ 1. one reference
@requires_data
def test_pooled_19_and_64_channel_recordings_have_channel_mean_zero_after_intersect(data_root, tmp_path):
    root = tmp_path / "pool"
    root.mkdir()
    for s in (0, 1):
        shutil.copy(data_root / "eegmat" / f"Subject{s:02d}_1.edf", root / f"mat_S{s:02d}.edf")
    for s in (1, 2):
        shutil.copy(_mmidb(data_root, s, 4), root / f"mmi_S{s:02d}x.edf")
    task = {"name": "pool", "source": "files", "root": str(root), "classes": ["mat", "mmi"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<label>mat|mmi)_(?P<subject>S\d+x?)\.edf$"},
            "windows": {"mode": "fixed"}, "channels": {"montage": "intersect"}}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    assert len(ws.ch_names) == 19 and {"mat", "mmi"} == set(np.asarray(ws.class_names)[ws.y])
    mean = np.abs(np.asarray(ws.X, dtype=np.float64).mean(axis=1))  # (windows, times), µV
    # before: the EEGMMIDB windows kept the common mode of the 45 dropped channels (median 1.3 µV, max 16.4 µV)
    assert mean.max() < 1e-5, mean.max()
    for cls in (0, 1):
        assert mean[ws.y == cls].max() < 1e-5
    rep = _report(ws)
    for name, r in rep.items():
        assert r["reference"] == {"reference": "average", "n_channels": 19, "channels": list(ws.ch_names)}, name
    assert "average over 19" in Path(ws.meta["ingest_report"]).read_text()
    assert ws.meta["reference"]["channels"] == list(ws.ch_names)


@requires_data
def test_a_reference_over_three_channels_is_a_finding_and_strict_refuses_it(data_root, tmp_path):
    task = {"preset": "eegmat", "channels": {"include": ["C3", "Cz", "C4"]}}
    ws = load_windows(task, PREP, data_root=data_root, subjects=[0], cache_dir=tmp_path / "c", progress=False)
    assert ws.ch_names == ["C3", "Cz", "C4"]
    r = next(iter(_report(ws).values()))
    assert r["reference"]["n_channels"] == 3
    assert any("common average reference over only 3 channel(s)" in f for f in r["findings"])
    assert np.abs(np.asarray(ws.X, dtype=np.float64).mean(axis=1)).max() < 1e-5
    with pytest.raises(IngestError, match=r"only 3 channel\(s\).*min_reference_channels = 8"):
        load_windows({**task, "strict": True}, PREP, data_root=data_root, subjects=[0], cache_dir=tmp_path / "c",
                     progress=False)
    ok = load_windows({**task, "channels": {**task["channels"], "min_reference_channels": 3}}, PREP,
                      data_root=data_root, subjects=[0], cache_dir=tmp_path / "c", progress=False)
    assert not next(iter(_report(ok).values()))["findings"]


def test_a_model_that_reads_a_subset_re_references_it():
    import torch

    from eegfm_bench.models.backbones import BACKBONES

    names = ["Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8", "P7", "P3", "Pz", "P4", "P8",
             "O1", "O2", "FC1", "FC2", "CP1", "CP2", "Oz"]
    ad = BACKBONES.get("eegdino")(names, 800, 2)
    assert len(ad.input_channels) == 19
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, len(names), 800, generator=g)
    x = x - x.mean(dim=1, keepdim=True)  # average-referenced over the 24 channels
    xs, read = ad.reference_selection(x, names)
    assert read == ad.input_channels and xs.shape == (3, 19, 800)
    assert xs.mean(dim=1).abs().max() < 1e-6  # the mean over the 19 read channels is 0
    idx = [names.index(c) for c in read]
    assert x[:, idx].mean(dim=1).abs().max() > 0.05  # it was not before the re-reference
    ad.data_reference = "none"
    same, _ = ad.reference_selection(x, names)
    assert same is x


# ---------------------------------------------------------------------------- 2. independent of the length
@requires_data
@pytest.mark.parametrize("sfreq", [128.0, 200.0, 256.0])
def test_windows_of_a_truncated_copy_equal_the_full_files_away_from_the_cut(data_root, tmp_path, sfreq):
    raw = mne.io.read_raw_edf(_mmidb(data_root, 1, 4), preload=True, verbose="error")
    mne.datasets.eegbci.standardize(raw)
    root = tmp_path / "cuts"
    root.mkdir()
    # FIF keeps any length (an EDF export pads to whole 1 s records); 12,347 and 15,003 are multiples of neither 4
    # (160 -> 200 Hz) nor 5 (160 -> 128 / 256 Hz)
    lengths = {"full": raw.n_times, "cut11680": 11680, "cut12347": 12347, "cut15003": 15003}
    for name, n in lengths.items():
        part = raw.copy().crop(tmax=(n - 1) / raw.info["sfreq"], include_tmax=True)
        assert part.n_times == n
        part.save(root / f"{name}_raw.fif", verbose="error")
    task = {"name": "cuts", "source": "files", "root": str(root), "classes": ["left", "right"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>\w+)_raw\.fif$"},
            "labels": {"events": {"T1": "left", "T2": "right"}}, "windows": {"mode": "events"}, "line_freq": 60.0}
    prep = Preprocessing(sfreq=sfreq, l_freq=0.5, h_freq=45.0, scale=1e6, window_s=4.0)
    ws = load_windows(task, prep, cache_dir=tmp_path / "c", progress=False)
    assert ws.meta["preprocessing"]["resample"] == "polyphase"
    onsets = sorted(a["onset"] for a in raw.annotations if a["description"] in ("T1", "T2"))
    full = np.asarray(ws.X[ws.subject == "full"], dtype=np.float64)
    for name, n in lengths.items():
        if name == "full":
            continue
        cut = np.asarray(ws.X[ws.subject == name], dtype=np.float64)
        away = [k for k, on in enumerate(onsets[:len(cut)]) if on + 4.0 < n / 160.0 - 8.0]  # 8 s: the filters' reach
        assert len(away) >= 5
        corr = [np.corrcoef(full[k].ravel(), cut[k].ravel())[0, 1] for k in away]
        assert min(corr) >= 0.9999, (name, min(corr))  # MNE's FFT resampling: 0.90-0.97 at 128 Hz
        assert np.abs(full[away] - cut[away]).max() < 1e-3  # µV (float32 windows)


def test_the_resampling_method_is_in_the_cache_key(tmp_path):
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.data.windows import cache_key

    task = get_task("eegmat")
    fps = [{"recording": "r", "sha256": "0", "extra": ""}]
    a = cache_key(task, fps, PREP)
    b = cache_key(task, fps, Preprocessing(**{**PREP.to_dict(), "resample": "fft"}))
    assert a != b and PREP.resample == "polyphase"


# ------------------------------------------------------------------------------------- 3. event durations
@requires_data
def test_a_window_longer_than_its_event_is_a_finding_and_strict_refuses_it(data_root, tmp_path):
    task = {"preset": "eegmmidb_mi", "window_s": 4.5, "eegmmidb": {"runs": [4]}}
    kw = dict(data_root=data_root, subjects=[1], cache_dir=tmp_path / "c", progress=False)
    ws = load_windows(task, PREP, **kw)
    r = next(iter(_report(ws).values()))
    assert r["past_event"]["window longer than its event"] == len(ws) == 15
    assert any("15 window(s) run past the end of their event: the events last 4.1 s, the windows end 4.5 s" in f
               for f in r["findings"])
    with pytest.raises(IngestError, match="run past the end of their event"):
        load_windows({**task, "strict": True}, PREP, **kw)
    with pytest.raises(IngestError, match=r"lasts 4.1 s; fix: a window of at most 4.1 s"):
        load_windows({**task, "windows": {"past_event": "error"}}, PREP, **kw)
    crop = load_windows({**task, "windows": {"past_event": "crop"}}, PREP, **kw)
    cut = int(round(4.1 * 128))
    X = np.asarray(crop.X)
    assert np.all(X[:, :, cut:] == 0) and np.all(np.abs(X[:, :, :cut]).max(axis=(1, 2)) > 1)
    assert np.allclose(X[:, :, :cut], np.asarray(ws.X)[:, :, :cut])  # the same windows up to the event's end
    ok = load_windows({**task, "window_s": 4.0, "strict": True}, PREP, **kw)  # 4 s windows fit 4.1 s trials
    assert not next(iter(_report(ok).values()))["past_event"]


@requires_data
def test_past_event_drop_keeps_the_windows_within_their_event_and_overruns_are_counted(data_root, tmp_path):
    raw = mne.io.read_raw_edf(_mmidb(data_root, 1, 4), preload=True, verbose="error")
    ann = raw.annotations
    durs = np.array(ann.duration)
    labelled = [i for i, d in enumerate(ann.description) if d in ("T1", "T2")]
    long = labelled[::2]
    durs[long] = 5.0  # runs 0.8 s into the next rest period (T0 follows each cue after 4.1 s)
    raw.set_annotations(mne.Annotations(ann.onset, durs, ann.description, orig_time=ann.orig_time))
    root = tmp_path / "d"
    root.mkdir()
    raw.save(root / "S1_raw.fif", verbose="error")
    task = {"name": "d", "source": "files", "root": str(root), "classes": ["left", "right"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
            "labels": {"events": {"T1": "left", "T2": "right"}},
            "windows": {"mode": "events", "past_event": "drop"}, "window_s": 4.5}
    ws = load_windows(task, PREP, cache_dir=tmp_path / "c", progress=False)
    r = next(iter(_report(ws).values()))
    assert len(ws) == len(long)  # the 4.1 s events are dropped, the 5 s ones kept
    assert r["windows_rejected"]["runs past the end of its event (windows.past_event: drop)"] == len(labelled) - len(long)
    nxt = {i: min((o for o in ann.onset if o > ann.onset[i]), default=None) for i in long}
    over = sum(1 for i in long if nxt[i] is not None and ann.onset[i] + 5.0 > nxt[i])
    assert over >= len(long) - 1 and r["past_event"]["event overruns the next annotation"] == over
    assert any(f"{over} event(s) last past the onset of the next annotation" in f for f in r["findings"])


# -------------------------------------------------------------------------------------- 4. duplicate labels
def _edf_with_labels(data_root, path: Path, labels: list[str]) -> np.ndarray:
    from edfio import Edf, EdfSignal

    raw = mne.io.read_raw_edf(data_root / "eegmat" / "Subject00_1.edf", preload=True, verbose="error")
    data = raw.get_data()[:len(labels), : int(raw.info["sfreq"]) * 60] * 1e6  # one minute, µV
    sigs = [EdfSignal(row, sampling_frequency=raw.info["sfreq"], label=lab, physical_dimension="uV",
                      physical_range=(-3000, 3000)) for row, lab in zip(data, labels)]
    Edf(sigs).write(path)
    return data


@requires_data
def test_a_label_on_two_channels_keeps_the_first_with_a_finding_or_is_refused(data_root, tmp_path):
    labels = ["EEG Fp1", "EEG Fp1", "EEG F3", "EEG F4", "EEG C3", "EEG C4", "EEG P3", "EEG P4", "EEG O1", "EEG O2"]
    root = tmp_path / "dup"
    root.mkdir()
    data = _edf_with_labels(data_root, root / "S1_rest.edf", labels)
    task = {"name": "dup", "source": "files", "root": str(root), "classes": ["rest"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>S\d+)_(?P<label>rest)\.edf$"},
            "windows": {"mode": "fixed"}, "line_freq": None}
    prep = Preprocessing(sfreq=data.shape[1] / 60.0, l_freq=None, h_freq=None, reference="none", window_s=4.0)
    ws = load_windows(task, prep, cache_dir=tmp_path / "c", progress=False)
    assert ws.ch_names[0] == "Fp1" and ws.ch_names.count("Fp1") == 1 and len(ws.ch_names) == 9
    r = next(iter(_report(ws).values()))
    assert r["dropped"] == {"EEG Fp1-1": "a second channel labelled EEG Fp1 (channels.duplicates: keep_first)"}
    assert any("duplicate channel labels: EEG Fp1 on 2 channels" in f for f in r["findings"])
    first = np.asarray(ws.X[0, 0], dtype=np.float64)  # the first of the two, not the second
    assert np.corrcoef(first, data[0, :len(first)])[0, 1] > 0.9999
    assert np.corrcoef(first, data[1, :len(first)])[0, 1] < 0.99
    with pytest.raises(IngestError, match=r"one label on several channels: EEG Fp1 on 2 channels"):
        load_windows({**task, "channels": {"duplicates": "error"}}, prep, cache_dir=tmp_path / "c", progress=False)


@requires_data
def test_two_spellings_of_one_electrode_keep_the_first(data_root, tmp_path):
    labels = ["EEG Fp1", "FP1", "EEG F3", "EEG F4", "EEG C3", "EEG C4", "EEG P3", "EEG P4", "EEG O1", "EEG O2"]
    root = tmp_path / "sp"
    root.mkdir()
    _edf_with_labels(data_root, root / "S1_rest.edf", labels)
    task = {"name": "sp", "source": "files", "root": str(root), "classes": ["rest"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>S\d+)_(?P<label>rest)\.edf$"},
            "windows": {"mode": "fixed"}, "line_freq": None}
    prep = Preprocessing(sfreq=500.0, l_freq=None, h_freq=None, reference="none", window_s=4.0)
    ws = load_windows(task, prep, cache_dir=tmp_path / "c", progress=False)
    r = next(iter(_report(ws).values()))
    assert ws.ch_names.count("Fp1") == 1 and "FP1" in r["dropped"]
    assert any("'EEG Fp1' and 'FP1' are both Fp1" in f for f in r["findings"])
    with pytest.raises(IngestError, match="both Fp1 after renaming"):
        load_windows({**task, "channels": {"duplicates": "error"}}, prep, cache_dir=tmp_path / "c", progress=False)


def test_duplicates_in_include_or_exclude_are_refused_before_any_data_is_read():
    from eegfm_bench.data.tasks import get_task

    with pytest.raises(ConfigError, match=r"channels.include lists \['C3'\] more than once"):
        get_task({"preset": "eegmat", "channels": {"include": ["C3", "Cz", "c3"]}})
    with pytest.raises(ConfigError, match=r"channels.exclude lists \['Fz'\] more than once"):
        get_task({"preset": "eegmat", "channels": {"exclude": ["Fz", "Fz"]}})


# ------------------------------------------------------------------------------------------ 5. relative paths
def test_relative_data_roots_and_task_roots_resolve_once(tmp_path, monkeypatch, capsys):
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.data.sources import resolve_data_root

    (tmp_path / "data" / "mine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EEGFM_DATA", "data")
    assert resolve_data_root() == tmp_path / "data" and resolve_data_root("data").is_absolute()
    spec = {"name": "m", "source": "files", "classes": ["a", "b"], "files": {"glob": "*.edf", "subject": "s1"}}
    under = get_task({**spec, "root": "mine"}).source()
    assert under.root == tmp_path / "data" / "mine"
    spelled = get_task({**spec, "root": "data/mine"}).source()  # a path that already names the data root
    assert spelled.root == tmp_path / "data" / "mine"
    assert "is not under the data root" in capsys.readouterr().out


def test_ci_runs_the_readme_test_command_as_written():
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    ci = (repo / ".ci" / "run").read_text()
    cmd = next(line for line in readme.splitlines() if "pytest" in line and "EEGFM_DATA" in line)
    assert "EEGFM_DATA=../shared/data" in cmd
    test_cmd = cmd.split("&&", 1)[1].strip()
    assert test_cmd in ci, "CI must run the README's test command exactly as written"


# ------------------------------------------------------------------------------------------- 6. provenance
def test_state_dict_hash_follows_the_weights_and_reve_records_its_position_bank(tmp_path, monkeypatch):
    import torch

    from eegfm_bench.models.base import state_dict_sha256
    from eegfm_bench.models.backbones import BACKBONES

    torch.manual_seed(0)
    a = BACKBONES.get("eegnet")(["C3", "Cz", "C4"], 512, 2)
    torch.manual_seed(0)
    b = BACKBONES.get("eegnet")(["C3", "Cz", "C4"], 512, 2)
    assert state_dict_sha256(a) == state_dict_sha256(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-3
    assert state_dict_sha256(a) != state_dict_sha256(b)
    monkeypatch.setenv("EEGFM_CACHE", str(tmp_path))
    r = BACKBONES.get("reve")(["C3", "Cz", "C4"], 400, 2, embed_dim=32, depth=2, heads=2, head_dim=8)
    bank = (tmp_path / "reve" / "reve_positions.json").read_bytes()
    assert r.provenance() == {"reve_positions_sha256": hashlib.sha256(bank).hexdigest()}


# ------------------------------------------------------------------------------- 6b. per-recording cache
@requires_data
def test_the_window_cache_is_kept_per_recording(data_root, tmp_path, monkeypatch):
    import eegfm_bench.data.windows as W
    from eegfm_bench.data.sources.files import FilesSource

    root = tmp_path / "mat"
    root.mkdir()
    for s in (0, 1, 2):
        shutil.copy(data_root / "eegmat" / f"Subject{s:02d}_1.edf", root / f"Subject{s:02d}_rest.edf")
    task = {"name": "m", "source": "files", "root": str(root), "classes": ["rest"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<subject>Subject\d+)_(?P<label>rest)\.edf$"},
            "windows": {"mode": "fixed"}, "line_freq": 50.0}
    reads: list[str] = []
    real = FilesSource.read
    monkeypatch.setattr(FilesSource, "read", lambda self, rec: (reads.append(rec.subject), real(self, rec))[1])
    kw = dict(cache_dir=tmp_path / "c", progress=False)
    calls = {"n": 0}
    real_read = W._read_recording

    def killed(*a, **k):  # the build is killed while reading the third recording
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_read(*a, **k)
    monkeypatch.setattr(W, "_read_recording", killed)
    with pytest.raises(KeyboardInterrupt):
        load_windows(task, PREP, **kw)
    monkeypatch.setattr(W, "_read_recording", real_read)
    reads.clear()
    first = load_windows(task, PREP, **kw)
    assert reads == ["Subject02"]  # the resumed build reads only the recording still missing
    with open(root / "Subject01_rest.edf", "r+b") as f:  # edit one file (its header's patient field)
        f.seek(8)
        f.write(b"X edited")
    reads.clear()
    again = load_windows(task, PREP, **kw)
    assert reads == ["Subject01"] and again.meta["cache_key"] != first.meta["cache_key"]
    assert np.array_equal(np.asarray(again.X), np.asarray(first.X))
    reads.clear()
    load_windows(task, PREP, **kw)
    assert reads == []


# -------------------------------------------------------------------------------- 7. refused before reading
def _cli(monkeypatch, capsys, cfg: Path) -> tuple[int, str]:
    from eegfm_bench.cli import main

    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "cv", "--config", str(cfg)])
    rc = main()
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("case", ["one_class", "lora_key", "out_dir"])
def test_bad_inputs_found_after_reading_are_refused_before(tmp_path, monkeypatch, capsys, case):
    import eegfm_bench.data.windows as W

    def no_reading(*a, **k):
        raise AssertionError("data were read")
    monkeypatch.setattr(W, "load_windows", no_reading)
    cfg = {"task": "eegmat", "out_dir": str(tmp_path / "out"),
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]}
    if case == "one_class":
        cfg["task"] = {"preset": "eegmat", "classes": ["rest"], "labels": {"map": {"1": "rest", "2": None}}}
        want = "has one class"
    elif case == "lora_key":
        cfg["runs"] = [{"model": "labram", "regime": "lora", "heads": ["mean"], "lora": {"rank": 4}}]
        want = "runs[0].lora: PEFT method 'lora' (LoraConfig) has no fields ['rank']"
    else:
        (tmp_path / "afile").write_text("x")
        cfg["out_dir"] = str(tmp_path / "afile" / "out")
        want = "cannot be created"
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    rc, err = _cli(monkeypatch, capsys, p)
    assert rc == 2 and want in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= 3
