"""Static view of :mod:`eegfm_bench`'s public API for IDEs and type checkers (the package imports these names
lazily at run time, through ``_API`` in ``__init__.py``). Written by ``python scripts/write_api_stub.py``; do not
edit by hand."""

from eegfm_bench.config import ConfigError as ConfigError
from eegfm_bench.config.cv import CVConfig as CVConfig
from eegfm_bench.controls.gates import ClaimEvidence as ClaimEvidence, evaluate_gates as evaluate_gates
from eegfm_bench.data.datamodule import EEGDataModule as EEGDataModule
from eegfm_bench.data.preprocessing import Preprocessing as Preprocessing
from eegfm_bench.data.splits import SplitSpec as SplitSpec, make_split as make_split
from eegfm_bench.data.tasks import get_task as get_task, preset_names as preset_names
from eegfm_bench.data.windows import WindowSet as WindowSet, load_windows as load_windows
from eegfm_bench.errors import EEGFMError as EEGFMError
from eegfm_bench.models.backbones import BACKBONES as BACKBONES
from eegfm_bench.models.heads import HEADS as HEADS
from eegfm_bench.models.module import FMClassifier as FMClassifier
from eegfm_bench.models.user import register_user_models as register_user_models
from eegfm_bench.provenance.audit import audit_embeddings as audit_embeddings
from eegfm_bench.reports.page import run_report as run_report
from eegfm_bench.results import ResultStore as ResultStore
from eegfm_bench.runs.audit import run_audit as run_audit
from eegfm_bench.runs.controls.command import run_controls as run_controls
from eegfm_bench.runs.cv.cells import load_config as load_config, run_check as run_check
from eegfm_bench.runs.cv.command import run_cv as run_cv
from eegfm_bench.runs.cv.confound import run_confound as run_confound
from eegfm_bench.runs.cv.loop import CVLoop as CVLoop, evaluate_cell as evaluate_cell, run_cells as run_cells, train_cell as train_cell
from eegfm_bench.runs.cv.progress import CellProgress as CellProgress
from eegfm_bench.runs.interpret.attribute import run_attribution as run_attribution
from eegfm_bench.runs.interpret.probe import run_probes as run_probes
from eegfm_bench.runs.plan.command import run_plan as run_plan
from eegfm_bench.runs.sweep.command import run_sweep as run_sweep
from eegfm_bench.stats import paired_cluster_bootstrap as paired_cluster_bootstrap, sign_flip_test as sign_flip_test, wilcoxon_holm as wilcoxon_holm
from eegfm_bench.trainer import build_trainer as build_trainer

__all__ = [
    "BACKBONES",
    "CVConfig",
    "CVLoop",
    "CellProgress",
    "ClaimEvidence",
    "ConfigError",
    "EEGDataModule",
    "EEGFMError",
    "FMClassifier",
    "HEADS",
    "Preprocessing",
    "ResultStore",
    "SplitSpec",
    "WindowSet",
    "audit_embeddings",
    "build_trainer",
    "evaluate_cell",
    "evaluate_gates",
    "get_task",
    "load_config",
    "load_windows",
    "make_split",
    "paired_cluster_bootstrap",
    "preset_names",
    "register_user_models",
    "run_attribution",
    "run_audit",
    "run_cells",
    "run_check",
    "run_confound",
    "run_controls",
    "run_cv",
    "run_plan",
    "run_probes",
    "run_report",
    "run_sweep",
    "sign_flip_test",
    "train_cell",
    "wilcoxon_holm",
]
