"""``eegfm-bench controls --config X.yaml``: the negative-control suite of paper 001 on one task.

For one task and a list of models, in the subject-grouped folds of a cv run (its ``splits.json``, when
``cv_out_dir`` points at one) or of a fresh split:

(a) **handcrafted comparators** — the simple (``9·N_ch + 2``) and enhanced (``15·N_ch + 6``) families (§3.4)
    through the frozen probe (logistic by default; LDA / SVM-RBF selectable, §3.5), window-level and, where the
    label is constant within a unit, unit-aggregated estimates, reported separately (§3.5);
(b) **frozen embeddings** of every model (token cache, mean-pooled or flattened) through the same probe, for the
    configured checkpoint and for matched fully random initialisations (same architecture, ``init_seeds``;
    Control 2, §4.2.2);
(c) **fine-tuned scores** of a cv run, read from its ``predictions/`` (e.g. EEGNet ``full``, LaBraM
    ``head_only``);
(d) **label permutation** (Control 3, §4.2.3) of each model's frozen probe and of the stronger handcrafted
    family, the whole probe refitted in each fixed fold, N permutations (default 100, scheme ``auto``);
(e) **scrambled-label adaptation** (Control 4, §4.2.4): LoRA / full fine-tuning on permuted source labels with
    the schedule, seeds and head of the correct-label run (:mod:`eegfm_bench.controls.adapt`);
(f) the **dataset-identity probe** (§4.4, Table 7) of two tasks' datasets on their shared channels, one unit per
    recording: AUROC in full space and after in-fold PCA-50, a permuted-label null and balanced subsamples;
(g) **paired uncertainty** (§4.6) of each model minus the stronger handcrafted family: subject-cluster bootstrap
    95 % CI, Wilcoxon across folds, sign-flip;
(h) the **four-gate report** (§3.6, §5.5) as JSON and Markdown (``gates.json``, ``gates.md``), with gate (iii)
    from the model catalogue's pretraining corpora against the task's dataset and its aliases
    (``Task.pretraining_aliases``), plus a full ``controls_report.md`` / ``.json``.

Resumable: every unit of work writes long result rows (:class:`eegfm_bench.results.ResultStore`, keyed by
experiment, task, model, init, regime, head, fold, seed, condition, metric) and its out-of-fold predictions or
null distribution under ``out_dir``; a rerun loads those instead of recomputing, and refuses (naming the unit)
when the stored rows were computed with other settings (their ``config_hash`` differs). Handcrafted features
and token caches are stored on disk too.

Config schema (``configs/experiment/controls_eegmat.yaml`` is a complete example)::

    experiment: controls_eegmat
    task: eegmat
    out_dir: results/controls_eegmat
    seed: 0
    cv_out_dir: null              # a cv run's out_dir: its splits.json, data settings and predictions are used
    trainer: {accelerator: auto, devices: 1, precision: 32-true}   # the frozen embeddings' Trainer.predict passes
    data:     {data_root, cache_dir, subjects, max_windows_per_subject, batch_size}
    split:    {scheme: kfold|loso, k, seed, n_val_groups, group_by: subject, folds}   # ignored with cv_out_dir
    features: {families: [simple, enhanced], preprocessing: {...} or a backbone name, welch_seconds: 2.0,
               study_summaries: true}
    probe:    {kind: logreg|lda|svm_rbf, C: null, pca: null, svm_probability: libsvm|calibrated,
               overrides: {frozen: {pca: 50}}}   # per representation: handcrafted | frozen | adapted
    metric: auroc                 # the gates' metric (balanced_accuracy is reported too)
    aggregate: auto               # auto | subject | recording | none (unit-level estimates, §3.5)
    models:   - {model: labram, pretrained: null, init_seeds: [0], pooling: mean, backbone_kwargs: {}}
    cv_claims: auto               # auto (every run x head of the cv run) | [] | [{model, regime, head}]
    permutation: {n: 100, scheme: auto, seed: 0, families: strongest}   # families: strongest | all | none
    bootstrap:   {n_boot: 2000, level: 0.95, seed: 0}
    scrambled: - {model: labram, regime: lora, head: mean, seeds: [0], scheme: auto, perm_seed: 0,
                  correct: auto, trainer: {...}, optim: {...}, backbone_kwargs: {...}, lora: {...}}
               # correct: cv reuses the matching cv run's predictions as the correct-label arm (its schedule and
               # seed; no overrides allowed), rerun trains both arms here; auto = cv when the cv run has the cell
    identity: {tasks: [eegmmidb_mi, eegmat], family: simple, n_folds: 5, pca_k: 50, n_permutations: 20,
               n_balanced: 10, C: 1.0, seed: 0, subjects: {task: [...]}, max_windows_per_subject: null}
    gates: {alpha: 0.05}
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import pandas as pd
import yaml

from eegfm_bench.config import ConfigError, check_trainer_section, command_parser, merge_config, parse_config
from eegfm_bench.data.preprocessing import reference_windows
from eegfm_bench.data.windows import select_channels, window_reference
from eegfm_bench.runs.launch import LauncherConfig, check_launcher

DEFAULT_FEATURE_PREPROCESSING = {
    "sfreq": 200.0, "l_freq": 0.5, "h_freq": 70.0, "scale": 1e6, "unit": "µV", "window_s": 4.0,
    "reference": "average",
    "source": "paper 001 §3.3: 200 Hz, 0.5-70 Hz band-pass, mains notch, CAR; 4 s windows; µV (features over 0.5-45 Hz, §3.4)",
}


@dataclass
class ControlsData:
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


@dataclass
class ControlsFeatures:
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


@dataclass
class ControlsProbe:
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


@dataclass
class ControlsModel:
    """One encoder's frozen embeddings (configured checkpoint and matched random inits, Control 2).

    Args:
        model: registered backbone.
        pretrained: hub id or local checkpoint (null: random init only).
        init_seeds: seeds of the matched fully random initialisations.
        pooling: ``mean`` or ``flatten`` over tokens.
        backbone_kwargs: architecture overrides.
    """

    model: str
    pretrained: Optional[str] = None
    init_seeds: list[int] = field(default_factory=lambda: [0])
    pooling: str = "mean"
    backbone_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ControlsPermutation:
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


@dataclass
class ControlsBootstrap:
    """Subject-cluster bootstrap (§4.6).

    Args:
        n_boot: resamples.
        level: interval level.
        seed: seed.
    """

    n_boot: int = 2000
    level: float = 0.95
    seed: int = 0


@dataclass
class ControlsScrambled:
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
        pooling: how the adapted encoder's tokens are pooled for the refitted frozen probe (``mean``, ``flatten``).
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


@dataclass
class ControlsIdentity:
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


@dataclass
class ControlsGates:
    """The four gates (§3.6, §5.5).

    Args:
        alpha: level of the tests.
    """

    alpha: float = 0.05


@dataclass
class ControlsSplit:
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


@dataclass
class ControlsConfig:
    """``eegfm-bench controls``: the negative-control suite of paper 001 on one task.

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
            process), see :mod:`eegfm_bench.runs.launch`; the other steps run in the launching process.
        user_models: encoders by import path (:mod:`eegfm_bench.models.user`, as in a cv config); those of the
            ``cv_out_dir`` run are inherited. A user model's weights come from its declaration: its ``models``
            entry gets the declared weights as its pretrained arm and ``init_seeds`` random inits built without
            them.
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


def controls_parser():
    return command_parser("eegfm-bench controls", ControlsConfig, description=ControlsConfig.__doc__, training=False)


AGGREGATES = ("auto", "subject", "recording", "none")
PERM_FAMILIES = ("strongest", "all", "none")
SCRAMBLED_OPTIONAL = ("trainer", "optim", "backbone_kwargs", "head_kwargs", "lora", "pretrained")
"""Scrambled-entry keys that, when unset (null), come from the matching cv run."""


# ================================================================================================ config


def _lowest_band_seconds() -> float:
    from eegfm_bench.controls.features import BANDS

    return 1.0 / min(lo for _, lo, _ in BANDS)


def load_config(path_or_dict, args=()) -> dict:
    """Read a controls YAML (or dict, plus dotted overrides), fill defaults and validate every name and number before
    any data is read.

    Returns
    -------
    dict
        The resolved config (``features.preprocessing`` resolved to a full dict, ``identity`` filled).

    Raises
    ------
    ConfigError
        A missing ``task`` or ``out_dir``, unknown keys, unknown families / probes / poolings / aggregates / schemes,
        a feature window shorter than
        the lowest band (0.5 Hz needs 2 s) or the Welch segment, a missing cv out_dir, regimes that cannot run.
    UnknownNameError
        Unknown task or backbone (lists valid names).
    """
    from eegfm_bench.controls.features import FAMILIES
    from eegfm_bench.controls.embeddings import POOLINGS
    from eegfm_bench.controls.permutation import SCHEMES
    from eegfm_bench.controls.probes import PROBES
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.models.adaptation import check_regime
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.heads import HEADS

    from eegfm_bench.trainer import check_trainer

    given: dict[int, bool] = {}  # a resolved config (a launcher's worker) carries each entry's seeds_given
    if isinstance(path_or_dict, dict) and path_or_dict.get("scrambled"):
        path_or_dict = {**path_or_dict, "scrambled": [dict(e) for e in path_or_dict["scrambled"]]}
        for i, e in enumerate(path_or_dict["scrambled"]):
            if "seeds_given" in e:
                given[i] = bool(e.pop("seeds_given"))
    cfg = parse_config(controls_parser(), path_or_dict, args)
    missing = [k for k in ("task", "out_dir") if not cfg.get(k)]
    if missing:
        raise ConfigError(f"the controls config needs {' and '.join(f'`{k}`' for k in missing)} (a full run takes "
                          "hours on CPU, so nothing is assumed); fix: start from configs/experiment/controls_eegmat.yaml")
    check_trainer(cfg["trainer"], "trainer")
    check_launcher(cfg.get("launcher"), trainer=cfg.get("trainer"))
    get_task(cfg["task"])
    _user_models(cfg)
    fam = cfg["features"]["families"]
    if not fam or any(f not in FAMILIES for f in fam) or len(set(fam)) != len(fam):
        raise ConfigError(f"features.families {fam!r}; fix: a non-empty list from {list(FAMILIES)}")
    prep = cfg["features"]["preprocessing"]
    if prep is None:
        prep = dict(DEFAULT_FEATURE_PREPROCESSING)
    elif isinstance(prep, str):
        p = BACKBONES.get(prep).preprocessing
        prep = p.to_dict()
    else:
        from eegfm_bench.data.preprocessing import Preprocessing

        bad = set(prep) - set(Preprocessing.__dataclass_fields__)
        if bad:
            raise ConfigError(f"features.preprocessing: unknown keys {sorted(bad)}; valid: "
                              f"{sorted(Preprocessing.__dataclass_fields__)}")
        prep = {**DEFAULT_FEATURE_PREPROCESSING, **prep}
    cfg["features"]["preprocessing"] = prep
    need = max(_lowest_band_seconds(), float(cfg["features"]["welch_seconds"]))
    if float(prep["window_s"]) < need:
        raise ConfigError(
            f"features.preprocessing.window_s = {prep['window_s']} s is shorter than the handcrafted features need "
            f"({need:g} s: the lowest band edge is 0.5 Hz and the Welch segment is "
            f"{cfg['features']['welch_seconds']} s); fix: window_s >= {need:g}")
    if float(prep["sfreq"]) <= 90:
        raise ConfigError(f"features.preprocessing.sfreq = {prep['sfreq']} Hz cannot carry the γ band (30-45 Hz); "
                          "fix: sfreq > 90 (200 by default)")
    PROBES.get(cfg["probe"]["kind"])
    if cfg["probe"]["kind"] == "lda" and cfg["probe"]["C"] is not None:
        raise ConfigError("probe.C is set but the lda probe has no C; fix: probe.C: null")
    if cfg["metric"] not in ("auroc", "balanced_accuracy"):
        raise ConfigError(f"metric {cfg['metric']!r}; fix: auroc or balanced_accuracy")
    if cfg["aggregate"] not in AGGREGATES:
        raise ConfigError(f"aggregate {cfg['aggregate']!r}; fix: one of {AGGREGATES}")
    perm = cfg["permutation"]
    if perm["scheme"] != "auto" and perm["scheme"] not in SCHEMES:
        raise ConfigError(f"permutation.scheme {perm['scheme']!r}; fix: auto or one of {SCHEMES}")
    if perm["families"] not in PERM_FAMILIES:
        raise ConfigError(f"permutation.families {perm['families']!r}; fix: one of {PERM_FAMILIES}")
    if int(perm["n"]) < 1:
        raise ConfigError("permutation.n must be >= 1 (the paper uses 100)")
    if int(cfg["bootstrap"]["n_boot"]) < 100:
        raise ConfigError("bootstrap.n_boot must be >= 100 for a 95 % interval (2000 by default)")
    models = []
    for i, m in enumerate(cfg["models"]):
        BACKBONES.get(m["model"])
        m = {**m, "backbone_kwargs": m.get("backbone_kwargs") or {}}
        if m["model"] in cfg["user_models"]:
            if m["pretrained"] not in (None, "declared"):
                raise ConfigError(f"models[{i}]: {m['model']} is a user model, whose weights come from its "
                                  f"declaration (user_models.{m['model']}.pretrained), not pretrained: "
                                  f"{m['pretrained']!r}; fix: pretrained: null")
            m["pretrained"] = "declared" if cfg["user_models"][m["model"]].get("pretrained") else None
        if m["pooling"] not in POOLINGS:
            raise ConfigError(f"models[{i}].pooling {m['pooling']!r}; fix: one of {POOLINGS}")
        if not m["init_seeds"]:
            raise ConfigError(f"models[{i}].init_seeds is empty; fix: at least one seed (matched random init)")
        models.append(m)
    if len({m["model"] for m in models}) != len(models):
        raise ConfigError("a model is listed twice in `models`; fix: one entry per model (list its seeds in init_seeds)")
    cfg["models"] = models
    if cfg["cv_out_dir"] is not None:
        cvd = Path(cfg["cv_out_dir"])
        for f in ("config.yaml", "splits.json"):
            if not (cvd / f).is_file():
                raise ConfigError(f"cv_out_dir {cvd} has no {f}; fix: run `eegfm-bench cv --config ...` first, or "
                                  "point cv_out_dir at that run's out_dir (or set it to null)")
    claims = cfg["cv_claims"]
    if claims not in ("auto", None) and not isinstance(claims, list):
        raise ConfigError("cv_claims must be auto, [] or a list of {model, regime, head}")
    if isinstance(claims, list):
        for i, c in enumerate(claims):
            if set(c) != {"model", "regime", "head"}:
                raise ConfigError(f"cv_claims[{i}] needs exactly model, regime, head; got {sorted(c)}")
        if claims and cfg["cv_out_dir"] is None:
            raise ConfigError("cv_claims are listed but cv_out_dir is null; fix: point cv_out_dir at the cv run")
    scr = []
    for i, s in enumerate(cfg["scrambled"]):
        BACKBONES.get(s["model"])
        s = {k: v for k, v in s.items() if not (k in SCRAMBLED_OPTIONAL and v is None)}  # unset: from the cv run
        if s["model"] in cfg["user_models"] and s.get("pretrained"):
            raise ConfigError(f"scrambled[{i}]: {s['model']} is a user model, whose weights come from its "
                              f"declaration (user_models.{s['model']}.pretrained); fix: drop scrambled[{i}].pretrained")
        if s.get("trainer"):
            s["trainer"] = check_trainer_section(s["trainer"], f"scrambled[{i}].trainer")
        s = {**s, "seeds_given": given.get(i, s.get("seeds") is not None), "seeds": s.get("seeds") or [0]}
        if s["correct"] not in ("auto", "cv", "rerun"):
            raise ConfigError(f"scrambled[{i}].correct {s['correct']!r}; fix: auto, cv (reuse the cv run's "
                              "correct-label predictions) or rerun")
        check_regime(s["regime"])
        if s["regime"] == "head_only":
            raise ConfigError(f"scrambled[{i}]: regime head_only adapts nothing; fix: lora or full")
        HEADS.get(s["head"])
        if s["regime"] == "lora" and not BACKBONES.get(s["model"]).lora_targets and not (s.get("lora") or {}).get(
                "target_modules"):
            raise ConfigError(f"scrambled[{i}]: {s['model']} declares no LoRA targets (a supervised baseline); "
                              "fix: regime: full for it, or set lora.target_modules")
        if s["scheme"] != "auto" and s["scheme"] not in SCHEMES:
            raise ConfigError(f"scrambled[{i}].scheme {s['scheme']!r}; fix: auto or one of {SCHEMES}")
        if not s["seeds"]:
            raise ConfigError(f"scrambled[{i}].seeds is empty")
        scr.append(s)
    cfg["scrambled"] = scr
    if cfg["identity"] is not None:
        idc = cfg["identity"]
        if not isinstance(idc["tasks"], list) or len(idc["tasks"]) != 2:
            raise ConfigError("identity.tasks must name two tasks (e.g. [eegmmidb_mi, eegmat])")
        for t in idc["tasks"]:
            get_task(t)
        if get_task(idc["tasks"][0]).dataset == get_task(idc["tasks"][1]).dataset:
            raise ConfigError(f"identity.tasks {idc['tasks']} come from the same dataset; fix: two datasets")
        if idc["family"] not in FAMILIES:
            raise ConfigError(f"identity.family {idc['family']!r}; fix: one of {list(FAMILIES)}")
        cfg["identity"] = idc
    return cfg


def _user_models(cfg: dict) -> None:
    """Resolve, register and dry-run the user models of a controls config (in place).

    The ``cv_out_dir`` run's ``user_models`` are inherited; a name declared in both must have the same
    declaration. Each model a ``models`` / ``scrambled`` / ``identity`` step uses gets one batch through it
    (:func:`~eegfm_bench.models.user.check_user_model`) before any data is read.

    Raises
    ------
    ConfigError
        A name declared differently here and in the cv run.
    UserModelError
        A declaration that does not build or fails its dry run (naming the fix).
    """
    from eegfm_bench.models.user import _normalise, check_user_model, register_user_models

    user = dict(cfg.get("user_models") or {})
    cv_yaml = Path(cfg["cv_out_dir"]) / "config.yaml" if cfg.get("cv_out_dir") else None
    if cv_yaml is not None and cv_yaml.is_file():
        import yaml

        for name, spec in ((yaml.safe_load(cv_yaml.read_text()) or {}).get("user_models") or {}).items():
            if name in user and _normalise(dict(user[name])) != _normalise(dict(spec)):
                raise ConfigError(f"user model {name!r} is declared here and, differently, in the cv run "
                                  f"{cfg['cv_out_dir']}; fix: drop it from this config (the cv run's declaration is "
                                  "inherited) or give it another name")
            user.setdefault(name, spec)
    cfg["user_models"] = user
    if not user:
        return
    register_user_models(user)
    used = {m["model"] for m in cfg["models"]} | {s["model"] for s in cfg["scrambled"]}
    for name, spec in user.items():
        if name in used:
            check_user_model(name, spec, lora=any(s["model"] == name and s["regime"] == "lora"
                                                  and not (s.get("lora") or {}).get("target_modules")
                                                  for s in cfg["scrambled"]))


def _user_decl(cfg: dict, model: str) -> dict:
    """``{"user_model": <declaration without its unhashed keys>}`` for a user model (enters unit hashes), else {}."""
    from eegfm_bench.models.user import hashable_user_spec

    spec = (cfg.get("user_models") or {}).get(model)
    return {"user_model": hashable_user_spec(spec)} if spec else {}


def _init_label(cfg: dict, model: str, pretrained: str | None) -> str:
    """The rows' init label of a configured checkpoint: ``pretrained:<id>``, or for a user model's declared
    weights ``pretrained:<file>@<sha12>``."""
    if pretrained == "declared":
        from eegfm_bench.models.user import user_init_label

        return user_init_label(cfg["user_models"][model])
    return f"pretrained:{pretrained}"


# ================================================================================================ helpers
@dataclass
class Rep:
    """One scored representation on the feature windows' rows (handcrafted, frozen embedding, cv, adaptation).

    ``proba`` has shape ``(n_windows, n_classes)`` (NaN on rows outside the evaluated test folds); ``result`` is the
    :class:`~eegfm_bench.controls.probes.ProbeResult` built from it on the fixed folds.
    """

    name: str
    model: str
    init: str
    regime: str
    head: str
    source: str
    proba: np.ndarray
    result: object
    seed: int = 0
    notes: list = field(default_factory=list)


class _Store:
    """ResultStore with a cached frame, the config-hash guard and row completion."""

    def __init__(self, out: Path, cfg: dict, fold_unit: str, merge: bool = True):
        from eegfm_bench.results import ResultStore, code_version

        self.store = ResultStore(out, merge=merge)
        self.df = self.store.load()
        self.cfg = cfg
        self.code = code_version()
        self.fold_unit = fold_unit

    def rows_for(self, **key) -> pd.DataFrame:
        if self.df.empty:
            return self.df
        m = np.ones(len(self.df), dtype=bool)
        for k, v in key.items():
            m &= self.df[k].astype(str).to_numpy() == str(v)
        return self.df[m]

    def done(self, chash: str, what: str, **key) -> bool:
        """True if rows for ``key`` exist; raise if they were computed with other settings."""
        rows = self.rows_for(experiment=self.cfg["experiment"], **key)
        if rows.empty:
            return False
        other = sorted(set(rows["config_hash"].astype(str)) - {chash})
        if other:
            raise ConfigError(
                f"{self.store.folder} already holds {what} computed with other settings (config_hash {other[0]} vs "
                f"{chash} now); results of two configs would mix. fix: use a new out_dir, or delete that folder to "
                "recompute")
        return True

    def append(self, rows: list[dict], chash: str) -> None:
        full = []
        for r in rows:
            full.append({"experiment": self.cfg["experiment"], "seed": self.cfg["seed"], "condition": "clean",
                         "n_windows": np.nan, "n_subjects": np.nan, "fold_unit": self.fold_unit,
                         "config_hash": chash, "code_version": self.code, **r})
        self.store.append(full)
        self.df = self.store.load()

    def value(self, metric: str, **key) -> float:
        rows = self.rows_for(experiment=self.cfg["experiment"], metric=metric, **key)
        if rows.empty:
            raise KeyError(f"no stored row for {metric} {key}")
        return float(rows["value"].iloc[-1])


def _hash(obj) -> str:
    from eegfm_bench.results import config_hash

    return config_hash(obj)


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default, ensure_ascii=False))
    tmp.replace(path)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o)}")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


@dataclass
class _Ctx:
    """Everything the steps share: windows, folds, units, labels and the store."""

    cfg: dict
    out: Path
    task: object
    ws: object
    keys: np.ndarray
    y_idx: np.ndarray
    classes: np.ndarray
    subjects: np.ndarray
    split: object
    fold_ids: list
    folds: list
    agg_level: str | None
    agg_units: np.ndarray | None
    scheme: str
    spec: object
    store: _Store
    progress: bool
    ws_cache: dict = field(default_factory=dict)
    log: list = field(default_factory=list)

    def spec_for(self, source: str):
        """The probe for one kind of representation: ``probe`` with ``probe.overrides[kind]`` applied."""
        kind = {"frozen": "frozen", "handcrafted": "handcrafted"}.get(source, "adapted")
        ov = (self.cfg["probe"].get("overrides") or {}).get(kind)
        if not ov:
            return self.spec
        import dataclasses

        return dataclasses.replace(self.spec, **ov, **({"cap_pca": True} if ov.get("pca") is not None else {}))

    def note(self, msg: str) -> None:
        self.log.append(msg)
        if self.progress:
            from tqdm.auto import tqdm

            tqdm.write(f"[controls] {msg}")


def _probe_result(ctx: _Ctx, proba: np.ndarray):
    """ProbeResult of fixed out-of-fold probabilities on the context's folds (window and unit level)."""
    from eegfm_bench.controls.probes import ProbeResult, _metrics_rows

    fm, pooled = _metrics_rows(ctx.y_idx, proba, ctx.folds, ctx.agg_units, ctx.agg_level or "subject",
                               ctx.classes.size, [None] * len(ctx.folds))
    levels = ["window"] + ([ctx.agg_level] if ctx.agg_level else [])
    return ProbeResult(ctx.classes, proba, fm, pooled, ctx.spec, levels)


def _fold_rows(ctx: _Ctx, res, **key) -> list[dict]:
    rows = []
    for r in res.fold_metrics.itertuples(index=False):
        te = ctx.folds[int(r.fold)][1]
        rows.append({**key, "fold": ctx.fold_ids[int(r.fold)], "metric": f"{r.metric}_{r.level}",
                     "value": float(r.value), "n_windows": int(te.size),
                     "n_subjects": int(np.unique(ctx.subjects[te]).size)})
    tested = np.concatenate([te for _, te in ctx.folds])
    for lv, md in res.pooled.items():
        for m, v in md.items():
            rows.append({**key, "fold": "pooled", "metric": f"{m}_{lv}", "value": float(v),
                         "n_windows": int(tested.size), "n_subjects": int(np.unique(ctx.subjects[tested]).size)})
    return rows


def _save_predictions(ctx: _Ctx, path: Path, proba: np.ndarray) -> None:
    tested = np.concatenate([te for _, te in ctx.folds])
    fold_of = np.full(len(ctx.keys), -1)
    for k, (_, te) in enumerate(ctx.folds):
        fold_of[te] = ctx.fold_ids[k]
    df = pd.DataFrame({"row": tested, "subject": ctx.ws.subject[tested], "recording": ctx.ws.recording[tested],
                       "window_index": ctx.ws.window_index[tested], "fold": fold_of[tested],
                       "y": ctx.y_idx[tested]})
    for c in range(proba.shape[1]):
        df[f"p{c}"] = proba[tested, c]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def _load_predictions(ctx: _Ctx, path: Path) -> np.ndarray:
    from eegfm_bench.controls.embeddings import align_rows, row_keys

    df = pd.read_csv(path)
    proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
    tested = np.concatenate([te for _, te in ctx.folds])
    idx = align_rows(ctx.keys[tested], row_keys(df["recording"], df["window_index"]), f"saved predictions {path}",
                     "tested feature windows")
    proba[tested] = df[[f"p{c}" for c in range(ctx.classes.size)]].to_numpy()[idx]
    return proba


def _probe_rep(ctx: _Ctx, *, name: str, model: str, init: str, regime: str, head: str, source: str, unit_cfg: dict,
               compute_X, seed: int | None = None) -> tuple[Rep, object]:
    """Evaluate (or reload) one representation through the probe; returns the Rep and a lazy X getter."""
    from eegfm_bench.controls.probes import evaluate_probe

    chash = _hash(unit_cfg)
    seed = ctx.cfg["seed"] if seed is None else seed
    key = dict(task=ctx.task.name, model=model, init=init, regime=regime, head=head, seed=seed, condition="clean")
    path = ctx.out / "predictions" / f"{_safe(name)}.csv"
    cache = {}

    def get_X():
        if "X" not in cache:
            cache["X"] = compute_X()
        return cache["X"]

    if ctx.store.done(chash, f"the {name} probe", **key) and path.is_file():
        proba = _load_predictions(ctx, path)
        res = _probe_result(ctx, proba)
    else:
        t0 = time.time()
        X = get_X()
        res = evaluate_probe(X, ctx.y_idx, ctx.folds, spec=ctx.spec_for(source), groups=ctx.subjects,
                             aggregate_by=ctx.agg_units, aggregate_name=ctx.agg_level or "subject")
        res_fit = res
        proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
        tested = np.concatenate([te for _, te in ctx.folds])
        proba[tested] = res.proba[tested]
        res = _probe_result(ctx, proba)
        _save_predictions(ctx, path, proba)
        rows = _fold_rows(ctx, res, **key)
        rows.append({**key, "fold": "all", "metric": "n_dims", "value": float(X.shape[1])})
        ks = [k for k in res_fit.fold_metrics.get("pca_k", pd.Series(dtype=float)).dropna().unique()]
        if ks:  # in-fold PCA components the probe used (the smallest over folds when capped)
            rows.append({**key, "fold": "all", "metric": "pca_k", "value": float(min(ks))})
        rows.append({**key, "fold": "all", "metric": "probe_seconds", "value": float(time.time() - t0)})
        ctx.store.append(rows, chash)
        ctx.note(f"{name}: {ctx.cfg['metric']} (window, mean-fold) = {res.mean_fold(ctx.cfg['metric']):.4f} "
                 f"({X.shape[1]} dims, {time.time() - t0:.1f} s)")
    return Rep(name, model, init, regime, head, source, proba, res, seed), get_X


def _score(rep: Rep, metric: str, level: str = "window") -> float:
    return rep.result.mean_fold(metric, level)


# ================================================================================================ steps
def _load_ws(ctx_cfg: dict, task: str, prep_dict: dict, progress: bool, *, subjects=None, max_windows=None):
    from eegfm_bench.data.preprocessing import Preprocessing
    from eegfm_bench.data.windows import load_windows

    d = ctx_cfg["data"]
    return load_windows(task, Preprocessing(**prep_dict), data_root=d["data_root"], cache_dir=d["cache_dir"],
                        subjects=subjects, max_windows_per_subject=max_windows, progress=progress)


def _model_ws(ctx: _Ctx, model: str):
    from eegfm_bench.models.backbones import BACKBONES

    prep = BACKBONES.get(model).preprocessing
    k = json.dumps(prep.to_dict(), sort_keys=True)
    if k not in ctx.ws_cache:
        d = ctx.cfg["data"]
        ctx.ws_cache[k] = _load_ws(ctx.cfg, ctx.cfg["task"], prep.to_dict(), ctx.progress, subjects=d["subjects"],
                                   max_windows=d["max_windows_per_subject"])
    return ctx.ws_cache[k]


def _features(ctx: _Ctx, family: str, ws, ch_names: list[str], tag: str) -> np.ndarray:
    """Handcrafted features of ``ws`` (cached as .npy under out_dir/features)."""
    from eegfm_bench.controls.features import handcrafted_features

    fc = ctx.cfg["features"]
    from eegfm_bench.controls.embeddings import row_keys

    rows = row_keys(ws.recording, ws.window_index)
    h = _hash({"family": family, "ws": ws.meta.get("cache_key"), "rows": _hash(rows.tolist()), "ref": "final",
               "n": len(ws), "ch": ch_names, "welch": fc["welch_seconds"], "study": fc["study_summaries"]})
    path = ctx.out / "features" / f"{tag}-{family}-{h}.npy"
    if path.is_file():
        return np.load(path)
    t0 = time.time()
    sel = [ws.ch_names.index(c) for c in ch_names]
    parts = []
    from tqdm.auto import tqdm

    step = 256
    for s in tqdm(range(0, len(ws), step), desc=f"{family} features ({tag})", disable=not ctx.progress, unit="chunk"):
        X = np.asarray(ws.X[s:s + step], dtype=np.float64)[:, sel]
        if len(sel) < len(ws.ch_names):  # the reference over the channels kept (issue 22)
            reference_windows(X, window_reference(ws))
        kw = {"welch_seconds": fc["welch_seconds"], "study_summaries": fc["study_summaries"]}
        F, _ = handcrafted_features(X, ws.sfreq, ch_names, family=family, **kw)
        parts.append(F)
    F = np.concatenate(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path.with_name(path.name + ".tmp.npy"), F)
    Path(path.with_name(path.name + ".tmp.npy")).replace(path)
    ctx.note(f"{family} features for {tag}: {F.shape} in {time.time() - t0:.1f} s")
    return F


def _handcrafted(ctx: _Ctx) -> dict:
    reps, getters = {}, {}
    for fam in ctx.cfg["features"]["families"]:
        unit = {"step": "handcrafted", "family": fam, "features": ctx.cfg["features"], "probe": ctx.cfg["probe"],
                "folds": ctx.fold_ids, "aggregate": ctx.agg_level, "data": ctx.cfg["data"]}
        rep, get_X = _probe_rep(ctx, name=f"handcrafted_{fam}", model=f"handcrafted_{fam}", init="none",
                                regime="frozen_probe", head=f"probe_{ctx.spec_for('handcrafted').kind}",
                                source="handcrafted",
                                unit_cfg=unit, compute_X=lambda fam=fam: _features(ctx, fam, ctx.ws, ctx.ws.ch_names,
                                                                                   ctx.task.name))
        reps[fam], getters[fam] = rep, get_X
    return reps, getters


def _frozen_models(ctx: _Ctx) -> tuple[dict, dict]:
    """Frozen embeddings of every model and init through the probe: {model: {init_label: Rep}}, getters."""
    from eegfm_bench.controls.embeddings import frozen_embedding

    reps, getters = {}, {}
    for m in ctx.cfg["models"]:
        inits = ([("pretrained", m["pretrained"], m["init_seeds"][0])] if m["pretrained"] else []) + \
                [(f"random#seed{s}", None, s) for s in m["init_seeds"]]
        reps[m["model"]], getters[m["model"]] = {}, {}
        for label, pretrained, seed in inits:
            unit = {"step": "frozen", "model": m, "pretrained": pretrained, "init_seed": seed,
                    "probe": ctx.cfg["probe"], "folds": ctx.fold_ids, "aggregate": ctx.agg_level,
                    "data": ctx.cfg["data"], **_user_decl(ctx.cfg, m["model"])}

            def compute(m=m, pretrained=pretrained, seed=seed):
                ws_m = _model_ws(ctx, m["model"])
                emb = frozen_embedding(m["model"], ws_m, ctx.keys, init_seed=seed, pretrained=pretrained,
                                       pooling=m["pooling"], backbone_kwargs=m["backbone_kwargs"],
                                       cache_dir=ctx.cfg["data"]["cache_dir"], trainer=ctx.cfg["trainer"],
                                       batch_size=int(ctx.cfg["data"]["batch_size"]), progress=ctx.progress)
                return emb.X

            init_row = label if pretrained is None else _init_label(ctx.cfg, m["model"], pretrained)
            rep, get_X = _probe_rep(ctx, name=f"{m['model']}-{_safe(init_row)}-{m['pooling']}", model=m["model"],
                                    init=init_row, regime="frozen_probe", head=f"{m['pooling']}+probe_{ctx.spec_for('frozen').kind}",
                                    source="frozen", unit_cfg=unit, compute_X=compute)
            reps[m["model"]][label] = rep
            getters[m["model"]][label] = get_X
    return reps, getters


def _cv_config(cfg: dict) -> dict | None:
    if cfg["cv_out_dir"] is None:
        return None
    from eegfm_bench.runs.output import CVRun

    return CVRun(cfg["cv_out_dir"]).config


def _cv_claims(ctx: _Ctx, cv_cfg: dict | None) -> list[Rep]:
    """Fine-tuned / head-only cv scores from the cv run's predictions, aligned to the feature windows."""
    from eegfm_bench.controls.embeddings import align_rows, row_keys

    if cv_cfg is None or ctx.cfg["cv_claims"] in (None, []):
        return []
    from eegfm_bench.runs.output import CVRun, CVRunError

    cvd = Path(ctx.cfg["cv_out_dir"])
    run = CVRun(cvd)
    if ctx.cfg["cv_claims"] == "auto":
        wanted = [{"model": r["model"], "regime": r["regime"], "head": h} for r in cv_cfg["runs"] for h in r["heads"]]
    else:
        wanted = ctx.cfg["cv_claims"]
    reps = []
    for c in wanted:
        name = f"{c['model']}-{c['regime']}-{c['head']}"
        try:  # the folds of the cv run's current config hash of this cell
            cks = {ck.fold: ck for ck in run.checkpoints([c["model"]], [c["regime"]], [c["head"]])}
        except CVRunError as err:
            raise FileNotFoundError(f"cv claim {name}: {err}") from None
        files = {k: Path(cks[k].predictions) if k in cks and cks[k].predictions else
                 cvd / "predictions" / f"{name}-fold{k}.csv" for k in ctx.fold_ids}
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"cv claim {name}: missing predictions {missing[:3]}; fix: finish the cv run "
                                    f"(`eegfm-bench cv --config {cvd / 'config.yaml'}`) or drop it from cv_claims")
        inits = sorted({ck.init for ck in cks.values()})
        if len(inits) > 1:
            raise ValueError(f"cv run {cvd} holds {name} under several inits {inits}; its prediction files cannot "
                             "tell them apart; fix: one init per model/regime/head in that cv run")
        init = inits[0] if inits else "unknown"
        ws_m = _model_ws(ctx, c["model"])
        proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
        for k_pos, k in enumerate(ctx.fold_ids):
            df = pd.read_csv(files[k])
            te = ctx.folds[k_pos][1]
            idx = df["index"].to_numpy()
            keys = row_keys(ws_m.recording[idx], ws_m.window_index[idx])
            order = align_rows(ctx.keys[te], keys, f"cv predictions {files[k].name}", f"fold {k} test windows")
            if not np.array_equal(df["y"].to_numpy()[order], ctx.y_idx[te]):
                raise ValueError(f"{files[k]}: labels differ from the task's labels on the same windows; fix: rerun "
                                 "the cv run on the current data")
            proba[te] = df[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()[order]
        res = _probe_result(ctx, proba)
        chash = _hash({"step": "cv_claim", "claim": c, "cv_out_dir": str(cvd), "folds": ctx.fold_ids,
                       "aggregate": ctx.agg_level, "init": init})
        key = dict(task=ctx.task.name, model=c["model"], init=init, regime=c["regime"], head=c["head"],
                   seed=cv_cfg["seed"], condition="cv_predictions")
        if not ctx.store.done(chash, f"cv claim {name}", **key):
            ctx.store.append(_fold_rows(ctx, res, **key), chash)
        reps.append(Rep(f"{name} (cv)", c["model"], init, c["regime"], c["head"], "cv", proba, res, cv_cfg["seed"]))
        ctx.note(f"cv claim {name} ({init}): {ctx.cfg['metric']} = {res.mean_fold(ctx.cfg['metric']):.4f}")
    return reps


def _paired(ctx: _Ctx, rep: Rep, comp: Rep, comp_family: str) -> dict:
    """Paired uncertainty of rep minus the stronger family, per level (rows + dict)."""
    from eegfm_bench.controls.probes import paired_comparison

    b = ctx.cfg["bootstrap"]
    metric = ctx.cfg["metric"]
    chash = _hash({"step": "paired", "rep": rep.name, "comp": comp.name, "bootstrap": b, "metric": metric,
                   "folds": ctx.fold_ids, "aggregate": ctx.agg_level})
    key = dict(task=ctx.task.name, model=rep.model, init=rep.init, regime=rep.regime, head=rep.head, seed=rep.seed,
               condition=f"paired_vs_{comp_family}")
    path = ctx.out / "paired" / f"{_safe(rep.name)}-vs-{comp_family}.json"
    if ctx.store.done(chash, f"paired comparison {rep.name} vs {comp_family}", **key) and path.is_file():
        return json.loads(path.read_text())
    tested = np.concatenate([te for _, te in ctx.folds])
    out = {"model": rep.name, "comparator": f"handcrafted_{comp_family}", "metric": metric, "levels": {}}
    rows = []
    levels = ["window"] + ([ctx.agg_level] if ctx.agg_level else [])
    for lv in levels:
        # the comparison runs on the tested rows only (rows outside the selected folds carry no prediction)
        sub = _SubResult(rep.result, tested), _SubResult(comp.result, tested)
        folds_sub = _reindex_folds(ctx.folds, tested)
        clusters = ctx.subjects[tested]
        pc = paired_comparison(sub[0], sub[1], ctx.classes[ctx.y_idx[tested]], folds_sub, clusters, metric=metric,
                               level=lv, aggregate_by=None if lv == "window" else ctx.agg_units[tested],
                               n_boot=int(b["n_boot"]), level_ci=float(b["level"]), seed=int(b["seed"]))
        d = pc.to_dict()
        out["levels"][lv] = d
        bs = d["bootstrap"]
        for mname, v in (("diff", bs["estimate"]), ("ci_low", bs["low"]), ("ci_high", bs["high"]),
                         ("wilcoxon_p", d["wilcoxon"]["p_value"] if d["wilcoxon"] else np.nan),
                         ("sign_flip_p", d["sign_flip"]["p_value"] if d["sign_flip"] else np.nan)):
            rows.append({**key, "fold": "all", "metric": f"{metric}_{lv}_{mname}", "value": float(v),
                         "n_windows": int(tested.size), "n_subjects": int(np.unique(clusters).size)})
    _write_json(path, out)
    ctx.store.append(rows, chash)
    w = out["levels"]["window"]["bootstrap"]
    ctx.note(f"paired {rep.name} − {comp_family}: {w['estimate']:+.4f} [{w['low']:+.4f}, {w['high']:+.4f}]")
    return out


def _arm_interval(ctx: _Ctx, pairs: list[tuple[np.ndarray, np.ndarray]], what: str) -> tuple | None:
    """Paired subject-cluster interval of the mean over ``pairs`` of (A − B) (gate iv's two-arm comparisons).

    Each pair is two arms' out-of-fold probabilities ``(n_windows, n_classes)`` on the feature windows (a seed of
    each arm). The pairs are bootstrapped with the same seed, so every replicate resamples the same subjects for all
    of them; the mean of their replicates is the bootstrap of the mean difference (:mod:`eegfm_bench.controls.gates`
    explains the choice). Returns ``(low, high)`` at ``bootstrap.level``, or None (with a note) when the bootstrap
    cannot run (too few subjects per fold, a metric undefined in a fold).
    """
    from eegfm_bench.controls.probes import paired_comparison

    b, metric = ctx.cfg["bootstrap"], ctx.cfg["metric"]
    tested = np.concatenate([te for _, te in ctx.folds])
    folds_sub = _reindex_folds(ctx.folds, tested)
    samples = []
    try:
        for pa, pb in pairs:
            ra, rb = _probe_result(ctx, pa), _probe_result(ctx, pb)
            pc = paired_comparison(_SubResult(ra, tested), _SubResult(rb, tested), ctx.classes[ctx.y_idx[tested]],
                                   folds_sub, ctx.subjects[tested], metric=metric, level="window",
                                   n_boot=int(b["n_boot"]), level_ci=float(b["level"]), seed=int(b["seed"]))
            samples.append(np.asarray(pc.bootstrap.samples, dtype=float))
    except ValueError as err:
        ctx.note(f"{what}: no paired interval ({err}); the gate reads inconclusive")
        return None
    mean = np.nanmean(np.stack(samples), axis=0)
    a = (1 - float(b["level"])) / 2
    lo, hi = np.quantile(mean[np.isfinite(mean)], [a, 1 - a])
    ctx.note(f"{what}: paired {float(b['level']):.0%} interval [{lo:+.4f}, {hi:+.4f}] over {len(pairs)} pair(s)")
    return float(lo), float(hi)


class _SubResult:
    """A ProbeResult restricted to rows ``idx`` (what :func:`paired_comparison` reads: proba and classes)."""

    def __init__(self, res, idx):
        self.proba = res.proba[idx]
        self.classes = res.classes


def _reindex_folds(folds, tested):
    pos = np.full(int(tested.max()) + 1, -1)
    pos[tested] = np.arange(tested.size)
    return [(np.setdiff1d(np.arange(tested.size), pos[te]), pos[te]) for _, te in folds]


def _permutation(ctx: _Ctx, rep: Rep, get_X) -> dict:
    """Label permutation of one representation's probe (Control 3), resumable."""
    from eegfm_bench.controls.permutation import permutation_test

    p = ctx.cfg["permutation"]
    metric = ctx.cfg["metric"]
    chash = _hash({"step": "permutation", "rep": rep.name, "perm": p, "scheme": ctx.scheme, "probe": ctx.cfg["probe"],
                   "metric": metric, "folds": ctx.fold_ids})
    key = dict(task=ctx.task.name, model=rep.model, init=rep.init, regime=rep.regime, head=rep.head, seed=rep.seed,
               condition=f"label_permutation_{ctx.scheme}")
    path = ctx.out / "permutation" / f"{_safe(rep.name)}.json"
    if ctx.store.done(chash, f"the permutation test of {rep.name}", **key) and path.is_file():
        return json.loads(path.read_text())
    t0 = time.time()
    res = permutation_test(get_X(), ctx.y_idx, ctx.folds, groups=ctx.subjects, scheme=ctx.scheme,
                           n_permutations=int(p["n"]), metric=metric, level="window", spec=ctx.spec_for(rep.source),
                           seed=int(p["seed"]), progress=ctx.progress, statistic=p.get("statistic", "mean_fold"))
    d = res.to_dict()
    d["seconds"] = time.time() - t0
    d["representation"] = rep.name
    _write_json(path, d)
    rows = [{**key, "fold": "all", "metric": f"{metric}_window_{m}", "value": float(v)}
            for m, v in (("observed", res.observed), ("null_mean", res.null_mean), ("null_sd", res.null_sd),
                         ("null_max", float(np.max(res.null))), ("p_value", res.p_value),
                         ("n_permutations", res.n_permutations), ("n_redrawn", res.n_redrawn))]
    ctx.store.append(rows, chash)
    ctx.note(f"permutation {rep.name}: observed {res.observed:.4f}, null {res.null_mean:.4f} ± {res.null_sd:.4f}, "
             f"p = {res.p_value:.4f} ({res.n_permutations} perms, {res.n_redrawn} unscorable draws redrawn, "
             f"{d['seconds']:.0f} s)")
    return d


def _scrambled(ctx: _Ctx, entry: dict, cv_cfg: dict | None, *, units: set | None = None,
               list_units: bool = False) -> dict:
    """Correct- vs scrambled-label adaptation for one entry (Control 4), every fold and seed, resumable.

    ``list_units``: return ``{"units": [...]}``, the adaptation fits (``<model>-<regime>-<head>-<labels>-seed<s>
    /fold<k>``) that have no stored rows yet, and train nothing (a launcher's job list). ``units``: train only
    these fits (a launcher's worker) and return ``{"units": [...]}`` without collecting the entry's results.
    """
    from tqdm.auto import tqdm

    from eegfm_bench.controls.adapt import scrambled_source_labels, train_fold
    from eegfm_bench.controls.embeddings import align_rows, row_keys
    from eegfm_bench.runs.cells import cv_defaults

    # schedule: the matching cv run's (when there is one), else the cv defaults, then the entry's overrides
    defaults = cv_defaults()
    base_tr, base_opt, run = defaults["trainer"], defaults["optim"], None
    schedule_from = "cv defaults + entry"
    batch = int(ctx.cfg["data"]["batch_size"])
    if cv_cfg is not None:
        match = [r for r in cv_cfg["runs"] if r["model"] == entry["model"] and r["regime"] == entry["regime"]
                 and entry["head"] in r["heads"]]
        if match:
            run = match[0]
            base_tr = merge_config(cv_cfg["trainer"], run.get("trainer") or {}, "trainer.")
            base_opt = merge_config(cv_cfg["optim"], run.get("optim") or {}, "optim.")
            from eegfm_bench.runs.cells import fixed_batch_size

            batch = fixed_batch_size(cv_cfg["data"], fallback=batch)  # `auto` in the cv run: this config's
            schedule_from = f"cv run {ctx.cfg['cv_out_dir']} ({entry['model']}/{entry['regime']}/{entry['head']})"
    overrides = [k for k in ("trainer", "optim", "backbone_kwargs", "head_kwargs", "lora", "pretrained") if k in entry]
    correct = entry["correct"]
    if correct == "auto":
        correct = "rerun"  # one fixed schedule for both arms (§4.2.4); `cv` reuse is unmatched (early stopping)
    if correct == "cv":
        if run is None:
            raise ConfigError(f"scrambled entry {entry['model']}/{entry['regime']}/{entry['head']}: correct: cv but the "
                              f"cv run {ctx.cfg['cv_out_dir']} has no such run; fix: correct: rerun")
        if overrides:
            raise ConfigError(f"scrambled entry {entry['model']}/{entry['regime']}: correct: cv reuses the cv run's "
                              f"correct-label predictions, so its settings cannot be overridden ({overrides}); fix: "
                              "drop the overrides or set correct: rerun")
        seeds = [int(cv_cfg["seed"])]
        init_seed_of = {seeds[0]: int(run.get("init_seed", cv_cfg["seed"]))}
        if entry.get("seeds_given") and list(entry["seeds"]) != seeds:
            raise ConfigError(f"scrambled entry {entry['model']}: correct: cv fixes the seeds to the cv run's "
                              f"{seeds}, not {entry['seeds']}; fix: drop seeds or set correct: rerun")
    else:
        seeds = [int(x) for x in entry["seeds"]]
        init_seed_of = {x: x for x in seeds}
    run = run or {}
    trainer_cfg = merge_config(base_tr, entry.get("trainer") or {}, "scrambled.trainer.")
    optim = merge_config(base_opt, entry.get("optim") or {}, "scrambled.optim.")
    bk = entry.get("backbone_kwargs", run.get("backbone_kwargs"))
    hk = entry.get("head_kwargs", run.get("head_kwargs"))
    lora = entry.get("lora", run.get("lora"))
    pretrained = entry.get("pretrained", run.get("pretrained"))
    model, regime, head = entry["model"], entry["regime"], entry["head"]
    ws_m = _model_ws(ctx, model)
    align_rows(ctx.keys, row_keys(ws_m.recording, ws_m.window_index), f"{model} windows")  # same windows
    groups_m = ws_m.subject if ctx.split.spec.group_by == "subject" else ws_m.recording
    fixed = correct != "cv"
    pooling = entry.get("pooling") or "mean"
    out = {"model": model, "regime": regime, "head": head, "schedule_from": schedule_from, "trainer": trainer_cfg,
           "optim": optim, "seeds": seeds, "init_seeds": init_seed_of, "correct_from": correct,
           "schedule": (f"fixed: {trainer_cfg.get('max_epochs')} epochs, no early stopping, last weights, both arms"
                        if fixed else "cv recipe: early stopping on each arm's own validation labels (unmatched)"),
           "scored_by": f"frozen {ctx.spec_for('adapted').kind} probe refitted on the true training labels of each fold, on the "
                        f"adapted encoder's {pooling}-pooled tokens (§4.2.4)", "runs": {}, "runs_head": {}}
    cells = [(s, k_pos, k, lab) for s in seeds for k_pos, k in enumerate(ctx.fold_ids)
             for lab in ("correct", "scrambled")]
    bar = tqdm(cells, desc=f"scrambled-label {model}/{regime}", disable=not ctx.progress or list_units, unit="fit")
    listed: list[str] = []
    user = (ctx.cfg.get("user_models") or {}).get(model)
    if user and user.get("pretrained"):
        init_name = _init_label(ctx.cfg, model, "declared")
    else:
        init_name = "pretrained:" + str(pretrained) if pretrained else "random"
    for s, k_pos, k, lab in bar:
        unit = {"step": "adaptation", "protocol": "probe-refit-v2",
                "entry": {kk: vv for kk, vv in entry.items() if kk != "seeds_given"},
                "trainer": trainer_cfg, "optim": optim, "backbone_kwargs": bk, "head_kwargs": hk, "lora": lora,
                "pretrained": pretrained, "labels": lab, "data": ctx.cfg["data"], "batch": batch,
                "correct_from": correct, "init_seed": init_seed_of[s], "probe": ctx.cfg["probe"], "pooling": pooling,
                **_user_decl(ctx.cfg, model)}
        chash = _hash(unit)
        key = dict(task=ctx.task.name, model=model, init=f"{init_name}#seed{init_seed_of[s]}", regime=regime,
                   head=head, fold=k, seed=s, condition=f"{lab}_labels")
        tag = f"{model}-{regime}-{head}-{lab}-seed{s}"
        path = ctx.out / "adaptation" / "predictions" / f"{tag}-fold{k}.csv"
        probe_path = ctx.out / "adaptation" / "probe_predictions" / f"{tag}-fold{k}.csv"
        if ctx.store.done(chash, f"the {lab}-label adaptation of {model}/{regime} fold {k} seed {s}", **key) \
                and path.is_file() and probe_path.is_file():
            continue
        if list_units:
            listed.append(f"{tag}/fold{k}")
            continue
        if units is not None and f"{tag}/fold{k}" not in units:
            continue
        y_train, used_scheme = None, None
        if lab == "correct" and correct == "cv":
            from eegfm_bench.runs.output import CVRun

            cv_run = CVRun(ctx.cfg["cv_out_dir"])
            cks = {ck.fold: ck for ck in cv_run.checkpoints([model], [regime], [head])}
            src_file = Path(cks[k].predictions) if k in cks and cks[k].predictions else Path("<missing>")
            if not src_file.is_file():
                raise FileNotFoundError(f"the cv run's predictions of {model}/{regime}/{head} fold {k} ({src_file}) are "
                                        "missing; fix: finish the cv run, or set correct: rerun")
            pred = pd.read_csv(src_file)
            pred["window_index"] = ws_m.window_index[pred["index"].to_numpy()]
            cv_rows = cv_run.results
            sel = cv_rows[(cv_rows.model == model) & (cv_rows.regime == regime) & (cv_rows["head"] == head)
                          & (cv_rows.fold.astype(str) == str(k)) & (cv_rows.config_hash.astype(str) == cks[k].config_hash)]
            info = {m: float(sel[sel.metric == m].value.iloc[0]) if (sel.metric == m).any() else float("nan")
                    for m in ("epochs", "fit_seconds")}
            from eegfm_bench.runs.output import load_fold_model

            net = load_fold_model(cks[k].path)
        else:
            if lab == "scrambled":
                tr_m, va_m, _ = ctx.split.indices(groups_m, k)
                y_train, used_scheme = scrambled_source_labels(ws_m.y, ws_m.subject, np.concatenate([tr_m, va_m]),
                                                               entry["scheme"],
                                                               seed=int(entry["perm_seed"]) + 1000 * int(s) + int(k))
            bar.set_postfix_str(f"seed {s} fold {k} {lab}")
            pred, info, net = train_fold(task=ctx.cfg["task"], model=model, regime=regime, head=head, fold=k,
                                         split=ctx.split, ws=ws_m, seed=int(s), init_seed=init_seed_of[s],
                                         trainer_cfg=trainer_cfg, optim=optim, batch_size=batch, out_dir=ctx.out,
                                         tag=tag, backbone_kwargs=bk, head_kwargs=hk, lora=lora,
                                         pretrained=pretrained, y_train=y_train, progress=False,
                                         fixed_epochs=fixed, return_model=True, user_model=user)
        path.parent.mkdir(parents=True, exist_ok=True)
        pred.to_csv(path, index=False)
        # §4.2.4: freeze the adapted encoder, refit the probe on the TRUE training labels of this fold, score the test
        from eegfm_bench.controls.adapt import adapted_embedding
        from eegfm_bench.controls.probes import fit_predict_folds

        X = adapted_embedding(net, ws_m, ctx.keys, pooling=pooling, trainer=ctx.cfg["trainer"], batch_size=batch,
                              cache_dir=ctx.cfg["data"]["cache_dir"])
        tr_f, te_f = ctx.folds[k_pos]
        p_probe = fit_predict_folds(X, ctx.y_idx, [(tr_f, te_f)], ctx.spec_for("adapted"), ctx.classes.size)[0][te_f]
        del net, X
        pp = pd.DataFrame({"key": ctx.keys[te_f], "y": ctx.y_idx[te_f]})
        for j in range(ctx.classes.size):
            pp[f"p{j}"] = p_probe[:, j]
        probe_path.parent.mkdir(parents=True, exist_ok=True)
        pp.to_csv(probe_path, index=False)
        proba = pred[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()
        from eegfm_bench.controls.probes import classification_metrics

        m = classification_metrics(pred["y"].to_numpy(), proba, ctx.classes.size)
        te = ctx.folds[k_pos][1]
        if len(pred) != te.size:
            raise RuntimeError(f"{tag} fold {k}: {len(pred)} test predictions for {te.size} test windows of the "
                               "feature fold; fix: the model's windows must match the feature windows")
        rows = [{**key, "metric": f"head_{mm}_window", "value": float(v), "n_windows": int(len(pred)),
                 "n_subjects": int(pred["subject"].nunique())} for mm, v in m.items()]
        mp = classification_metrics(ctx.y_idx[te_f], p_probe, ctx.classes.size)
        rows += [{**key, "metric": f"{mm}_window", "value": float(v), "n_windows": int(te_f.size)}
                 for mm, v in mp.items()]
        rows += [{**key, "metric": mm, "value": float(info[mm])} for mm in ("epochs", "fit_seconds")]
        if used_scheme:
            rows.append({**key, "metric": f"scheme_{used_scheme}", "value": 1.0})
        ctx.store.append(rows, chash)
    if list_units or units is not None:
        return {"units": listed}
    # collect (from files, so reruns see the same numbers)
    metric = ctx.cfg["metric"]
    for lab in ("correct", "scrambled"):
        per_seed, per_seed_head = {}, {}
        for s in seeds:
            proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
            proba_head = np.full((len(ctx.keys), ctx.classes.size), np.nan)
            for k_pos, k in enumerate(ctx.fold_ids):
                tag = f"{model}-{regime}-{head}-{lab}-seed{s}"
                te = ctx.folds[k_pos][1]
                dfp = pd.read_csv(ctx.out / "adaptation" / "probe_predictions" / f"{tag}-fold{k}.csv")
                o = align_rows(ctx.keys[te], dfp["key"].astype(str).to_numpy(), "probe predictions")
                proba[te] = dfp[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()[o]
                df = pd.read_csv(ctx.out / "adaptation" / "predictions" / f"{tag}-fold{k}.csv")
                o = align_rows(ctx.keys[te], row_keys(df["recording"], df["window_index"]), "adaptation predictions")
                proba_head[te] = df[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()[o]
            res, res_h = _probe_result(ctx, proba), _probe_result(ctx, proba_head)
            per_seed[int(s)] = {"score": res.mean_fold(metric), "folds": res.fold_values(metric).tolist(),
                                "proba": proba}
            per_seed_head[int(s)] = {"score": res_h.mean_fold(metric), "folds": res_h.fold_values(metric).tolist()}
        out["runs"][lab] = per_seed
        out["runs_head"][lab] = per_seed_head
    return out


def _identity(ctx: _Ctx) -> dict:
    """Dataset-identity probe (§4.4) on the handcrafted family of two tasks' recordings, resumable."""
    from eegfm_bench.controls.identity import dataset_identity_probe, shared_channels
    from eegfm_bench.data.tasks import get_task

    idc = ctx.cfg["identity"]
    ta, tb = idc["tasks"]
    names = (get_task(ta).dataset, get_task(tb).dataset)
    chash = _hash({"step": "identity", "identity": idc, "features": ctx.cfg["features"]})
    key = dict(task=f"identity:{names[0]}-vs-{names[1]}", model=f"handcrafted_{idc['family']}", init="none",
               regime="frozen_probe", head="probe_logreg", seed=int(idc["seed"]), condition="dataset_identity")
    path = ctx.out / "identity" / f"{names[0]}-vs-{names[1]}-{idc['family']}.json"
    if ctx.store.done(chash, "the dataset-identity probe", **key) and path.is_file() and \
            "encoders" in json.loads(path.read_text()):
        d = json.loads(path.read_text())
        d["encoders"] = [_identity_encoder(ctx, m, d["shared_channels"], names) for m in ctx.cfg["models"]]
        return d
    subj = idc["subjects"] or {}
    wss = [_load_ws(ctx.cfg, t, ctx.cfg["features"]["preprocessing"], ctx.progress, subjects=subj.get(get_task(t).name),
                    max_windows=idc["max_windows_per_subject"]) for t in (ta, tb)]
    shared = shared_channels(wss[0].ch_names, wss[1].ch_names, names)  # raises, listing each dataset's channels
    t0 = time.time()
    Fs = []
    for t, w in zip((ta, tb), wss):
        names_w = {c.lower(): c for c in w.ch_names}
        Fs.append(_features(ctx, idc["family"], w, [names_w[c.lower()] for c in shared], f"identity-{get_task(t).name}"))
    res = dataset_identity_probe(Fs[0], wss[0].recording, Fs[1], wss[1].recording, names=names,
                                 n_folds=int(idc["n_folds"]), pca_k=int(idc["pca_k"]), C=float(idc["C"]),
                                 n_permutations=int(idc["n_permutations"]), n_balanced=int(idc["n_balanced"]),
                                 seed=int(idc["seed"]), progress=ctx.progress, subjects_a=wss[0].subject,
                                 subjects_b=wss[1].subject, group_by=idc["group_by"])
    d = res.to_dict()
    d.update(tasks=[ta, tb], shared_channels=shared, n_windows=[len(wss[0]), len(wss[1])],
             n_subjects=[int(np.unique(w.subject).size) for w in wss], family=idc["family"],
             seconds=time.time() - t0,
             note="one unit per recording (mean feature vector); preprocessing "
                  f"{ctx.cfg['features']['preprocessing']} applied per dataset before channel restriction (the "
                  "average reference uses each dataset's full montage); dataset membership confounds site, device, "
                  "montage, population and protocol (paper 001 §4.4)")
    _write_json(path, d)
    rows = [{**key, "fold": "all", "metric": m, "value": float(v)}
            for m, v in (("auroc_full", res.auroc_full), ("auroc_pca", res.auroc_pca), ("pca_k", res.pca_k),
                         ("null_mean", d["null_mean"]), ("null_max", float(np.max(res.null_aurocs))),
                         ("balanced_mean", d["balanced_mean"]), ("balanced_min", float(np.min(res.balanced_aurocs))),
                         ("n_units_a", res.n_units[0]), ("n_units_b", res.n_units[1]),
                         ("n_features", res.n_features), ("n_shared_channels", len(shared)))]
    ctx.store.append(rows, chash)
    ctx.note(f"identity {names[0]} vs {names[1]}: AUROC full {res.auroc_full:.4f}, PCA-{res.pca_k} "
             f"{res.auroc_pca:.4f}, null {d['null_mean']:.4f}, balanced {d['balanced_mean']:.4f}")
    d["encoders"] = [_identity_encoder(ctx, m, shared, names) for m in ctx.cfg["models"]]
    _write_json(path, d)
    return d


def _identity_encoder(ctx: _Ctx, m: dict, shared: list[str], names: tuple[str, str]) -> dict:
    """The dataset-identity probe on one encoder's frozen embeddings (paper 001 Table 7), resumable.

    Both datasets' windows are taken under the encoder's own preprocessing and restricted to the shared channels (in
    one order), one encoder is built on those channels (the configured checkpoint, else the first random-init seed),
    its frozen tokens are pooled as configured, and the same probe as the handcrafted row is run on the unit means:
    full space, in-fold PCA, permuted null, balanced subsampling."""
    from eegfm_bench.controls.embeddings import build_encoder, pool_tokens
    from eegfm_bench.controls.identity import dataset_identity_probe
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.features import extract_features

    idc = ctx.cfg["identity"]
    pretrained, seed = m.get("pretrained"), int(m["init_seeds"][0])
    init = _init_label(ctx.cfg, m["model"], pretrained) if pretrained else f"random#seed{seed}"
    chash = _hash({"step": "identity_encoder", "identity": idc, "model": m, "shared": shared,
                   **_user_decl(ctx.cfg, m["model"])})
    key = dict(task=f"identity:{names[0]}-vs-{names[1]}", model=m["model"], init=init, regime="frozen_probe",
               head=f"{m['pooling']}+probe_logreg", seed=seed, condition="dataset_identity")
    path = ctx.out / "identity" / f"{names[0]}-vs-{names[1]}-{_safe(m['model'])}-{_safe(init)}.json"
    if ctx.store.done(chash, f"the dataset-identity probe of {m['model']}", **key) and path.is_file():
        return json.loads(path.read_text())
    t0 = time.time()
    prep = BACKBONES.get(m["model"]).preprocessing.to_dict()
    subj = idc["subjects"] or {}
    feats, units, subjects = [], [], []
    adapter = None
    for t in idc["tasks"]:
        ws = _load_ws(ctx.cfg, t, prep, ctx.progress, subjects=subj.get(get_task(t).name),
                      max_windows=idc["max_windows_per_subject"])
        low = {c.lower(): i for i, c in enumerate(ws.ch_names)}
        idx = [low[c.lower()] for c in shared]
        sub_ws = select_channels(ws, [ws.ch_names[i] for i in idx])  # re-referenced over the shared channels
        if adapter is None:
            adapter, _ = build_encoder(m["model"], list(shared), sub_ws.n_times, 2, init_seed=seed,
                                       pretrained=pretrained, backbone_kwargs=m.get("backbone_kwargs"))
        tokens = extract_features(adapter, sub_ws, parts=("tokens",), trainer=ctx.cfg["trainer"],
                                  batch_size=int(ctx.cfg["data"]["batch_size"]), cache_dir=ctx.cfg["data"]["cache_dir"],
                                  progress=ctx.progress).array("tokens")
        feats.append(pool_tokens(tokens, m["pooling"]))
        units.append(ws.recording)
        subjects.append(ws.subject)
    res = dataset_identity_probe(feats[0], units[0], feats[1], units[1], names=names, n_folds=int(idc["n_folds"]),
                                 pca_k=int(idc["pca_k"]), C=float(idc["C"]), n_permutations=int(idc["n_permutations"]),
                                 n_balanced=int(idc["n_balanced"]), seed=int(idc["seed"]), progress=ctx.progress,
                                 subjects_a=subjects[0], subjects_b=subjects[1], group_by=idc["group_by"])
    d = res.to_dict()
    d.update(model=m["model"], init=init, pooling=m["pooling"], n_dims=int(feats[0].shape[1]),
             seconds=time.time() - t0, note=f"{m['model']} ({init}) built on the {len(shared)} shared channels, "
             f"frozen, {m['pooling']}-pooled tokens under its own preprocessing, one unit per recording")
    _write_json(path, d)
    rows = [{**key, "fold": "all", "metric": mm, "value": float(v)}
            for mm, v in (("auroc_full", res.auroc_full), ("auroc_pca", res.auroc_pca), ("pca_k", res.pca_k),
                          ("null_mean", d["null_mean"]), ("balanced_mean", d["balanced_mean"]),
                          ("n_features", res.n_features))]
    ctx.store.append(rows, chash)
    ctx.note(f"identity {names[0]} vs {names[1]} on {m['model']} ({init}): AUROC full {res.auroc_full:.4f}, "
             f"PCA-{res.pca_k} {res.auroc_pca:.4f}, null {d['null_mean']:.4f}")
    return d


# ================================================================================================ gates
def _provenance(model: str, init: str, task) -> tuple[list | None, str]:
    """Pretraining corpora for gate (iii) (paper 001 §3.6) from :mod:`eegfm_bench.models.catalogue`.

    A random initialisation has no pretraining exposure (``[]``); the note then says what the model's *published*
    checkpoint would show for this dataset. For a checkpoint, the catalogue's
    :func:`~eegfm_bench.models.catalogue.pretraining_overlap` against the task's dataset and its
    ``pretraining_aliases`` decides: its hits are passed as the corpora (gate iii fails on them); with no hit the
    full listed inventory is passed (gate iii passes); an incomplete inventory without a hit gives ``None``
    (gate iii ``missing``: absence of evidence is not certified).

    Returns
    -------
    corpora : list of str or None
    note : str
        One line for the report.

    Raises
    ------
    RuntimeError
        For a checkpoint claim when ``eegfm_bench.models.catalogue`` cannot be imported (the fix is named).
    """
    aliases = (task.dataset, *task.pretraining_aliases)
    from eegfm_bench.models.user import user_spec

    spec = user_spec(model)
    if spec is not None:  # a user model: its declaration says what its weights saw
        if not init.startswith("pretrained"):
            return [], "random initialisation: no pretraining exposure (user model)"
        corpora = spec.get("pretraining_corpora")
        if corpora is None:
            return None, (f"user model {model}: no pretraining_corpora declared for its weights; fix: "
                          f"user_models.{model}.pretraining_corpora: [...] (the datasets they were pretrained on)")
        low = {a.lower() for a in aliases}
        hits = [c for c in corpora if c.lower() in low]
        if hits:
            return hits, f"declared: {model} pretraining corpora overlap {task.dataset} via {hits}"
        return list(corpora), f"declared: no {model} pretraining corpus ({list(corpora)}) overlaps {task.dataset} ({aliases})"
    try:
        from eegfm_bench.models import catalogue as cat
    except ImportError as err:
        if init.startswith("pretrained"):
            raise RuntimeError(f"gate (iii) for {model} ({init}) needs eegfm_bench.models.catalogue, which cannot be "
                               f"imported ({err}); fix: restore models/catalogue.py and catalogue.yaml") from err
        return [], "random initialisation: no pretraining exposure (model catalogue unavailable)"
    checkpoint = init.split(":", 1)[1].split("@")[0] if init.startswith("pretrained") else None
    hub_ids = cat.load_catalogue(check_registry=False).get(model, {}).get("hub_ids") or []
    ck = checkpoint if checkpoint in hub_ids else None
    try:
        hits = cat.pretraining_overlap(model, aliases, checkpoint=ck)
        complete = True
    except cat.IncompleteInventoryError as err:
        hits, complete = [], False
        why = str(err)
    if not init.startswith("pretrained"):
        pub = (f"the published {model} inventory overlaps {task.dataset}: {hits}" if hits else
               f"no overlap listed for the published {model} inventory" + ("" if complete else " (incomplete)"))
        return [], f"random initialisation: no pretraining exposure ({pub})"
    if hits:
        return list(hits), f"catalogue: {model} pretraining overlaps {task.dataset} via {hits}"
    if not complete:
        return None, f"catalogue inventory incomplete: {why}"
    corpora = cat.pretraining_corpora(model, ck)
    return list(corpora or []), f"catalogue: no listed {model} corpus overlaps {task.dataset} ({aliases})"


def _gates(ctx: _Ctx, hand: dict, frozen: dict, cv_reps: list, perms: dict, paired: dict, scrambled: list) -> list:
    from eegfm_bench.controls.gates import RELATED_SOURCES, ClaimEvidence, evaluate_gates

    metric = ctx.cfg["metric"]
    alpha = float(ctx.cfg["gates"]["alpha"])
    comp_scores = {f: _score(r, metric) for f, r in hand.items()}
    related = dict(RELATED_SOURCES)
    related[ctx.task.dataset] = tuple(ctx.task.pretraining_aliases)
    reports, context = [], []

    def claim(rep: Rep, *, random_scores, perm_p, perm_src, adaptation=False, scrambled_score=None,
              scrambled_correct=None, extra=None, random_ci=None, scrambled_ci=None):
        corpora, prov_note = _provenance(rep.model, rep.init, ctx.task)
        pr = paired.get(rep.name)
        ci = None if pr is None else (pr["levels"]["window"]["bootstrap"]["low"],
                                      pr["levels"]["window"]["bootstrap"]["high"])
        ev = ClaimEvidence(model=rep.name, task=ctx.task.name, evaluation_dataset=ctx.task.dataset,
                           model_score=_score(rep, metric), comparator_scores=comp_scores, paired_ci=ci,
                           pretraining_corpora=corpora, random_init_scores=random_scores, permutation_p=perm_p,
                           adaptation=adaptation, scrambled_label_score=scrambled_score,
                           scrambled_correct_score=scrambled_correct, alpha=alpha, metric=metric,
                           random_init_ci=random_ci, scrambled_ci=scrambled_ci,
                           ci_level=float(ctx.cfg["bootstrap"]["level"]))
        r = evaluate_gates(ev, related=related)
        reports.append(r)
        context.append({"claim": rep.name, "source": rep.source, "init": rep.init, "provenance": prov_note,
                        "permutation_source": perm_src, **(extra or {})})

    first_random = {}
    for model, by_init in frozen.items():
        m_cfg = next(m for m in ctx.cfg["models"] if m["model"] == model)
        rnd = {lab: r for lab, r in by_init.items() if lab.startswith("random")}
        first_random[model] = rnd[f"random#seed{m_cfg['init_seeds'][0]}"]
        rci = None
        if "pretrained" in by_init:
            rep = by_init["pretrained"]
            rs = [_score(r, metric) for r in rnd.values()]
            rci = _arm_interval(ctx, [(rep.result.proba, r.result.proba) for r in rnd.values()],
                                f"gate (iv) {rep.name} − matched random init")
        else:
            rep = first_random[model]
            rs = None
        pp = perms.get(rep.name)
        claim(rep, random_scores=rs, random_ci=rci, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {rep.name}",
              extra={"random_init": None if rs is not None else "no pretrained checkpoint configured: the claim is "
                     "the random-init representation itself, so 'pretrained > matched random init' has no evidence"})
    scr_by = {(s["model"], s["regime"], s["head"]): s for s in scrambled}
    used_scr = set()
    for rep in cv_reps:
        key = (rep.model, rep.regime, rep.head)
        frozen_rep = None
        if rep.model in frozen:
            frozen_rep = frozen[rep.model].get("pretrained") if rep.init.startswith("pretrained") \
                else first_random.get(rep.model)
        pp = perms.get(frozen_rep.name) if frozen_rep is not None else None
        adaptation = rep.regime in ("full", "lora")
        scr = scr_by.get(key) if adaptation else None
        if scr is not None:
            used_scr.add(key)
        claim(rep, random_scores=None, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {frozen_rep.name} (same backbone)",
              adaptation=adaptation, scrambled_ci=None if scr is None else _scrambled_interval(ctx, scr),
              scrambled_score=None if scr is None else float(np.mean([v["score"] for v in scr["runs"]["scrambled"].values()])),
              scrambled_correct=None if scr is None else float(np.mean([v["score"] for v in scr["runs"]["correct"].values()])),
              extra={"random_init": "cv claims carry no matched random-init contrast here" if not rep.init.startswith(
                  "pretrained") else "add a random-init cv run of the same model for this contrast"})
    for key, scr in scr_by.items():
        if key in used_scr:
            continue
        rep = scr["rep"]
        frozen_rep = first_random.get(rep.model)
        pp = perms.get(frozen_rep.name) if frozen_rep is not None else None
        claim(rep, random_scores=None, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {frozen_rep.name} (same backbone)",
              adaptation=True, scrambled_ci=_scrambled_interval(ctx, scr),
              scrambled_score=float(np.mean([v["score"] for v in scr["runs"]["scrambled"].values()])),
              scrambled_correct=float(np.mean([v["score"] for v in scr["runs"]["correct"].values()])),
              extra={"random_init": "adaptation from random init: no pretrained checkpoint to contrast"})
    return reports, context


def _scrambled_interval(ctx: _Ctx, scr: dict) -> tuple | None:
    """Gate (iv)'s correct- minus scrambled-label interval: the probe predictions of each seed, paired."""
    runs = scr["runs"]
    if "paired_ci" in scr:
        return scr["paired_ci"]
    seeds = [s for s in runs["correct"] if s in runs["scrambled"] and "proba" in runs["correct"][s]
             and "proba" in runs["scrambled"][s]]
    if not seeds:
        return None
    if "paired_ci" not in scr:  # once per entry (a cv claim and the entry's own claim share it)
        scr["paired_ci"] = _arm_interval(ctx, [(runs["correct"][s]["proba"], runs["scrambled"][s]["proba"])
                                               for s in seeds],
                                         f"gate (iv) {scr['model']} {scr['regime']}: correct − scrambled labels")
    return scr["paired_ci"]


# ================================================================================================ report
def _fmt(v, nd=4):
    return "—" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{nd}f}"


def controls_main(config, *, args=(), progress: bool = True, worker_units=None) -> dict:
    """Run the negative-control suite of one config and write its report (paper 001 §3.6, §4, §5.5).

    Parameters
    ----------
    config : str, path or dict
        A controls YAML (see the module docstring) or the dict it holds.
    progress : bool
        Progress bars (feature chunks, token batches, permutations, adaptation fits).
    worker_units : list of str, optional
        A launcher's worker: train only these scrambled-label adaptation fits (rows as part files) and return
        ``{"failures": []}``. With ``launcher: {kind: local | slurm}`` the launching process submits every fit
        without rows as a job first, then runs the other steps itself and finds the fits done.

    Returns
    -------
    dict
        Paths of ``gates.json``, ``gates.md``, ``controls_report.md``, ``controls_report.json``, ``results.csv``,
        and ``wall_seconds``.

    Raises
    ------
    ConfigError
        Bad config values (before any data is read), too few subjects for the folds or for the within-fold
        bootstrap, a unit level the labels do not define, or stored results from other settings.
    ValueError
        A permutation scheme that does not fit the labels (naming the one that does), two identity datasets
        without shared channels (listing each one's), features on too-short windows.
    SplitMismatchError
        The cv run's ``splits.json`` does not match these windows.
    RowAlignmentError, FileNotFoundError
        A backbone's windows or a cv run's predictions do not cover the feature windows.
    """
    from eegfm_bench.controls.gates import scrambled_label_contrast
    from eegfm_bench.reports.controls import write_gate_report
    from eegfm_bench.controls.permutation import check_scheme, infer_scheme
    from eegfm_bench.controls.probes import ProbeSpec, encode_labels
    from eegfm_bench.controls.embeddings import row_keys
    from eegfm_bench.data.splits import SplitConfigError, SplitSpec, make_split, save_or_verify
    from eegfm_bench.data.tasks import get_task

    t_start = time.time()
    cfg = load_config(config, args)
    cv_cfg = _cv_config(cfg)
    if cv_cfg is not None:
        if cv_cfg["task"] != cfg["task"]:
            raise ConfigError(f"cv_out_dir {cfg['cv_out_dir']} is a run of task {cv_cfg['task']!r}, not "
                              f"{cfg['task']!r}; fix: point cv_out_dir at a run of this task")
        for k in ("subjects", "max_windows_per_subject"):
            mine = (config if isinstance(config, dict) else yaml.safe_load(Path(config).read_text())).get(
                "data", {}).get(k)
            if mine is not None and mine != cv_cfg["data"][k]:
                raise ConfigError(f"data.{k} = {mine} differs from the cv run's {cv_cfg['data'][k]}; paired "
                                  "comparisons need the same windows; fix: drop data.{k} (it is taken from the cv run)")
            cfg["data"][k] = cv_cfg["data"][k]
        cfg["split"] = {**cv_cfg["split"]}
    out = Path(cfg["out_dir"])
    worker = worker_units is not None
    out.mkdir(parents=True, exist_ok=True)
    if not worker:
        (out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    task = get_task(cfg["task"])
    d, sp = cfg["data"], cfg["split"]
    ws = _load_ws(cfg, cfg["task"], cfg["features"]["preprocessing"], progress, subjects=d["subjects"],
                  max_windows=d["max_windows_per_subject"])
    y_idx, classes = encode_labels(ws.y)
    subjects = np.asarray(ws.subject).astype(str)
    spec = SplitSpec(sp["scheme"], sp["k"], sp["seed"], sp["n_val_groups"], sp["group_by"])
    groups = subjects if spec.group_by == "subject" else np.asarray(ws.recording).astype(str)
    n_subj = np.unique(subjects).size
    if spec.scheme == "kfold" and spec.k > n_subj:
        raise ConfigError(f"{n_subj} subjects for {spec.k} folds; fix: split.k <= {n_subj} (or add subjects)")
    try:
        split = make_split(ws.y, groups, spec, task.name)
    except SplitConfigError as err:
        raise ConfigError(f"too few subjects for the requested folds: {err}") from err
    split_path = Path(cfg["cv_out_dir"]) / "splits.json" if cv_cfg is not None else out / "splits.json"
    split = save_or_verify(split, split_path)
    if cv_cfg is not None:
        save_or_verify(split, out / "splits.json")
    fold_ids = list(sp["folds"]) if sp.get("folds") is not None else list(range(len(split.folds)))
    folds = []
    for k in fold_ids:
        tr, va, te = split.indices(groups, k)
        folds.append((np.sort(np.concatenate([tr, va])), te))
    # --- checks before any heavy computation
    n_test_subj = [np.unique(subjects[te]).size for _, te in folds]
    if not (all(n == 1 for n in n_test_subj) or all(n >= 2 for n in n_test_subj)):
        raise ConfigError(f"too few subjects for the paired within-fold bootstrap: test folds hold "
                          f"{n_test_subj} subjects (each needs >= 2, or exactly 1 for leave-one-subject-out); "
                          f"fix: split.k <= {n_subj // 2} for {n_subj} subjects, scheme: loso, or more subjects")
    if len(folds) < 2:
        raise ConfigError(f"{len(folds)} evaluated fold(s): paired tests across folds need at least 2; fix: "
                          "split.folds: null (all folds)")
    scheme = cfg["permutation"]["scheme"]
    if scheme == "auto":
        scheme = infer_scheme(y_idx, subjects)  # raises when neither subject scheme fits
    check_scheme(y_idx, subjects, scheme)
    agg = cfg["aggregate"]
    const = {}
    for lv, u in (("subject", subjects), ("recording", np.asarray(ws.recording).astype(str))):
        n_lab = pd.Series(y_idx).groupby(u).nunique()
        const[lv] = bool((n_lab == 1).all())
    if agg == "auto":
        agg = "subject" if const["subject"] else "recording" if const["recording"] else "none"
    elif agg != "none" and not const[agg]:
        raise ConfigError(f"aggregate: {agg} but some {agg}s hold both classes, so a {agg}-level outcome is "
                          "undefined (paper 001 §3.5); fix: aggregate: auto or none")
    agg_level = None if agg == "none" else agg
    agg_units = None if agg_level is None else (subjects if agg_level == "subject" else
                                                np.asarray(ws.recording).astype(str))
    bad = set(cfg["probe"].get("overrides") or {}) - {"handcrafted", "frozen", "adapted"}
    bad_keys = {k for ov in (cfg["probe"].get("overrides") or {}).values() for k in (ov or {})} - {
        "kind", "C", "pca", "svm_probability"}
    if bad or bad_keys:
        raise ConfigError(f"probe.overrides: unknown {sorted(bad) or sorted(bad_keys)}; fix: keys handcrafted, "
                          "frozen, adapted, each a mapping of kind, C, pca, svm_probability")
    from eegfm_bench.controls.probes import PROBES

    for where, pr in [("probe", cfg["probe"])] + [(f"probe.overrides.{k}", v or {})
                                                  for k, v in (cfg["probe"].get("overrides") or {}).items()]:
        if pr.get("kind") is not None and pr["kind"] not in PROBES.names():
            raise ConfigError(f"{where}.kind {pr['kind']!r}; fix: one of {PROBES.names()}")
        if pr.get("svm_probability") is not None and pr["svm_probability"] not in ("libsvm", "calibrated"):
            raise ConfigError(f"{where}.svm_probability {pr['svm_probability']!r}; fix: libsvm (the paper's "
                              "SVC(probability=True)) or calibrated (CalibratedClassifierCV)")
        if pr.get("pca") is not None and (not isinstance(pr["pca"], int) or pr["pca"] < 1):
            raise ConfigError(f"{where}.pca {pr['pca']!r}; fix: a number of PCA components >= 1, or null")
        if pr.get("C") is not None and not float(pr["C"]) > 0:
            raise ConfigError(f"{where}.C {pr['C']!r}; fix: a regularisation strength > 0, or null")
    pspec = ProbeSpec(kind=cfg["probe"]["kind"], C=cfg["probe"]["C"], pca=cfg["probe"]["pca"],
                      cap_pca=cfg["probe"]["pca"] is not None, seed=42,
                      svm_probability=cfg["probe"].get("svm_probability", "libsvm"))
    store = _Store(out, cfg, spec.group_by, merge=not worker)
    ctx = _Ctx(cfg, out, task, ws, row_keys(ws.recording, ws.window_index), y_idx, classes, subjects, split, fold_ids,
               folds, agg_level, agg_units, scheme, pspec, store, progress)
    ctx.note(f"{len(ws)} windows, {n_subj} subjects, folds {fold_ids} (test subjects per fold {n_test_subj}); "
             f"permutation scheme {scheme}; unit level {agg_level or 'none'}")
    # models: windows align and contracts hold (cheap; before the expensive steps)
    from eegfm_bench.controls.embeddings import align_rows

    for m in cfg["models"] + [{"model": s["model"]} for s in cfg["scrambled"]]:
        ws_m = _model_ws(ctx, m["model"])
        align_rows(ctx.keys, row_keys(ws_m.recording, ws_m.window_index), f"{m['model']} windows")
    if worker:
        for entry in cfg["scrambled"]:
            _scrambled(ctx, entry, cv_cfg, units=set(worker_units))
        return {"failures": []}
    lc = cfg.get("launcher") or {"kind": "none"}
    if lc["kind"] != "none":
        from eegfm_bench.results import FailedCellsError
        from eegfm_bench.runs.launch import run_jobs

        todo = [u for entry in cfg["scrambled"] for u in _scrambled(ctx, entry, cv_cfg, list_units=True)["units"]]
        if todo:
            failures = run_jobs(lc, {**cfg, "launcher": {**lc, "kind": "none"}}, todo, out, progress=progress,
                                kind="controls")
            store.store.merge()
            store.df = store.store.load()
            if failures:
                raise FailedCellsError(f"{len(failures)} scrambled-label adaptation job(s) failed (first: "
                                       f"{failures[0]['cell']}: {failures[0]['error'][:300]}); the finished fits are "
                                       f"kept under {out}; fix the cause and rerun")
        ctx.note(f"launcher {lc['kind']}: {len(todo)} scrambled-label adaptation fits as jobs")
    if cfg["identity"] is not None:  # shared channels (the error names each dataset's channels)
        from eegfm_bench.controls.identity import shared_channels

        ta, tb = cfg["identity"]["tasks"]
        wa = _load_ws(cfg, ta, cfg["features"]["preprocessing"], progress,
                      subjects=(cfg["identity"]["subjects"] or {}).get(get_task(ta).name),
                      max_windows=cfg["identity"]["max_windows_per_subject"])
        wb = _load_ws(cfg, tb, cfg["features"]["preprocessing"], progress,
                      subjects=(cfg["identity"]["subjects"] or {}).get(get_task(tb).name),
                      max_windows=cfg["identity"]["max_windows_per_subject"])
        shared_channels(wa.ch_names, wb.ch_names, (get_task(ta).dataset, get_task(tb).dataset))
        del wa, wb

    # (a) handcrafted
    hand, hand_X = _handcrafted(ctx)
    metric = cfg["metric"]
    strongest = max(hand, key=lambda f: _score(hand[f], metric))
    ctx.note(f"stronger handcrafted family: {strongest} ({_score(hand[strongest], metric):.4f})")
    # (b) frozen embeddings
    frozen, frozen_X = _frozen_models(ctx)
    # (c) cv claims
    cv_reps = _cv_claims(ctx, cv_cfg)
    # (e) scrambled-label adaptation
    scrambled = []
    for entry in cfg["scrambled"]:
        s = _scrambled(ctx, entry, cv_cfg)
        for lab in ("correct", "scrambled"):
            first = s["runs"][lab][int(s["seeds"][0])]
            proba = first["proba"] if len(s["seeds"]) == 1 else np.mean(
                [v["proba"] for v in s["runs"][lab].values()], axis=0)
            user = cfg["user_models"].get(entry["model"])
            init = _init_label(cfg, entry["model"], "declared") if user and user.get("pretrained") else \
                f"pretrained:{entry['pretrained']}" if entry.get("pretrained") else "random"
            rep = Rep(f"{entry['model']}-{entry['regime']}-{entry['head']} ({lab} labels)", entry["model"],
                      init, entry["regime"], entry["head"], f"adaptation ({lab} labels)", proba,
                      _probe_result(ctx, proba), int(s["seeds"][0]))
            s["rep" if lab == "correct" else "rep_scrambled"] = rep
        s["contrast"] = scrambled_label_contrast([v["score"] for v in s["runs"]["correct"].values()],
                                                 [v["score"] for v in s["runs"]["scrambled"].values()])
        _scrambled_interval(ctx, s)  # gate (iv)'s paired interval, from the per-seed predictions (dropped next)
        for lab in ("correct", "scrambled"):
            for v in s["runs"][lab].values():
                v.pop("proba")
        scrambled.append(s)
    # (g) paired: each claim minus the stronger family
    claims = []
    for model, by_init in frozen.items():
        claims.append(by_init.get("pretrained") or next(r for lab, r in by_init.items() if lab.startswith("random")))
    claims += cv_reps
    claims += [s["rep"] for s in scrambled if not any((r.model, r.regime, r.head) == (s["model"], s["regime"], s["head"])
                                                      for r in cv_reps)]
    paired = {r.name: _paired(ctx, r, hand[strongest], strongest) for r in claims}
    # (d) permutations: each model's claim probe, and the handcrafted families
    perms = {}
    for model, by_init in frozen.items():
        lab = "pretrained" if "pretrained" in by_init else next(lab for lab in by_init if lab.startswith("random"))
        perms[by_init[lab].name] = _permutation(ctx, by_init[lab], frozen_X[model][lab])
    fams = {"strongest": [strongest], "all": list(hand), "none": []}[cfg["permutation"]["families"]]
    for f in fams:
        perms[hand[f].name] = _permutation(ctx, hand[f], hand_X[f])
    # (f) identity
    identity = _identity(ctx) if cfg["identity"] is not None else None
    # (h) gates
    gate_reports, gate_context = _gates(ctx, hand, frozen, cv_reps, perms, paired, scrambled)
    write_gate_report(gate_reports, out / "gates.json", out / "gates.md")
    seconds = time.time() - t_start
    from eegfm_bench.reports.controls import controls_markdown

    md = controls_markdown(ctx, hand, frozen, cv_reps, perms, paired, scrambled, identity, gate_reports,
                           gate_context, seconds)
    (out / "controls_report.md").write_text(md)
    summary = {
        "experiment": cfg["experiment"], "task": task.name, "dataset": task.dataset, "n_windows": len(ws),
        "n_subjects": int(n_subj), "folds": fold_ids, "permutation_scheme": scheme, "unit_level": agg_level,
        "metric": metric, "stronger_family": strongest,
        "scores": {r.name: {"source": r.source, "init": r.init, "regime": r.regime, "head": r.head,
                            **{f"{m}_{lv}": r.result.fold_values(m, lv).tolist()
                               for m in ("auroc", "balanced_accuracy") for lv in r.result.levels}}
                   for r in list(hand.values()) + [r for dd in frozen.values() for r in dd.values()] + cv_reps
                   + [s[k] for s in scrambled for k in ("rep", "rep_scrambled")]},
        "paired": paired, "permutation": {k: {kk: vv for kk, vv in v.items() if kk != "null"} for k, v in perms.items()},
        "scrambled": [{k: v for k, v in s.items() if k not in ("rep", "rep_scrambled")} for s in scrambled],
        "identity": identity, "gates": [r.to_dict() for r in gate_reports], "gate_context": gate_context,
        "notes": ctx.log, "wall_seconds": seconds}
    _write_json(out / "controls_report.json", summary)
    from eegfm_bench.trainer import log_summary

    log_summary(cfg["trainer"], out, "controls", {
        f"controls/{name}/{k}": float(np.nanmean(v)) for name, s in summary["scores"].items()
        for k, v in s.items() if isinstance(v, list) and v}, experiment=cfg["experiment"])
    from eegfm_bench.reports.page import refresh

    refresh([out], quiet=not progress)
    return {"gates_json": out / "gates.json", "gates_md": out / "gates.md", "report_md": out / "controls_report.md",
            "report_json": out / "controls_report.json", "results": out / "results.csv", "wall_seconds": seconds}


__all__ = ["ControlsConfig", "DEFAULT_FEATURE_PREPROCESSING", "load_config", "controls_main"]
