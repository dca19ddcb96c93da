"""The safe points of a ``Trainer.fit`` for a stop request (:mod:`eegfm_bench.interrupt`)."""
from __future__ import annotations

import lightning as L

from eegfm_bench.interrupt import check_stop


class StopAtSafePoint(L.Callback):
    """Raise a recorded stop request (SIGINT / SIGTERM) at the end of a training or validation batch, never while
    a checkpoint is written: Lightning's own interrupt handling then shuts the fit down (``trainer.interrupted``)
    with ``last.ckpt`` of the last finished epoch intact, from which a rerun resumes. Used with
    :func:`eegfm_bench.interrupt.deferred` around the fit, which keeps the signal from raising anywhere else."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        check_stop()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        check_stop()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        check_stop()


__all__ = ["StopAtSafePoint"]
