"""``eegfm-bench plan`` estimates the whole cv command stage by stage (runs/plan/stages.py; issue 35 item 6).

No timing is asserted: the stages' structure and arithmetic are (present, in order, adding to the total, the
confound variations each counted, parallel jobs dividing the cells' stages only).
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from eegfm_testutils import requires_data

from eegfm_bench.runs.plan.stages import (CELL_STAGES, cell_stage_seconds, command_stages, compare_seconds,
                                          effective_parallel, features_seconds, stages_markdown)


def _part(parallel: int = 1, launched: bool = False, **over) -> dict:
    return {"windows_s": 2.0, "features_s": 30.0, "training_s": 100.0, "testing_s": 10.0, "n_jobs": 4,
            "parallel": parallel, "launched": launched, "job_start_s": 5.0, **over}


def _by(rows: list[dict]) -> dict[str, dict]:
    return {r["stage"]: r for r in rows}


def test_every_stage_is_present_in_order_and_adds_to_the_total():
    variations = [{**_part(training_s=50.0), "condition": "confound=band4-40", "compare_s": 3.0},
                  {**_part(training_s=70.0), "condition": "confound=frontal", "compare_s": 3.0}]
    rows = command_stages(7.0, _part(), variations, refresh_s=1.0)
    assert [r["stage"] for r in rows] == ["start-up", "windows", "features", "training", "testing",
                                          "confound check confound=band4-40", "confound check confound=frontal",
                                          "report"]
    by = _by(rows)
    # each variation is the cv again: its windows, features, cells, comparison and page
    assert by["confound check confound=band4-40"]["wall_s"] == pytest.approx(2 + 30 + 50 + 10 + 3 + 1)
    assert by["confound check confound=frontal"]["wall_s"] == pytest.approx(2 + 30 + 70 + 10 + 3 + 1)
    assert by["report"]["wall_s"] == pytest.approx(2.0)  # the page after the headline and after the check
    total = 7 + (2 + 30 + 100 + 10) + 96 + 116 + 2
    assert sum(r["wall_s"] for r in rows) == pytest.approx(total)
    md = "\n".join(stages_markdown(rows, {}))
    assert f"| **total** | **{total / 60:.1f} min** |" in md
    assert md.count("| confound check") == 2


def test_confound_off_has_no_confound_stage():
    rows = command_stages(7.0, _part(), [], refresh_s=1.0)
    assert [r["stage"] for r in rows] == ["start-up", "windows", "features", "training", "testing", "report"]
    assert sum(r["wall_s"] for r in rows) == pytest.approx(7 + 2 + 30 + 100 + 10 + 1)


def test_parallel_jobs_shrink_the_cells_not_the_stages_before_them():
    one = _by(command_stages(7.0, _part(launched=True), []))
    two = _by(command_stages(7.0, _part(parallel=2, launched=True), []))
    for s in ("start-up", "windows", "features", "report"):
        assert two[s]["wall_s"] == one[s]["wall_s"]
    for s in CELL_STAGES:
        assert two[s]["wall_s"] == pytest.approx(one[s]["wall_s"] / 2)
        assert two[s]["seconds"] == one[s]["seconds"]  # the same work, summed over jobs
    # 4 jobs, each a new process (start-up + window read): 4 in a row, or 2 rounds of 2
    assert one["job start-up"]["wall_s"] == pytest.approx(4 * 5.0)
    assert two["job start-up"]["wall_s"] == pytest.approx(2 * 5.0)
    assert "job start-up" not in _by(command_stages(7.0, _part(), []))  # no launcher: no job processes


def test_local_workers_on_a_cpu_share_its_cores():
    assert effective_parallel("local", 4, 1, "cpu", cores=2) == 2
    assert effective_parallel("local", 4, 2, "cpu", cores=2) == 1
    assert effective_parallel("local", 2, 1, "gpu", cores=1) == 2
    assert effective_parallel("slurm", 8, 4, "cpu", cores=2) == 8
    assert effective_parallel("none", 1, 1, "cpu", cores=16) == 1


def test_cell_stage_seconds_from_known_rates():
    tput = {"fwd_per_s": 100.0, "fwd_bwd_per_s": 10.0, "save_s": 0.5, "build_s": 0.25,
            "fwd_warmup_excess_s": 0.1, "fwd_bwd_warmup_excess_s": 0.4}
    over = {"per_cell": 2.0, "per_epoch": 1.0, "test": 0.5}
    s = cell_stage_seconds("full", 3, 200, 50, 100, 16, tput, over)
    # 3 epochs × (200 / 10 + 50 / 100) + sanity 32 / 100 + fit 1.5 + 3 × (1 + 2 × 0.5) + build 0.25 + warm-up 0.5
    assert s["training"][0] == pytest.approx(3 * 20.5 + 0.32 + 1.5 + 6 + 0.25 + 0.5)
    assert s["testing"][0] == pytest.approx(100 / 100 + 0.5)
    ho = cell_stage_seconds("head_only", 3, 200, 50, 100, 16, tput, over)  # the head trains on cached tokens
    assert ho["training"][0] == pytest.approx(1.5 + 6 + 0.25) and ho["testing"][0] == pytest.approx(0.5)
    assert features_seconds(1000, tput)[0] == pytest.approx(10.0 + 0.1)
    assert compare_seconds(3, 16, 0.5) == pytest.approx(3 * 2 * 17 * 0.5)  # 2 bootstraps, then one per subject left out
    assert not cell_stage_seconds("full", 3, 200, 50, 100, 16, None, over)["training"].any()


@requires_data
def test_plan_estimates_the_whole_command(tmp_path, capsys, monkeypatch):
    from eegfm_bench.cli import main
    from eegfm_bench.runs.plan.command import run_plan

    cfg = {"experiment": "ps", "task": "eegmmidb_eyes", "out_dir": str(tmp_path / "p"), "seed": 0,
           "data": {"subjects": [1, 2, 3, 4], "max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 2, "seed": 0, "n_val_groups": 1},
           "trainer": {"max_epochs": 2, "patience": 1},
           "confound": {"enabled": True, "variations": ["band", "frontal"]},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([{"model": "eegnet", "device": "cpu", "fwd_per_s": 100.0, "fwd_bwd_per_s": 10.0}]))
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = run_plan(cfg, bench=str(bench), measure=False)
        two = run_plan({**cfg, "launcher": {"kind": "local", "workers": 2}}, bench=str(bench), measure=False)
        off = run_plan({**cfg, "confound": False}, bench=str(bench), measure=False)
    names = [r["stage"] for r in p["stages"]]
    assert names == ["start-up", "windows", "features", "training", "testing", "confound check confound=band4-40",
                     "confound check confound=frontal", "report"]
    assert p["estimate_command_wall_s"] == pytest.approx(sum(r["wall_s"] for r in p["stages"]))
    st = _by(p["stages"])
    # the training row holds the planned cells' passes at the table's rates (plus their fixed costs)
    passes = sum(r["backbone_passes"]["forward_backward"] for r in p["todo"]) / 10.0
    assert st["training"]["seconds"] >= passes > 0
    for c in ("confound check confound=band4-40", "confound check confound=frontal"):
        assert st[c]["parts"]["training"] >= passes  # each variation retrains every cell
    assert [r["stage"] for r in off["stages"]] == ["start-up", "windows", "features", "training", "testing", "report"]
    t2 = _by(two["stages"])
    assert two["n_jobs"] == 2 and t2["training"]["wall_s"] == pytest.approx(t2["training"]["seconds"] / 2)
    assert t2["windows"]["wall_s"] == t2["windows"]["seconds"] and t2["job start-up"]["seconds"] > 0
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    assert main(["plan", "--config", str(path), "--bench", str(bench), "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "## the whole command, stage by stage" in out and "| **total** |" in out
    for s in ("| start-up |", "| windows |", "| features |", "| training |", "| testing |", "| report |",
              "| confound check confound=frontal |"):
        assert s in out
    assert np.isfinite(p["estimate_command_wall_s"])
