"""Real-data tests of the negative-control suite (paper 001): the dataset-identity probe, the `controls` CLI end
to end on a tiny config, resumability, and the CLI-level bad inputs.

Reads the staged EEG through ``EEGFM_DATA`` (skipped without it). One thread per library (``OMP_NUM_THREADS=1``).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_testutils import requires_data

os.environ["OMP_NUM_THREADS"] = "1"

TINY_EEGNET = {"F1": 4, "D": 1, "kernel_length": 16}


def _tiny_config(out: Path, **over) -> dict:
    cfg = {
        "experiment": "controls_tiny", "task": "eegmat", "out_dir": str(out), "seed": 0,
        "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
        "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
        "features": {"families": ["simple"]},
        "models": [{"model": "eegnet", "init_seeds": [0], "pooling": "mean", "backbone_kwargs": TINY_EEGNET}],
        "permutation": {"n": 5, "families": "strongest"},
        "bootstrap": {"n_boot": 200},
        "scrambled": [{"model": "eegnet", "regime": "full", "head": "flatten", "seeds": [0],
                       "backbone_kwargs": TINY_EEGNET, "trainer": {"max_epochs": 1, "patience": 1}}],
        "identity": {"tasks": ["eegmmidb_mi", "eegmat"], "n_folds": 3, "n_permutations": 5, "n_balanced": 2,
                     "subjects": {"eegmmidb_mi": [1, 2, 3], "eegmat": [0, 1, 2]}},
    }
    for k, v in over.items():
        cfg[k] = v
    return cfg


def _write(tmp_path: Path, cfg: dict, name: str = "c.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


# ------------------------------------------------------------------------------------- identity probe (§4.4)
@requires_data
def test_identity_probe_separates_eegmmidb_from_eegmat(data_root):
    """EEGMMIDB vs eegmat on their 19 shared 10-20 channels, one unit per recording, simple features (173 =
    9·19 + 2): ceiling AUROC in full space and after in-fold PCA, a permuted null near chance."""
    from eegfm_bench.controls.identity import identity_from_windows
    from eegfm_bench.runs.controls.config import DEFAULT_FEATURE_PREPROCESSING
    from eegfm_bench.data.preprocessing import Preprocessing
    from eegfm_bench.data.windows import load_windows

    prep = Preprocessing(**DEFAULT_FEATURE_PREPROCESSING)
    mi = load_windows("eegmmidb_mi", prep, data_root=data_root, subjects=[1, 2, 3, 4, 5, 6], progress=False)
    mat = load_windows("eegmat", prep, data_root=data_root, subjects=list(range(8)), progress=False)
    res = identity_from_windows(np.asarray(mi.X), mi.ch_names, mi.recording, np.asarray(mat.X), mat.ch_names,
                                mat.recording, prep.sfreq, family="simple", names=("eegmmidb", "eegmat"), n_folds=5,
                                pca_k=50, n_permutations=20, n_balanced=5, seed=0, subjects_a=mi.subject,
                                subjects_b=mat.subject)
    assert res.n_units == (18, 16)  # 6 subjects x runs 4/8/12; 8 subjects x (rest, arithmetic)
    assert res.n_features == 9 * 19 + 2
    assert res.auroc_full >= 0.95
    assert res.auroc_pca >= 0.95
    assert res.pca_k <= 50
    assert abs(float(np.mean(res.null_aurocs)) - 0.5) < 0.12
    assert float(np.mean(res.balanced_aurocs)) >= 0.95
    d = res.to_dict()
    assert res.group_by == "subject" and res.n_groups == (6, 8) and d["null_sd"] > 0
    assert d["null_q05"] <= d["null_mean"] <= d["null_q95"] and "grouped by subject" in d["fold_unit"]


# ------------------------------------------------------------------------------------------- CLI end to end
@requires_data
def test_controls_cli_tiny_end_to_end_and_rerun(tmp_path, capsys, monkeypatch):
    from eegfm_bench.cli import main
    from eegfm_bench.results import ROW_COLUMNS

    out = tmp_path / "out"
    path = _write(tmp_path, _tiny_config(out))
    assert main(["controls", "--config", path, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "(i) comparator" in printed and "stopped at" in printed
    for f in ("gates.json", "gates.md", "controls_report.md", "controls_report.json", "results.csv", "splits.json",
              "config.yaml", "cells.json"):
        assert (out / f).is_file(), f
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns[:len(ROW_COLUMNS)]) == ROW_COLUMNS
    exp = df[df.experiment == "controls_tiny"]
    # (a) handcrafted simple family: 9 x 19 + 2 features, one AUROC per fold (3 folds), in [0, 1]
    simple = exp[(exp.model == "handcrafted_simple") & (exp.condition == "clean")]
    assert float(simple[simple.metric == "n_dims"].value.iloc[0]) == 173
    auc = simple[(simple.metric == "auroc_window") & (simple.fold.astype(str) != "pooled")]
    assert sorted(auc.fold.astype(int)) == [0, 1, 2] and auc.value.between(0, 1).all()
    # eegmat labels are per recording: a recording-level estimate exists, separately from the window level
    assert (simple.metric == "auroc_recording").any()
    # every test fold: 2 subjects x (4 rest + 4 arithmetic) windows
    assert set(auc.n_windows) == {16} and set(auc.n_subjects) == {2}
    # (b) frozen random-init EEGNet, mean-pooled: F2 = F1 * D = 4 dimensions
    eeg = exp[(exp.model == "eegnet") & (exp.regime == "frozen_probe")]
    assert set(eeg.init) == {"random#seed0"} and float(eeg[eeg.metric == "n_dims"].value.iloc[0]) == 4
    # (d) permutation: N = 5, p in {1/6, ..., 1}, within-subject scheme (every subject holds both classes)
    perm = exp[exp.condition == "label_permutation_within_subject"]
    p = perm[perm.metric == "auroc_window_p_value"].value.to_numpy()
    assert p.size == 2 and np.all(np.isin(np.round(p * 6), [1, 2, 3, 4, 5, 6]))
    assert set(perm[perm.metric == "auroc_window_n_permutations"].value) == {5.0}
    # (e) scrambled-label adaptation: correct and scrambled runs for all 3 folds
    for cond in ("correct_labels", "scrambled_labels"):
        r = exp[(exp.condition == cond) & (exp.metric == "auroc_window")]
        assert sorted(r.fold.astype(int)) == [0, 1, 2] and r.value.between(0, 1).all()
    # (g) paired: CI brackets the estimate
    rep = json.loads((out / "controls_report.json").read_text())
    for name, pr in rep["paired"].items():
        bs = pr["levels"]["window"]["bootstrap"]
        assert bs["low"] <= bs["estimate"] <= bs["high"] and bs["mode"] == "within_fold"
    # (f) identity: 3 EEGMMIDB subjects x 3 runs vs 3 eegmat subjects x 2 recordings, 19 shared channels
    ide = rep["identity"]
    assert ide["n_units"] == [9, 6] and len(ide["shared_channels"]) == 19 and ide["n_features"] == 173
    assert 0 <= ide["auroc_full"] <= 1
    # Table 7: the same probe on each encoder's frozen embeddings (EEGNet built on the 19 shared channels)
    enc = ide["encoders"]
    assert [e["model"] for e in enc] == ["eegnet"] and enc[0]["n_units"] == [9, 6] and enc[0]["n_features"] == 4
    assert 0 <= enc[0]["auroc_full"] <= 1 and len(enc[0]["null_aurocs"]) == 5
    assert "eegnet random#seed0, mean-pooled (4)" in (out / "controls_report.md").read_text()
    # (h) gates: one claim for the frozen EEGNet and one for the adaptation run, four gates each
    gates = json.loads((out / "gates.json").read_text())
    assert {g["model"] for g in gates} == {"eegnet-random_seed0-mean", "eegnet-full-flatten (correct labels)"}
    for g in gates:
        assert [x["gate"] for x in g["gates"]] == ["i", "ii", "iii", "iv"]
        assert g["attributed"] is False  # random init: gate (iv) can never pass without a pretrained checkpoint
    md = (out / "gates.md").read_text()
    assert md.startswith("| model | task | (i) comparator")
    # rerun: everything is skipped, rows unchanged, no refit (no unit runs: the counts, not a clock)
    before = pd.read_csv(out / "results.csv")
    calls = _count_units(monkeypatch)
    assert main(["controls", "--config", path, "--no-progress"]) == 0
    assert calls == {"probe": 0, "permutation": 0, "fit": 0, "identity": 0}
    pd.testing.assert_frame_equal(before, pd.read_csv(out / "results.csv"))
    # cells.json: every unit of the config with its current hash (the rows the page reads), as a cv run's
    index = json.loads((out / "cells.json").read_text())
    assert {c["config_hash"] for c in index} == set(before.config_hash.astype(str)) and len(index) == 14
    # a changed setting reruns only the units it changes (the cv's rule): a larger N reruns the two permutation
    # tests; their rows sit beside the old ones under their own hash, every other unit is found done
    report0 = json.loads((out / "controls_report.json").read_text())
    assert main(["controls", "--config", _write(tmp_path, _tiny_config(out, permutation={"n": 7}), "c2.yaml"),
                 "--no-progress"]) == 0
    assert calls == {"probe": 0, "permutation": 2, "fit": 0, "identity": 0}
    after = pd.read_csv(out / "results.csv")
    kept = after[after.config_hash.isin(before.config_hash)].reset_index(drop=True)
    pd.testing.assert_frame_equal(before, kept)
    new = after[~after.config_hash.isin(before.config_hash)]
    assert set(new.condition) == {"label_permutation_within_subject"} and new.config_hash.nunique() == 2
    assert set(new[new.metric == "auroc_window_n_permutations"].value) == {7.0}
    old_perm = set(before[before.condition == "label_permutation_within_subject"].config_hash)
    index2 = {c["config_hash"] for c in json.loads((out / "cells.json").read_text())}
    assert index2 == (set(before.config_hash) - old_perm) | set(new.config_hash)
    report2 = json.loads((out / "controls_report.json").read_text())
    assert {v["n_permutations"] for v in report2["permutation"].values()} == {7}
    assert report2["scores"] == report0["scores"] and report2["paired"] == report0["paired"]
    assert (out / "report.html").is_file()
    # changing it back finds the old rows and files again: nothing recomputed, nothing appended
    assert main(["controls", "--config", path, "--no-progress"]) == 0
    assert calls == {"probe": 0, "permutation": 2, "fit": 0, "identity": 0}
    pd.testing.assert_frame_equal(after, pd.read_csv(out / "results.csv"))
    assert json.loads((out / "cells.json").read_text()) == index
    report3 = json.loads((out / "controls_report.json").read_text())
    assert report3["permutation"] == report0["permutation"] and report3["gates"] == report0["gates"]
    from eegfm_bench.errors import NotAResultFolderError

    with pytest.raises(NotAResultFolderError, match="a controls out_dir"):  # its cells.json is not a cv run's
        main(["status", str(out)])


def _count_units(monkeypatch) -> dict:
    """Count the computations of the controls' units (probe fits, permutation tests, adaptation fits, identity
    probes) from now on: ``{kind: calls}``, updated in place."""
    import eegfm_bench.runs.controls.scrambled as scr
    import eegfm_bench.runs.controls.steps as steps

    calls = {"probe": 0, "permutation": 0, "fit": 0, "identity": 0}
    for mod, name, kind in ((steps, "evaluate_probe", "probe"), (steps, "permutation_test", "permutation"),
                            (scr, "train_fold", "fit"), (steps, "dataset_identity_probe", "identity")):
        def counted(*a, _f=getattr(mod, name), _k=kind, **kw):
            calls[_k] += 1
            return _f(*a, **kw)

        monkeypatch.setattr(mod, name, counted)
    return calls


@requires_data
def test_controls_changed_probe_reruns_the_units_that_read_it(tmp_path, monkeypatch):
    """A unit's hash holds the hashes of the units it reads: another probe reruns the probes and with them the
    permutation test and the paired comparison of the changed representations (their own settings unchanged).
    A unit whose rows exist but whose file was deleted recomputes the file only: its rows are written once."""
    from eegfm_bench.runs.controls.command import run_controls

    out = tmp_path / "o"
    base = dict(scrambled=[], identity=None, bootstrap={"n_boot": 100})
    run_controls(_tiny_config(out, **base), progress=False)
    before = pd.read_csv(out / "results.csv")
    calls = _count_units(monkeypatch)
    run_controls(_tiny_config(out, probe={"kind": "logreg", "C": 0.1}, **base), progress=False)
    assert calls == {"probe": 2, "permutation": 2, "fit": 0, "identity": 0}
    after = pd.read_csv(out / "results.csv")
    new = after[~after.config_hash.isin(before.config_hash)]
    assert set(new.condition) == {"clean", "label_permutation_within_subject", "paired_vs_simple"}
    assert new.groupby("condition").config_hash.nunique().to_dict() == {
        "clean": 2, "label_permutation_within_subject": 2, "paired_vs_simple": 1}
    # the first config again: found done; then its files deleted: recomputed, the rows not appended again
    run_controls(_tiny_config(out, **base), progress=False)
    assert calls == {"probe": 2, "permutation": 2, "fit": 0, "identity": 0}
    index = {c["config_hash"] for c in json.loads((out / "cells.json").read_text())}
    assert index == set(before.config_hash)
    report = json.loads((out / "controls_report.json").read_text())
    gone = [p for p in (out / "predictions").glob("*.csv") if p.stem.rsplit("-", 1)[1] in index]
    gone += [p for p in (out / "permutation").glob("*.json") if p.stem.rsplit("-", 1)[1] in index]
    assert len(gone) == 4
    for p in gone:
        p.unlink()
    run_controls(_tiny_config(out, **base), progress=False)
    assert calls == {"probe": 4, "permutation": 4, "fit": 0, "identity": 0}
    assert all(p.is_file() for p in gone)
    pd.testing.assert_frame_equal(after, pd.read_csv(out / "results.csv"))
    again = json.loads((out / "controls_report.json").read_text())
    assert again["scores"] == report["scores"] and _untimed(again["permutation"]) == _untimed(report["permutation"])


def _untimed(perms: dict) -> dict:
    return {k: {kk: vv for kk, vv in v.items() if kk != "seconds"} for k, v in perms.items()}


@requires_data
def test_controls_on_a_cv_run_take_its_windows_split_and_checkpoints(tmp_path, monkeypatch):
    """With ``cv_out_dir`` the loaded config is final: the cv run's subjects, window cap and split are taken before
    it is typed (a different ``data.subjects`` is refused); the cv claims come from its predictions and ``correct:
    cv`` reuses its checkpoints, so only the scrambled arm trains (with the cv run's seed and init seed)."""
    from eegfm_bench.cli import main
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.controls.config import load_run_config

    cv = {"experiment": "cvtiny", "task": "eegmat", "out_dir": str(tmp_path / "cv"), "seed": 3,
          "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
          "split": {"scheme": "kfold", "k": 3, "seed": 1, "n_val_groups": 1}, "confound": False,
          "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu"},
          "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"], "backbone_kwargs": TINY_EEGNET}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", _write(tmp_path, cv, "cv.yaml"), "--no-progress"]) == 0
    ctl = {"experiment": "controls_cv", "task": "eegmat", "out_dir": str(tmp_path / "o"), "cv_out_dir": cv["out_dir"],
           "features": {"families": ["simple"]}, "models": [], "identity": None, "bootstrap": {"n_boot": 100},
           "permutation": {"n": 3, "families": "none"},
           "scrambled": [{"model": "eegnet", "regime": "full", "head": "flatten", "correct": "cv"}]}
    cfg, cv_cfg = load_run_config(ctl)
    assert cfg.data.subjects == [0, 1, 2, 3, 4, 5] and cfg.data.max_windows_per_subject == 4
    assert cfg.split.to_dict() == cv_cfg.split.to_dict() and cfg.split.seed == 1
    with pytest.raises(ConfigError, match=r"data.subjects = \[0, 1\] differs from the cv run's.*fix: drop data.subjects"):
        load_run_config({**ctl, "data": {"subjects": [0, 1]}})
    calls = _count_units(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["controls", "--config", _write(tmp_path, ctl, "c.yaml"), "--no-progress"]) == 0
    assert calls["fit"] == 3  # the scrambled arm per fold; the correct arm is the cv run's checkpoint
    df = pd.read_csv(tmp_path / "o" / "results.csv")
    claim = df[(df.condition == "cv_predictions") & (df.metric == "auroc_window") & (df.fold.astype(str) != "pooled")]
    assert len(claim) == 3 and set(claim.seed) == {3}
    fits = df[df.condition.isin(["correct_labels", "scrambled_labels"]) & (df.metric == "auroc_window")]
    assert len(fits) == 6 and set(fits.seed) == {3} and set(fits.init) == {"random#seed3"}
    saved = yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())
    assert saved["data"]["subjects"] == [0, 1, 2, 3, 4, 5] and saved["split"]["seed"] == 1


# ------------------------------------------------------------------------------------------------ bad input
def test_feature_window_too_short_is_rejected_before_reading_data(tmp_path):
    from eegfm_bench.runs.controls.config import load_config
    from eegfm_bench.config import ConfigError

    cfg = _tiny_config(tmp_path / "o", features={"families": ["simple"], "preprocessing": {"window_s": 1.0}})
    with pytest.raises(ConfigError, match=r"window_s = 1.0 s is shorter .* fix: window_s >= 2"):
        load_config(cfg)


def test_unknown_keys_and_names_are_rejected(tmp_path):
    from eegfm_bench.runs.controls.config import load_config
    from eegfm_bench.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key permutaton. Did you mean 'permutation'"):
        load_config({**_tiny_config(tmp_path / "o"), "permutaton": {"n": 5}})
    with pytest.raises(ConfigError, match="features.families"):
        load_config(_tiny_config(tmp_path / "o", features={"families": ["fancy"]}))
    bad = _tiny_config(tmp_path / "o")
    bad["scrambled"] = [{"model": "eegnet", "regime": "lora", "head": "flatten"}]
    with pytest.raises(ConfigError, match="declares no LoRA targets.*fix: regime: full"):
        load_config(bad)


@requires_data
def test_permutation_scheme_that_does_not_fit_the_labels(tmp_path):
    from eegfm_bench.runs.controls.command import run_controls

    # eegmat: every subject has a rest and an arithmetic recording, so one label per subject is wrong
    cfg = _tiny_config(tmp_path / "o", permutation={"n": 5, "scheme": "subject_label"}, scrambled=[], identity=None,
                       models=[])
    with pytest.raises(ValueError, match="subject-label permutation needs one label per subject.*"
                                         "fix: every subject holds several classes: use scheme='within_subject'"):
        run_controls(cfg, progress=False)


@requires_data
def test_too_few_subjects_for_folds_or_bootstrap(tmp_path):
    from eegfm_bench.runs.controls.command import run_controls
    from eegfm_bench.config import ConfigError

    base = dict(scrambled=[], identity=None, models=[])
    few = _tiny_config(tmp_path / "a", data={"subjects": [0, 1, 2], "max_windows_per_subject": 2}, **base)
    few["split"]["k"] = 5
    with pytest.raises(ConfigError, match=r"3 subjects for 5 folds; fix: split.k <= 3"):
        run_controls(few, progress=False)
    # 5 subjects in 3 folds: one test fold holds a single subject, too few for the within-fold bootstrap
    odd = _tiny_config(tmp_path / "b", data={"subjects": [0, 1, 2, 3, 4], "max_windows_per_subject": 2}, **base)
    with pytest.raises(ConfigError, match=r"too few subjects for the paired within-fold bootstrap.*fix: split.k <= 2"):
        run_controls(odd, progress=False)


@requires_data
def test_identity_datasets_without_shared_channels(tmp_path, monkeypatch):
    """Two datasets with no channel in common: the error names what each one has (checked before any probe)."""
    import eegfm_bench.runs.controls.command as run

    real = run.load_task_windows

    def renamed(cfg, task, prep, progress, **kw):
        ws = real(cfg, task, prep, progress, **kw)
        if task.name == "eegmmidb_mi":  # (the task the loader resolved) pretend this dataset were recorded bipolar
            ws.ch_names = [f"{c}-REF" for c in ws.ch_names]
        return ws

    monkeypatch.setattr(run, "load_task_windows", renamed)
    cfg = _tiny_config(tmp_path / "o", scrambled=[], models=[])
    with pytest.raises(ValueError, match=r"share no channel.*eegmmidb.*Fp1-REF.*eegmat.*Fp1"):
        run.run_controls(cfg, progress=False)


# --------------------------------------------------------------------------------- synthetic, exact answers
def test_scrambled_source_labels_permute_only_the_source_within_subject():
    from eegfm_bench.controls.adapt import scrambled_source_labels

    y = np.array([0, 1] * 10)
    groups = np.repeat([f"S{i}" for i in range(4)], 5)
    src = np.arange(15)  # subjects S0-S2 are the source, S3 the test fold
    ys, scheme = scrambled_source_labels(y, groups, src, "auto", seed=3)
    assert scheme == "within_subject"
    np.testing.assert_array_equal(ys[15:], y[15:])  # test labels untouched
    for g in ("S0", "S1", "S2"):  # class counts preserved inside every source subject
        m = groups == g
        assert sorted(ys[m]) == sorted(y[m])
    assert not np.array_equal(ys[:15], y[:15])
    with pytest.raises(ValueError, match="use scheme='within_subject'"):
        scrambled_source_labels(y, groups, src, "subject_label", seed=0)


def test_align_rows_matches_by_identity_and_refuses_missing_windows():
    from eegfm_bench.controls.embeddings import RowAlignmentError, align_rows, row_keys

    ref = row_keys(["r1", "r1", "r2"], [0, 1, 0])
    other = row_keys(["r2", "r1", "r1"], [0, 1, 0])
    idx = align_rows(ref, other, "model windows")
    np.testing.assert_array_equal(other[idx], ref)
    np.testing.assert_array_equal(idx, [2, 1, 0])
    with pytest.raises(RowAlignmentError, match=r"1 only in the feature windows \(e.g. \['r2#0'\]\)"):
        align_rows(ref, row_keys(["r1", "r1"], [0, 1]), "model windows")


def test_pool_cached_tokens_mean_flatten_and_max():
    from eegfm_bench.controls.embeddings import pool_cached_tokens

    t = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    t[0, 1, 2] = 100.0
    np.testing.assert_allclose(pool_cached_tokens(t, "mean"), t.mean(axis=1))
    assert pool_cached_tokens(t, "flatten").shape == (2, 12)
    np.testing.assert_array_equal(pool_cached_tokens(t, "flatten", batch=1)[1], t[1].ravel())
    np.testing.assert_array_equal(pool_cached_tokens(t, "max", batch=1), [[8, 9, 100, 11], [20, 21, 22, 23]])
    with pytest.raises(ValueError, match=r"unknown pooling 'attention'.*\['flatten', 'max', 'mean'\]"):
        pool_cached_tokens(t, "attention")  # learned pooling: a head, not a pooling of frozen tokens


def test_scrambled_label_lora_cell_on_synthetic_windows(tmp_path):
    """Control 4's LoRA path (paper 001 §4.2.4): one cell of a tiny LaBraM trained with LoRA on scrambled source
    labels; the test fold is scored on its true labels and only adapters + head train."""
    import torch

    from eegfm_bench.controls.adapt import scrambled_source_labels, train_fold
    from eegfm_bench.data.splits import SplitSpec, make_split
    from eegfm_bench.data.windows import WindowSet

    torch.set_num_threads(1)
    ch = ["Fp1", "Fp2", "F3", "F4", "C3", "C4", "O1", "O2"]
    rng = np.random.default_rng(0)
    y = np.tile([0, 1], 8)
    subj = np.repeat([f"S{i}" for i in range(4)], 4)
    X = (rng.standard_normal((16, len(ch), 400)) * 0.1).astype(np.float32)
    ws = WindowSet(X, y, subj, np.char.add(subj, np.where(y == 0, "_a", "_b")), np.arange(16), np.full(16, "syn"),
                   ch, 200.0, ["a", "b"], {"cache_key": "synthetic"})
    split = make_split(y, subj, SplitSpec("kfold", 2, 0, 1), "eegmat")
    tr, va, te = split.indices(subj, 0)
    ys, scheme = scrambled_source_labels(y, subj, np.concatenate([tr, va]), "auto", seed=0)
    assert scheme == "within_subject" and np.array_equal(ys[te], y[te])
    pred, info = train_fold(task="eegmat", model="labram", regime="lora", head="mean", fold=0, split=split, ws=ws,
                            seed=0, init_seed=0, trainer_cfg={"max_epochs": 1, "patience": 1, "precision": "32-true",
                                                              "accelerator": "cpu", "devices": 1},
                            optim={"lr": 1e-3, "weight_decay": 0.0, "warmup_epochs": 0}, batch_size=4,
                            out_dir=tmp_path, tag="lora-scrambled",
                            backbone_kwargs={"num_layers": 1, "num_heads": 2, "conv_out_channels": 4},
                            lora={"r": 2}, y_train=ys)
    assert sorted(pred["index"]) == sorted(te.tolist())
    np.testing.assert_array_equal(pred.sort_values("index")["y"].to_numpy(), y[np.sort(te)])  # true test labels
    np.testing.assert_allclose(pred[["p0", "p1"]].sum(axis=1), 1.0, atol=1e-5)
    assert 0 < info["trainable_params"] < 0.05 * info["total_params"]  # LoRA adapters + head only
    with pytest.raises(ValueError, match="changes labels of the test fold"):
        bad = y.copy()
        bad[te[0]] = 1 - bad[te[0]]
        train_fold(task="eegmat", model="labram", regime="lora", head="mean", fold=0, split=split, ws=ws, seed=0,
                   init_seed=0, trainer_cfg={}, optim={}, batch_size=4, out_dir=tmp_path, tag="x", y_train=bad)


@requires_data
def test_control4_can_fail_an_adaptation_that_ignores_labels(tmp_path):
    """Control 4 as §4.2.4 (issue 12 item 9): both arms adapt on one fixed schedule, then the frozen probe is refitted
    on the true training labels. An 'adaptation' that learns nothing (lr = 0) leaves both encoders the same: the
    scrambled arm scores exactly as the correct one and gate (iv) fails. (Scoring the scrambled arm's own head, the
    old way, put it at chance and let 'correct > scrambled' pass.)"""
    from eegfm_bench.runs.controls.command import run_controls

    entry = {"model": "eegnet", "regime": "full", "head": "flatten", "seeds": [0], "backbone_kwargs": TINY_EEGNET,
             "trainer": {"max_epochs": 1, "patience": 1}, "optim": {"lr": 0.0, "warmup_epochs": 0}}
    cfg = _tiny_config(tmp_path / "o", scrambled=[entry], identity=None, models=[],
                       permutation={"n": 5, "families": "none"})
    run_controls(cfg, progress=False)
    rep = json.loads((tmp_path / "o" / "controls_report.json").read_text())
    s = rep["scrambled"][0]
    assert s["schedule"].startswith("fixed: 1 epochs, no early stopping") and "refitted on the true" in s["scored_by"]
    c = s["contrast"]
    assert c["delta"] == 0.0 and c["correct_mean"] == c["scrambled_mean"]
    from eegfm_bench.controls.gates import ClaimEvidence, evaluate_gates

    # the paired interval of two identical arms is exactly [0, 0]: at or below zero, so gate (iv) fails (issue 23)
    assert s["paired_ci"] == [0.0, 0.0]
    ev = ClaimEvidence(model="x", task="eegmat", evaluation_dataset="eegmat", model_score=0.9,
                       comparator_scores={"simple": 0.5}, paired_ci=(0.1, 0.3), pretraining_corpora=[],
                       random_init_scores=[0.5], random_init_ci=(0.2, 0.5), permutation_p=0.01, adaptation=True,
                       scrambled_label_score=c["scrambled_mean"], scrambled_correct_score=c["correct_mean"],
                       scrambled_ci=tuple(s["paired_ci"]))
    g4 = next(g for g in evaluate_gates(ev).to_dict()["gates"] if g["gate"] == "iv")
    assert g4["status"] == "fail" and "lies at or below zero" in g4["detail"]
    assert "paired subject-cluster" in (tmp_path / "o" / "controls_report.md").read_text()


@requires_data
def test_controls_probe_overrides_per_representation(tmp_path):
    """probe.overrides: PCA only for the encoders' frozen embeddings, another classifier for handcrafted features
    (paper 001 §3.5's pipelines); an unknown representation key is refused before anything runs."""
    from eegfm_bench.cli import main
    from eegfm_bench.config import ConfigError

    out = tmp_path / "out"
    cfg = _tiny_config(out, scrambled=[], identity=None, permutation={"n": 5, "families": "none"},
                       probe={"kind": "logreg", "overrides": {"frozen": {"pca": 3}, "handcrafted": {"kind": "lda"}}})
    cfg["models"][0]["backbone_kwargs"] = {**TINY_EEGNET, "F1": 4, "D": 2}  # 8 embedding dims, so PCA-3 reduces
    assert main(["controls", "--config", _write(tmp_path, cfg), "--no-progress"]) == 0
    df = pd.read_csv(out / "results.csv")
    eeg = df[(df.model == "eegnet") & (df.regime == "frozen_probe")]
    assert float(eeg[eeg.metric == "n_dims"].value.iloc[0]) == 8
    assert float(eeg[eeg.metric == "pca_k"].value.iloc[0]) == 3
    assert set(eeg["head"]) == {"mean+probe_logreg"}
    hand = df[df.model == "handcrafted_simple"]
    assert set(hand["head"]) == {"probe_lda"} and not (hand.metric == "pca_k").any()
    bad = _tiny_config(tmp_path / "bad", probe={"overrides": {"encoders": {"pca": 50}}})
    with pytest.raises(ConfigError, match="handcrafted, frozen, adapted"):
        main(["controls", "--config", _write(tmp_path, bad, "bad.yaml"), "--no-progress"])
    for probe, msg in (({"overrides": {"frozen": {"pca": -3}}}, r"probe.overrides.frozen.pca -3; fix"),
                       ({"overrides": {"frozen": {"svm_probability": "platt"}}}, "probe.overrides.frozen.svm_prob"),
                       ({"overrides": {"handcrafted": {"kind": "svm"}}}, r"probe.overrides.handcrafted.kind 'svm'")):
        bad = _tiny_config(tmp_path / "bad2", probe=probe)
        with pytest.raises(ConfigError, match=msg):
            main(["controls", "--config", _write(tmp_path, bad, "bad2.yaml"), "--no-progress"])
        assert not (tmp_path / "bad2" / "results.csv").exists()  # refused before any probe ran
