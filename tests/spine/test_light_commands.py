"""Light commands stay light (issue 36, item 3; docs/guide/architecture.md, house rules): ``status``, ``report``
and ``plan`` of a finished cv and every ``--help`` run in a fresh interpreter that, at exit, holds neither torch, Lightning, MNE
nor braindecode. The run is real (staged EEGMMIDB, one tiny EEGNet, two folds); each command's output is checked too,
so a light path that printed nothing would not pass, and the light ``report`` page must equal the page written in a
process that holds the whole stack; the light ``plan`` must give the cells, hashes and held-out subjects the
whole plan computes from the windows."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from eegfm_testutils import requires_data

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "lightning", "mne", "braindecode")


def run_light(args: list[str], heavy: tuple[str, ...] = HEAVY) -> tuple[int, str, list[str]]:
    """``eegfm-bench <args>`` in a fresh interpreter: its exit code, what it printed, and which of ``heavy`` (default
    :data:`HEAVY`) it had imported when it ended."""
    code = ("import sys\nfrom eegfm_bench import cli\ntry:\n    rc = cli.main(sys.argv[1:])\n"
            "except SystemExit as e:\n    rc = e.code\n"
            f"print('\\nLOADED', rc, sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    printed, _, last = out.stdout.rpartition("\nLOADED ")
    rc, loaded = last.split(" ", 1)
    return int(rc), printed, ast.literal_eval(loaded)


@pytest.fixture(scope="module")
def finished_cv(tmp_path_factory) -> Path:
    """A finished two-cell cv (EEGNet, folds 0 and 1 of 3) on staged EEGMMIDB eyes open / closed."""
    from eegfm_bench.cli import main

    root = tmp_path_factory.mktemp("light")
    cfg = {"experiment": "light", "task": "eegmmidb_eyes", "out_dir": str(root / "cv"), "seed": 0,
           "data": {"max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    (root / "cv.yaml").write_text(yaml.safe_dump(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", str(root / "cv.yaml"), "--no-progress"]) == 0
    return root / "cv"


@requires_data
def test_status_of_a_finished_cv_loads_no_deep_learning_stack(finished_cv):
    # nor what only the other light commands need: the page's scipy.signal / matplotlib, the plan's scipy.stats
    rc, printed, loaded = run_light(["status", str(finished_cv)], HEAVY + ("scipy", "matplotlib"))
    assert rc == 0 and loaded == []
    assert "2 cells: 2 done, 0 running, 0 failed, 0 missing" in printed
    assert printed.count("| done |") == 2 and "nothing to resume" in printed


def _undated(text: str) -> str:
    """A page without its ``generated YYYY-MM-DD HH:MM`` stamp (the one line that differs between two writes)."""
    return re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d", "generated <time>", text)


@requires_data
def test_report_of_a_finished_cv_loads_no_deep_learning_stack(finished_cv, tmp_path):
    from eegfm_bench.reports.page import run_report

    out = tmp_path / "page"
    rc, printed, loaded = run_light(["report", str(finished_cv), "--out", str(out)])
    assert rc == 0 and loaded == []
    assert f"report: {out / 'report.html'}" in printed and f"markdown: {out / 'report.md'}" in printed
    light = {name: _undated((out / name).read_text()) for name in ("report.md", "report.html")}
    # the class names come from what the cv saved: the chance level and both classes are on the page
    assert "chance (balanced accuracy of any constant prediction) = 0.500 (2 classes: eyes_open, eyes_closed)" \
        in light["report.md"]
    assert "2 subject-grouped test folds" in light["report.md"]
    import torch  # noqa: F401  (the heavy path: the same page written by a process that holds the whole stack)

    run_report([finished_cv], out)
    for name, text in light.items():
        assert _undated((out / name).read_text()) == text, f"{name}: the light page differs from the heavy one"


@requires_data
def test_plan_of_a_finished_cv_loads_no_deep_learning_stack(finished_cv):
    from eegfm_bench.runs.plan.command import run_plan
    from eegfm_bench.runs.plan.finished import finished_plan

    config = str(finished_cv.parent / "cv.yaml")
    rc, printed, loaded = run_light(["plan", "--config", config, "--json"])
    assert rc == 0 and loaded == []
    light = json.loads(printed)
    assert light["finished"] is True and light["n_cells"] == light["n_done"] == 2 and light["todo"] == []
    rc, printed, loaded = run_light(["plan", "--config", config])
    assert rc == 0 and loaded == []
    assert "2 cells (2 already have rows of their config hash, 0 to run); launcher none: 0 job(s)" in printed
    assert "nothing to run: every cell has rows of its config hash" in printed
    # the whole plan (windows read, cells enumerated and hashed) agrees with what the light one read from the files
    heavy = run_plan(config, measure=False)
    for key in ("n_cells", "n_done", "todo", "heads", "detectable", "confound", "launcher", "n_jobs"):
        assert light[key] == heavy[key], key
    # a config the run did not run is not finished: plan then takes the whole way
    assert finished_plan([config], ["--data.batch_size", "8"]) is None
    assert finished_plan([config], ["--trainer.max_epochs", "2"]) is None
    assert finished_plan([config], ["--split.folds", "[0, 1, 2]"]) is None
    assert finished_plan([config], ["--trainer.max_epochs", "1", "--launcher.kind", "local"])["launcher"] == "local"


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["report", "--help"], ["plan", "--help"],
                                  ["cv", "--help"], ["sweep", "--help"], ["controls", "--help"]])
def test_help_loads_no_deep_learning_stack(args):
    rc, printed, loaded = run_light(args)
    assert rc == 0 and loaded == []
    assert "usage: eegfm-bench" in printed
    assert "``" not in printed and ":class:`" not in printed and ":func:`" not in printed  # no Sphinx markup
