"""eegfm_bench: fine-tune and evaluate EEG foundation models the way the careful papers do.

The public Python API (every name in ``__all__``), for notebooks and scripts; the commands of ``eegfm-bench`` call
the same functions::

    import eegfm_bench as eb

    table = eb.run_cv("configs/experiment/quickstart.yaml")        # headline cells + the confound check
    eb.run_sweep("configs/experiment/sweep_quickstart.yaml")       # test-time perturbations (paper 003 App. D)
    eb.run_probes("configs/experiment/interpret_quickstart.yaml")   # block-wise probes (App. I.4)
    eb.run_attribution("configs/experiment/interpret_quickstart.yaml")  # G×I / AttnLRP / GradCAM maps
    eb.run_controls("configs/experiment/controls_eegmat.yaml")     # paper 001's negative controls
    eb.run_audit({"embeddings": "emb.npz", "out_dir": "audit"})    # paper 000's provenance audit
    ws = eb.load_windows("eegmat", eb.BACKBONES.get("eegnet").preprocessing)  # windows with their ingest report

Names are imported on first use (the package itself imports nothing heavy), so ``import eegfm_bench`` is fast and
``eegfm-bench --help`` starts at once. :data:`_API` (name -> module) is the one list of public names; the stub
``eegfm_bench/__init__.pyi`` gives IDEs and type checkers each name with its real import (written from
:data:`_API` by ``python scripts/write_api_stub.py``; a test checks the two agree).

Third-party deprecation warnings are hidden as the CLI hides them (:mod:`eegfm_bench.quiet`): a name is imported,
and a public function runs, inside :func:`~eegfm_bench.quiet.quiet_third_party_warnings`; the caller's warning
filters are untouched after it.
"""
from __future__ import annotations

import importlib
import inspect

from eegfm_bench.quiet import quiet, quiet_third_party_warnings

_API = {
    # commands
    "run_cv": "eegfm_bench.runs.cv.command", "run_cells": "eegfm_bench.runs.cv.loop", "run_check": "eegfm_bench.runs.cv.cells",
    "load_config": "eegfm_bench.runs.cv.cells", "CVConfig": "eegfm_bench.config.cv", "CVLoop": "eegfm_bench.runs.cv.loop",
    "train_cell": "eegfm_bench.runs.cv.loop", "evaluate_cell": "eegfm_bench.runs.cv.loop",
    "CellProgress": "eegfm_bench.runs.cv.progress", "run_confound": "eegfm_bench.runs.cv.confound",
    "run_sweep": "eegfm_bench.runs.sweep.command", "run_probes": "eegfm_bench.runs.interpret.probe",
    "run_attribution": "eegfm_bench.runs.interpret.attribute", "run_controls": "eegfm_bench.runs.controls.command",
    "run_audit": "eegfm_bench.runs.audit", "run_plan": "eegfm_bench.runs.plan.command", "run_report": "eegfm_bench.reports.page",
    # data
    "get_task": "eegfm_bench.data.tasks", "preset_names": "eegfm_bench.data.tasks",
    "load_windows": "eegfm_bench.data.windows", "WindowSet": "eegfm_bench.data.windows",
    "Preprocessing": "eegfm_bench.data.preprocessing", "EEGDataModule": "eegfm_bench.data.datamodule",
    "make_split": "eegfm_bench.data.splits", "SplitSpec": "eegfm_bench.data.splits",
    # models
    "BACKBONES": "eegfm_bench.models.backbones", "HEADS": "eegfm_bench.models.heads",
    "FMClassifier": "eegfm_bench.models.module", "register_user_models": "eegfm_bench.models.user",
    # analyses and statistics
    "paired_cluster_bootstrap": "eegfm_bench.stats", "wilcoxon_holm": "eegfm_bench.stats",
    "sign_flip_test": "eegfm_bench.stats", "evaluate_gates": "eegfm_bench.controls.gates",
    "ClaimEvidence": "eegfm_bench.controls.gates", "audit_embeddings": "eegfm_bench.provenance.audit",
    "ResultStore": "eegfm_bench.results", "build_trainer": "eegfm_bench.trainer",
    # errors
    "EEGFMError": "eegfm_bench.errors", "ConfigError": "eegfm_bench.config",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    """The public names, imported from their module on first use (PEP 562)."""
    if name in _API:
        with quiet_third_party_warnings():  # importing braindecode / Lightning warns about their own code
            value = getattr(importlib.import_module(_API[name]), name)
        if inspect.isfunction(value):
            value = quiet(value)
            value.__module__ = __name__  # pickled by reference as eegfm_bench.<name> (this very object)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'eegfm_bench' has no attribute {name!r}; the public API is eegfm_bench.__all__")


def __dir__() -> list[str]:
    """The public names and the module's dunders: not the helpers this file imports (``importlib``, ``quiet``)."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__")})
