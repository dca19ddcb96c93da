"""User errors: one message that names the fix, from the config helpers and the console script."""
from __future__ import annotations

import re
import sys

import pytest
import yaml

from eegfm_bench.config import ConfigError, merge_config


def test_a_config_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"the config must be a mapping of `key: value` lines, got a list"):
        merge_config({"task": None, "runs": []}, ["task: eegmat"])
    with pytest.raises(ConfigError, match=r"`data` must be a mapping.*valid keys: batch_size"):
        merge_config({"data": {"batch_size": 64}}, {"data": [1]}, "")
    assert merge_config({"a": 1, "b": {"c": 2}}, {"b": {"c": 3}}) == {"a": 1, "b": {"c": 3}}


def test_controls_needs_task_and_out_dir():
    from eegfm_bench.runs.controls.config import load_config

    with pytest.raises(ConfigError, match=r"needs `task` and `out_dir`.*fix: start from"):
        load_config({})
    with pytest.raises(ConfigError, match=r"needs `out_dir`"):
        load_config({"task": "eegmat"})


def test_console_script_prints_user_errors_without_traceback(tmp_path, monkeypatch, capsys):
    from eegfm_bench.cli import main

    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump({"task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"),
                                   "runs": [{"model": "labrum", "regime": "full", "heads": ["mean"]}]}))
    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "check", "--config", str(cfg)])
    assert main() == 2
    err = capsys.readouterr().err
    assert err.startswith("eegfm-bench check: UnknownNameError: ") and "labram" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 4
    # with EEGFM_TRACEBACK the exception propagates; from Python (argv given) it always does
    monkeypatch.setenv("EEGFM_TRACEBACK", "1")
    with pytest.raises(KeyError):
        main()
    monkeypatch.delenv("EEGFM_TRACEBACK")
    with pytest.raises(KeyError, match="labram"):
        main(["check", "--config", str(cfg)])


def test_console_script_reraises_bugs(monkeypatch):
    import eegfm_bench.cli as cli

    def boom(argv):
        raise ZeroDivisionError("not a user error")
    monkeypatch.setattr(cli, "_main", boom)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "tasks"])
    with pytest.raises(ZeroDivisionError):
        cli.main()


ROLES = re.compile(r"``|:\w+:`|`~\w|^\s*\w+:`", re.M)  # a role, or its halves when argparse's wrapping split it


def test_plain_text_reads_sphinx_markup_as_a_terminal_shows_it():
    from eegfm_bench.config import plain_text

    text = ("``eegfm-bench cv``: :func:`~eegfm_bench.runs.cv.cells.load_config` resolves ``task`` once into a "
            ":class:`eegfm_bench.data.ingest.DeclaredTask` (:ref:`the guide <guide-data>`, :mod:`~eegfm_bench.quiet`)")
    assert plain_text(text) == ("`eegfm-bench cv`: `load_config` resolves `task` once into a "
                                "`eegfm_bench.data.ingest.DeclaredTask` (`the guide`, `quiet`)")
    assert plain_text(":paramref:`~lightning.Trainer.max_epochs` and :py:meth:`x.y`") == "`max_epochs` and `x.y`"


def test_every_command_lists_its_keys_prints_its_resolved_config_and_refuses_unknown_options(tmp_path, capsys):
    from eegfm_bench.cli import COMMANDS, main

    for cmd in COMMANDS:
        assert main([cmd, "--keys"]) == 0
        out = capsys.readouterr().out
        assert "--config" in out and (cmd == "audit" or "--trainer.strategy" in out), cmd
        assert not ROLES.findall(out), (cmd, ROLES.findall(out)[:3])  # the docstrings' Sphinx markup, made plain
    cfg = "configs/experiment/quickstart.yaml"
    assert main(["cv", "--config", cfg, "--trainer.devices", "2", "--trainer.strategy", "ddp",
                 "--trainer.precision", "bf16-mixed", "--print-config"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["trainer"]["devices"] == 2 and resolved["trainer"]["strategy"] == "ddp"
    assert resolved["trainer"]["precision"] == "bf16-mixed" and resolved["trainer"]["max_epochs"] == 15
    with pytest.raises(ConfigError, match=r"unknown option --trainer\.max_epoch\. Did you mean 'max_epochs'"):
        main(["cv", "--config", cfg, "--trainer.max_epoch", "2"])
    with pytest.raises(ConfigError, match=r"command line: unknown option --batchsize\. Did you mean 'batch_size'"):
        main(["sweep", "--config", "configs/experiment/sweep_quickstart.yaml", "--batchsize", "2"])
    # a bare logger name is a list of one; the sweep has no early stopping, so no trainer.patience
    assert main(["sweep", "--config", "configs/experiment/sweep_quickstart.yaml", "--trainer.loggers", "tensorboard",
                 "--print-config"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert resolved["trainer"]["loggers"] == ["tensorboard"] and "patience" not in resolved["trainer"]


COMMANDS_WITH_CONFIG = ["cv", "check", "plan", "sweep", "probe", "attribute", "controls", "audit"]


@pytest.mark.parametrize("argv", [
    *[[c, "--config", "{tmp}/missing.yaml"] for c in COMMANDS_WITH_CONFIG],      # a missing file
    *[[c, "--config", "{tmp}/badkey.yaml"] for c in ("cv", "check", "plan")],    # a bad key
    ["sweep", "--config", "{tmp}/badkey_sweep.yaml"], ["probe", "--config", "{tmp}/badkey_interp.yaml"],
    ["attribute", "--config", "{tmp}/badkey_interp.yaml"], ["controls", "--config", "{tmp}/badkey_controls.yaml"],
    ["status", "{tmp}/empty"], ["report", "{tmp}/empty"], ["report", "{tmp}/missing_dir"],   # a wrong folder
    ["confound", "--cv", "{tmp}/empty"], ["ingest", "--task", "nope", "--model", "eegnet", "--out", "{tmp}/o"],
])
def test_every_command_answers_a_user_error_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys, argv):
    """Issue 25: one error policy — every error a user can cause, from every command, is one block naming the fix
    and exit status 2, never a traceback."""
    from eegfm_bench.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "badkey.yaml").write_text(yaml.safe_dump({"task": "eegmat", "out_dir": str(tmp_path / "o"),
                                                          "trainer": {"max_epoch": 3},
                                                          "runs": [{"model": "eegnet"}]}))
    (tmp_path / "badkey_sweep.yaml").write_text(yaml.safe_dump({"cv_out_dir": str(tmp_path), "conditons": []}))
    (tmp_path / "badkey_interp.yaml").write_text(yaml.safe_dump({"cv_dir": str(tmp_path), "out_dir": str(tmp_path),
                                                                 "attribution": {"methds": ["gxi"]}}))
    (tmp_path / "badkey_controls.yaml").write_text(yaml.safe_dump({"task": "eegmat", "out_dir": str(tmp_path),
                                                                   "permutaion": {"n": 3}}))
    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", *[a.format(tmp=tmp_path) for a in argv]])
    assert main() == 2
    err = capsys.readouterr().err
    assert err.startswith(f"eegfm-bench {argv[0]}: ") and "Traceback" not in err, err
    assert "fix" in err.lower() or "did you mean" in err.lower(), err
    assert len(err.strip().splitlines()) <= 6
