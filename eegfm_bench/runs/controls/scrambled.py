"""Control 4 of ``eegfm-bench controls``: correct- vs scrambled-label adaptation of one encoder (paper 001 §4.2.4).

For one ``scrambled:`` entry, every seed and fold trains two arms — the true source labels and the source labels
permuted (:func:`~eegfm_bench.controls.adapt.scrambled_source_labels`) — on one schedule, then freezes each adapted
encoder and refits the frozen probe on the fold's true training labels; the arms are compared on the probe's test
scores. :func:`scrambled_arm` reads as: resolve the entry (:func:`_resolve_arms`: schedule, seeds and settings, from the
matching cv run when there is one) -> for every (seed, fold, arm) without rows of its current config hash,
:func:`_run_fit` (train or reuse the cv's checkpoint, refit the probe, store rows and predictions, the files named
with the hash) -> :func:`_collect_arms` (each arm's out-of-fold predictions per seed, read back from the files).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_path
from eegfm_bench.config import ConfigError, merge_config
from eegfm_bench.controls.adapt import adapted_embedding, scrambled_source_labels, train_fold
from eegfm_bench.controls.embeddings import align_rows, row_keys
from eegfm_bench.controls.probes import classification_metrics, fit_predict_folds
from eegfm_bench.runs.cv.cells import cv_defaults, fixed_batch_size, run_init_seed
from eegfm_bench.config.cv import CVConfig, RunConfig
from eegfm_bench.runs.controls.config import init_label, user_decl
from eegfm_bench.config.controls import ControlsScrambled
from eegfm_bench.results import config_hash
from eegfm_bench.runs.controls.steps import ControlsContext, model_windows, probe_result
from eegfm_bench.runs.controls.store import Unit
from eegfm_bench.runs.cv.output import CVRun, load_fold_model

ARMS = ("correct", "scrambled")


@dataclass
class _Arms:
    """One scrambled-label entry resolved: the schedule and settings both arms train with, the seeds, the windows."""

    entry: ControlsScrambled
    correct: str
    seeds: list
    init_seed_of: dict
    trainer_cfg: dict
    optim: dict
    backbone_kwargs: dict | None
    head_kwargs: dict | None
    lora: dict | None
    pretrained: str | None
    batch: int
    pooling: str
    schedule_from: str
    ws_m: object
    groups_m: np.ndarray
    user: dict | None
    init_name: str

    @property
    def model(self) -> str:
        return self.entry.model

    @property
    def regime(self) -> str:
        return self.entry.regime

    @property
    def head(self) -> str:
        return self.entry.head

    @property
    def fixed(self) -> bool:
        """One fixed schedule for both arms (``rerun``), not the cv's early stopping (``cv``)."""
        return self.correct != "cv"

    def tag(self, s, lab: str) -> str:
        return f"{self.model}-{self.regime}-{self.head}-{lab}-seed{s}"

    def unit_config(self, ctx: ControlsContext, s, lab: str) -> dict:
        """Everything that changes the numbers of one fit (its config hash)."""
        return {"step": "adaptation", "protocol": "probe-refit-v2", "entry": self.entry.hashed(),
                "trainer": self.trainer_cfg, "optim": self.optim, "backbone_kwargs": self.backbone_kwargs,
                "head_kwargs": self.head_kwargs, "lora": self.lora, "pretrained": self.pretrained, "labels": lab,
                "data": ctx.cfg.data.to_dict(), "batch": self.batch, "correct_from": self.correct,
                "init_seed": self.init_seed_of[s], "probe": ctx.cfg.probe.to_dict(), "pooling": self.pooling,
                **user_decl(ctx.cfg, self.model)}

    def fit(self, ctx: ControlsContext, s, k, lab: str) -> Unit:
        """The store's unit of one fit (seed ``s``, fold ``k``, arm ``lab``) under its config hash."""
        return ctx.store.unit(config_hash(self.unit_config(ctx, s, lab)), task=ctx.task.name, model=self.model,
                              init=f"{self.init_name}#seed{self.init_seed_of[s]}", regime=self.regime, head=self.head,
                              fold=k, seed=s, condition=f"{lab}_labels")

    def files(self, ctx: ControlsContext, unit: Unit, s, k, lab: str) -> tuple[Path, Path]:
        """``(the adapted head's predictions, the refitted probe's predictions)`` of one fit, named with its hash."""
        stem = f"{self.tag(s, lab)}-fold{k}"
        return (unit.file(ctx.out / "adaptation" / "predictions", stem, ".csv"),
                unit.file(ctx.out / "adaptation" / "probe_predictions", stem, ".csv"))

    def summary(self, ctx: ControlsContext) -> dict:
        """The entry's report dict (schedule, seeds, how it is scored); ``runs`` / ``runs_head`` filled later."""
        fixed = self.fixed
        return {"model": self.model, "regime": self.regime, "head": self.head, "schedule_from": self.schedule_from,
                "trainer": self.trainer_cfg, "optim": self.optim, "seeds": self.seeds,
                "init_seeds": self.init_seed_of, "correct_from": self.correct,
                "schedule": (f"fixed: {self.trainer_cfg.get('max_epochs')} epochs, no early stopping, last weights, "
                             "both arms" if fixed else
                             "cv recipe: early stopping on each arm's own validation labels (unmatched)"),
                "scored_by": f"frozen {ctx.spec_for('adapted').kind} probe refitted on the true training labels of "
                             f"each fold, on the adapted encoder's {self.pooling}-pooled tokens (§4.2.4)",
                "runs": {}, "runs_head": {}}


def scrambled_arm(ctx: ControlsContext, entry: ControlsScrambled, cv_cfg: CVConfig | None, *, units: set | None = None,
               list_units: bool = False) -> dict:
    """Correct- vs scrambled-label adaptation for one entry (Control 4), every fold and seed, resumable.

    ``list_units``: return ``{"units": [...]}``, the adaptation fits (``<model>-<regime>-<head>-<labels>-seed<s>
    /fold<k>``) that have no stored rows yet, and train nothing (a launcher's job list). ``units``: train only
    these fits (a launcher's worker) and return ``{"units": [...]}`` without collecting the entry's results.
    """
    arms = _resolve_arms(ctx, entry, cv_cfg)
    out = arms.summary(ctx)
    cells = [(s, k_pos, k, lab) for s in arms.seeds for k_pos, k in enumerate(ctx.fold_ids) for lab in ARMS]
    bar = tqdm(cells, desc=f"scrambled-label {arms.model}/{arms.regime}", disable=not ctx.progress or list_units,
               unit="fit")
    listed: list[str] = []
    for s, k_pos, k, lab in bar:
        unit = arms.fit(ctx, s, k, lab)
        path, probe_path = arms.files(ctx, unit, s, k, lab)
        if ctx.store.done(unit) and path.is_file() and probe_path.is_file():
            continue
        tag = arms.tag(s, lab)
        if list_units:
            listed.append(f"{tag}/fold{k}")
            continue
        if units is not None and f"{tag}/fold{k}" not in units:
            continue
        _run_fit(ctx, arms, s, k_pos, k, lab, unit=unit, path=path, probe_path=probe_path, bar=bar)
    if list_units or units is not None:
        return {"units": listed}
    _collect_arms(ctx, arms, out)  # from files, so reruns see the same numbers
    return out


# ------------------------------------------------------------------------------------------ the entry resolved
def _resolve_arms(ctx: ControlsContext, entry: ControlsScrambled, cv_cfg: CVConfig | None) -> _Arms:
    """The schedule (the matching cv run's when there is one, else the cv defaults, then the entry's overrides),
    the correct arm's source (``auto`` = ``rerun``), the seeds and the model's windows (aligned to the feature
    windows).

    Raises
    ------
    ConfigError
        ``correct: cv`` without a matching cv run, with overrides, or with other seeds than the cv run's.
    """
    base_tr, base_opt, run, batch, schedule_from = _cv_schedule(ctx, entry, cv_cfg)
    correct = entry.correct
    if correct == "auto":
        correct = "rerun"  # one fixed schedule for both arms (§4.2.4); `cv` reuse is unmatched (early stopping)
    seeds, init_seed_of = _arm_seeds(ctx, entry, correct, run, cv_cfg)
    trainer_cfg = merge_config(base_tr, entry.trainer or {}, "scrambled.trainer.")
    optim = merge_config(base_opt, entry.optim or {}, "scrambled.optim.")

    def inherited(name: str):  # the entry's setting, else the matching cv run's (unset in both: None)
        mine = getattr(entry, name)
        return mine if mine is not None or run is None else getattr(run, name)

    pretrained = inherited("pretrained")
    model = entry.model
    ws_m = model_windows(ctx, model)
    align_rows(ctx.keys, row_keys(ws_m.recording, ws_m.window_index), f"{model} windows")  # same windows
    groups_m = ws_m.subject if ctx.split.spec.group_by == "subject" else ws_m.recording
    user = ctx.cfg.user_models.get(model)
    if user and user.get("pretrained"):
        init_name = init_label(ctx.cfg, model, "declared")
    else:
        init_name = "pretrained:" + str(pretrained) if pretrained else "random"
    return _Arms(entry=entry, correct=correct, seeds=seeds, init_seed_of=init_seed_of, trainer_cfg=trainer_cfg,
                 optim=optim, backbone_kwargs=inherited("backbone_kwargs"), head_kwargs=inherited("head_kwargs"),
                 lora=inherited("lora"), pretrained=pretrained, batch=batch, pooling=entry.pooling or "mean",
                 schedule_from=schedule_from, ws_m=ws_m, groups_m=groups_m, user=user, init_name=init_name)


def _cv_schedule(ctx: ControlsContext, entry: ControlsScrambled, cv_cfg: CVConfig | None):
    """``(trainer, optim, cv run entry or None, batch size, where the schedule came from)``: the matching cv run's
    when there is one (its batch size unless ``auto``), else the cv defaults; trainer and optim as mappings."""
    defaults = cv_defaults()
    base_tr, base_opt, run = defaults["trainer"], defaults["optim"], None
    schedule_from = "cv defaults + entry"
    batch = int(ctx.cfg.data.batch_size)
    if cv_cfg is not None:
        match = [r for r in cv_cfg.runs if r.model == entry.model and r.regime == entry.regime
                 and entry.head in r.heads]
        if match:
            run = match[0]
            base_tr = merge_config(dict(cv_cfg.trainer), run.trainer or {}, "trainer.")
            base_opt = merge_config(cv_cfg.optim.to_dict(), run.optim or {}, "optim.")
            batch = fixed_batch_size(cv_cfg.data, fallback=batch)  # `auto` in the cv run: this config's
            schedule_from = f"cv run {ctx.cfg.cv_out_dir} ({entry.model}/{entry.regime}/{entry.head})"
    return base_tr, base_opt, run, batch, schedule_from


def _arm_seeds(ctx: ControlsContext, entry: ControlsScrambled, correct: str, run: RunConfig | None, cv_cfg: CVConfig | None):
    """``(seeds, {seed: init seed})``: the entry's, or with ``correct: cv`` the cv run's one seed and its run's
    init seed (which then allows no overrides)."""
    if correct != "cv":
        seeds = entry.seed_list
        return seeds, {x: x for x in seeds}
    overrides = entry.overrides()
    if run is None:
        raise ConfigError(f"scrambled entry {entry.model}/{entry.regime}/{entry.head}: correct: cv but the "
                          f"cv run {ctx.cfg.cv_out_dir} has no such run; fix: correct: rerun")
    if overrides:
        raise ConfigError(f"scrambled entry {entry.model}/{entry.regime}: correct: cv reuses the cv run's "
                          f"correct-label predictions, so its settings cannot be overridden ({overrides}); fix: "
                          "drop the overrides or set correct: rerun")
    seeds = [int(cv_cfg.seed)]
    init_seed_of = {seeds[0]: run_init_seed(cv_cfg, run)}
    if entry.seeds_given and entry.seed_list != seeds:
        raise ConfigError(f"scrambled entry {entry.model}: correct: cv fixes the seeds to the cv run's "
                          f"{seeds}, not {entry.seeds}; fix: drop seeds or set correct: rerun")
    return seeds, init_seed_of


# ------------------------------------------------------------------------------------------------- one fit
def _run_fit(ctx: ControlsContext, arms: _Arms, s, k_pos: int, k, lab: str, *, unit: Unit, path: Path, probe_path: Path,
             bar) -> None:
    """One arm of one seed and fold: its adapted model (trained here, or the cv run's checkpoint for ``correct:
    cv``), its head's test predictions, the frozen probe refitted on its tokens, and their rows.

    Raises
    ------
    FileNotFoundError
        ``correct: cv`` and the cv run's predictions of the fold are missing.
    RuntimeError
        The model's test windows do not match the feature fold's.
    """
    if lab == "correct" and arms.correct == "cv":
        pred, info, net = _cv_correct_arm(ctx, arms, k)
        used_scheme = None
    else:
        bar.set_postfix_str(f"seed {s} fold {k} {lab}")
        pred, info, net, used_scheme = _train_arm(ctx, arms, s, k, lab, unit.chash)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp_file:
        pred.to_csv(tmp_file, index=False)
    # §4.2.4: freeze the adapted encoder, refit the probe on the TRUE training labels of this fold, score the test
    p_probe = _refit_probe(ctx, arms, net, k_pos)
    del net
    tr_f, te_f = ctx.folds[k_pos]
    pp = pd.DataFrame({"key": ctx.keys[te_f], "y": ctx.y_idx[te_f]})
    for j in range(ctx.classes.size):
        pp[f"p{j}"] = p_probe[:, j]
    probe_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(probe_path) as tmp_file:
        pp.to_csv(tmp_file, index=False)
    ctx.store.append(unit, _fit_rows(ctx, pred, p_probe, info, used_scheme, k_pos, f"{arms.tag(s, lab)} fold {k}",
                                     unit.row_key))


def _cv_correct_arm(ctx: ControlsContext, arms: _Arms, k):
    """The cv run's fold-``k`` checkpoint of the entry's cell as the correct-label arm: ``(predictions, info,
    model)``, its epochs and fit time from the cv run's rows."""
    model, regime, head = arms.model, arms.regime, arms.head
    cv_run = CVRun(ctx.cfg.cv_out_dir)
    cks = {ck.fold: ck for ck in cv_run.checkpoints([model], [regime], [head])}
    src_file = Path(cks[k].predictions) if k in cks and cks[k].predictions else Path("<missing>")
    if not src_file.is_file():
        raise FileNotFoundError(f"the cv run's predictions of {model}/{regime}/{head} fold {k} ({src_file}) are "
                                "missing; fix: finish the cv run, or set correct: rerun")
    pred = pd.read_csv(src_file)
    pred["window_index"] = arms.ws_m.window_index[pred["index"].to_numpy()]
    cv_rows = cv_run.results
    sel = cv_rows[(cv_rows.model == model) & (cv_rows.regime == regime) & (cv_rows["head"] == head)
                  & (cv_rows.fold.astype(str) == str(k)) & (cv_rows.config_hash.astype(str) == cks[k].config_hash)]
    info = {m: float(sel[sel.metric == m].value.iloc[0]) if (sel.metric == m).any() else float("nan")
            for m in ("epochs", "fit_seconds")}
    return pred, info, load_fold_model(cks[k].path)


def _train_arm(ctx: ControlsContext, arms: _Arms, s, k, lab: str, chash: str):
    """Train one arm on fold ``k``: the scrambled arm on the source labels permuted (seed ``perm_seed + 1000·s +
    k``), the correct arm on the true ones; its checkpoint and logs go under ``adaptation/<tag>-<hash>/``. Returns
    ``(predictions, info, model, permutation scheme or None)``."""
    y_train, used_scheme = None, None
    if lab == "scrambled":
        tr_m, va_m, _ = ctx.split.indices(arms.groups_m, k)
        y_train, used_scheme = scrambled_source_labels(arms.ws_m.y, arms.ws_m.subject, np.concatenate([tr_m, va_m]),
                                                       arms.entry.scheme,
                                                       seed=int(arms.entry.perm_seed) + 1000 * int(s) + int(k))
    pred, info, net = train_fold(task=ctx.cfg.task, model=arms.model, regime=arms.regime, head=arms.head, fold=k,
                                 split=ctx.split, ws=arms.ws_m, seed=int(s), init_seed=arms.init_seed_of[s],
                                 trainer_cfg=arms.trainer_cfg, optim=arms.optim, batch_size=arms.batch,
                                 out_dir=ctx.out, tag=f"{arms.tag(s, lab)}-{chash}", backbone_kwargs=arms.backbone_kwargs,
                                 head_kwargs=arms.head_kwargs, lora=arms.lora, pretrained=arms.pretrained,
                                 y_train=y_train, progress=False, fixed_epochs=arms.fixed, return_model=True,
                                 user_model=arms.user)
    return pred, info, net, used_scheme


def _refit_probe(ctx: ControlsContext, arms: _Arms, net, k_pos: int) -> np.ndarray:
    """The frozen probe refitted on the adapted encoder's pooled tokens with the fold's TRUE training labels: its
    test-window probabilities, shape ``(n_test, n_classes)``."""
    X = adapted_embedding(net, arms.ws_m, ctx.keys, pooling=arms.pooling, trainer=ctx.cfg.trainer,
                          batch_size=arms.batch, cache_dir=ctx.cfg.data.cache_dir)
    tr_f, te_f = ctx.folds[k_pos]
    return fit_predict_folds(X, ctx.y_idx, [(tr_f, te_f)], ctx.spec_for("adapted"), ctx.classes.size)[0][te_f]


def _fit_rows(ctx: ControlsContext, pred: pd.DataFrame, p_probe: np.ndarray, info: dict, used_scheme, k_pos: int, what: str,
              key: dict) -> list[dict]:
    """The rows of one fit: the adapted head's own test metrics (``head_*``), the refitted probe's, epochs and fit
    time, and the permutation scheme used.

    Raises
    ------
    RuntimeError
        The model's test predictions do not cover the feature fold's test windows.
    """
    proba = pred[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()
    m = classification_metrics(pred["y"].to_numpy(), proba, ctx.classes.size)
    tr_f, te_f = ctx.folds[k_pos]
    te = ctx.folds[k_pos][1]
    if len(pred) != te.size:
        raise RuntimeError(f"{what}: {len(pred)} test predictions for {te.size} test windows of the "
                           "feature fold; fix: the model's windows must match the feature windows")
    rows = [{**key, "metric": f"head_{mm}_window", "value": float(v), "n_windows": int(len(pred)),
             "n_subjects": int(pred["subject"].nunique())} for mm, v in m.items()]
    mp = classification_metrics(ctx.y_idx[te_f], p_probe, ctx.classes.size)
    rows += [{**key, "metric": f"{mm}_window", "value": float(v), "n_windows": int(te_f.size)}
             for mm, v in mp.items()]
    rows += [{**key, "metric": mm, "value": float(info[mm])} for mm in ("epochs", "fit_seconds")]
    if used_scheme:
        rows.append({**key, "metric": f"scheme_{used_scheme}", "value": 1.0})
    return rows


# ------------------------------------------------------------------------------------------------ the arms
def _collect_arms(ctx: ControlsContext, arms: _Arms, out: dict) -> None:
    """Each arm's out-of-fold predictions per seed, read back from the files (so reruns see the same numbers):
    ``out["runs"][arm][seed]`` scores the refitted probe (with its probabilities), ``out["runs_head"]`` the adapted
    head, ``out["arm_hashes"][arm]`` is a hash of the arm's fits' config hashes (what a unit reading the arm
    hashes)."""
    metric = ctx.cfg.metric
    out["arm_hashes"] = {lab: config_hash(sorted(arms.fit(ctx, s, k, lab).chash for s in arms.seeds for k in ctx.fold_ids))
                         for lab in ARMS}
    for lab in ARMS:
        per_seed, per_seed_head = {}, {}
        for s in arms.seeds:
            proba, proba_head = _arm_predictions(ctx, arms, s, lab)
            res, res_h = probe_result(ctx, proba), probe_result(ctx, proba_head)
            per_seed[int(s)] = {"score": res.mean_fold(metric), "folds": res.fold_values(metric).tolist(),
                                "proba": proba}
            per_seed_head[int(s)] = {"score": res_h.mean_fold(metric), "folds": res_h.fold_values(metric).tolist()}
        out["runs"][lab] = per_seed
        out["runs_head"][lab] = per_seed_head


def _arm_predictions(ctx: ControlsContext, arms: _Arms, s, lab: str) -> tuple[np.ndarray, np.ndarray]:
    """One arm and seed's out-of-fold probabilities on the feature windows: the refitted probe's and the adapted
    head's, each ``(n_windows, n_classes)`` (NaN outside the tested folds)."""
    proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
    proba_head = np.full((len(ctx.keys), ctx.classes.size), np.nan)
    for k_pos, k in enumerate(ctx.fold_ids):
        path, probe_path = arms.files(ctx, arms.fit(ctx, s, k, lab), s, k, lab)
        te = ctx.folds[k_pos][1]
        dfp = pd.read_csv(probe_path)
        o = align_rows(ctx.keys[te], dfp["key"].astype(str).to_numpy(), "probe predictions")
        proba[te] = dfp[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()[o]
        df = pd.read_csv(path)
        o = align_rows(ctx.keys[te], row_keys(df["recording"], df["window_index"]), "adaptation predictions")
        proba_head[te] = df[[f"p{j}" for j in range(ctx.classes.size)]].to_numpy()[o]
    return proba, proba_head
