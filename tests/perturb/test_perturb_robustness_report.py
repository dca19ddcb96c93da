"""The multi-dataset robustness report (paper 003 Tables 10-17, Figure 2), on synthetic sweep stores with known Δ."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from eegfm_bench.reports.robustness import RobustnessReportError, combine, condition_table, benchmark_deltas, \
    write_robustness_report
from eegfm_bench.results import ResultStore


def _sweep(folder, task, deltas: dict, n_folds=6, chash="h1", stale=False):
    """One sweep store: clean 0.80 for every model and fold, each condition 0.80 + delta(model, fold) / 100."""
    rows = []
    for model, per_cond in deltas.items():
        for fold in range(n_folds):
            base = {"experiment": "e", "task": task, "model": model, "init": "random", "regime": "full", "head": "mean",
                    "fold": fold, "seed": 0, "metric": "balanced_accuracy", "n_windows": 10, "n_subjects": 2,
                    "fold_unit": "subject", "config_hash": chash, "code_version": "x"}
            rows.append({**base, "condition": "clean", "value": 0.80})
            for cond, d in per_cond.items():
                rows.append({**base, "condition": cond, "value": 0.80 + (d + 0.1 * fold) / 100})
    folder.mkdir(parents=True, exist_ok=True)
    ResultStore(folder).append(rows)
    if stale:  # rows of an older config: must never be read
        ResultStore(folder).append([{**r, "config_hash": "old", "value": 0.0} for r in rows])
    (folder / "cells.json").write_text(json.dumps([chash]))
    return folder


def test_tables_per_condition_average_weights_benchmarks_equally_and_marks(tmp_path):
    a = _sweep(tmp_path / "a", "mi", {"eegnet": {"dropout_p=0.5_zero": -10.0, "white_snr=-5dB": -5.0},
                                      "labram": {"dropout_p=0.5_zero": -2.0, "white_snr=-5dB": -20.0}}, stale=True)
    b = _sweep(tmp_path / "b", "eyes", {"eegnet": {"dropout_p=0.5_zero": -30.0, "white_snr=-5dB": -5.0},
                                        "labram": {"dropout_p=0.5_zero": -4.0, "white_snr=-5dB": -20.0}}, n_folds=4)
    df = combine([a, b])
    assert set(df["benchmark"]) == {"mi", "eyes"} and (df["value"] > 0).all()  # the stale rows are not read
    deltas = benchmark_deltas(df)
    t, tests = condition_table(deltas, "dropout_p=0.5_zero", ["eyes", "mi"], reference="eegnet")
    # eegnet: mi mean -10 + 0.1*mean(0..5) = -9.75, eyes -30 + 0.15 = -29.85; Average = their mean (not fold-pooled)
    assert t.loc["eegnet", "mi"] == pytest.approx(-9.75) and t.loc["eegnet", "eyes"] == pytest.approx(-29.85)
    assert t.loc["eegnet", "Average"] == pytest.approx((-9.75 - 29.85) / 2)
    assert list(t.index) == ["labram", "eegnet"]  # ranked: least degradation first
    # labram beats eegnet on all 10 (benchmark, fold) pairs: exact two-sided p = 2/1024, one model -> Holm x1
    assert t.loc["labram", "mark"] == "∗" and tests[0]["pairs"][:1] == ["eyes/fold0"] and len(tests[0]["pairs"]) == 10
    t2, _ = condition_table(deltas, "white_snr=-5dB", ["eyes", "mi"], reference="eegnet")
    assert t2.loc["labram", "mark"] == "∇" and list(t2.index) == ["eegnet", "labram"]  # types are never mixed
    md = write_robustness_report([a, b], tmp_path / "out")
    text = md.read_text()
    assert "Initialisation: eegnet: init=random; labram: init=random" in text
    assert "## dropout_p=0.5_zero (paper 003 Table 12)" in text and "## white_snr=-5dB (paper 003 Table 10)" in text
    assert (tmp_path / "out" / "robustness_curves.png").stat().st_size > 1000
    tab = pd.read_csv(tmp_path / "out" / "robustness_tables.csv")
    assert set(tab["condition"]) == {"dropout_p=0.5_zero", "white_snr=-5dB"}


def test_missing_or_stale_sweeps_are_refused(tmp_path):
    with pytest.raises(RobustnessReportError, match="holds no sweep results"):
        combine([tmp_path / "nowhere"])
    a = _sweep(tmp_path / "a", "mi", {"eegnet": {"dropout_p=0.5_zero": -1.0}})
    (a / "cells.json").write_text(json.dumps(["another"]))
    with pytest.raises(RobustnessReportError, match="no row of its current config"):
        combine([a])
    b = _sweep(tmp_path / "b", "mi", {"eegnet": {"dropout_p=0.5_zero": -1.0}})
    c = _sweep(tmp_path / "c", "mi", {"eegnet": {"dropout_p=0.5_zero": -1.0}})
    with pytest.raises(RobustnessReportError, match="come from several sweeps"):
        combine([b, c])
