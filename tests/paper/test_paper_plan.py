"""A paper as one command: plan (cells, jobs, device-hours, launcher flags), check on the staged data, run."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from eegfm_testutils import requires_data

ROOT = Path(__file__).resolve().parents[2]
P003 = ROOT / "configs" / "paper" / "003_beyond_accuracy.yaml"
P001 = ROOT / "configs" / "paper" / "001_negative_controls.yaml"
P000 = ROOT / "configs" / "paper" / "000_physiotrace.yaml"
EYES = ["eyes_cv", "eyes_pooling", "eyes_sweep", "eyes_probe", "eyes_attribute", "eyes_truncation"]


def _bench(tmp_path: Path) -> Path:
    """Model-level rates (every input size): eegnet 100 / 10, the others 50 / 5 windows/s, REVE's 22 blocks."""
    rows = [{"model": "eegnet", "device": "cuda", "fwd_per_s": 100.0, "fwd_bwd_per_s": 10.0}]
    rows += [{"model": m, "device": "cuda", "fwd_per_s": 50.0, "fwd_bwd_per_s": 5.0, "n_blocks": 22 if m == "reve" else 12}
             for m in ("biot", "cbramod", "labram", "reve")]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))
    return path


def test_plan_paper_counts_cells_jobs_and_hours(tmp_path):
    """Paper 003's Eyes members on the declared dataset (3,270 windows, 109 subjects, 10 folds, 30 epochs): cells,
    jobs of 3 local workers, and the cv member's device-hours from the passes of every cell."""
    from eegfm_bench.runs.plan.paper_plan import plan_paper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_paper(P003, ["--launcher.kind", "local", "--launcher.workers", "3"], bench=str(_bench(tmp_path)),
                       measure=False, members=EYES)
    rows = {r["member"]: r for r in p["members"]}
    assert [rows[m]["cells"] for m in ("eyes_cv", "eyes_pooling", "eyes_truncation")] == [90, 180, 60]
    assert rows["eyes_cv"]["jobs"] == 3 and rows["eyes_cv"]["parallel"] == 3
    assert rows["eyes_truncation"]["jobs"] == 1  # one process, no launcher
    # sweep: 7 swept run-heads (BIOT excluded) × 10 folds; 26 conditions for LaBraM / REVE (variable channels, mean
    # head), 21 for EEGNet and CBraMod (no removed-channel conditions)
    assert rows["eyes_sweep"]["cells"] == 10 * (4 * 26 + 3 * 21)
    w, folds, epochs = 3270, 10, 30
    test, val = w // folds, int(w * 1 / 109)
    train = w - test - val
    o = p["overhead_s"]
    fixed = o["per_cell"] + epochs * o["per_epoch"]
    full = folds * ((epochs * val + test) / 100 + epochs * train / 10 + fixed)  # EEGNet
    full += 4 * folds * ((epochs * val + test) / 50 + epochs * train / 5 + fixed)  # four FMs fine-tuned
    head_only = 4 * (w / 50 + folds * fixed)  # one extraction of every window per frozen backbone
    assert rows["eyes_cv"]["seconds"][0] == pytest.approx(full + head_only, rel=1e-9)
    assert p["estimate_device_hours"] == pytest.approx(sum(r["seconds"][0] for r in rows.values()) / 3600)
    assert rows["eyes_probe"]["cells"] == 10 * 22 * 2 * 2  # folds × REVE blocks × poolings × (fine-tuned, frozen)
    assert any("labram-pretrained: missing; put" in x for x in p["missing_weights"])
    assert any("NeuroRVQ" in g["what"] for g in p["not_runnable"])


def test_plan_cli_takes_the_launcher_flags_of_the_command(tmp_path, capsys):
    """``eegfm-bench plan --config <paper> --launcher local --workers 4`` plans 4 concurrent jobs, as cv would run."""
    from eegfm_bench.cli import main

    assert main(["plan", "--config", str(P003), "--members", "eyes_cv", "--bench", str(_bench(tmp_path)),
                 "--no-measure", "--launcher", "local", "--workers", "4"]) == 0
    out = capsys.readouterr().out
    assert "| eyes_cv | cv | 3,270 (declared) | 90 cells | 4 (local, 4) |" in out
    assert "NeuroRVQ" in out and "weights brain-bzh/reve-base: missing; put" in out


@pytest.mark.parametrize("path", [P000, P001, P003], ids=["000", "001", "003"])
def test_committed_throughput_costs_every_member(path):
    """The committed CPU throughput table (configs/paper/throughput_cpu.json) prices every member whose windows are
    known, so ``plan`` needs no measurement; a whole paper plans in well under a few minutes."""
    from eegfm_bench.runs.plan.paper_plan import plan_paper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_paper(path, measure=False)
    assert p["measured_here"] == 0
    known = [r for r in p["members"] if r["known_windows"]]
    assert all(r["costed"] for r in p["members"]), [r["member"] for r in p["members"] if not r["costed"]]
    assert (p["estimate_device_hours"] > 0) == bool(known)


@requires_data
def test_check_paper_on_the_staged_data(capsys):
    """Eyes (7 staged subjects) runs one batch of EEGNet and names the missing weights of the others; 4-class motor
    imagery (runs 6/10/14 not staged) and every dataset of papers 001 and 000 are listed, not skipped silently."""
    from eegfm_bench.runs.plan.paper import check_paper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = check_paper(P003, members=["eyes_cv", "mi_pn_cv", "eyes_sweep"])
        assert out == {"eyes_cv": "ok", "mi_pn_cv": "no local copy", "eyes_sweep": "config only"}
        text = capsys.readouterr().out
        assert "weights braindecode/labram-pretrained: missing; put" in text and "ok      eegnet" in text
        assert "no local copy of its data:" in text and "not runnable here: NeuroRVQ" in text
        assert check_paper(P001, members=["chbmit", "sleep_edf"]) == {"chbmit": "no local copy",
                                                                       "sleep_edf": "no local copy"}
        assert check_paper(P000) == {"nmt_audit": "no local copy"}


@requires_data
def test_run_paper_runs_members_in_order_and_resumes(tmp_path, capsys):
    """A paper of one tiny cv member runs as its own ``eegfm-bench cv`` process; a rerun skips its cells."""
    from eegfm_bench.runs.plan.paper import run_paper

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "cv.yaml").write_text((ROOT / "configs" / "experiment" / "tiny_ci.yaml").read_text())
    paper = tmp_path / "tiny_paper.yaml"
    paper.write_text(yaml.safe_dump({"paper": "none", "title": "tiny", "members": [
        {"name": "tiny_cv", "command": "cv", "config": ["m/cv.yaml"], "args": ["--out_dir", str(tmp_path / "out")]}]}))
    assert run_paper(paper, ["--launcher", "none"], dry_run=True) == 0
    assert "eegfm_bench.cli cv --config" in capsys.readouterr().out
    assert run_paper(paper) == 0
    assert (tmp_path / "out" / "results.csv").is_file()
    assert run_paper(paper) == 0  # resumes: every cell has rows of its config hash


@requires_data
def test_plan_of_a_cv_config_takes_the_launcher_flags(tmp_path, capsys):
    """``eegfm-bench plan --config <cv config> --workers 2`` plans the cells as 2 local jobs, as ``cv --workers 2``
    runs them (the flags become the config's launcher section)."""
    from eegfm_bench.cli import main

    cfg = ROOT / "configs" / "experiment" / "tiny_ci.yaml"
    args = ["plan", "--config", str(cfg), "--out_dir", str(tmp_path / "tiny"), "--bench", str(_bench(tmp_path)),
            "--no-measure"]
    assert main(args) == 0
    assert "launcher none: 1 job(s)" in capsys.readouterr().out
    assert main(args + ["--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "launcher local: 2 job(s)" in out and "2 at once" in out


def test_plan_counts_channel_removal_only_for_heads_that_take_any_token_count(tmp_path):
    """The sweep member's pairs: channel-removal conditions count for a variable-channel model only where its head
    takes any number of tokens (the head's own answer, as the sweep asks it): LaBraM's mean and ``mlp`` with
    ``pooling: mean`` take all 26 conditions, its flatten and ``mlp`` with ``pooling: flatten`` the 21 without
    removal, as EEGNet's flatten."""
    from eegfm_bench.runs.plan.paper_plan import plan_paper

    paper = yaml.safe_load(P003.read_text())
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"runs": [
        {"model": "eegnet", "regime": "full", "heads": ["flatten"]},
        {"model": "labram", "regime": "full", "heads": ["mean", "flatten", "mlp"], "head_kwargs": {"mlp": {"pooling": "flatten"}}},
        {"model": "labram", "regime": "head_only", "heads": ["mlp"], "head_kwargs": {"pooling": "mean"}}]}))
    d = P003.parent / "003"
    paper["members"] = [
        {"name": "eyes_cv", "command": "cv", "config": [str(d / "cv.yaml"), str(runs), str(d / "tasks" / "eyes.yaml")]},
        {"name": "eyes_sweep", "command": "sweep", "config": [str(d / "sweep.yaml")], "after": ["eyes_cv"],
         "args": ["--cv_out_dir", "results/paper003/eyes/cv", "--out_dir", "results/paper003/eyes/sweep"]}]
    paper["throughput"] = str(P003.parent / paper["throughput"])
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(paper, allow_unicode=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan_paper(path, bench=str(_bench(tmp_path)), measure=False, members=["eyes_cv", "eyes_sweep"])
    rows = {r["member"]: r for r in p["members"]}
    # labram mean, labram mlp/mean: 26; eegnet flatten, labram flatten, labram mlp/flatten: 21; 10 folds
    assert rows["eyes_sweep"]["cells"] == 10 * (2 * 26 + 3 * 21)
