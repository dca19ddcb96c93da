"""The reviewer's page (issue 36 item 7): score axes anchored at chance (read from the matplotlib Axes), counted
nouns in the number their count asks for, captions that promise only what the figure or table shows, no label
outside a one-model figure, folds in natural order, and Figure 2 of the robustness report drawing a user's
condition in its own panel. Synthetic stores with known values (no EEG needed)."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot anywhere in this process

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_bench.reports.style import fold_key, plural, score_limits, sorted_folds
from eegfm_bench.results import ResultStore

BASE = {"experiment": "e", "task": "eegmmidb_mi", "init": "random", "regime": "full", "head": "flatten", "seed": 0,
        "n_windows": 40, "n_subjects": 2, "fold_unit": "subject", "code_version": "test"}


def _store(folder: Path, rows: list[dict], *, sweep: dict | None = None) -> Path:
    """A result folder as a command leaves it: the rows, ``cells.json`` naming their hashes, ``sweep.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    ResultStore(folder).append(rows)
    (folder / "cells.json").write_text(json.dumps(sorted({r["config_hash"] for r in rows})))
    if sweep is not None:
        (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return folder


def _clean(model: str, values, **extra) -> list[dict]:
    return [{**BASE, "model": model, "fold": k, "condition": "clean", "metric": "balanced_accuracy", "value": v,
             "config_hash": f"h{model}", **extra} for k, v in enumerate(values)]


def _sweep_rows(model: str, per_cond: dict[str, list[float]], task: str = "eegmmidb_mi") -> list[dict]:
    rows = []
    for cond, vals in per_cond.items():
        rows += [{**BASE, "task": task, "model": model, "fold": k, "condition": cond, "metric": "balanced_accuracy",
                  "value": v, "config_hash": f"h{model}"} for k, v in enumerate(vals)]
    return rows


# ------------------------------------------------------------------------------------------------ helpers
def test_plural_fold_order_and_the_score_axis_rule():
    assert plural(1, "fold") == "1 fold" and plural(3, "fold") == "3 folds" and plural(0, "fold") == "0 folds"
    assert plural(2, "class", "classes") == "2 classes" and plural(1.0, "window") == "1 window"
    assert sorted_folds(["10", "2", "pooled", "0", "11", "1"]) == ["0", "1", "2", "10", "11", "pooled"]
    assert sorted([3, "12", "4"], key=fold_key) == [3, "4", "12"]
    assert score_limits([0.4825, 0.5], chance=0.5) == pytest.approx((0.4, 1.0))
    assert score_limits([0.48, 0.5]) == (0.0, 1.0)  # no chance level: the whole score range
    assert score_limits([0.2, 0.6], chance=0.5) == pytest.approx((0.15, 1.0))  # a fold under the anchor stays in


# ------------------------------------------------------------------------------------------------ fold points
def test_the_fold_points_axis_is_anchored_at_chance_and_a_one_model_figure_keeps_its_labels():
    """The issue's case: 3 folds within 0.4825-0.5000 on a 2-class task. Autoscaled, the axis spanned the spread
    (noise read as an effect); anchored, it runs from chance − 0.1 to 1. On a one-model page every label lies inside
    the figure and the axes keep most of its width (the chance label no longer pushes them into a sliver)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from eegfm_bench.reports.page import fold_points_figure

    df = pd.DataFrame(_clean("eegnet", [0.4825, 0.4910, 0.5000]))
    df["fold"] = df["fold"].astype(str)
    fig = fold_points_figure(df, chance=0.5)
    (ax,) = fig.axes
    assert ax.get_ylim() == pytest.approx((0.4, 1.0))
    canvas = FigureCanvasAgg(fig)  # what savefig draws with
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    texts = [ax.yaxis.label, *ax.get_yticklabels(), *ax.get_xticklabels(), *ax.texts]
    assert ax.yaxis.label.get_text() == "balanced accuracy"
    for t in texts:
        e = t.get_window_extent(renderer)
        assert box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1, t.get_text()
    assert ax.get_window_extent(renderer).width > 0.5 * box.width
    no_chance = fold_points_figure(df)
    assert no_chance.axes[0].get_ylim() == (0.0, 1.0)


# ------------------------------------------------------------------------------------------------ captions, plurals
def test_a_one_fold_cv_page_says_fold_and_the_caption_names_only_what_is_drawn(tmp_path):
    """One fold: "1 subject-grouped test fold", no "± SD" (one value has none); no chance level known (no saved
    config): the caption does not promise a dashed chance line the figure does not draw."""
    from eegfm_bench.reports.page import clean_sections

    cv = _store(tmp_path / "cv", _clean("eegnet", [0.61]))
    (tmp_path / "assets").mkdir()
    sec = clean_sections(cv, tmp_path / "assets")[0]
    assert "over 1 subject-grouped test fold," in sec.intro and "folds" not in sec.intro.split("window-level")[0]
    (fig,) = sec.figures
    assert "(dots; 1 fold)" in fig.caption and "1 folds" not in fig.caption
    assert "chance level" not in fig.caption.replace("no chance level", "") and "± SD" not in fig.caption
    assert "y axis from 0 to 1" in fig.caption


def test_robustness_captions_promise_intervals_only_when_they_are_shown(tmp_path):
    """A sweep that saved no per-window predictions has no bootstrap interval: neither the section, nor the
    tables, nor the no-marks legend may promise one (they did: "with its 95 % subject-cluster bootstrap
    interval", "the intervals below are the evidence"). Three folds: the legend says "3 folds"."""
    from eegfm_bench.reports.page import robustness_sections
    from eegfm_bench.reports.page import SAVED_CONFIGS

    rows = (_sweep_rows("eegnet", {"clean": [0.8, 0.7, 0.75], "white_snr=0dB": [0.6, 0.6, 0.6]})
            + _sweep_rows("labram", {"clean": [0.7, 0.7, 0.7], "white_snr=0dB": [0.65, 0.6, 0.62]}))
    d = _store(tmp_path / "sweep", rows, sweep={"reference": "eegnet", "conditions": ["clean", "white_snr=0dB"]})
    (sec,) = robustness_sections(d, SAVED_CONFIGS["sweep"](d / "sweep.yaml"))
    assert "interval" not in sec.intro.replace("no interval either", "")
    assert "no interval either (the sweep saved no per-window predictions)" in sec.intro
    assert "with 3 folds" in sec.intro and "mean over 3 folds" in sec.intro
    (table,) = sec.tables
    assert "interval" not in table.caption
    assert all("[" not in c.text for row in table.rows for c in row[2:])  # and indeed none is shown


# ------------------------------------------------------------------------------------------------ score axes
def test_the_sweep_degradation_axis_is_anchored_at_chance_and_shared(tmp_path):
    import matplotlib.pyplot as plt

    from eegfm_bench.reports.sweep import add_labels, degradation_figure

    rows = _sweep_rows("eegnet", {"clean": [0.52, 0.51, 0.50], "white_snr=0dB": [0.50, 0.49, 0.50],
                                  "dropout_p=0.3_zero": [0.51, 0.50, 0.49]})
    fig = degradation_figure(add_labels(pd.DataFrame(rows)), chance=0.5)
    try:
        lims = {ax.get_ylim() for ax in fig.axes}
        assert len(lims) == 1 and lims.pop() == pytest.approx((0.4, 1.0))
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------------ Figure 2
def test_figure_2_draws_a_user_condition_in_its_family_panel_on_a_0_1_axis(tmp_path, monkeypatch):
    """A condition a user registered (tests/user_condition.py, declared as an entry point as ``pip install`` would
    leave it) has its own panel in Figure 2 after the standard ones, its levels in order from the clean point; the
    benchmarks' mean is the mean of the two sweeps; the axis is 0 to 1 (chance differs between benchmarks)."""
    from eegfm_bench.reports.robustness import combine, curves_figure, curve_panels
    from user_condition import SPIKES

    site = tmp_path / "site" / "eegfm_user_spikes-0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: eegfm-user-spikes\nVersion: 0.1\n")
    (site / "entry_points.txt").write_text("[eegfm_bench.conditions]\nspikes = user_condition:Spikes\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    a = _store(tmp_path / "a", _sweep_rows("eegnet", {"clean": [0.8, 0.8], "white_snr=0dB": [0.7, 0.7],
                                                      "spikes=2": [0.75, 0.75], "spikes=40": [0.6, 0.6]}, task="mi"))
    b = _store(tmp_path / "b", _sweep_rows("eegnet", {"clean": [0.6, 0.6], "white_snr=0dB": [0.5, 0.5],
                                                      "spikes=2": [0.55, 0.55], "spikes=40": [0.5, 0.5]}, task="eyes"))
    df = combine([a, b])
    panels = curve_panels(df)
    assert [f.title for f in panels] == ["White noise", "Spike artefacts"]
    np.testing.assert_allclose(panels[SPIKES]["curves"]["eegnet"], [(0.0, 0.7), (2.0, 0.65), (40.0, 0.55)])
    fig = curves_figure(df)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[1].startswith("Spike artefacts") and "mean over 2 benchmarks" in titles[1]
    assert {ax.get_ylim() for ax in fig.axes} == {(0.0, 1.0)}


# ------------------------------------------------------------------------------------------------ fold order
def test_twelve_folds_are_listed_in_numeric_order(tmp_path):
    """Folds come back from the typed store as text: "10" must not come before "2" in the Wilcoxon table's folds
    nor in the page's flags (one per fold that predicts one class)."""
    from eegfm_bench.reports.page import _recall_table
    from eegfm_bench.reports.sweep import add_labels, degradation_table, fold_deltas

    rng = np.random.default_rng(0)
    rows = []
    for m, drop in (("eegnet", 0.1), ("labram", 0.3)):
        clean = 0.8 + 0.01 * rng.random(12)
        rows += _sweep_rows(m, {"clean": list(clean), "white_snr=0dB": list(clean - drop - 0.01 * rng.random(12))})
    d = _store(tmp_path / "sweep", rows)
    df = add_labels(ResultStore(d).load())
    assert df["fold"].map(type).eq(str).all()
    _, _, tests = degradation_table(fold_deltas(df), ["white_snr=0dB"], reference="eegnet")
    assert tests and tests[0]["folds"] == [str(k) for k in range(12)]

    prows = []
    for k in range(12):  # every fold predicts class 0 for every window
        p = pd.DataFrame({"index": range(4), "y": [0, 0, 1, 1], "p0": 0.9, "p1": 0.1})
        path = tmp_path / "predictions" / f"fold{k}.csv"
        path.parent.mkdir(exist_ok=True)
        p.to_csv(path, index=False)
        base = {"model": "eegnet", "regime": "full", "head": "flatten", "fold": str(k), "predictions": str(path)}
        prows += [{**base, "metric": "balanced_accuracy", "value": 0.5}, {**base, "metric": "auroc", "value": 0.5}]
    _, flags = _recall_table(tmp_path, pd.DataFrame(prows), ["left", "right"])
    assert [f.split(" fold ")[1].split()[0] for f in flags] == [str(k) for k in range(12)]
