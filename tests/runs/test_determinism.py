"""A cell's rows depend on its config and seed only (issue 33): not on the launcher, the process's thread count or an
interruption. Sequential and local-worker runs give the same rows and predictions to the last bit; a fit
interrupted after its first epoch and resumed from ``last.ckpt`` ends with the weights and rows of an
uninterrupted one. (The SLURM launcher's bitwise equality is in ``test_slurm_real.py``.)"""
from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback

from eegfm_testutils import assert_bitwise_same_runs, cfg_near_threshold, requires_data, stored_rows


@requires_data
def test_local_workers_with_another_thread_count_give_the_sequential_rows_bitwise(tmp_path):
    """The sequential run's process has 3 threads, each local worker's 1 (``launcher.threads``); every cell computes
    with ``intra_op_threads`` (2) all the same, so rows and predictions are equal bit for bit, and every row says 2."""
    from eegfm_bench.cli import main

    seq_yaml, loc_yaml = tmp_path / "seq.yaml", tmp_path / "loc.yaml"
    seq_yaml.write_text(yaml.safe_dump(cfg_near_threshold(tmp_path / "seq")))
    loc_yaml.write_text(yaml.safe_dump(cfg_near_threshold(tmp_path / "loc", launcher={"threads": 1})))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["cv", "--config", str(seq_yaml), "--no-progress"]) == 0
            assert torch.get_num_threads() == 3  # the cell's count was the cell's only
            assert main(["cv", "--config", str(loc_yaml), "--launcher", "local", "--workers", "2",
                         "--no-progress"]) == 0
    finally:
        torch.set_num_threads(before)
    assert_bitwise_same_runs(tmp_path / "seq", tmp_path / "loc")
    rows = stored_rows(tmp_path / "loc")
    assert set(rows.intra_op_threads) == {2} and set(rows.fold.astype(str)) == {"0", "1"}  # folds are text in the store
    fold1 = pd.read_csv(next((tmp_path / "loc" / "predictions").glob("*-fold1.csv")))
    assert (fold1.p1 - 0.5).abs().min() < 1e-4  # the pinned fold: a window at the threshold
    assert len({p.name.split("-")[2] for p in (tmp_path / "loc" / "parts").glob("*.parquet")}) == 2  # two workers wrote
    assert yaml.safe_load((tmp_path / "loc" / "config.yaml").read_text())["intra_op_threads"] == 2


class _StopAfterFirstEpoch(Callback):
    """What a kill after epoch 0's checkpoint leaves behind: the fit raises as epoch 1 starts (its ``last.ckpt``,
    with the loader's and the RNGs' states at the end of epoch 0, is on disk)."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == 1:
            raise RuntimeError("interrupted after epoch 0")


@requires_data
def test_a_fit_resumed_mid_way_ends_with_the_weights_and_rows_of_an_uninterrupted_one(tmp_path, monkeypatch, capsys):
    """Three epochs uninterrupted vs. interrupted after the first and resumed by a rerun from ``last.ckpt``: the
    best checkpoint's weights, the rows and the predictions are bitwise equal. The resumed epochs must shuffle where
    the interrupted fit was (the loader's generator in the checkpoint) and draw the dropout masks it would have."""
    from eegfm_bench.results import FailedCellsError
    from eegfm_bench.runs.cv import loop as cv_loop
    from eegfm_bench.runs.cv.command import run_cv

    over = {"data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 6, "batch_size": 8},
            "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [1]},
            "trainer": {"max_epochs": 3, "patience": 3}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_cv(cfg_near_threshold(tmp_path / "whole", **over), progress=False)
        real = cv_loop.fit_callbacks

        def interrupting(*args, **kwargs):
            callbacks, ckpt = real(*args, **kwargs)
            return callbacks + [_StopAfterFirstEpoch()], ckpt

        monkeypatch.setattr(cv_loop, "fit_callbacks", interrupting)
        with pytest.raises(FailedCellsError, match="interrupted after epoch 0"):
            run_cv(cfg_near_threshold(tmp_path / "resumed", **over), progress=False)
        last = next((tmp_path / "resumed" / "checkpoints").glob("*/fold1/last.ckpt"))
        assert torch.load(last, map_location="cpu", weights_only=True)["epoch"] == 0
        assert not (tmp_path / "resumed" / "results.parquet").exists()
        monkeypatch.setattr(cv_loop, "fit_callbacks", real)
        capsys.readouterr()
        run_cv(cfg_near_threshold(tmp_path / "resumed", **over), progress=True)
    assert "fold 1: resuming from" in capsys.readouterr().out
    assert not last.exists()  # the finished cell keeps best.ckpt only
    assert_bitwise_same_runs(tmp_path / "whole", tmp_path / "resumed")
    rows = stored_rows(tmp_path / "resumed")
    assert rows.loc[rows.metric == "epochs", "value"].tolist() == [3.0]
    best = [torch.load(next((tmp_path / d / "checkpoints").glob("*/fold1/best.ckpt")), map_location="cpu",
                       weights_only=True) for d in ("whole", "resumed")]
    assert best[0]["epoch"] == best[1]["epoch"]
    sa, sb = best[0]["state_dict"], best[1]["state_dict"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_intra_op_threads_is_a_setting_hashed_only_when_it_is_not_the_default(tmp_path):
    """The default (2, not the machine's core count) keeps the hashes of the rows computed before the setting
    existed (this hash was computed by the code before it); another count is another cell; below 1 is refused."""
    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv.cells import cell_hash, load_config

    base = {"runs": [{"model": "eegnet", "heads": ["flatten"]}], "confound": False, "out_dir": str(tmp_path)}
    default = load_config(base)
    assert default.intra_op_threads == 2
    h = cell_hash(default, default.runs[0], "flatten", "windows-key")
    assert h == "d4d656336a55"
    two = load_config({**base, "intra_op_threads": 2})
    assert cell_hash(two, two.runs[0], "flatten", "windows-key") == h
    four = load_config(base, ["--intra_op_threads", "4"])
    assert four.intra_op_threads == 4 and cell_hash(four, four.runs[0], "flatten", "windows-key") != h
    with pytest.raises(ConfigError, match="intra_op_threads = 0; fix: a whole number >= 1"):
        load_config({**base, "intra_op_threads": 0})


def test_fixed_numerics_sets_every_thread_pool_for_the_block_and_restores_the_callers(monkeypatch):
    import os

    from threadpoolctl import threadpool_info

    from eegfm_bench.config import ConfigError
    from eegfm_bench.trainer import fixed_numerics

    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    before = torch.get_num_threads()
    with fixed_numerics(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
        assert os.environ["OMP_NUM_THREADS"] == "1"  # Lightning's DDP launcher leaves the count alone; ranks inherit it
        assert {p["num_threads"] for p in threadpool_info()} == {1}  # numpy's BLAS (the ridge head) and OpenMP
    assert torch.get_num_threads() == before and os.environ["OMP_NUM_THREADS"] == "5"
    with pytest.raises(ConfigError, match="intra_op_threads = 0"):
        with fixed_numerics(0):
            pass


def test_every_trainer_on_a_cpu_uses_deterministic_algorithms():
    from eegfm_bench.trainer import build_trainer

    try:
        build_trainer({"accelerator": "cpu", "deterministic": False})
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        build_trainer({"accelerator": "cpu", "deterministic": True})
        assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
