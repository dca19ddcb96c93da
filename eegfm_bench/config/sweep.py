"""The robustness sweep's config (``eegfm-bench sweep``; paper 003 §3.2).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from eegfm_bench.config import ConfigRecord, command_parser
from eegfm_bench.config.launch import LauncherConfig


@dataclass(frozen=True)
class SweepConfig(ConfigRecord):
    """``eegfm-bench sweep``: test-time perturbations (paper 003 App. D) on a cv run's fold checkpoints.

    Args:
        cv_out_dir: the cv run's out_dir.
        cv_config: the cv config file (its out_dir is used; its cell hashes must match the run's).
        out_dir: where the sweep's rows and report go (default ``<cv out_dir>/sweep``).
        conditions: condition strings (default: every App. D condition of the task).
        seed: perturbation seed (dropout masks and noise), fixed for the sweep.
        reference: model of the ∗/∇ marks; null for none.
        folds: subset of the cv folds.
        models: subset of the cv models.
        batch_size: windows per batch and device.
        num_workers: DataLoader worker processes (perturbation runs in them).
        save_predictions: write per-window probabilities per condition.
        alpha: family-wise level of the marks (Holm across models).
        corruption_order: ``before_reference`` (default): the corruption is applied to the signal before the
            model's reference step and the common average is recomputed over the channels present (zero-padded
            channels zeroed after it); ``after_reference``: the referenced windows are corrupted (the old order,
            under which a removed channel is recoverable from the survivors).
        region_snr: region noise SNR against the whole montage's signal power (``montage``, default, as the
            authors' code) or the region's (``region``); App. D.5 leaves it open.
        mask: random dropout masks: ``paper`` (drawn as the paper's runs, reproducing Table 5's PhysioNet rows) or
            ``hashed`` (one hash per channel name: independent of the channel order).
        launcher: where the (backbone group × fold) units run: ``none`` (this process), ``local`` workers or
            ``slurm`` (:mod:`eegfm_bench.runs.launch.launcher`); not part of any config hash.
        trainer: every ``lightning.Trainer`` argument plus ``loggers`` (``precision: null``: each cell's training
            precision).
    """

    cv_out_dir: Optional[str] = None
    cv_config: Optional[str] = None
    out_dir: Optional[str] = None
    conditions: Optional[list[str]] = None
    seed: int = 0
    reference: Optional[str] = "eegnet"
    folds: Optional[list[int]] = None
    models: Optional[list[str]] = None
    batch_size: int = 64
    num_workers: int = 0
    save_predictions: bool = True
    alpha: float = 0.05
    corruption_order: Literal["before_reference", "after_reference"] = "before_reference"
    region_snr: Literal["montage", "region"] = "montage"
    mask: Literal["paper", "hashed"] = "paper"
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    trainer: dict[str, Any] = field(default_factory=dict)


def sweep_parser(saved: bool = False):
    """The ``eegfm-bench sweep`` parser (``--config`` files, dotted overrides, the Trainer arguments).

    ``saved=True``: the parser of a config the command saved beside its results, for
    :func:`~eegfm_bench.config.read_saved` (``status``, ``report``): its ``trainer:`` section is read as the mapping
    the file holds (every key already there), without importing Lightning to list and type the Trainer's arguments.
    """
    return command_parser("eegfm-bench sweep", SweepConfig, trainer=not saved and {"precision": None, "devices": 1},
                          training=False, description=SweepConfig.__doc__)
