"""``BlockProbe``: block-wise probes of the backbone before and after ``fit`` as a Lightning callback (App. I.5).

The analysis runs once (rank 0) when fit ends, on the best checkpoint, with the block outputs computed by a
one-device ``Trainer.predict`` (:func:`eegfm_bench.models.features.extract_features`) on the device the fit ran on.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Sequence

from lightning.pytorch.callbacks import Callback
from torch import nn

from eegfm_bench.data.tasks import task_name
from eegfm_bench.interpret.probes import DEFAULT_POOLINGS, check_pooling, run_fold_probes
from eegfm_bench.reports.probes import write_report
from eegfm_bench.trainer import best_fitted


def single_device(trainer) -> dict:
    """A one-device ``trainer:`` section on the device (and precision) ``trainer`` ran on."""
    dev = trainer.strategy.root_device
    return {"accelerator": "cuda" if dev.type == "cuda" else "cpu",
            "devices": [dev.index or 0] if dev.type == "cuda" else 1, "precision": trainer.precision}


class BlockProbe(Callback):
    """Lightning callback: block-wise probes of the backbone before and after ``fit`` (App. I.5).

    After ``fit`` (on the best checkpoint when a ``ModelCheckpoint`` recorded one, else on the final weights),
    block outputs of every window of the DataModule's :class:`WindowSet` are cached (once per weights hash)
    for the backbone as it was before fitting (``stage = frozen``) and, unless the regime is ``head_only``
    (identical weights), as fine-tuned; one probe per block and pooling is fitted on the DataModule's fold
    (train / val / test subjects) and the rows, table and curves are written to ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Where ``results.csv``, ``probes.md``, ``probe_table.csv`` and ``probe_curves.png`` go.
    poolings : sequence of str
        Names of :func:`eegfm_bench.models.heads.token_poolings` (default ``mean`` and ``flatten``).
    experiment : str
        The ``experiment`` column of the rows.
    cache_dir : path, optional
        Block-cache root (default ``$EEGFM_CACHE``).
    include_frozen : bool
        Also probe the backbone as it was before fitting.
    batch_size : int
        Windows per backbone forward while caching.
    probe_kwargs : dict, optional
        Passed to :func:`fit_probe` (``max_epochs``, ``patience``, ``lr``, ``batch_size``).

    Notes
    -----
    The model must be an :class:`~eegfm_bench.models.module.FMClassifier` (``backbone``, ``regime``, ``init``)
    and the DataModule an :class:`~eegfm_bench.data.datamodule.EEGDataModule` (``ws``, ``fold``, indices).
    """

    def __init__(self, out_dir: str | Path, poolings: Sequence[str] = DEFAULT_POOLINGS, experiment: str = "probe",
                 cache_dir: str | Path | None = None, include_frozen: bool = True, batch_size: int = 16,
                 probe_kwargs: dict | None = None):
        super().__init__()
        self.out_dir = Path(out_dir)
        self.poolings = [check_pooling(p) for p in poolings]
        self.experiment = experiment
        self.cache_dir = cache_dir
        self.include_frozen = include_frozen
        self.batch_size = batch_size
        self.probe_kwargs = dict(probe_kwargs or {})
        self._frozen_backbone: nn.Module | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.include_frozen:
            self._frozen_backbone = copy.deepcopy(pl_module.backbone).cpu().eval()

    def on_fit_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:  # the analysis runs once, on rank 0, in a one-device Trainer
            return
        dm = trainer.datamodule
        model, best = best_fitted(trainer, pl_module)
        run_fold_probes(model, dm.ws, dm.train_idx, dm.val_idx, dm.test_idx, fold=int(dm.fold),
                        out_dir=self.out_dir, experiment=self.experiment, task=_task_of(dm),
                        model_name=str(pl_module.hparams.backbone), source_head=str(pl_module.hparams.head),
                        frozen_backbone=self._frozen_backbone if self.include_frozen else None,
                        poolings=self.poolings, cache_dir=self.cache_dir, batch_size=self.batch_size,
                        probe_kwargs=self.probe_kwargs, checkpoint=str(best), trainer=single_device(trainer))
        write_report(self.out_dir, chance=1.0 / len(dm.ws.class_names), title=f"{self.experiment}: block-wise probes")


def _task_of(dm) -> str:
    """The task name of a datamodule's windows (the name the rows are written under)."""
    return dm.ws.meta.get("task") or task_name(dm.hparams.task)
