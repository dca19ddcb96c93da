"""The page's robustness tables carry the ∗/∇ marks (paper 003 §5): a synthetic sweep store of 8 folds where one
model degrades far less (∗) and one far more (∇) than the reference under every fold, and one like it (no mark)."""
from __future__ import annotations

import json

import numpy as np
import yaml


def _rows(model: str, drops: np.ndarray) -> list[dict]:
    base = {"experiment": "sw", "task": "eegmmidb_mi", "init": "random", "regime": "full", "head": "flatten",
            "seed": 0, "metric": "balanced_accuracy", "n_windows": 40, "n_subjects": 2, "fold_unit": "subject",
            "config_hash": f"h{model}", "code_version": "test", "model": model}
    out = []
    for k, d in enumerate(drops):
        clean = 0.80 + 0.01 * k
        out += [{**base, "fold": k, "condition": "clean", "value": clean},
                {**base, "fold": k, "condition": "white_snr=0dB", "value": clean - d}]
    return out


def test_robustness_section_marks_less_and_more_degradation_than_the_reference(tmp_path):
    from eegfm_bench.reports.page import robustness_sections
    from eegfm_bench.reports.page import SAVED_CONFIGS
    from eegfm_bench.results import ResultStore

    rng = np.random.default_rng(0)
    ref = 0.20 + 0.01 * rng.random(8)
    rows = _rows("eegnet", ref) + _rows("robust", ref - 0.15) + _rows("fragile", ref + 0.15) \
        + _rows("same", ref + 0.002 * np.array([1, -1] * 4))
    ResultStore(tmp_path).append(rows)
    (tmp_path / "cells.json").write_text(json.dumps([{"config_hash": r} for r in
                                                     ("heegnet", "hrobust", "hfragile", "hsame")]))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"reference": "eegnet", "conditions": ["white_snr=0dB"]}))
    (sec,) = robustness_sections(tmp_path, SAVED_CONFIGS["sweep"](tmp_path / "sweep.yaml"))
    (table,) = sec.tables
    assert table.columns[:3] == ["model", "clean", "white_snr=0dB"]  # the clean score beside Δ (issue 24)
    cells = {row[0].text if hasattr(row[0], "text") else str(row[0]): row[2].text for row in table.rows}
    assert cells["robust"].endswith("∗") and cells["robust"].startswith("-5.")
    assert cells["fragile"].endswith("∇") and cells["fragile"].startswith("-35.")
    assert not cells["same"].endswith(("∗", "∇")) and not cells["eegnet"].endswith(("∗", "∇"))
    assert "8 folds" in sec.intro and "No ∗/∇ marks" not in sec.intro  # 8 folds can reach α: the legend stays
