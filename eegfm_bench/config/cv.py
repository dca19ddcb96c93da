"""The cv command's config (``eegfm-bench cv``; :func:`eegfm_bench.runs.cv.cells.load_config` loads and checks it).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

import json
from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, Optional, Union

from eegfm_bench.config import INTRA_OP_THREADS, ConfigRecord, command_parser
from eegfm_bench.config.confound import ConfoundConfig
from eegfm_bench.config.launch import LauncherConfig


@dataclass(frozen=True)
class DataConfig(ConfigRecord):
    """Which windows and how they are batched.

    Args:
        data_root: folder holding the staged datasets (default ``$EEGFM_DATA`` or MNE's data folder).
        cache_dir: window / feature cache root (default ``$EEGFM_CACHE`` or ``~/.cache/eegfm_bench``).
        subjects: subset of subjects (default: every subject present).
        max_windows_per_subject: keep the first N windows per subject and class (tiny runs).
        batch_size: windows per batch (per device under DDP), or ``auto``: Lightning's batch-size finder
            (:func:`find_batch_size`) once per run × head on its first fold, capped by that fold's training windows
            and ``max_batch_size``; the size it chose is in every row of the cell (metric ``batch_size``).
        max_batch_size: the cap of ``batch_size: auto``.
        num_workers: DataLoader worker processes.
        band: restrict every model's band-pass to ``[lo, hi]`` Hz (``l_freq = max(model's, lo)``, ``h_freq =
            min(model's, hi)``; the confound check's ``band`` variation).
        window_shorten_s: windows this many seconds shorter than the length the model and the task give (the task's
            ``window_s`` where it declares one, else the model's; applied after it:
            :func:`~eegfm_bench.data.windows.resolve_preprocessing`). The confound check's ``offset`` variation sets
            it to ``offset_s`` and starts the windows as much later, so they keep their end.
        n_jobs: recordings read and preprocessed at once when the windows are built, each in its own process with
            one BLAS / OpenMP thread (joblib, loky): ``null`` or ``-1`` for every core the job may run on (what the
            launcher or SLURM gives it), or a whole number. The windows, their order and the ingest report do not
            depend on it (:func:`~eegfm_bench.data.windows.load_windows`).
        feature_dtype: storage dtype of the frozen backbone's cached tokens (head-only cells, LP-FT's probing
            stage, the ``features`` stage): ``float32``, or ``float16`` for half the feature cache's disk; the head
            reads them cast back to float32. Part of the feature cache key (a float16 entry is never read as a
            float32 one) and, when not ``float32``, of those cells' config hash; tokens beyond float16's range
            (65504) are refused. Its measured effect on a head-only result: ``docs/guide/scaling.md``.
    """

    data_root: Optional[str] = None
    cache_dir: Optional[str] = None
    subjects: Optional[list[Union[int, str]]] = None
    max_windows_per_subject: Optional[int] = None
    batch_size: Union[int, Literal["auto"]] = 64
    max_batch_size: int = 4096
    num_workers: int = 0
    band: Optional[list[float]] = None
    window_shorten_s: float = 0.0
    n_jobs: Optional[int] = None
    feature_dtype: Literal["float32", "float16"] = "float32"


@dataclass(frozen=True)
class SplitConfig(ConfigRecord):
    """Subject-grouped folds (:mod:`eegfm_bench.data.splits`).

    Args:
        scheme: ``kfold`` (StratifiedGroupKFold) or ``loso``.
        k: folds of ``kfold``.
        seed: fold and validation-draw seed.
        n_val_groups: validation subjects drawn from each fold's training subjects.
        group_by: ``subject``, or ``recording`` for recording-level folds (rows then say ``fold_unit=recording``).
        folds: subset of folds to run (default: all).
    """

    scheme: Literal["kfold", "loso"] = "kfold"
    k: int = 5
    seed: int = 0
    n_val_groups: int = 1
    group_by: Literal["subject", "recording"] = "subject"
    folds: Optional[list[int]] = None


@dataclass(frozen=True)
class OptimConfig(ConfigRecord):
    """AdamW with linear warm-up then cosine decay (per step).

    Args:
        lr: learning rate.
        weight_decay: AdamW weight decay.
        warmup_epochs: warm-up length in epochs.
    """

    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_epochs: float = 1.0


@dataclass(frozen=True)
class RunConfig(ConfigRecord):
    """One model × regime with its heads.

    Args:
        model: registered backbone (``eegfm-bench models``).
        regime: ``head_only`` (linear probing), ``lora`` or ``full`` fine-tuning, or LP-FT: ``lp_ft`` / ``lp_lora``
            (the head is first trained on the frozen backbone's tokens, its best-validation weights start the full /
            LoRA fine-tuning).
        heads: registered heads (``eegfm-bench models`` lists them, plug-ins included: ``mean``, ``flatten``, …), or
            ``ridge`` (``head_only`` only): a closed-form ridge probe on the flattened cached tokens, alpha chosen on the
            validation subjects (:mod:`eegfm_bench.models.ridge`), stored as a flatten head's weights.
        lp_ft: LP-FT settings: ``lp_max_epochs`` (stage 1; default ``trainer.max_epochs``).
        pretrained: hub id or local checkpoint folder (``null``: random init, ``init=random`` in every row).
        init_seed: seed of the architecture's initialisation (default: the config's ``seed``).
        backbone_kwargs: architecture overrides passed to the braindecode constructor.
        head_kwargs: head overrides.
        lora: peft settings (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``, ``method``, ``use_dora``).
        optim: this run's overrides of ``optim``.
        trainer: this run's overrides of ``trainer``.
    """

    model: str
    regime: Literal["head_only", "lora", "full", "lp_ft", "lp_lora"] = "full"
    heads: list[str] = field(default_factory=lambda: ["flatten"])
    pretrained: Optional[str] = None
    init_seed: Optional[int] = None
    backbone_kwargs: Optional[dict[str, Any]] = None
    head_kwargs: Optional[dict[str, Any]] = None
    lora: Optional[dict[str, Any]] = None
    optim: Optional[dict[str, Any]] = None
    trainer: Optional[dict[str, Any]] = None
    lp_ft: Optional[dict[str, Any]] = None


@dataclass(frozen=True)
class CVConfig(ConfigRecord):
    """``eegfm-bench cv``: cross-validate models × heads × regimes on one task.

    :func:`~eegfm_bench.runs.cv.cells.load_config` resolves ``task`` once: ``cfg.resolved_task`` is its
    :class:`~eegfm_bench.data.ingest.DeclaredTask` (what every cell, window and confound step reads; not a key of the
    config, neither saved nor hashed: ``to_dict`` and the config hashes see ``task`` as written; ``None`` on a
    config read back without the loader, :func:`~eegfm_bench.config.read_saved`). It resolves each run's window
    preprocessing once as well: ``cfg.resolved_preprocessing`` (:class:`ResolvedPreprocessing`).

    Parameters
    ----------
    experiment
        name recorded in every row.
    task
        a registered task (``eegfm-bench tasks``), a task YAML file, or a task mapping
        (``{preset: tuab, root: /data/tuab}``, or a full declaration: see ``eegfm_bench.data.spec``).
    out_dir
        where rows, splits, checkpoints, predictions and logs go.
    seed
        training seed (fold ``k`` trains with ``seed + k``).
    data
        windows and batches.
    split
        folds.
    optim
        optimiser.
    runs
        the models to cross-validate.
    launcher
        where the cells run (``none``: this process; ``local`` workers; ``slurm``), see
        :mod:`eegfm_bench.runs.launch.launcher`. Not part of any config hash.
    user_models
        encoders outside this package, by import path, with the declaration the adapter contract
        needs (:class:`~eegfm_bench.config.user_model.UserModelConfig`); runs name them like built-in backbones.
    confound
        the confound check (:mod:`eegfm_bench.runs.cv.confound`), on by default for every event-locked task:
        every cell again with windows starting 1 s after the cue and in the 4-40 Hz band (the
        task's default variations), beside the headline with a verdict; ``confound: off`` turns it off.
    intra_op_threads
        torch intra-op threads of every cell (:func:`~eegfm_bench.trainer.fixed_numerics`), whatever runs it:
        the sequential loop, a local worker, a SLURM job, a resumed cell or a DDP rank. Float sums split over
        another number of threads round differently (1e-7 to 1e-6 on a probability: enough to move a window near
        0.5 to the other class), so the count is fixed by the config, recorded in every row (``intra_op_threads``)
        and, when it is not the default (2, the same on every machine), part of the config hash. Raise it on a node
        with more cores for speed (local workers then share the cores: ``launcher.workers`` × it threads).
    compile
        ``torch.compile`` each cell's model before fit and test: ``true`` (defaults) or the keyword
        arguments (``{mode: max-autotune}``, ``{backend: eager}``); ``null``: off. Not part of the config
        hash (a compiled graph computes the same function; kernels may round differently).
    trainer
        every ``lightning.Trainer`` argument plus ``patience`` and ``loggers``
        (:func:`~eegfm_bench.config.add_trainer_arguments`).
    """

    experiment: str = "experiment"
    task: Union[str, dict[str, Any]] = "eegmmidb_mi"
    out_dir: str = "results/experiment"
    seed: int = 0
    intra_op_threads: int = INTRA_OP_THREADS
    data: DataConfig = field(default_factory=DataConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    runs: list[RunConfig] = field(default_factory=list)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    compile: Optional[Union[bool, dict[str, Any]]] = None
    user_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    confound: Union[ConfoundConfig, bool] = field(default_factory=ConfoundConfig)
    trainer: dict[str, Any] = field(default_factory=dict)
    resolved_task: InitVar[Any] = None  # a DeclaredTask (data.ingest imports MNE: not imported here)
    resolved_preprocessing: InitVar[Any] = None  # a ResolvedPreprocessing (below), set by the loader

    def __post_init__(self, resolved_task, resolved_preprocessing):  # init-only: kept by `replace`, not fields
        object.__setattr__(self, "resolved_task", resolved_task)
        if resolved_preprocessing is not None and (resolved_preprocessing.inputs != preprocessing_inputs(self) or
                                                   not {r.model for r in self.runs} <= set(resolved_preprocessing.by_model)):
            resolved_preprocessing = None  # resolved for another task, band, shortening or runs: never read stale
        object.__setattr__(self, "resolved_preprocessing", resolved_preprocessing)


@dataclass(frozen=True)
class ResolvedPreprocessing:
    """The effective window preprocessing of every model a cv runs, resolved once by
    :func:`~eegfm_bench.runs.cv.cells.load_config` (:func:`~eegfm_bench.data.windows.resolve_preprocessing`: the
    model's declared preprocessing, then the task's ``window_s`` / ``reference``, then ``data.band`` /
    ``data.window_shorten_s``) and carried on :class:`CVConfig` as ``cfg.resolved_preprocessing``.

    Not a key of the config (neither saved nor hashed: the window cache key holds what it resolved to). A config
    made from a loaded one by :func:`dataclasses.replace` keeps it only while :attr:`inputs` still match
    (:func:`preprocessing_inputs`) and its runs name no model beyond :attr:`by_model`; otherwise it carries ``None`` and
    :func:`~eegfm_bench.runs.cv.cells.model_preprocessing` refuses it, naming the fix, instead of reading
    preprocessing resolved for another task, user model, band, shortening or set of runs.

    Attributes
    ----------
    inputs : tuple
        What it was resolved from (:func:`preprocessing_inputs`: the task, the user models, ``data.band``,
        ``data.window_shorten_s``).
    by_model : dict[str, WindowPreprocessing]
        Model name -> its :class:`~eegfm_bench.data.windows.WindowPreprocessing`.
    """

    inputs: tuple
    by_model: dict[str, Any]


def preprocessing_inputs(cfg: CVConfig) -> tuple:
    """What a cv's effective preprocessing depends on beyond each model's declaration: ``(task as written, resolved
    task key, user models as declared, data.band as a tuple of Hz or None, data.window_shorten_s in s)``; ``None`` for the
    task key of a config read without the loader (no ``resolved_task``). The task and the user models as written
    enter as canonical JSON text: a ``replace`` of either (which also leaves ``resolved_task`` resolved for the old
    one) drops the carried preprocessing."""
    task = getattr(cfg, "resolved_task", None)
    band = cfg.data.band
    return (json.dumps(cfg.task, sort_keys=True, default=str), task.key if task is not None else None,
            json.dumps(cfg.user_models, sort_keys=True, default=str), tuple(float(b) for b in band) if band else None,
            float(cfg.data.window_shorten_s))


def cv_parser(saved: bool = False):
    """The ``eegfm-bench cv`` parser (``--config`` files, dotted overrides, every Trainer argument).

    ``saved=True``: the parser of a config the command saved beside its results, for
    :func:`~eegfm_bench.config.read_saved` (``status``, ``report``): its ``trainer:`` section is read as the mapping
    the file holds (every key already there), without importing Lightning to list and type the Trainer's arguments.
    """
    return command_parser("eegfm-bench cv", CVConfig, description=CVConfig.__doc__, trainer=not saved)
