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
    from eegfm_bench.runs.cv.command import run_cv

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
    from eegfm_bench.runs.cv.cells import load_config, windows_for

    dcfg = load_config(out / "confound" / "offset" / "config.yaml")
    assert windows_for(dcfg, "eegnet", {}).n_times == 384
    # a headline retrained since (another config hash) leaves its confound rows off the page and the README
    from eegfm_bench.reports.confound import current_rows

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
    from eegfm_bench.runs.cv.command import run_cv

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

    from eegfm_bench.runs.cv.confound import derive
    from eegfm_bench.config.confound import FRONTAL
    from eegfm_bench.runs.cv.cells import load_config, model_preprocessing

    base = {"experiment": "d", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"),
            "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}], "confound": {"enabled": True}}
    cfg = load_config(base)
    off = derive(cfg, "offset")
    assert off.task == {"preset": "eegmmidb_mi", "windows": {"tmin": 1.0}}
    assert off.out_dir.endswith("confound/offset") and not off.confound.enabled
    assert model_preprocessing(off, "eegnet").prep.window_s == 3.0
    band = derive(cfg, "offset+band")
    p = model_preprocessing(band, "eegnet").prep
    assert (p.l_freq, p.h_freq, p.window_s) == (4.0, 40.0, 3.0)
    fr = derive(cfg, "frontal")
    assert set(FRONTAL) <= set(fr.task["channels"]["exclude"]) and "windows" not in fr.task
    assert model_preprocessing(fr, "eegnet").prep == model_preprocessing(cfg, "eegnet").prep
    task_file = tmp_path / "t.yaml"
    task_file.write_text(yaml.safe_dump({"name": "mine", "source": "files", "root": str(tmp_path), "classes": ["a", "b"],
                                         "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
                                         "labels": {"events": {"a": "a", "b": "b"}},
                                         "windows": {"mode": "events", "tmin": 0.5}}))
    cfg2 = load_config({**base, "task": str(task_file)})
    t = derive(cfg2, "offset").task
    assert t["name"] == "mine" and t["windows"]["tmin"] == 1.5 and "preset" not in t


CH14 = ["Fp1", "Fp2", "F7", "F8", "F3", "Fz", "F4", "C3", "Cz", "C4", "P3", "P4", "O1", "O2"]


def _write14(root: Path, kind: str, n_subjects: int = 8, n_events: int = 40, seed: int = 0) -> dict:
    """As :func:`_write` on 14 channels: class b carries 10 Hz power on O1/O2 over the whole trial (``occipital``,
    a real effect) or a 1 Hz half-wave on Fp1/Fp2/F7/F8 in the first second after the cue (``frontal``, an eye-
    movement-like artefact)."""
    import mne

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = int((n_events * 6 + 8) * SF)
    t = np.arange(int(6 * SF)) / SF
    for s in range(n_subjects):
        x = rng.normal(0, 10e-6, (len(CH14), n))
        onsets, labels = [], []
        for e in range(n_events):
            start = int((2 + 6 * e) * SF)
            lab = "b" if (e + s) % 2 else "a"
            if lab == "b":
                if kind == "occipital":
                    sig = 20e-6 * np.sin(2 * np.pi * 10 * t + rng.uniform(0, 2 * np.pi))
                    chans = [CH14.index("O1"), CH14.index("O2")]
                else:
                    sig = np.where(t < 1.0, 60e-6 * np.sin(np.pi * t), 0.0)  # 1 Hz half-wave, first second
                    chans = [CH14.index(c) for c in ("Fp1", "Fp2", "F7", "F8")]
                for c in chans:
                    x[c, start:start + t.size] += sig
            onsets.append(start / SF)
            labels.append(lab)
        raw = mne.io.RawArray(x, mne.create_info(CH14, SF, "eeg"), verbose="error")
        raw.set_annotations(mne.Annotations(onsets, [0.1] * len(onsets), labels))
        raw.save(root / f"S{s:02d}_raw.fif", overwrite=True, verbose="error")
    return {"name": f"syn14_{kind}", "source": "files", "root": str(root), "classes": ["a", "b"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
            "labels": {"events": {"a": "a", "b": "b"}}, "windows": {"mode": "events", "tmin": 0.0},
            "line_freq": 50, "reference": "none"}


def test_a_real_occipital_alpha_effect_survives_every_variation(tmp_path):
    """Issue 24, the positive control: the check must keep an effect that is real. The label lives in 10 Hz power
    over O1/O2 for the whole trial: above chance and not significantly lower under offset, band, offset+band and
    without the frontal electrodes."""
    from eegfm_bench.runs.cv.command import run_cv

    task = _write14(tmp_path / "occ", "occipital")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = run_cv(_cfg(tmp_path, task, ["offset", "band", "offset+band", "frontal"]), progress=False)
    conf = table.attrs["confound"].set_index("condition")
    assert set(conf.index) == {"confound=offset1s", "confound=band4-40", "confound=offset1s+band4-40",
                               "confound=frontal"}
    assert (conf["verdict"] == "survives").all(), conf[["variation_mean", "checked_low", "low", "high", "verdict"]]
    assert (conf["checked_low"] > 0.5).all() and (conf["chance"] == 0.5).all()
    side = table.attrs["side_by_side"]
    assert list(side.columns[:5]) == ["model", "init", "regime", "head", "headline balanced_accuracy"]
    assert (side[[c for c in side.columns if c.startswith("verdict")]] == "survives").all().all()
    md = (Path(tmp_path / task["name"]) / "summary.md").read_text()
    assert "## Headline and confound-checked" in md and "| survives |" in md


def test_a_frontal_1hz_transient_does_not_survive(tmp_path):
    """The negative counterpart: the label is a cue-locked 1 Hz deflection on the frontal electrodes (what eye
    movements toward a target look like): gone after the offset and outside 4-40 Hz, and without the frontal
    electrodes."""
    from eegfm_bench.runs.cv.command import run_cv

    task = _write14(tmp_path / "fr", "frontal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = run_cv(_cfg(tmp_path, task, ["offset+band", "frontal"]), progress=False)
    conf = table.attrs["confound"].set_index("condition")
    assert conf.loc["confound=offset1s+band4-40", "headline_mean"] > 0.85
    assert (conf["verdict"] == "does not survive").all(), conf[["variation_mean", "checked_low", "verdict"]]
    # the variations' rows joined the headline store naming their files relative to it (a movable folder)
    out = tmp_path / task["name"]
    rows = pd.read_csv(out / "results.csv")
    var = rows[rows["condition"].str.startswith("confound=") & (rows["metric"] == "balanced_accuracy")]
    assert len(var) == 4 and all(p.startswith("confound/") and (out / p).is_file() for p in var["predictions"])
    assert all(c.startswith("confound/") and (out / c).is_file() for c in var["checkpoint"])


def test_the_verdict_rule():
    from eegfm_bench.runs.cv.confound import confound_verdict

    assert confound_verdict(checked_low=0.62, chance=0.5, delta_high=0.01) == "survives"
    assert confound_verdict(checked_low=0.62, chance=0.5, delta_high=0.0) == "survives"  # Δ not significantly < 0
    assert confound_verdict(checked_low=0.55, chance=0.5, delta_high=-0.05) == "partly"
    assert confound_verdict(checked_low=0.50, chance=0.5, delta_high=0.1) == "does not survive"
    assert confound_verdict(checked_low=0.30, chance=1 / 3, delta_high=0.1) == "does not survive"


def test_side_by_side_table_from_a_crafted_store():
    from eegfm_bench.reports.cv import confound_side_by_side

    head = pd.DataFrame([{"model": "eegnet", "init": "random", "regime": "full", "head": "flatten",
                          "balanced_accuracy": "0.780 ± 0.070"},
                         {"model": "labram", "init": "random", "regime": "head_only", "head": "mean",
                          "balanced_accuracy": "0.510 ± 0.030"}])
    conf = pd.DataFrame([{"model": "eegnet", "regime": "full", "head": "flatten", "condition": "confound=x",
                          "variation_mean": 0.60, "checked_low": 0.55, "checked_high": 0.65, "delta": -0.18,
                          "low": -0.24, "high": -0.12, "verdict": "partly", "chance": 0.5}])
    side = confound_side_by_side(head, conf)
    assert side.loc[0, "confound=x"] == "0.600 [0.550, 0.650] (Δ -0.180 [-0.240, -0.120])"
    assert side["verdict (confound=x)"].tolist() == ["partly", "–"]


def test_default_variations_for_every_preset_and_confound_off(tmp_path, monkeypatch):
    """Every event-locked preset carries default variations (offset+band for the motor-imagery ones), no
    fixed-window preset does; ``confound: off`` (or false) runs none."""
    from eegfm_bench.data.spec import default_confound_variations, parse_task_spec
    from eegfm_bench.data.tasks import preset_names, preset_spec
    from eegfm_bench.runs.cv.cells import load_config

    for name in preset_names():
        spec = parse_task_spec(preset_spec(name), name)
        got = default_confound_variations(spec)
        if spec.windows.mode == "events":
            assert got, name
            if "mi" in name or "movement" in name or name == "hgd":
                assert "offset+band" in got, name
        else:
            assert got == [], name
    base = {"task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"),
            "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]}
    on = load_config(base).confound
    assert on.enabled and on.variations == ["offset+band"]
    for off in (False, {"enabled": False}):
        assert not load_config({**base, "confound": off}).confound.enabled
    assert not load_config({**base, "task": "eegmat"}).confound.enabled  # fixed windows: nothing by default
    import eegfm_bench.runs.cv.confound as C

    monkeypatch.setattr(C, "confound_check", lambda *a, **k: pytest.fail("the confound check ran"))
    from eegfm_bench.runs.cv.command import run_cv

    cfg = {**base, "confound": False, "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 2,
                                               "batch_size": 8},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "confound" not in run_cv(cfg, progress=False).attrs


def test_confound_off_as_the_docs_write_it_works_from_python_too(tmp_path):
    """``confound: off`` in a YAML file is the boolean False; from Python the same word is a string, and reads the
    same (issue 36); another string still names the fix."""
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv.cells import load_config

    base = {"task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "experiment": "off",
            "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]}
    for off in ("off", "Off", "no", "false", False):
        assert load_config({**base, "confound": off}).confound.enabled is False, off
    cfg = load_config({**base, "confound": "on"})
    assert cfg.confound.enabled is True and cfg.confound.variations == ["offset+band"]
    assert cfg.experiment == "off"  # only a section that may be a boolean takes the word as one
    with pytest.raises(ConfigError, match="`confound` must be a mapping"):
        load_config({**base, "confound": "maybe"})


def _pred_table(correct: dict, folds: dict, windows=range(8), seed: int = 0) -> pd.DataFrame:
    """One cell's test predictions (eegnet/full/flatten): per subject (one recording ``<S>R01``, window ``w`` of class
    ``w % 2``) p1 = 0.9 on the class the window is predicted as: the true one where ``correct[S](w)``. Rows shuffled
    (the comparison must pair by window, not by row)."""
    rows = []
    for s, ok in correct.items():
        for w in windows:
            y = w % 2
            pred = y if ok(w) else 1 - y
            rows.append({"model": "eegnet", "regime": "full", "head": "flatten", "fold": folds[s],
                         "recording": f"{s}R01", "window_index": w, "index": len(rows), "subject": s, "y": y,
                         "p0": 0.1 if pred else 0.9, "p1": 0.9 if pred else 0.1})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def test_delta_is_paired_by_window_on_the_windows_both_runs_hold():
    """Issue 33 item 6 (c). Four subjects in two test folds of two. The headline is right on windows 0-5 and wrong on
    6-7 (balanced accuracy 0.75 on all 8, 1 on 0-5); the variation holds windows 0-5 only (6-7 dropped, rows in
    another order) and is right on 0-3: 2/3 per class. Paired on the 24 windows both hold: Δ = 2/3 − 1 = −1/3 in
    every subject (so the interval is that point), the checked score 2/3 > 0.5 → 'partly', and no subject flips it
    (a two-subject fold keeps its other subject)."""
    from eegfm_bench.runs.cv.confound import compare_predictions

    folds = {"S1": 0, "S2": 0, "S3": 1, "S4": 1}
    head = _pred_table({s: (lambda w: w < 6) for s in folds}, folds, seed=1)
    var = _pred_table({s: (lambda w: w < 4) for s in folds}, folds, windows=range(6), seed=2)
    (row,) = compare_predictions(head, var, "confound=x", n_boot=200)
    assert (row["n_windows"], row["n_windows_headline"], row["folds"], row["n_subjects"]) == (24, 32, 2, 4)
    assert row["headline_mean"] == pytest.approx(1.0) and row["variation_mean"] == pytest.approx(2 / 3)
    assert (row["delta"], row["low"], row["high"]) == (pytest.approx(-1 / 3),) * 3
    assert (row["checked_low"], row["checked_high"]) == (pytest.approx(2 / 3),) * 2
    assert row["verdict"] == "partly" and row["loso_flips"] == "" and not row["rests_on_one_subject"]
    assert row["loso_undecided"] == ""  # each leave-one-out verdict exists (a fold may keep a single subject)


def test_verdict_reads_the_checked_lower_bound_and_names_the_one_subject_it_rests_on():
    """Issue 33 items 6 (b) and 8, the eyes control's shape: five subjects, one per test fold; the headline is right
    everywhere, the variation too except on S5, where it is reversed (per-subject balanced accuracy 1, 1, 1, 1, 0).
    The checked score's replicates are 1 − k/5 with k ~ Binomial(5, 1/5) draws of S5: P(k ≥ 3) = 5.8 % > 2.5 % >
    P(k ≥ 4) = 0.7 %, so its lower bound is 0.4 (≤ chance: 'does not survive') while its upper bound is 1 (read
    instead, the verdict would be 'survives'). Without S5 every replicate is 1 and Δ is 0: 'survives' — the verdict
    rests on S5 alone; without any other subject the bound is 1 − 3/4 = 0.25: still 'does not survive'."""
    from eegfm_bench.reports.confound import confound_markdown, verdict_text
    from eegfm_bench.runs.cv.cells import load_config
    from eegfm_bench.runs.cv.confound import compare_predictions

    folds = {f"S{i}": i - 1 for i in range(1, 6)}
    head = _pred_table({s: (lambda w: True) for s in folds}, folds, seed=3)
    var = _pred_table({**{s: (lambda w: True) for s in folds}, "S5": lambda w: False}, folds, seed=4)
    (row,) = compare_predictions(head, var, "confound=band4-40", n_boot=2000)
    assert row["variation_mean"] == pytest.approx(0.8) and row["delta"] == pytest.approx(-0.2)
    assert (row["checked_low"], row["checked_high"]) == (pytest.approx(0.4), pytest.approx(1.0))
    assert (row["low"], row["high"]) == (pytest.approx(-0.6), pytest.approx(0.0))
    assert row["verdict"] == "does not survive"
    assert row["loso_flips"] == "S5:survives" and row["rests_on_one_subject"] and row["loso_undecided"] == ""
    text = "does not survive — rests on one subject (S5 → survives)"
    assert verdict_text(pd.Series(row)) == text
    cfg = load_config({"task": "eegmmidb_mi", "out_dir": "o", "runs": [{"model": "eegnet", "regime": "full",
                                                                        "heads": ["flatten"]}]})
    assert f"| {text} |" in confound_markdown(pd.DataFrame([row]), cfg)
