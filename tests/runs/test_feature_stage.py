"""The feature stage (issue 35, item 3): a head-only backbone's frozen tokens extracted once, split by window ranges
over jobs, assembled into the ordinary cache entry.

Real staged EEGMMIDB (motor imagery, subjects 1-3: 24 windows, batches of 4) and a tiny
LaBraM. A 2-shard local stage gives the sequential entry's files (same key) and arrays bit for bit; a stage killed
after one shard resumes only the missing one; a shard that leaves its range short is refused by name; a cv under a
local launcher runs the stage before its cells (one entry, assembled by the stage: no cell extracts) and gives the
sequential cv's rows to the last bit. The SLURM array is in ``tests/runs/test_slurm_features.py``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import eegfm_bench.runs.cv.feature_stage as stage_mod
from eegfm_bench.models.features import FeatureShardError, window_ranges
from eegfm_bench.runs.cv.cells import load_config
from eegfm_bench.runs.cv.feature_stage import feature_shard, run_feature_stage

from eegfm_testutils import assert_bitwise_same_runs, requires_data

TINY = {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}


def _cfg(out: Path, cache: Path, **over) -> dict:
    c = {"experiment": "fs", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
         "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 4, "batch_size": 4, "cache_dir": str(cache)},
         "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
         "trainer": {"max_epochs": 1, "patience": 1},
         "runs": [{"model": "labram", "regime": "head_only", "heads": ["mean"], "backbone_kwargs": TINY}]}
    c.update(over)
    return c


def _entry(cache: Path) -> Path:
    (folder,) = [p for p in (cache / "features").iterdir() if (p / "COMPLETE").is_file()]
    return folder


def _same_arrays(a: Path, b: Path) -> None:
    assert a.name == b.name  # the same key
    names = sorted(f.name for f in a.glob("*.npy"))
    assert names == sorted(f.name for f in b.glob("*.npy")) and "tokens.npy" in names
    for f in names:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_ranges_are_contiguous_ordered_and_start_on_a_batch():
    assert window_ranges(12, 2, 4) == [(0, 8), (8, 12)]
    assert window_ranges(10, 3, 4) == [(0, 4), (4, 8), (8, 10)]
    assert window_ranges(5, 4, 4) == [(0, 4), (4, 5)]  # never more shards than batches
    assert window_ranges(7, 1, 32) == [(0, 7)]


@pytest.fixture
def sequential(tmp_path_factory) -> Path:
    """The sequential extraction's entry (a cv config without launcher)."""
    tmp = tmp_path_factory.mktemp("seq")
    run_feature_stage(load_config(_cfg(tmp / "o", tmp / "c")), progress=False)
    return _entry(tmp / "c")


@requires_data
def test_a_two_shard_local_stage_gives_the_sequential_entry_bit_for_bit(sequential, tmp_path, capsys):
    cfg = load_config(_cfg(tmp_path / "o", tmp_path / "c", launcher={"kind": "local", "workers": 2}))
    run_feature_stage(cfg, shards=2, progress=False)
    printed = capsys.readouterr().out
    assert "features: labram tokens of 24 windows in 2 shard(s) of windows 0..11, 12..23 (launcher local)" in printed
    assert len(list((tmp_path / "o" / "features" / "jobs").glob("*_result.pkl"))) == 2  # two jobs ran
    entry = _entry(tmp_path / "c")
    _same_arrays(sequential, entry)
    assert json.loads((entry / "meta.json").read_text())["stage"] == {"shards": 2, "ranges": [[0, 12], [12, 24]]}
    assert not list((tmp_path / "c" / "features").glob("*.partial-*"))  # the stage's chunks are gone


def _in_process(calls: list, only=None, short=None):
    """run_jobs replaced: the units run in this process; ``only`` keeps those shards (a stage killed after them),
    ``short`` makes that shard leave out the last window of its range."""

    def run(lc, cfg, units, out, **_):
        calls.append(list(units))
        backbones = cfg.backbones
        if short is not None:
            b = backbones[0]
            ranges = [(a, s - 1) if k == short else (a, s) for k, (a, s) in enumerate(b.ranges)]
            backbones = [type(b)(**{**b.__dict__, "ranges": ranges})]
        cfg = type(cfg)(cfg.cv, backbones, cfg.trainer)
        todo = [u for u in units if only is None or int(u.split(":")[1]) in only]
        return feature_shard(cfg, worker_units=todo)["failures"]

    return run


@requires_data
def test_a_killed_stage_resumes_only_its_missing_shard_and_a_short_shard_is_refused(sequential, tmp_path,
                                                                                    monkeypatch):
    cfg = load_config(_cfg(tmp_path / "o", tmp_path / "c", launcher={"kind": "local", "workers": 2}))
    calls: list = []
    monkeypatch.setattr(stage_mod, "run_jobs", _in_process(calls, short=1))
    with pytest.raises(FeatureShardError, match=r"shard 1 has no finished chunk of windows 12\.\.23") as err:
        run_feature_stage(cfg, shards=2, progress=False)
    assert "shard 0" not in str(err.value) and "rerun the same command" in str(err.value)
    assert not list((tmp_path / "c" / "features").glob("*/COMPLETE"))  # no entry without the skipped window
    monkeypatch.setattr(stage_mod, "run_jobs", _in_process(calls, only={0}))  # killed after shard 0
    with pytest.raises(FeatureShardError, match=r"shard 1 has no finished chunk of windows 12\.\.23"):
        run_feature_stage(cfg, shards=2, progress=False)
    monkeypatch.setattr(stage_mod, "run_jobs", _in_process(calls))
    run_feature_stage(cfg, shards=5, progress=False)  # resumed: the first stage's ranges, only shard 1 runs
    assert calls == [["0:0", "0:1"], ["0:1"], ["0:1"]]
    _same_arrays(sequential, _entry(tmp_path / "c"))


@requires_data
def test_a_second_command_of_the_same_stage_takes_the_entry_the_first_published(sequential, tmp_path, monkeypatch):
    """Two identical ``features`` commands at once: whichever assembles second finds the chunks gone (the first
    assembled the entry and removed them) and must take the published entry, not refuse the missing chunks."""
    cfg = load_config(_cfg(tmp_path / "o", tmp_path / "c", launcher={"kind": "local", "workers": 2}))
    calls: list = []
    run_in_process = _in_process(calls)

    def other_command_finishes_first(lc, job_cfg, units, out, **kw):
        failures = run_in_process(lc, job_cfg, units, out, **kw)
        for b in job_cfg.backbones:  # the other command's assembly: entry published, stage folder removed
            entry = stage_mod._entry(cfg, b.run, {})[0]
            assert str(entry.folder) == b.folder
            stage_mod.assemble_stage(entry, b.ranges)
        return failures

    monkeypatch.setattr(stage_mod, "run_jobs", other_command_finishes_first)
    (folder,) = run_feature_stage(cfg, shards=2, progress=False)
    _same_arrays(sequential, folder)
    assert not list((tmp_path / "c" / "features").glob("*.partial-*"))


@requires_data
def test_cv_under_a_local_launcher_extracts_in_the_stage_and_gives_the_sequential_rows(tmp_path, capsys):
    from eegfm_bench.runs.cv.command import run_cv

    split = {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]}  # one cell; the stage: 2 jobs
    run_cv(_cfg(tmp_path / "seq", tmp_path / "cs", split=split), progress=False)
    run_cv(_cfg(tmp_path / "loc", tmp_path / "cl", split=split, launcher={"kind": "local", "workers": 2}),
           progress=False)
    printed = capsys.readouterr().out
    assert "features: labram tokens of 24 windows in 2 shard(s) of windows 0..11, 12..23 (launcher local)" in printed
    entries = list((tmp_path / "cl" / "features").iterdir())
    assert len(entries) == 1  # the stage's entry, opened by every cell: none extracted its own
    assert json.loads((entries[0] / "meta.json").read_text())["stage"]["shards"] == 2
    _same_arrays(_entry(tmp_path / "cs"), entries[0])
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "loc")


@requires_data
def test_the_features_command_runs_the_stage(tmp_path, capsys):
    from eegfm_bench.cli import main

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_cfg(tmp_path / "o", tmp_path / "c")))
    assert main(["features", "--config", str(path), "--workers", "2", "--shards", "2", "--no-progress"]) == 0
    assert "in 2 shard(s) of windows 0..11, 12..23 (launcher local)" in capsys.readouterr().out
    assert np.load(_entry(tmp_path / "c") / "tokens.npy").shape[0] == 24
