"""A paper file's schema (``configs/paper/<id>/paper.yaml``; :func:`eegfm_bench.runs.plan.paper.load_paper`).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, Optional, Union

from eegfm_bench.config import ConfigRecord
from eegfm_bench.config.audit import AuditConfig


@dataclass(frozen=True)
class PaperMember(ConfigRecord):
    """One command of a paper.

    Args:
        name: unique within the paper.
        command: one of :data:`COMMANDS`.
        config: config files, relative to the paper file (stacked: later ones override earlier).
        args: dotted overrides after the files (``[--out_dir, results/x]``); not for truncation / provenance.
        after: members whose results this one reads (they come earlier in ``members``).
    """

    name: str
    command: Literal["cv", "sweep", "probe", "attribute", "controls", "truncation", "provenance"]
    config: list[str]
    args: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PaperDataset(ConfigRecord):
    """A dataset's size for the plan when it has no local copy.

    Args:
        n_chans: channels the models read (sets the throughput's input size).
        subjects: subjects (the folds' validation share; LOSO's fold count).
        windows: windows of the whole dataset (null: unknown; the plan then gives cost per 1,000 windows).
        source: where the numbers come from.
    """

    n_chans: Optional[int] = None
    subjects: Optional[int] = None
    windows: Optional[int] = None
    source: str = ""


@dataclass(frozen=True)
class NotRunnable(ConfigRecord):
    """Something the paper used that cannot run here.

    Args:
        what: the model, analysis or setting.
        why: the reason (and the way to add it, where there is one).
    """

    what: str
    why: str


@dataclass(frozen=True)
class PaperConfig(ConfigRecord):
    """A paper file (see the module docstring).

    Args:
        paper: the seed text's file name.
        title: the paper.
        throughput: throughput table of ``plan`` (relative to the paper file; ``--bench`` replaces it).
        members: the commands, in run order.
        datasets: sizes per task name, for datasets without a local copy.
        not_runnable: what the paper used that cannot run here, with the reason.
        path: the paper file (set by :func:`load_paper`; not written in the file).
    """

    paper: str = ""
    title: str = ""
    throughput: Optional[str] = None
    members: list[PaperMember] = field(default_factory=list)
    datasets: dict[str, PaperDataset] = field(default_factory=dict)
    not_runnable: list[NotRunnable] = field(default_factory=list)
    path: Optional[str] = None


@dataclass(frozen=True)
class ProvenanceData(ConfigRecord):
    """The windows of a provenance run (``scripts/provenance_demo.py``).

    Args:
        preprocessing_of: the backbone whose declared preprocessing the windows get.
        reference: the reference step (``none`` keeps the recorded reference: the ``original`` view).
        views: the paired reference views (K = their number).
    """

    preprocessing_of: str = "eegnet"
    reference: str = "none"
    views: list[str] = field(default_factory=lambda: ["original", "average", "Cz"])


@dataclass(frozen=True)
class ProvenanceSplit(ConfigRecord):
    """Whole-subject split of a provenance run.

    Args:
        n_val: validation subjects.
        n_test: held-out (audit) subjects.
        n_train: training subjects (default: the rest).
        n_encoder: subjects of the training share the encoder trains on (default: all of it).
        seed: seed of the subject permutation.
    """

    n_val: int
    n_test: int
    n_train: Optional[int] = None
    n_encoder: Optional[int] = None
    seed: int = 0


@dataclass(frozen=True)
class ProvenanceEncoder(ConfigRecord):
    """The encoders a provenance run trains (one per seed).

    Args:
        backbone: registered backbone.
        seeds: one encoder per seed.
        max_epochs: training epochs (the most).
        batch_size: windows per batch.
        lr: learning rate.
        weight_decay: AdamW weight decay.
        backbone_kwargs: architecture overrides.
        head: pooling head (its input is the audited embedding).
        warmup_epochs: warm-up length in epochs.
        patience: early-stopping patience (epochs) on the validation subjects.
        select_on_val: keep the best validation epoch.
        class_weighted: class-weighted loss.
    """

    backbone: str
    seeds: list[int]
    max_epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    backbone_kwargs: Optional[dict[str, Any]] = None
    head: str = "mean"
    warmup_epochs: float = 1.0
    patience: int = 5
    select_on_val: bool = True
    class_weighted: bool = True


@dataclass(frozen=True)
class ProvenanceRunConfig(ConfigRecord):
    """A provenance member's file (``scripts/provenance_demo.py --config``; paper 000), typed for planning and
    checking (the script reads the same file). :func:`~eegfm_bench.runs.plan.paper.load_provenance_config` resolves
    ``task`` once: ``cfg.resolved_task`` is its :class:`~eegfm_bench.data.ingest.DeclaredTask` (not a key).

    Args:
        task: registered task or task mapping.
        out_dir: where the embeddings and audits go.
        data: the windows and their views.
        split: the whole-subject split.
        encoder: the encoders.
        audit: the audit's settings (:class:`~eegfm_bench.config.audit.AuditConfig`).
        experiment: name.
        trainer: ``lightning.Trainer`` arguments of the encoders' training and embedding passes.
    """

    task: Union[str, dict[str, Any]]
    out_dir: str
    data: ProvenanceData
    split: ProvenanceSplit
    encoder: ProvenanceEncoder
    audit: AuditConfig
    experiment: str = "provenance"
    trainer: Optional[dict[str, Any]] = None
    resolved_task: InitVar[Any] = None  # a DeclaredTask (data.ingest imports MNE: not imported here)

    def __post_init__(self, resolved_task):
        object.__setattr__(self, "resolved_task", resolved_task)  # init-only: kept by `replace`, not a field
