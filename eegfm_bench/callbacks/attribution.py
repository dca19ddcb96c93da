"""``Attribution``: attribution maps of the fold's test windows after ``fit`` as a Lightning callback (App. I.1, I.2).

The analysis runs once (rank 0) when fit ends, on the best checkpoint, in one-device ``Trainer.predict`` passes on
the device the fit ran on (:func:`eegfm_bench.interpret.attribution.explain_fold`).
"""
from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import numpy as np
from lightning.pytorch.callbacks import Callback

from eegfm_bench.data.tasks import task_name
from eegfm_bench.callbacks.probes import single_device
from eegfm_bench.interpret.attribution import NoWindowsSelectedError, fold_rows, cond_dir, explain_fold, resolve_method
from eegfm_bench.interpret.config import InterpretConfigError
from eegfm_bench.config.interpret import AttributionConfig
from eegfm_bench.reports.attribution import method_label, write_cell_maps
from eegfm_bench.results import ResultStore, code_version, config_hash
from eegfm_bench.trainer import best_fitted

log = logging.getLogger(__name__)


class Attribution(Callback):
    """Lightning callback: attribution maps of the fold's test windows after ``fit`` (App. I.1, I.2).

    Uses the best checkpoint when a ``ModelCheckpoint`` recorded one (else the final weights), the
    DataModule's test windows (:class:`~eegfm_bench.data.datamodule.EEGDataModule`), and writes per-fold
    npz files, result rows and, after each fold, the fold-averaged topomaps of every fold present in
    ``out_dir`` (same layout as :func:`run_attribution`, cell ``<backbone>-<regime>-<head>``).

    Parameters
    ----------
    out_dir : path
    methods : sequence of {"gxi", "attnlrp", "gradcam"}
    conditions : sequence of str
        Condition strings (App. I.2), ``clean`` by default.
    experiment : str
    **settings
        Any field of the config's ``attribution`` section
        (:class:`~eegfm_bench.config.interpret.AttributionConfig`: ``percentile``, ``max_windows_per_fold``,
        ``lrp_fallback``, ``attention_rule``, ``epsilon``, ``conservation_windows``, ...).

    Raises
    ------
    InterpretConfigError
        A setting that is not a field of the ``attribution`` section (naming the valid ones).
    """

    def __init__(self, out_dir: str | Path, methods: Sequence[str] = ("gxi", "attnlrp"),
                 conditions: Sequence[str] = ("clean",), experiment: str = "attribution", **settings):
        super().__init__()
        valid = {f.name for f in fields(AttributionConfig)}
        bad = set(settings) - valid
        if bad:
            raise InterpretConfigError(f"Attribution: unknown settings {sorted(bad)}; valid: {sorted(valid)}; fix: "
                                       "correct or remove them")
        self.out_dir = Path(out_dir)
        self.acfg = AttributionConfig(**{**settings, "methods": list(methods), "conditions": list(conditions)})
        self.experiment = experiment

    def on_fit_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:  # the analysis runs once, on rank 0, in a one-device Trainer
            return
        dm = trainer.datamodule
        clf, best = best_fitted(trainer, pl_module)
        clf = clf.cpu().eval()
        hp = pl_module.hparams
        cell = f"{hp.backbone}-{hp.regime}-{hp.head}"
        for m in self.acfg.methods:
            resolve_method(m, hp.backbone, self.acfg.lrp_fallback)
        store = ResultStore(self.out_dir)
        for condition in self.acfg.conditions:
            try:
                res = explain_fold(clf, dm.ws, dm.test_idx, condition=condition, acfg=self.acfg,
                                   trainer=single_device(trainer))
            except NoWindowsSelectedError as err:
                log.warning("%s fold %s %s: %s", cell, dm.fold, condition, err)
                continue
            base = {"experiment": self.experiment, "task": _task_of(dm), "model": hp.backbone,
                    "init": str(pl_module.init), "regime": hp.regime, "head": hp.head, "fold": int(dm.fold),
                    "seed": 0, "condition": condition,
                    "n_subjects": int(np.unique(np.asarray(dm.ws.subject)[dm.test_idx]).size), "fold_unit": "subject",
                    "config_hash": config_hash(self.acfg.to_dict()), "code_version": code_version(),
                    "checkpoint": str(best)}
            rows = []
            for method, fm in res.items():
                fm.save(self.out_dir / cell / cond_dir(condition) / method / f"fold{int(dm.fold)}.npz")
                rows += fold_rows(base, fm)
                write_cell_maps(self.out_dir / cell, method, condition, dm.ws.class_names,
                                f"{cell}, {condition}: {method_label(method, hp.backbone)}")
            store.append(rows)


def _task_of(dm) -> str:
    """The task name of a datamodule's windows (the name the rows are written under)."""
    return dm.ws.meta.get("task") or task_name(dm.hparams.task)
