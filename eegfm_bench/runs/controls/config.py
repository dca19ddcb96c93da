"""The config of ``eegfm-bench controls`` (paper 001's negative controls): its typed schema and its loader.

:func:`load_config` reads a controls YAML (or mapping, plus dotted overrides), fills the defaults, normalises the
mapping, builds the frozen :class:`ControlsConfig` and checks every name and number on it before any data is read;
:func:`load_run_config` (the command's loader) also takes the data selection and split of the ``cv_out_dir`` run
before the config is typed, so the steps receive it final. The schema is documented in
:mod:`eegfm_bench.runs.controls.command` and ``configs/experiment/controls_eegmat.yaml``. The user models a config (or its
cv run) declares are registered and dry-run here too.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import yaml

from eegfm_bench.config import ConfigError, check_trainer_section, load_typed
from eegfm_bench.controls.features import BANDS, FAMILIES
from eegfm_bench.controls.permutation import SCHEMES
from eegfm_bench.controls.probes import PROBES
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.tasks import get_task
from eegfm_bench.models.adaptation import check_regime
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.heads import HEADS, check_token_pooling
from eegfm_bench.models.user import user_model_config, check_user_model, hashable_user_spec, register_user_models, user_init_label
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.launch.launcher import check_launcher
from eegfm_bench.runs.cv.output import CVRun
from eegfm_bench.trainer import check_trainer
from eegfm_bench.config.controls import (controls_parser, ControlsFeatures, ControlsProbe, ControlsScrambled,
    ControlsConfig)

DEFAULT_FEATURE_PREPROCESSING = {
    "sfreq": 200.0, "l_freq": 0.5, "h_freq": 70.0, "scale": 1e6, "unit": "µV", "window_s": 4.0,
    "reference": "average",
    "source": "paper 001 §3.3: 200 Hz, 0.5-70 Hz band-pass, mains notch, CAR; 4 s windows; µV (features over 0.5-45 Hz, §3.4)",
}




AGGREGATES = ("auto", "subject", "recording", "none")
PERM_FAMILIES = ("strongest", "all", "none")


def _lowest_band_seconds() -> float:
    return 1.0 / min(lo for _, lo, _ in BANDS)


# ============================================================================================ the loading step
def load_config(source, args=()) -> ControlsConfig:
    """Read a controls YAML (or mapping, or :class:`ControlsConfig`, plus dotted overrides), fill defaults, validate
    every name and number before any data is read, and return it typed and frozen.

    The cv run of ``cv_out_dir`` is not read here beyond its ``config.yaml`` (its user models) and the presence of
    its ``splits.json``; :func:`load_run_config` (what the command uses) also takes its data selection and split.

    Steps: parse against :class:`ControlsConfig` and require ``task`` and ``out_dir`` (:func:`_required`) -> the
    normalisations on the mapping (:func:`_resolved`: user models inherited and registered, the feature
    preprocessing resolved to a full mapping, each model's ``backbone_kwargs`` and declared weights, each
    scrambled entry's trainer section) -> :func:`~eegfm_bench.config.typed` -> the checks on the typed object
    (:func:`_check_controls`).

    Returns
    -------
    ControlsConfig
        The resolved config (``features.preprocessing`` a full mapping).

    Raises
    ------
    ConfigError
        A missing ``task`` or ``out_dir``, unknown keys, unknown families / probes / poolings / aggregates / schemes,
        a feature window shorter than the lowest band (0.5 Hz needs 2 s) or the Welch segment, a missing cv
        out_dir, regimes that cannot run.
    UnknownNameError
        Unknown task or backbone (lists valid names).
    """
    return _loaded(source, args, with_cv=False)[0]


def load_run_config(source, args=()) -> tuple[ControlsConfig, CVConfig | None]:
    """:func:`load_config` with the cv run of ``cv_out_dir`` read (:class:`~eegfm_bench.runs.cv.output.CVRun`): its
    data selection (``subjects``, ``max_windows_per_subject``) and its split are taken on the mapping before it is
    typed, so the returned config is final. Returns ``(config, the cv run's typed config or None)``.

    Raises
    ------
    ConfigError
        As :func:`load_config`; the cv run is of another task, or this config sets ``data.subjects`` /
        ``data.max_windows_per_subject`` to other values than the cv run's (paired comparisons need the same
        windows).
    CVRunError
        ``cv_out_dir`` is not a finished cv run.
    """
    return _loaded(source, args, with_cv=True)


def _loaded(source, args, with_cv: bool) -> tuple[ControlsConfig, CVConfig | None]:
    """Through the one loader (:func:`~eegfm_bench.config.load_typed`; a :class:`ControlsConfig` is parsed again: a
    launcher's worker) with :func:`_required` and :func:`_resolved` as its step on the mapping, then the checks on
    the typed config."""
    cv_of: list = [None]

    def prepare(raw: dict) -> dict:
        _required(raw)
        if with_cv and raw["cv_out_dir"] is not None:
            cv_of[0] = CVRun(raw["cv_out_dir"]).config
        return _resolved(raw, cv_of[0])

    cfg = load_typed(controls_parser(), ControlsConfig, source, args, prepare=prepare)
    return _check_controls(cfg), cv_of[0]


def _required(raw: dict) -> None:
    """``task`` and ``out_dir`` set, and the cv run's ``config.yaml`` / ``splits.json`` present."""
    missing = [k for k in ("task", "out_dir") if not raw[k]]
    if missing:
        raise ConfigError(f"the controls config needs {' and '.join(f'`{k}`' for k in missing)} (a full run takes "
                          "hours on CPU, so nothing is assumed); fix: start from configs/experiment/controls_eegmat.yaml")
    if raw["cv_out_dir"] is not None:
        cvd = Path(raw["cv_out_dir"])
        for f in ("config.yaml", "splits.json"):
            if not (cvd / f).is_file():
                raise ConfigError(f"cv_out_dir {cvd} has no {f}; fix: run `eegfm-bench cv --config ...` first, or "
                                  "point cv_out_dir at that run's out_dir (or set it to null)")


def _resolved(raw: dict, cv: CVConfig | None) -> dict:
    """The normalisations on the parsed mapping (in place): the cv run's settings inherited, user models
    registered, the feature preprocessing and each model resolved, each scrambled entry's trainer checked."""
    if cv is not None:
        _inherit_cv_settings(raw, cv)
    raw["user_models"] = _inherited_user_models(raw)
    if raw["user_models"]:
        register_user_models(raw["user_models"])  # user models name backbones (and preprocessings) from here on
    raw["features"]["preprocessing"] = _resolved_preprocessing(raw["features"]["preprocessing"])
    raw["models"] = [_resolved_model(raw, i, m) for i, m in enumerate(raw["models"])]
    for i, s in enumerate(raw["scrambled"]):
        if s.get("trainer"):
            s["trainer"] = check_trainer_section(s["trainer"], f"scrambled[{i}].trainer")
    return raw


def _inherit_cv_settings(raw: dict, cv: CVConfig) -> None:
    """The cv run's data selection and split, taken on the mapping (its task must be this config's).

    Raises
    ------
    ConfigError
        The cv run is of another task, or this config sets ``data.subjects`` / ``data.max_windows_per_subject`` to
        other values than the cv run's.
    """
    if cv.task != raw["task"]:
        raise ConfigError(f"cv_out_dir {raw['cv_out_dir']} is a run of task {cv.task!r}, not {raw['task']!r}; fix: "
                          "point cv_out_dir at a run of this task")
    theirs = {"subjects": cv.data.subjects, "max_windows_per_subject": cv.data.max_windows_per_subject}
    for k, v in theirs.items():
        mine = raw["data"][k]
        if mine is not None and mine != v:
            raise ConfigError(f"data.{k} = {mine} differs from the cv run's {v}; paired comparisons need the same "
                              f"windows; fix: drop data.{k} (it is taken from the cv run)")
        raw["data"][k] = copy.deepcopy(v)
    raw["split"] = cv.split.to_dict()


def _inherited_user_models(raw: dict) -> dict:
    """This config's ``user_models`` with those of the ``cv_out_dir`` run (its ``config.yaml``) added.

    Raises
    ------
    ConfigError
        A name declared here and, differently, in the cv run.
    """
    user = dict(raw["user_models"] or {})
    cv_yaml = Path(raw["cv_out_dir"]) / "config.yaml" if raw["cv_out_dir"] else None
    if cv_yaml is not None and cv_yaml.is_file():
        for name, spec in ((yaml.safe_load(cv_yaml.read_text()) or {}).get("user_models") or {}).items():
            if name in user and user_model_config(dict(user[name])) != user_model_config(dict(spec)):
                raise ConfigError(f"user model {name!r} is declared here and, differently, in the cv run "
                                  f"{raw['cv_out_dir']}; fix: drop it from this config (the cv run's declaration is "
                                  "inherited) or give it another name")
            user.setdefault(name, spec)
    return user


def _resolved_preprocessing(prep) -> dict:
    """The feature preprocessing as a full mapping: null -> paper 001 §3.3's defaults; a backbone name -> its
    preprocessing; a mapping -> over the defaults.

    Raises
    ------
    ConfigError
        Unknown preprocessing keys.
    """
    if prep is None:
        return dict(DEFAULT_FEATURE_PREPROCESSING)
    if isinstance(prep, str):
        return BACKBONES.get(prep).preprocessing.to_dict()
    bad = set(prep) - set(Preprocessing.__dataclass_fields__)
    if bad:
        raise ConfigError(f"features.preprocessing: unknown keys {sorted(bad)}; valid: "
                          f"{sorted(Preprocessing.__dataclass_fields__)}")
    return {**DEFAULT_FEATURE_PREPROCESSING, **prep}


def _resolved_model(raw: dict, i: int, m: dict) -> dict:
    """One ``models`` entry with ``backbone_kwargs`` a mapping and, for a user model, ``pretrained`` its declared
    weights (``declared``) or null.

    Raises
    ------
    ConfigError
        A user model given a hub checkpoint (its weights come from its declaration).
    """
    m = {**m, "backbone_kwargs": m.get("backbone_kwargs") or {}}
    if m["model"] in raw["user_models"]:
        if m["pretrained"] not in (None, "declared"):
            raise ConfigError(f"models[{i}]: {m['model']} is a user model, whose weights come from its "
                              f"declaration (user_models.{m['model']}.pretrained), not pretrained: "
                              f"{m['pretrained']!r}; fix: pretrained: null")
        m["pretrained"] = "declared" if raw["user_models"][m["model"]].get("pretrained") else None
    return m


# ================================================================================== checks on the typed config
def _check_controls(cfg: ControlsConfig) -> ControlsConfig:
    """The checks that need no data: the trainer, launcher and task, the user models (one batch through each), the
    features (:func:`_check_features`), the probe and statistics (:func:`_check_probe_and_statistics`,
    :func:`check_probe_overrides`), the models (:func:`_check_models`), the cv claims, each scrambled-label entry
    (:func:`_check_scrambled`) and the identity probe (:func:`_check_identity`).

    Returns the config with its tasks resolved once (:func:`_resolve_tasks`).

    Raises
    ------
    ConfigError, UnknownNameError, UserModelError
    """
    check_trainer(cfg.trainer, "trainer")
    check_launcher(cfg.launcher, trainer=cfg.trainer)
    cfg = _resolve_tasks(cfg)
    _check_user_models(cfg)
    _check_features(cfg.features)
    _check_probe_and_statistics(cfg)
    check_probe_overrides(cfg.probe)
    _check_models(cfg)
    _check_cv_claims(cfg)
    for i, s in enumerate(cfg.scrambled):
        _check_scrambled(cfg, i, s)
    _check_identity(cfg)
    return cfg


def _check_user_models(cfg: ControlsConfig) -> None:
    """Each user model a ``models`` / ``scrambled`` entry uses gets one batch through it
    (:func:`~eegfm_bench.models.user.check_user_model`) before any data is read.

    Raises
    ------
    UserModelError
        A declaration that does not build or fails its dry run (naming the fix).
    """
    used = {m.model for m in cfg.models} | {s.model for s in cfg.scrambled}
    for name, spec in cfg.user_models.items():
        if name in used:
            check_user_model(name, spec, lora=any(s.model == name and s.regime == "lora"
                                                  and not (s.lora or {}).get("target_modules")
                                                  for s in cfg.scrambled))


def _check_features(fc: ControlsFeatures) -> None:
    """The feature families, and a resolved feature preprocessing long and fast enough for the bands."""
    fam = fc.families
    if not fam or any(f not in FAMILIES for f in fam) or len(set(fam)) != len(fam):
        raise ConfigError(f"features.families {fam!r}; fix: a non-empty list from {list(FAMILIES)}")
    prep = fc.preprocessing
    need = max(_lowest_band_seconds(), float(fc.welch_seconds))
    if float(prep["window_s"]) < need:
        raise ConfigError(
            f"features.preprocessing.window_s = {prep['window_s']} s is shorter than the handcrafted features need "
            f"({need:g} s: the lowest band edge is 0.5 Hz and the Welch segment is "
            f"{fc.welch_seconds} s); fix: window_s >= {need:g}")
    if float(prep["sfreq"]) <= 90:
        raise ConfigError(f"features.preprocessing.sfreq = {prep['sfreq']} Hz cannot carry the γ band (30-45 Hz); "
                          "fix: sfreq > 90 (200 by default)")


def _check_probe_and_statistics(cfg: ControlsConfig) -> None:
    """The probe kind, the gates' metric, the unit level, the permutation and the bootstrap settings."""
    PROBES.get(cfg.probe.kind)
    if cfg.probe.kind == "lda" and cfg.probe.C is not None:
        raise ConfigError("probe.C is set but the lda probe has no C; fix: probe.C: null")
    if cfg.metric not in ("auroc", "balanced_accuracy"):
        raise ConfigError(f"metric {cfg.metric!r}; fix: auroc or balanced_accuracy")
    if cfg.aggregate not in AGGREGATES:
        raise ConfigError(f"aggregate {cfg.aggregate!r}; fix: one of {AGGREGATES}")
    perm = cfg.permutation
    if perm.scheme != "auto" and perm.scheme not in SCHEMES:
        raise ConfigError(f"permutation.scheme {perm.scheme!r}; fix: auto or one of {SCHEMES}")
    if perm.families not in PERM_FAMILIES:
        raise ConfigError(f"permutation.families {perm.families!r}; fix: one of {PERM_FAMILIES}")
    if int(perm.n) < 1:
        raise ConfigError("permutation.n must be >= 1 (the paper uses 100)")
    if int(cfg.bootstrap.n_boot) < 100:
        raise ConfigError("bootstrap.n_boot must be >= 100 for a 95 % interval (2000 by default)")


def _check_models(cfg: ControlsConfig) -> None:
    """The frozen-embedding models: registered backbones, a known pooling, at least one init seed, one entry
    per model."""
    for i, m in enumerate(cfg.models):
        BACKBONES.get(m.model)
        try:
            check_token_pooling(m.pooling)
        except ValueError as err:
            raise ConfigError(f"models[{i}].pooling: {err}") from None
        if not m.init_seeds:
            raise ConfigError(f"models[{i}].init_seeds is empty; fix: at least one seed (matched random init)")
    if len({m.model for m in cfg.models}) != len(cfg.models):
        raise ConfigError("a model is listed twice in `models`; fix: one entry per model (list its seeds in init_seeds)")


def _check_cv_claims(cfg: ControlsConfig) -> None:
    """``cv_claims`` is auto, [] or {model, regime, head} entries (and needs the cv run)."""
    claims = cfg.cv_claims
    if claims not in ("auto", None) and not isinstance(claims, list):
        raise ConfigError("cv_claims must be auto, [] or a list of {model, regime, head}")
    if isinstance(claims, list):
        for i, c in enumerate(claims):
            if set(c) != {"model", "regime", "head"}:
                raise ConfigError(f"cv_claims[{i}] needs exactly model, regime, head; got {sorted(c)}")
        if claims and cfg.cv_out_dir is None:
            raise ConfigError("cv_claims are listed but cv_out_dir is null; fix: point cv_out_dir at the cv run")


def _check_scrambled(cfg: ControlsConfig, i: int, s: ControlsScrambled) -> None:
    """Scrambled-label entry ``i``: a registered backbone, a known ``correct`` source, an adapting regime with LoRA
    targets where needed, a head, a permutation scheme, seeds, and no hub checkpoint for a user model."""
    BACKBONES.get(s.model)
    if s.model in cfg.user_models and s.pretrained:
        raise ConfigError(f"scrambled[{i}]: {s.model} is a user model, whose weights come from its "
                          f"declaration (user_models.{s.model}.pretrained); fix: drop scrambled[{i}].pretrained")
    if s.correct not in ("auto", "cv", "rerun"):
        raise ConfigError(f"scrambled[{i}].correct {s.correct!r}; fix: auto, cv (reuse the cv run's "
                          "correct-label predictions) or rerun")
    check_regime(s.regime)
    if s.regime == "head_only":
        raise ConfigError(f"scrambled[{i}]: regime head_only adapts nothing; fix: lora or full")
    HEADS.get(s.head)
    if s.regime == "lora" and not BACKBONES.get(s.model).lora_targets and not (s.lora or {}).get("target_modules"):
        raise ConfigError(f"scrambled[{i}]: {s.model} declares no LoRA targets (a supervised baseline); "
                          "fix: regime: full for it, or set lora.target_modules")
    if s.scheme != "auto" and s.scheme not in SCHEMES:
        raise ConfigError(f"scrambled[{i}].scheme {s.scheme!r}; fix: auto or one of {SCHEMES}")


def _resolve_tasks(cfg: ControlsConfig) -> ControlsConfig:
    """The controls' one resolution of its tasks (validated): ``cfg`` with ``resolved_task`` (``task``'s
    :class:`~eegfm_bench.data.ingest.DeclaredTask`) and ``resolved_identity`` (the identity probe's two, or None).

    Raises
    ------
    ConfigError, UnknownNameError
        An invalid task, or ``identity.tasks`` not a list of two.
    """
    idc = cfg.identity
    if idc is not None and (not isinstance(idc.tasks, list) or len(idc.tasks) != 2):
        raise ConfigError("identity.tasks must name two tasks (e.g. [eegmmidb_mi, eegmat])")
    tasks = [get_task(t) for t in [cfg.task, *(idc.tasks if idc is not None else [])]]
    return replace(cfg, resolved_task=tasks[0], resolved_identity=tuple(tasks[1:]) if idc is not None else None)


def _check_identity(cfg: ControlsConfig) -> None:
    """The identity probe names two tasks of two datasets and a handcrafted family."""
    idc = cfg.identity
    if idc is None:
        return
    ta, tb = cfg.resolved_identity
    if ta.dataset == tb.dataset:
        raise ConfigError(f"identity.tasks {idc.tasks} come from the same dataset; fix: two datasets")
    if idc.family not in FAMILIES:
        raise ConfigError(f"identity.family {idc.family!r}; fix: one of {list(FAMILIES)}")


def check_probe_overrides(probe: ControlsProbe) -> None:
    """``probe.overrides``: keys handcrafted / frozen / adapted, each a mapping of kind, C, pca, svm_probability
    with valid values (checked with the probe's own settings).

    Raises
    ------
    ConfigError
        An unknown representation or key, or a bad value (naming the fix).
    """
    overrides = probe.overrides or {}
    bad = set(overrides) - {"handcrafted", "frozen", "adapted"}
    bad_keys = {k for ov in overrides.values() for k in (ov or {})} - {"kind", "C", "pca", "svm_probability"}
    if bad or bad_keys:
        raise ConfigError(f"probe.overrides: unknown {sorted(bad) or sorted(bad_keys)}; fix: keys handcrafted, "
                          "frozen, adapted, each a mapping of kind, C, pca, svm_probability")
    own = {"kind": probe.kind, "C": probe.C, "pca": probe.pca, "svm_probability": probe.svm_probability}
    for where, pr in [("probe", own)] + [(f"probe.overrides.{k}", v or {}) for k, v in overrides.items()]:
        _check_probe_settings(where, pr)


def _check_probe_settings(where: str, pr: dict) -> None:
    """One probe mapping's kind, svm_probability, pca and C (the set ones)."""
    if pr.get("kind") is not None and pr["kind"] not in PROBES.names():
        raise ConfigError(f"{where}.kind {pr['kind']!r}; fix: one of {PROBES.names()}")
    if pr.get("svm_probability") is not None and pr["svm_probability"] not in ("libsvm", "calibrated"):
        raise ConfigError(f"{where}.svm_probability {pr['svm_probability']!r}; fix: libsvm (the paper's "
                          "SVC(probability=True)) or calibrated (CalibratedClassifierCV)")
    if pr.get("pca") is not None and (not isinstance(pr["pca"], int) or pr["pca"] < 1):
        raise ConfigError(f"{where}.pca {pr['pca']!r}; fix: a number of PCA components >= 1, or null")
    if pr.get("C") is not None and not float(pr["C"]) > 0:
        raise ConfigError(f"{where}.C {pr['C']!r}; fix: a regularisation strength > 0, or null")


# ============================================================================================ names in the rows
def user_decl(cfg: ControlsConfig, model: str) -> dict:
    """``{"user_model": <declaration without its unhashed keys>}`` for a user model (enters unit hashes), else {}."""
    spec = cfg.user_models.get(model)
    return {"user_model": hashable_user_spec(spec)} if spec else {}


def init_label(cfg: ControlsConfig, model: str, pretrained: str | None) -> str:
    """The rows' init label of a configured checkpoint: ``pretrained:<id>``, or for a user model's declared
    weights ``pretrained:<file>@<sha12>``."""
    if pretrained == "declared":
        return user_init_label(cfg.user_models[model])
    return f"pretrained:{pretrained}"
