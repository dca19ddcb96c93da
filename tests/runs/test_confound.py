"""Confound check (issue 16) on synthetic event-locked recordings with known answers, written as FIF files and read
through the real ingestion path: a label carried only by a cue-locked transient in the first 0.4 s vanishes
when the windows start 1 s after the cue, a label in 10 Hz power over the whole trial does not, and a label
carried only at 2 Hz vanishes in the 4–40 Hz band. Tiny EEGNet, 8 subjects, two subject-grouped test folds."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

CH = ["F3", "Fz", "F4", "C3", "Cz", "C4", "P3", "P4"]
SF = 128.0


def _write(root: Path, kind: str, n_subjects: int = 8, n_events: int = 40, seed: int = 0) -> dict:
    """One FIF per subject: events 'a' / 'b' every 6 s; class b carries ``kind`` on C3 and C4 (µV scale)."""
    import mne

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = int((n_events * 6 + 8) * SF)
    t = np.arange(int(6 * SF)) / SF
    for s in range(n_subjects):
        x = rng.normal(0, 10e-6, (len(CH), n))
        onsets, labels = [], []
        for e in range(n_events):
            start = int((2 + 6 * e) * SF)
            lab = "b" if (e + s) % 2 else "a"
            if lab == "b":
                if kind == "transient":
                    sig = np.where(t < 0.4, 40e-6 * np.sin(np.pi * t / 0.4), 0.0)
                elif kind == "alpha":
                    sig = 20e-6 * np.sin(2 * np.pi * 10 * t + rng.uniform(0, 2 * np.pi))
                else:  # 2 Hz
                    sig = 30e-6 * np.sin(2 * np.pi * 2 * t + rng.uniform(0, 2 * np.pi))
                x[3, start:start + t.size] += sig
                x[5, start:start + t.size] -= sig
            onsets.append(start / SF)
            labels.append(lab)
        raw = mne.io.RawArray(x, mne.create_info(CH, SF, "eeg"), verbose="error")
        raw.set_annotations(mne.Annotations(onsets, [0.1] * len(onsets), labels))
        raw.save(root / f"S{s:02d}_raw.fif", overwrite=True, verbose="error")
    return {"name": f"syn_{kind}", "source": "files", "root": str(root), "classes": ["a", "b"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
            "labels": {"events": {"a": "a", "b": "b"}}, "windows": {"mode": "events", "tmin": 0.0},
            "line_freq": 50, "reference": "none"}


def _cfg(tmp_path: Path, task: dict, variations: list[str]) -> dict:
    return {"experiment": f"conf_{task['name']}", "task": task, "out_dir": str(tmp_path / task["name"]), "seed": 0,
            "data": {"batch_size": 16, "cache_dir": str(tmp_path / "cache")},
            "split": {"scheme": "kfold", "k": 4, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
            "trainer": {"max_epochs": 12, "patience": 12}, "optim": {"lr": 0.005, "warmup_epochs": 0},
            "runs": [{"model": "eegnet", "regime": "full", "heads": ["mean"],
                      "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}],
            "confound": {"enabled": True, "variations": variations, "n_boot": 200}}


def _run(tmp_path, kind, variations):
    from eegfm_bench.runs.cv import run_cv

    task = _write(tmp_path / f"data_{kind}", kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = run_cv(_cfg(tmp_path, task, variations), progress=False)
    return table, table.attrs["confound"], Path(tmp_path / task["name"])


def test_offset_removes_a_cue_locked_transient_and_keeps_10hz_power(tmp_path):
    _, conf, out = _run(tmp_path, "transient", ["offset"])
    row = conf.iloc[0]
    assert row.condition == "confound=offset1s"
    assert row.headline_mean > 0.85  # the transient is easy to see in the headline windows
    assert row.variation_mean < 0.65  # gone 1 s after the cue: chance
    assert row.high < 0  # the paired interval excludes no change
    rows = pd.read_csv(out / "results.csv")
    assert {"clean", "confound=offset1s"} <= set(rows.condition)
    assert "confound=offset1s" in (out / "confound.md").read_text()
    # the offset windows start 1 s later and are 1 s shorter (EEGNet takes any length): 3 s at 128 Hz
    from eegfm_bench.runs.cv import load_config, windows_for

    dcfg = load_config(out / "confound" / "offset" / "config.yaml")
    assert windows_for(dcfg, "eegnet", {}).n_times == 384
    # a headline retrained since (another config hash) leaves its confound rows off the page and the README
    from eegfm_bench.runs.confound import current_rows

    assert len(current_rows(out)) == 1
    c = pd.read_csv(out / "confound.csv")
    c["headline_hash"] = "0" * 12
    c.to_csv(out / "confound.csv", index=False)
    assert current_rows(out).empty
    _, conf, _ = _run(tmp_path, "alpha", ["offset"])
    row = conf.iloc[0]
    assert row.headline_mean > 0.85 and row.variation_mean > 0.85  # power over the whole trial survives


def test_band_removes_a_label_carried_only_at_2hz(tmp_path):
    _, conf, _ = _run(tmp_path, "slow", ["band"])
    row = conf.iloc[0]
    assert row.condition == "confound=band4-40"
    assert row.headline_mean > 0.85 and row.variation_mean < 0.65


def test_confound_settings_are_checked_before_any_data(tmp_path, monkeypatch):
    import eegfm_bench.data.windows as W
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv import run_cv

    monkeypatch.setattr(W, "load_windows", lambda *a, **k: pytest.fail("data read"))
    task = {"name": "syn", "source": "files", "root": str(tmp_path), "classes": ["a", "b"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
            "labels": {"events": {"a": "a", "b": "b"}}, "windows": {"mode": "events"}}
    for over, match in (({"variations": ["offst"]}, r"confound.variations.*fix"),
                        ({"band": [40, 4]}, r"confound.band.*lo < hi"),
                        ({"offset_s": 0}, r"offset_s = 0.*fix")):
        cfg = _cfg(tmp_path, task, ["offset"])
        cfg["confound"].update(over)
        with pytest.raises(ConfigError, match=match):
            run_cv(cfg, progress=False)
    cfg = _cfg(tmp_path, {**task, "windows": {"mode": "fixed"}}, ["band", "offset+band"])
    with pytest.raises(ConfigError, match="not locked to events.*fix: variations without offset"):
        run_cv(cfg, progress=False)


def test_derived_configs_change_only_their_variation(tmp_path):
    """derive(): the offset moves the window start and shortens it, band narrows the pass band, frontal drops
    the frontal electrodes from the montage; a preset stays a preset and a task file becomes its full mapping."""
    import yaml

    from eegfm_bench.runs.confound import FRONTAL, derive
    from eegfm_bench.runs.cv import load_config, model_preprocessing

    base = {"experiment": "d", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"),
            "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}], "confound": {"enabled": True}}
    cfg = load_config(base)
    off = derive(cfg, "offset")
    assert off["task"] == {"preset": "eegmmidb_mi", "windows": {"tmin": 1.0}}
    assert off["out_dir"].endswith("confound/offset") and not off["confound"]["enabled"]
    assert model_preprocessing(off, "eegnet").window_s == 3.0
    band = derive(cfg, "offset+band")
    p = model_preprocessing(band, "eegnet")
    assert (p.l_freq, p.h_freq, p.window_s) == (4.0, 40.0, 3.0)
    fr = derive(cfg, "frontal")
    assert set(FRONTAL) <= set(fr["task"]["channels"]["exclude"]) and "windows" not in fr["task"]
    assert model_preprocessing(fr, "eegnet") == model_preprocessing(cfg, "eegnet")
    task_file = tmp_path / "t.yaml"
    task_file.write_text(yaml.safe_dump({"name": "mine", "source": "files", "root": str(tmp_path), "classes": ["a", "b"],
                                         "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
                                         "labels": {"events": {"a": "a", "b": "b"}},
                                         "windows": {"mode": "events", "tmin": 0.5}}))
    cfg2 = load_config({**base, "task": str(task_file)})
    t = derive(cfg2, "offset")["task"]
    assert t["name"] == "mine" and t["windows"]["tmin"] == 1.5 and "preset" not in t
