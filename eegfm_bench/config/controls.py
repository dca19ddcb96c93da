"""The negative-control protocol's config (``eegfm-bench controls``; paper 001; :mod:`eegfm_bench.runs.controls.command`).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, Optional, Union

from eegfm_bench.config import ConfigRecord, command_parser
from eegfm_bench.config.launch import LauncherConfig


@dataclass(frozen=True)
class ControlsData(ConfigRecord):
    """Windows of the task (``subjects`` / ``max_windows_per_subject`` come from the cv run when ``cv_out_dir`` is set).

    Args:
        data_root: staged data folder.
        cache_dir: window / feature cache root.
        subjects: subset of subjects.
        max_windows_per_subject: first N windows per subject and class.
        batch_size: windows per backbone forward.
    """

    data_root: Optional[str] = None
    cache_dir: Optional[str] = None
    subjects: Optional[list[Union[int, str]]] = None
    max_windows_per_subject: Optional[int] = None
    batch_size: int = 64


@dataclass(frozen=True)
class ControlsFeatures(ConfigRecord):
    """Handcrafted comparators (§3.3-3.4).

    Args:
        families: ``simple`` (9·N+2) and / or ``enhanced`` (15·N+6).
        preprocessing: null (paper 001 §3.3 defaults), a backbone name, or Preprocessing fields.
        welch_seconds: Welch segment length.
        study_summaries: add study-level summary features.
    """

    families: list[str] = field(default_factory=lambda: ["simple", "enhanced"])
    preprocessing: Optional[Union[str, dict[str, Any]]] = None
    welch_seconds: float = 2.0
    study_summaries: bool = True


@dataclass(frozen=True)
class ControlsProbe(ConfigRecord):
    """The frozen probe (§3.5).

    Args:
        kind: ``logreg``, ``lda`` or ``svm_rbf``.
        C: regularisation (null: the probe's default).
        pca: in-fold PCA components (null: none).
        svm_probability: ``libsvm`` (the paper's ``SVC(probability=True)``) or ``calibrated``
            (``CalibratedClassifierCV``); only for ``kind: svm_rbf``.
        overrides: per-representation changes, keyed ``handcrafted``, ``frozen`` (the encoders' frozen
            embeddings) or ``adapted`` (Control 4's probe refitted on an adapted encoder), e.g.
            ``{frozen: {pca: 50}}`` for the paper's pipelines, where PCA precedes the probe only for encoder
            embeddings (paper 001 §3.5). Keys: ``kind``, ``C``, ``pca``, ``svm_probability``.
    """

    kind: str = "logreg"
    C: Optional[float] = None
    pca: Optional[int] = None
    svm_probability: Literal["libsvm", "calibrated"] = "libsvm"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlsModel(ConfigRecord):
    """One encoder's frozen embeddings (configured checkpoint and matched random inits, Control 2).

    Args:
        model: registered backbone.
        pretrained: hub id or local checkpoint (null: random init only).
        init_seeds: seeds of the matched fully random initialisations.
        pooling: a parameter-free pooling over tokens (a head whose ``token_pooling`` is set: ``mean``, ``flatten``,
            … ; ``eegfm-bench models`` lists them).
        backbone_kwargs: architecture overrides.
    """

    model: str
    pretrained: Optional[str] = None
    init_seeds: list[int] = field(default_factory=lambda: [0])
    pooling: str = "mean"
    backbone_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlsPermutation(ConfigRecord):
    """Label permutation (Control 3, §4.2.3).

    Args:
        n: permutations.
        scheme: ``auto`` or a permutation scheme.
        seed: seed.
        families: ``strongest``, ``all`` or ``none`` (handcrafted families permuted).
        statistic: ``mean_fold`` (the mean of per-fold values, the paper's) or ``pooled`` (the pooled out-of-fold
            value). Draws a fold cannot be scored on are redrawn and counted (``controls.permutation``).
    """

    n: int = 100
    scheme: str = "auto"
    seed: int = 0
    families: str = "strongest"
    statistic: Literal["mean_fold", "pooled"] = "mean_fold"


@dataclass(frozen=True)
class ControlsBootstrap(ConfigRecord):
    """Subject-cluster bootstrap (§4.6).

    Args:
        n_boot: resamples.
        level: interval level.
        seed: seed.
    """

    n_boot: int = 2000
    level: float = 0.95
    seed: int = 0


@dataclass(frozen=True)
class ControlsScrambled(ConfigRecord):
    """Scrambled-label adaptation (Control 4, §4.2.4); unset keys come from the matching cv run.

    Args:
        model: registered backbone.
        regime: ``lora`` or ``full``.
        head: pooling head.
        seeds: training seeds (null: [0], or the cv run's with ``correct: cv``).
        scheme: permutation scheme (``auto``).
        perm_seed: seed of the label permutation.
        correct: ``auto`` (= ``rerun``) trains both arms here on one fixed schedule (``trainer.max_epochs`` epochs, no
            early stopping, the last weights); ``cv`` reuses the cv run's checkpoint as the correct-label arm and
            trains the scrambled arm with the cv's early-stopping recipe (an unmatched schedule, reported as such).
        pooling: how the adapted encoder's tokens are pooled for the refitted frozen probe (a parameter-free
            pooling: ``eegfm-bench models`` lists them).
        trainer: trainer overrides.
        optim: optimiser overrides.
        backbone_kwargs: architecture overrides.
        head_kwargs: head overrides.
        lora: peft settings.
        pretrained: checkpoint.
    """

    model: str
    regime: str = "lora"
    head: str = "flatten"
    seeds: Optional[list[int]] = None
    scheme: str = "auto"
    perm_seed: int = 0
    correct: str = "auto"
    pooling: str = "mean"
    trainer: Optional[dict[str, Any]] = None
    optim: Optional[dict[str, Any]] = None
    backbone_kwargs: Optional[dict[str, Any]] = None
    head_kwargs: Optional[dict[str, Any]] = None
    lora: Optional[dict[str, Any]] = None
    pretrained: Optional[str] = None

    @property
    def seed_list(self) -> list[int]:
        """The training seeds: ``seeds``, or ``[0]`` when unset (``correct: cv`` takes the cv run's instead)."""
        return [int(x) for x in self.seeds or [0]]

    @property
    def seeds_given(self) -> bool:
        """Whether the config set ``seeds`` (``correct: cv`` refuses seeds other than the cv run's)."""
        return self.seeds is not None

    def overrides(self) -> list[str]:
        """The optional keys this entry sets (:data:`SCRAMBLED_OPTIONAL`; the unset ones come from the cv run)."""
        return [k for k in SCRAMBLED_OPTIONAL if getattr(self, k) is not None]

    def hashed(self) -> dict:
        """The entry as its fits' config hashes read it: the unset optional keys left out and ``seeds`` resolved
        (the mapping hashed before configs were typed, so the hashes are unchanged)."""
        d = {k: v for k, v in self.to_dict().items() if not (k in SCRAMBLED_OPTIONAL and v is None)}
        return {**d, "seeds": self.seed_list}


@dataclass(frozen=True)
class ControlsIdentity(ConfigRecord):
    """Dataset-identity probe (§4.4, Table 7).

    Args:
        tasks: two tasks of two datasets.
        family: handcrafted family.
        n_folds: folds.
        pca_k: in-fold PCA components.
        n_permutations: permuted-label null size.
        n_balanced: balanced subsamples.
        C: logistic regularisation.
        seed: seed.
        subjects: per-task subject subsets.
        max_windows_per_subject: per subject cap.
        group_by: ``subject`` (default: every recording of a subject in one fold; the null permutes subjects) or
            ``recording`` (recording-level folds, labelled so in the report).
    """

    tasks: Optional[list[Union[str, dict[str, Any]]]] = None
    family: str = "simple"
    n_folds: int = 5
    pca_k: int = 50
    n_permutations: int = 20
    n_balanced: int = 10
    C: float = 1.0
    seed: int = 0
    subjects: Optional[dict[str, Any]] = None
    max_windows_per_subject: Optional[int] = None
    group_by: Literal["subject", "recording"] = "subject"


@dataclass(frozen=True)
class ControlsGates(ConfigRecord):
    """The four gates (§3.6, §5.5).

    Args:
        alpha: level of the tests.
    """

    alpha: float = 0.05


@dataclass(frozen=True)
class ControlsSplit(ConfigRecord):
    """Folds (ignored with ``cv_out_dir``: the cv run's are used).

    Args:
        scheme: ``kfold`` or ``loso``.
        k: folds.
        seed: seed.
        n_val_groups: validation subjects.
        group_by: ``subject`` or ``recording``.
        folds: subset of folds.
    """

    scheme: str = "kfold"
    k: int = 5
    seed: int = 0
    n_val_groups: int = 1
    group_by: str = "subject"
    folds: Optional[list[int]] = None


@dataclass(frozen=True)
class ControlsConfig(ConfigRecord):
    """``eegfm-bench controls``: the negative-control suite of paper 001 on one task.

    :func:`~eegfm_bench.runs.controls.config.load_config` resolves the tasks once: ``cfg.resolved_task`` is
    ``task``'s :class:`~eegfm_bench.data.ingest.DeclaredTask` and ``cfg.resolved_identity`` the identity probe's two
    (``None`` without one); neither is a key of the config, saved or hashed (``None`` on a config read back with
    :func:`~eegfm_bench.config.read_saved`).

    Args:
        experiment: name in the rows.
        task: registered task (required).
        out_dir: where rows, reports and caches go (required).
        seed: seed.
        cv_out_dir: a cv run's out_dir (its splits, data settings and predictions are used).
        data: windows.
        split: folds.
        features: handcrafted comparators.
        probe: the frozen probe.
        metric: ``auroc`` or ``balanced_accuracy`` (the gates' metric).
        aggregate: ``auto``, ``subject``, ``recording`` or ``none`` (unit-level estimates).
        models: frozen encoders.
        cv_claims: ``auto``, ``[]`` or a list of {model, regime, head}.
        permutation: Control 3.
        bootstrap: paired uncertainty.
        scrambled: Control 4 entries.
        identity: the dataset-identity probe (null: skip).
        gates: gate settings.
        launcher: where the scrambled-label adaptations run (one job per arm × seed × fold; ``none``: this
            process), see :mod:`eegfm_bench.runs.launch.launcher`; the other steps run in the launching process.
        user_models: encoders by import path (:mod:`eegfm_bench.models.user`, as in a cv config); those of the
            ``cv_out_dir`` run are inherited. A user model's weights come from its declaration: its ``models``
            entry gets the declared weights as its pretrained arm and ``init_seeds`` random inits built without
            them.
        trainer: the frozen embeddings' ``Trainer.predict`` passes (every ``lightning.Trainer`` argument, see
            :func:`~eegfm_bench.config.add_trainer_arguments`).
    """

    experiment: str = "controls"
    task: Optional[Union[str, dict[str, Any]]] = None
    out_dir: Optional[str] = None
    seed: int = 0
    cv_out_dir: Optional[str] = None
    data: ControlsData = field(default_factory=ControlsData)
    split: ControlsSplit = field(default_factory=ControlsSplit)
    features: ControlsFeatures = field(default_factory=ControlsFeatures)
    probe: ControlsProbe = field(default_factory=ControlsProbe)
    metric: str = "auroc"
    aggregate: str = "auto"
    models: list[ControlsModel] = field(default_factory=list)
    cv_claims: Optional[Union[str, list[dict[str, str]]]] = "auto"
    permutation: ControlsPermutation = field(default_factory=ControlsPermutation)
    bootstrap: ControlsBootstrap = field(default_factory=ControlsBootstrap)
    scrambled: list[ControlsScrambled] = field(default_factory=list)
    identity: Optional[ControlsIdentity] = None
    gates: ControlsGates = field(default_factory=ControlsGates)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    user_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    resolved_task: InitVar[Any] = None  # DeclaredTask objects (data.ingest imports MNE: not imported here)
    resolved_identity: InitVar[Any] = None

    def __post_init__(self, resolved_task, resolved_identity):  # init-only: kept by `replace`, not fields
        object.__setattr__(self, "resolved_task", resolved_task)
        object.__setattr__(self, "resolved_identity", resolved_identity)


SCRAMBLED_OPTIONAL = ("trainer", "optim", "backbone_kwargs", "head_kwargs", "lora", "pretrained")
"""Scrambled-entry keys that, when unset (null), come from the matching cv run."""


def controls_parser(saved: bool = False):
    """The ``eegfm-bench controls`` parser (``--config`` files, dotted overrides, the Trainer arguments).

    ``saved=True``: the parser of a config the command saved beside its results, for
    :func:`~eegfm_bench.config.read_saved` (``status``, ``report``): its ``trainer:`` section is read as the mapping
    the file holds (every key already there), without importing Lightning to list and type the Trainer's arguments.
    """
    return command_parser("eegfm-bench controls", ControlsConfig, description=ControlsConfig.__doc__, training=False,
                          trainer=not saved)
