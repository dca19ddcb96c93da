"""``TestSweep``: turns each condition of a sweep's test loop into results as soon as its dataloader ends.

Attached to ``trainer.test(SweepModule, dataloaders=[one per condition])`` (:mod:`eegfm_bench.perturb.evaluate`).
When the loop moves to the next dataloader (and at the end of the epoch) the callback collects the finished
condition's per-window probabilities from the module, gathers them from every rank, keeps each window once (the
``DistributedSampler``'s padding removed by window index), computes balanced accuracy, AUROC and Cohen's kappa
with scikit-learn, logs them to the Trainer's loggers (``sweep/<model>/<condition>/<metric>``) and hands one
:class:`~eegfm_bench.perturb.evaluate.ConditionResult` per model to ``sink`` — on rank 0 only, so rows,
predictions and reports are written once. A condition is therefore on disk before the next one starts: a crash
later in the loop loses none of the conditions already done.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from lightning.pytorch.callbacks import Callback

from eegfm_bench.distributed import gather_objects, is_global_zero, merge_by_index
from eegfm_bench.perturb.evaluate import ConditionResult, probability_metrics


class TestSweep(Callback):
    """Per-condition gathering, metrics, tracker logging and rank-0 hand-off of a sweep's test loop.

    Parameters
    ----------
    y : ndarray of int, shape (n_windows_in_set,)
        True labels indexed by WindowSet row (the batches' ``index``).
    sink : callable, optional
        ``sink(list[ConditionResult])``, called on rank 0 once per condition, in loop order.
    labels : mapping str -> str, optional
        Model key → name used in the logged metric keys (default: the key).
    sink_on_all_ranks : bool
        Call ``sink`` on every rank (it then decides itself what rank 0 writes).

    Attributes
    ----------
    results : list of ConditionResult
        Every result so far (on every rank).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, y: np.ndarray, sink: Callable[[list], None] | None = None,
                 labels: Mapping[str, str] | None = None, sink_on_all_ranks: bool = False):
        super().__init__()
        self.sink_on_all_ranks = bool(sink_on_all_ranks)
        self.y = np.asarray(y)
        self.sink = sink
        self.labels = dict(labels or {})
        self.results: list = []
        self._current: int | None = None
        self._done: set[int] = set()

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._current, self._done = None, set()

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx: int = 0) -> None:
        if self._current is not None and dataloader_idx != self._current and self._current not in self._done:
            self._finish(trainer, pl_module, self._current)
        self._current = dataloader_idx

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx: int = 0) -> None:
        n = trainer.num_test_batches
        n = n[dataloader_idx] if isinstance(n, (list, tuple)) else n
        if batch_idx + 1 >= n:  # the condition's last batch (every rank has as many: the sampler pads)
            self._finish(trainer, pl_module, dataloader_idx)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        for i in range(len(pl_module.conditions)):  # the last one, and any whose loader held no batch on this rank
            if i not in self._done:
                self._finish(trainer, pl_module, i)

    def _finish(self, trainer, pl_module, i: int) -> None:
        self._done.add(i)
        cond = pl_module.conditions[i]
        local, failed = pl_module.take(i)
        parts = gather_objects({"out": local, "failed": failed})
        failed_all: dict[str, tuple[str, str]] = {}
        for p in parts:
            failed_all.update(p["failed"])
        out: list = []
        for k in cond.keys:
            name = cond.condition.name
            if k in failed_all:
                err, tb = failed_all[k]
                out.append(ConditionResult(name, "failed", model=k, details=cond.details, error=err, traceback=tb))
                continue
            merged = merge_by_index([p["out"][k] for p in parts if k in p["out"]])
            if not merged:
                out.append(ConditionResult(name, "failed", model=k, details=cond.details,
                                           error="RuntimeError: the test loop predicted no window"))
                continue
            probs = merged["probs"]
            out.append(ConditionResult(name, "ok", model=k, metrics=probability_metrics(self.y[merged["index"]], probs),
                                       probs=probs, index=merged["index"], details=cond.details))
        self.results += out
        if is_global_zero():
            for lg in trainer.loggers:
                lg.log_metrics({f"sweep/{self.labels.get(r.model, r.model)}/{r.condition}/{m}": v
                                for r in out if r.status == "ok" for m, v in r.metrics.items()}, step=i)
        if self.sink is not None and (self.sink_on_all_ranks or is_global_zero()):
            self.sink(out)


__all__ = ["TestSweep"]
