"""The steps of ``eegfm-bench controls`` (paper 001), each a resumable unit of work over one shared context.

:class:`ControlsContext` holds what every step reads (the feature windows, their labels and subjects, the fixed folds, the
unit level, the probe and the store); :class:`Rep` is one scored representation on those windows. The steps, in
the order the command runs them (:func:`eegfm_bench.runs.controls.command.run_controls`):

* :func:`handcrafted` — (a) the handcrafted families through the frozen probe;
* :func:`frozen_models` — (b) every model's frozen embeddings, configured checkpoint and matched random inits;
* :func:`cv_claims` — (c) a cv run's fine-tuned scores, from its predictions;
* :func:`paired_uncertainty` — (g) a claim minus the stronger family, subject-cluster bootstrap, Wilcoxon, sign-flip;
* :func:`permutation_control` — (d) label permutation of a representation's probe;
* :func:`identity_control` / :func:`_identity_encoder` — (f) the dataset-identity probe, handcrafted and per encoder.

Control 4 (scrambled-label adaptation) is :mod:`eegfm_bench.runs.controls.scrambled`, the gates
:mod:`eegfm_bench.runs.controls.gates`. Each step is a unit of the store
(:class:`~eegfm_bench.runs.controls.store.ControlsStore`): long rows under the unit's config hash and its predictions
or null distribution in files named with that hash under ``out_dir``; a rerun of the same config reads those back, a
changed one computes the units it changes beside them.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.controls.embeddings import align_rows, build_encoder, frozen_embedding, pool_cached_tokens, row_keys
from eegfm_bench.controls.features import handcrafted_features
from eegfm_bench.controls.gates import decision_stability
from eegfm_bench.controls.identity import dataset_identity_probe, shared_channels
from eegfm_bench.controls.permutation import permutation_test
from eegfm_bench.controls.probes import ProbeResult, metrics_rows, evaluate_probe, paired_comparison
from eegfm_bench.data.preprocessing import Preprocessing, reference_windows
from eegfm_bench.data.windows import load_windows, select_channels, window_reference
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.features import extract_features
from eegfm_bench.results import config_hash
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.controls.config import init_label, user_decl
from eegfm_bench.config.controls import ControlsConfig, ControlsModel
from eegfm_bench.runs.controls.store import ControlsStore
from eegfm_bench.runs.cv.output import CVRun, CVRunError
from eegfm_bench.stats import fold_ids_from_folds


@dataclass
class Rep:
    """One scored representation on the feature windows' rows (handcrafted, frozen embedding, cv, adaptation).

    ``proba`` has shape ``(n_windows, n_classes)`` (NaN on rows outside the evaluated test folds); ``result`` is the
    :class:`~eegfm_bench.controls.probes.ProbeResult` built from it on the fixed folds; ``chash`` is the config hash
    of the unit(s) it comes from (the units that read it, paired comparisons and permutations, hash it).
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
    chash: str = ""


def write_json(path: Path, obj) -> None:
    """Write ``obj`` to ``path`` as indented JSON, atomically (numpy scalars and arrays as Python values)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=1, default=_json_default, ensure_ascii=False))


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
class ControlsContext:
    """Everything the steps share: the config, windows, folds, units, labels and the store."""

    cfg: ControlsConfig
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
    store: ControlsStore
    progress: bool
    ws_cache: dict = field(default_factory=dict)
    log: list = field(default_factory=list)
    arm_flips: dict = field(default_factory=dict)  # gate (iv) interval (low, high) → {subject: status without it}

    def spec_for(self, source: str):
        """The probe for one kind of representation: ``probe`` with ``probe.overrides[kind]`` applied."""
        kind = {"frozen": "frozen", "handcrafted": "handcrafted"}.get(source, "adapted")
        ov = (self.cfg.probe.overrides or {}).get(kind)
        if not ov:
            return self.spec
        return dataclasses.replace(self.spec, **ov, **({"cap_pca": True} if ov.get("pca") is not None else {}))

    def note(self, msg: str) -> None:
        self.log.append(msg)
        if self.progress:
            tqdm.write(f"[controls] {msg}")


def probe_result(ctx: ControlsContext, proba: np.ndarray):
    """ProbeResult of fixed out-of-fold probabilities on the context's folds (window and unit level)."""
    fm, pooled = metrics_rows(ctx.y_idx, proba, ctx.folds, ctx.agg_units, ctx.agg_level or "subject",
                               ctx.classes.size, [None] * len(ctx.folds))
    levels = ["window"] + ([ctx.agg_level] if ctx.agg_level else [])
    return ProbeResult(ctx.classes, proba, fm, pooled, ctx.spec, levels)


def _fold_rows(ctx: ControlsContext, res, **key) -> list[dict]:
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


def _save_predictions(ctx: ControlsContext, path: Path, proba: np.ndarray) -> None:
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
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def _load_predictions(ctx: ControlsContext, path: Path) -> np.ndarray:
    df = pd.read_csv(path)
    proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
    tested = np.concatenate([te for _, te in ctx.folds])
    idx = align_rows(ctx.keys[tested], row_keys(df["recording"], df["window_index"]), f"saved predictions {path}",
                     "tested feature windows")
    proba[tested] = df[[f"p{c}" for c in range(ctx.classes.size)]].to_numpy()[idx]
    return proba


def _probe_rep(ctx: ControlsContext, *, name: str, model: str, init: str, regime: str, head: str, source: str, unit_cfg: dict,
               compute_X, seed: int | None = None) -> tuple[Rep, object]:
    """Evaluate (or reload) one representation through the probe; returns the Rep and a lazy X getter."""
    seed = ctx.cfg.seed if seed is None else seed
    unit = ctx.store.unit(config_hash(unit_cfg), task=ctx.task.name, model=model, init=init, regime=regime, head=head,
                          seed=seed, condition="clean")
    path = unit.file(ctx.out / "predictions", _safe(name), ".csv")
    cache = {}

    def get_X():
        if "X" not in cache:
            cache["X"] = compute_X()
        return cache["X"]

    if ctx.store.done(unit) and path.is_file():
        proba = _load_predictions(ctx, path)
        res = probe_result(ctx, proba)
    else:
        t0 = time.time()
        X = get_X()
        res = evaluate_probe(X, ctx.y_idx, ctx.folds, spec=ctx.spec_for(source), groups=ctx.subjects,
                             aggregate_by=ctx.agg_units, aggregate_name=ctx.agg_level or "subject")
        res_fit = res
        proba = np.full((len(ctx.keys), ctx.classes.size), np.nan)
        tested = np.concatenate([te for _, te in ctx.folds])
        proba[tested] = res.proba[tested]
        res = probe_result(ctx, proba)
        _save_predictions(ctx, path, proba)
        key = unit.row_key
        rows = _fold_rows(ctx, res, **key)
        rows.append({**key, "fold": "all", "metric": "n_dims", "value": float(X.shape[1])})
        ks = [k for k in res_fit.fold_metrics.get("pca_k", pd.Series(dtype=float)).dropna().unique()]
        if ks:  # in-fold PCA components the probe used (the smallest over folds when capped)
            rows.append({**key, "fold": "all", "metric": "pca_k", "value": float(min(ks))})
        rows.append({**key, "fold": "all", "metric": "probe_seconds", "value": float(time.time() - t0)})
        ctx.store.append(unit, rows)
        ctx.note(f"{name}: {ctx.cfg.metric} (window, mean-fold) = {res.mean_fold(ctx.cfg.metric):.4f} "
                 f"({X.shape[1]} dims, {time.time() - t0:.1f} s)")
    return Rep(name, model, init, regime, head, source, proba, res, seed, chash=unit.chash), get_X


def score(rep: Rep, metric: str, level: str = "window") -> float:
    """The fold mean of ``metric`` of one representation at ``level`` (``window`` or the unit level)."""
    return rep.result.mean_fold(metric, level)



# ================================================================================================ steps
def load_task_windows(cfg: ControlsConfig, task, prep_dict: dict, progress: bool, *, subjects=None, max_windows=None):
    """The windows of ``task`` under one preprocessing, from the config's data root and cache."""
    return load_windows(task, Preprocessing(**prep_dict), data_root=cfg.data.data_root, cache_dir=cfg.data.cache_dir,
                        subjects=subjects, max_windows_per_subject=max_windows, progress=progress)


def model_windows(ctx: ControlsContext, model: str):
    """The task's windows under ``model``'s declared preprocessing, loaded once per preprocessing for the run."""
    prep = BACKBONES.get(model).preprocessing
    k = json.dumps(prep.to_dict(), sort_keys=True)
    if k not in ctx.ws_cache:
        ctx.ws_cache[k] = load_task_windows(ctx.cfg, ctx.cfg.resolved_task, prep.to_dict(), ctx.progress, subjects=ctx.cfg.data.subjects,
                                   max_windows=ctx.cfg.data.max_windows_per_subject)
    return ctx.ws_cache[k]


def _features(ctx: ControlsContext, family: str, ws, ch_names: list[str], tag: str) -> np.ndarray:
    """Handcrafted features of ``ws`` (cached as .npy under out_dir/features)."""
    fc = ctx.cfg.features
    rows = row_keys(ws.recording, ws.window_index)
    h = config_hash({"family": family, "ws": ws.meta.get("cache_key"), "rows": config_hash(rows.tolist()), "ref": "final",
               "n": len(ws), "ch": ch_names, "welch": fc.welch_seconds, "study": fc.study_summaries})
    path = ctx.out / "features" / f"{tag}-{family}-{h}.npy"
    if path.is_file():
        return np.load(path)
    t0 = time.time()
    sel = [ws.ch_names.index(c) for c in ch_names]
    parts = []
    step = 256
    for s in tqdm(range(0, len(ws), step), desc=f"{family} features ({tag})", disable=not ctx.progress, unit="chunk"):
        X = np.asarray(ws.X[s:s + step], dtype=np.float64)[:, sel]
        if len(sel) < len(ws.ch_names):  # the reference over the channels kept
            reference_windows(X, window_reference(ws))
        kw = {"welch_seconds": fc.welch_seconds, "study_summaries": fc.study_summaries}
        F, _ = handcrafted_features(X, ws.sfreq, ch_names, family=family, **kw)
        parts.append(F)
    F = np.concatenate(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a file object: np.save adds no ".npy" to the name
        np.save(fh, F)
    ctx.note(f"{family} features for {tag}: {F.shape} in {time.time() - t0:.1f} s")
    return F


def handcrafted(ctx: ControlsContext) -> dict:
    """Step (a): each handcrafted family through the frozen probe, resumable: ``({family: Rep}, {family: get_X})``."""
    reps, getters = {}, {}
    cfg = ctx.cfg
    for fam in cfg.features.families:
        unit = {"step": "handcrafted", "family": fam, "features": cfg.features.to_dict(), "probe": cfg.probe.to_dict(),
                "folds": ctx.fold_ids, "aggregate": ctx.agg_level, "data": cfg.data.to_dict()}
        rep, get_X = _probe_rep(ctx, name=f"handcrafted_{fam}", model=f"handcrafted_{fam}", init="none",
                                regime="frozen_probe", head=f"probe_{ctx.spec_for('handcrafted').kind}",
                                source="handcrafted",
                                unit_cfg=unit, compute_X=lambda fam=fam: _features(ctx, fam, ctx.ws, ctx.ws.ch_names,
                                                                                   ctx.task.name))
        reps[fam], getters[fam] = rep, get_X
    return reps, getters


def frozen_models(ctx: ControlsContext) -> tuple[dict, dict]:
    """Frozen embeddings of every model and init through the probe: {model: {init_label: Rep}}, getters."""
    reps, getters = {}, {}
    cfg = ctx.cfg
    for m in cfg.models:
        inits = ([("pretrained", m.pretrained, m.init_seeds[0])] if m.pretrained else []) + \
                [(f"random#seed{s}", None, s) for s in m.init_seeds]
        reps[m.model], getters[m.model] = {}, {}
        for label, pretrained, seed in inits:
            unit = {"step": "frozen", "model": m.to_dict(), "pretrained": pretrained, "init_seed": seed,
                    "probe": cfg.probe.to_dict(), "folds": ctx.fold_ids, "aggregate": ctx.agg_level,
                    "data": cfg.data.to_dict(), **user_decl(cfg, m.model)}

            def compute(m=m, pretrained=pretrained, seed=seed):
                ws_m = model_windows(ctx, m.model)
                emb = frozen_embedding(m.model, ws_m, ctx.keys, init_seed=seed, pretrained=pretrained,
                                       pooling=m.pooling, backbone_kwargs=m.backbone_kwargs,
                                       cache_dir=cfg.data.cache_dir, trainer=cfg.trainer,
                                       batch_size=int(cfg.data.batch_size), progress=ctx.progress)
                return emb.X

            init_row = label if pretrained is None else init_label(cfg, m.model, pretrained)
            rep, get_X = _probe_rep(ctx, name=f"{m.model}-{_safe(init_row)}-{m.pooling}", model=m.model,
                                    init=init_row, regime="frozen_probe",
                                    head=f"{m.pooling}+probe_{ctx.spec_for('frozen').kind}",
                                    source="frozen", unit_cfg=unit, compute_X=compute)
            reps[m.model][label] = rep
            getters[m.model][label] = get_X
    return reps, getters


def cv_claims(ctx: ControlsContext, cv_cfg: CVConfig | None) -> list[Rep]:
    """Fine-tuned / head-only cv scores from the cv run's predictions, aligned to the feature windows: one
    :func:`_cv_claim` per ``cv_claims`` entry (``auto``: every run × head of the cv run)."""
    claims = ctx.cfg.cv_claims
    if cv_cfg is None or claims in (None, []):
        return []
    run = CVRun(ctx.cfg.cv_out_dir)
    if claims == "auto":
        claims = [{"model": r.model, "regime": r.regime, "head": h} for r in cv_cfg.runs for h in r.heads]
    return [_cv_claim(ctx, run, cv_cfg, c) for c in claims]


def _cv_claim(ctx: ControlsContext, run: CVRun, cv_cfg: CVConfig, c: dict) -> Rep:
    """One cv claim ``{model, regime, head}``: its out-of-fold predictions of the cv run's current cells, scored on
    the fixed folds and stored as rows (a unit whose hash holds the cv cells' hashes).

    Raises
    ------
    FileNotFoundError
        The cv run lacks the cell or a fold's predictions.
    ValueError
        The cell holds several inits, or its labels differ from the task's.
    """
    cvd = run.dir
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
    ws_m = model_windows(ctx, c["model"])
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
    res = probe_result(ctx, proba)
    chash = config_hash({"step": "cv_claim", "claim": c, "cv_out_dir": str(cvd), "folds": ctx.fold_ids,
                   "aggregate": ctx.agg_level, "init": init,
                   "cv_cells": sorted({str(ck.config_hash) for ck in cks.values()})})
    unit = ctx.store.unit(chash, task=ctx.task.name, model=c["model"], init=init, regime=c["regime"], head=c["head"],
                          seed=cv_cfg.seed, condition="cv_predictions")
    ctx.store.append(unit, _fold_rows(ctx, res, **unit.row_key))  # once per hash
    ctx.note(f"cv claim {name} ({init}): {ctx.cfg.metric} = {res.mean_fold(ctx.cfg.metric):.4f}")
    return Rep(f"{name} (cv)", c["model"], init, c["regime"], c["head"], "cv", proba, res, cv_cfg.seed, chash=chash)


def paired_uncertainty(ctx: ControlsContext, rep: Rep, comp: Rep, comp_family: str) -> dict:
    """Paired uncertainty of rep minus the stronger family, per level (rows + dict); its hash holds both
    representations' hashes, so it is recomputed whenever either changes."""
    b = ctx.cfg.bootstrap
    metric = ctx.cfg.metric
    chash = config_hash({"step": "paired", "rep": rep.name, "comp": comp.name, "bootstrap": b.to_dict(), "metric": metric,
                   "folds": ctx.fold_ids, "aggregate": ctx.agg_level, "inputs": [rep.chash, comp.chash]})
    unit = ctx.store.unit(chash, task=ctx.task.name, model=rep.model, init=rep.init, regime=rep.regime,
                          head=rep.head, seed=rep.seed, condition=f"paired_vs_{comp_family}")
    key = unit.row_key
    path = unit.file(ctx.out / "paired", f"{_safe(rep.name)}-vs-{comp_family}", ".json")
    if ctx.store.done(unit) and path.is_file():
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
                               n_boot=int(b.n_boot), level_ci=float(b.level), seed=int(b.seed))
        level_out = pc.to_dict()
        if lv == "window":  # does leaving out one subject change gate (ii)'s decision? (same predictions)
            level_out["loso"] = _stability(ctx, sub, tested, folds_sub, clusters)
        out["levels"][lv] = level_out
        bs = level_out["bootstrap"]
        for mname, v in (("diff", bs["estimate"]), ("ci_low", bs["low"]), ("ci_high", bs["high"]),
                         ("wilcoxon_p", level_out["wilcoxon"]["p_value"] if level_out["wilcoxon"] else np.nan),
                         ("sign_flip_p", level_out["sign_flip"]["p_value"] if level_out["sign_flip"] else np.nan)):
            rows.append({**key, "fold": "all", "metric": f"{metric}_{lv}_{mname}", "value": float(v),
                         "n_windows": int(tested.size), "n_subjects": int(np.unique(clusters).size)})
    write_json(path, out)
    ctx.store.append(unit, rows)
    boot = out["levels"]["window"]["bootstrap"]
    ctx.note(f"paired {rep.name} − {comp_family}: {boot['estimate']:+.4f} [{boot['low']:+.4f}, {boot['high']:+.4f}]")
    return out


def _stability(ctx: ControlsContext, sub, tested, folds_sub, clusters) -> dict | None:
    """Gate (ii)'s decision without each subject in turn (:func:`~eegfm_bench.controls.gates.decision_stability`):
    ``{"decision", "flips", "undecided"}``, or None when the interval itself cannot be computed."""
    b = ctx.cfg.bootstrap
    try:
        st = decision_stability(ctx.classes[ctx.y_idx[tested]], [(sub[0].proba, sub[1].proba)], clusters,
                                fold_ids_from_folds(folds_sub, tested.size), metric=ctx.cfg.metric,
                                n_boot=int(b.n_boot), level=float(b.level), seed=int(b.seed))
    except ValueError:
        return None
    return {"decision": st.verdict, "flips": st.flips, "undecided": sorted(st.undecided)}


def arm_interval(ctx: ControlsContext, pairs: list[tuple[np.ndarray, np.ndarray]], what: str) -> tuple | None:
    """Paired subject-cluster interval of the mean over ``pairs`` of (A − B) (gate iv's two-arm comparisons).

    Each pair is two arms' out-of-fold probabilities ``(n_windows, n_classes)`` on the feature windows (a seed of
    each arm). The pairs are bootstrapped with the same seed, so every replicate resamples the same subjects for all
    of them; the mean of their replicates is the bootstrap of the mean difference (:mod:`eegfm_bench.controls.gates`
    explains the choice). Returns ``(low, high)`` at ``bootstrap.level``, or None (with a note) when the bootstrap
    cannot run (too few subjects per fold, a metric undefined in a fold); the subjects whose removal alone changes
    the interval's decision go to ``ctx.arm_flips`` under it.
    """
    b, metric = ctx.cfg.bootstrap, ctx.cfg.metric
    tested = np.concatenate([te for _, te in ctx.folds])
    folds_sub = _reindex_folds(ctx.folds, tested)
    samples = []
    try:
        for pa, pb in pairs:
            ra, rb = probe_result(ctx, pa), probe_result(ctx, pb)
            pc = paired_comparison(_SubResult(ra, tested), _SubResult(rb, tested), ctx.classes[ctx.y_idx[tested]],
                                   folds_sub, ctx.subjects[tested], metric=metric, level="window",
                                   n_boot=int(b.n_boot), level_ci=float(b.level), seed=int(b.seed))
            samples.append(np.asarray(pc.bootstrap.samples, dtype=float))
    except ValueError as err:
        ctx.note(f"{what}: no paired interval ({err}); the gate reads inconclusive")
        return None
    mean = np.nanmean(np.stack(samples), axis=0)
    a = (1 - float(b.level)) / 2
    lo, hi = np.quantile(mean[np.isfinite(mean)], [a, 1 - a])
    ctx.note(f"{what}: paired {float(b.level):.0%} interval [{lo:+.4f}, {hi:+.4f}] over {len(pairs)} pair(s)")
    st = decision_stability(ctx.classes[ctx.y_idx[tested]], [(pa[tested], pb[tested]) for pa, pb in pairs],
                            ctx.subjects[tested], fold_ids_from_folds(folds_sub, tested.size), metric=metric,
                            n_boot=int(b.n_boot), level=float(b.level), seed=int(b.seed))
    ctx.arm_flips[(float(lo), float(hi))] = st.flips
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


def permutation_control(ctx: ControlsContext, rep: Rep, get_X) -> dict:
    """Label permutation of one representation's probe (Control 3), resumable; its hash holds the
    representation's, so it is recomputed whenever the representation changes."""
    p = ctx.cfg.permutation
    metric = ctx.cfg.metric
    chash = config_hash({"step": "permutation", "rep": rep.name, "perm": p.to_dict(), "scheme": ctx.scheme,
                   "probe": ctx.cfg.probe.to_dict(), "metric": metric, "folds": ctx.fold_ids, "input": rep.chash})
    unit = ctx.store.unit(chash, task=ctx.task.name, model=rep.model, init=rep.init, regime=rep.regime,
                          head=rep.head, seed=rep.seed, condition=f"label_permutation_{ctx.scheme}")
    key = unit.row_key
    path = unit.file(ctx.out / "permutation", _safe(rep.name), ".json")
    if ctx.store.done(unit) and path.is_file():
        return json.loads(path.read_text())
    t0 = time.time()
    res = permutation_test(get_X(), ctx.y_idx, ctx.folds, groups=ctx.subjects, scheme=ctx.scheme,
                           n_permutations=int(p.n), metric=metric, level="window", spec=ctx.spec_for(rep.source),
                           seed=int(p.seed), progress=ctx.progress, statistic=p.statistic)
    record = res.to_dict()
    record["seconds"] = time.time() - t0
    record["representation"] = rep.name
    write_json(path, record)
    rows = [{**key, "fold": "all", "metric": f"{metric}_window_{m}", "value": float(v)}
            for m, v in (("observed", res.observed), ("null_mean", res.null_mean), ("null_sd", res.null_sd),
                         ("null_max", float(np.max(res.null))), ("p_value", res.p_value),
                         ("n_permutations", res.n_permutations), ("n_redrawn", res.n_redrawn))]
    ctx.store.append(unit, rows)
    ctx.note(f"permutation {rep.name}: observed {res.observed:.4f}, null {res.null_mean:.4f} ± {res.null_sd:.4f}, "
             f"p = {res.p_value:.4f} ({res.n_permutations} perms, {res.n_redrawn} unscorable draws redrawn, "
             f"{record['seconds']:.0f} s)")
    return record


def identity_control(ctx: ControlsContext) -> dict:
    """Dataset-identity probe (§4.4) on the handcrafted family of two tasks' recordings, resumable."""
    idc = ctx.cfg.identity
    ta, tb = ctx.cfg.resolved_identity
    names = (ta.dataset, tb.dataset)
    chash = config_hash({"step": "identity", "identity": idc.to_dict(), "features": ctx.cfg.features.to_dict()})
    unit = ctx.store.unit(chash, task=f"identity:{names[0]}-vs-{names[1]}", model=f"handcrafted_{idc.family}",
                          init="none", regime="frozen_probe", head="probe_logreg", seed=int(idc.seed),
                          condition="dataset_identity")
    key = unit.row_key
    path = unit.file(ctx.out / "identity", f"{names[0]}-vs-{names[1]}-{idc.family}", ".json")
    if ctx.store.done(unit) and path.is_file() and "encoders" in json.loads(path.read_text()):
        record = json.loads(path.read_text())
        record["encoders"] = [_identity_encoder(ctx, m, record["shared_channels"], names) for m in ctx.cfg.models]
        return record
    subj = idc.subjects or {}
    wss = [load_task_windows(ctx.cfg, t, ctx.cfg.features.preprocessing, ctx.progress, subjects=subj.get(t.name),
                    max_windows=idc.max_windows_per_subject) for t in (ta, tb)]
    shared = shared_channels(wss[0].ch_names, wss[1].ch_names, names)  # raises, listing each dataset's channels
    t0 = time.time()
    Fs = []
    for t, w in zip((ta, tb), wss):
        names_w = {c.lower(): c for c in w.ch_names}
        Fs.append(_features(ctx, idc.family, w, [names_w[c.lower()] for c in shared], f"identity-{t.name}"))
    res = dataset_identity_probe(Fs[0], wss[0].recording, Fs[1], wss[1].recording, names=names,
                                 n_folds=int(idc.n_folds), pca_k=int(idc.pca_k), C=float(idc.C),
                                 n_permutations=int(idc.n_permutations), n_balanced=int(idc.n_balanced),
                                 seed=int(idc.seed), progress=ctx.progress, subjects_a=wss[0].subject,
                                 subjects_b=wss[1].subject, group_by=idc.group_by)
    record = res.to_dict()
    record.update(tasks=list(idc.tasks), shared_channels=shared, n_windows=[len(wss[0]), len(wss[1])],
                  n_subjects=[int(np.unique(w.subject).size) for w in wss], family=idc.family,
                  seconds=time.time() - t0,
                  note="one unit per recording (mean feature vector); preprocessing "
                       f"{ctx.cfg.features.preprocessing} applied per dataset before channel restriction (the "
                       "average reference uses each dataset's full montage); dataset membership confounds site, "
                       "device, montage, population and protocol (paper 001 §4.4)")
    write_json(path, record)
    rows = [{**key, "fold": "all", "metric": m, "value": float(v)}
            for m, v in (("auroc_full", res.auroc_full), ("auroc_pca", res.auroc_pca), ("pca_k", res.pca_k),
                         ("null_mean", record["null_mean"]), ("null_max", float(np.max(res.null_aurocs))),
                         ("balanced_mean", record["balanced_mean"]),
                         ("balanced_min", float(np.min(res.balanced_aurocs))),
                         ("n_units_a", res.n_units[0]), ("n_units_b", res.n_units[1]),
                         ("n_features", res.n_features), ("n_shared_channels", len(shared)))]
    ctx.store.append(unit, rows)
    ctx.note(f"identity {names[0]} vs {names[1]}: AUROC full {res.auroc_full:.4f}, PCA-{res.pca_k} "
             f"{res.auroc_pca:.4f}, null {record['null_mean']:.4f}, balanced {record['balanced_mean']:.4f}")
    record["encoders"] = [_identity_encoder(ctx, m, shared, names) for m in ctx.cfg.models]
    write_json(path, record)
    return record


def _identity_encoder(ctx: ControlsContext, m: ControlsModel, shared: list[str], names: tuple[str, str]) -> dict:
    """The dataset-identity probe on one encoder's frozen embeddings (paper 001 Table 7), resumable.

    Both datasets' windows are taken under the encoder's own preprocessing and restricted to the shared channels (in
    one order), one encoder is built on those channels (the configured checkpoint, else the first random-init seed),
    its frozen tokens are pooled as configured, and the same probe as the handcrafted row is run on the unit means:
    full space, in-fold PCA, permuted null, balanced subsampling."""
    idc, cfg = ctx.cfg.identity, ctx.cfg
    pretrained, seed = m.pretrained, int(m.init_seeds[0])
    init = init_label(cfg, m.model, pretrained) if pretrained else f"random#seed{seed}"
    chash = config_hash({"step": "identity_encoder", "identity": idc.to_dict(), "model": m.to_dict(), "shared": shared,
                   **user_decl(cfg, m.model)})
    unit = ctx.store.unit(chash, task=f"identity:{names[0]}-vs-{names[1]}", model=m.model, init=init,
                          regime="frozen_probe", head=f"{m.pooling}+probe_logreg", seed=seed,
                          condition="dataset_identity")
    key = unit.row_key
    path = unit.file(ctx.out / "identity", f"{names[0]}-vs-{names[1]}-{_safe(m.model)}-{_safe(init)}", ".json")
    if ctx.store.done(unit) and path.is_file():
        return json.loads(path.read_text())
    t0 = time.time()
    prep = BACKBONES.get(m.model).preprocessing.to_dict()
    subj = idc.subjects or {}
    feats, units, subjects = [], [], []
    adapter = None
    for t in cfg.resolved_identity:
        ws = load_task_windows(cfg, t, prep, ctx.progress, subjects=subj.get(t.name),
                      max_windows=idc.max_windows_per_subject)
        low = {c.lower(): i for i, c in enumerate(ws.ch_names)}
        idx = [low[c.lower()] for c in shared]
        sub_ws = select_channels(ws, [ws.ch_names[i] for i in idx])  # re-referenced over the shared channels
        if adapter is None:
            adapter, _ = build_encoder(m.model, list(shared), sub_ws.n_times, 2, init_seed=seed,
                                       pretrained=pretrained, backbone_kwargs=m.backbone_kwargs)
        tokens = extract_features(adapter, sub_ws, parts=("tokens",), trainer=cfg.trainer,
                                  batch_size=int(cfg.data.batch_size), cache_dir=cfg.data.cache_dir,
                                  progress=ctx.progress).array("tokens")
        feats.append(pool_cached_tokens(tokens, m.pooling))
        units.append(ws.recording)
        subjects.append(ws.subject)
    res = dataset_identity_probe(feats[0], units[0], feats[1], units[1], names=names, n_folds=int(idc.n_folds),
                                 pca_k=int(idc.pca_k), C=float(idc.C), n_permutations=int(idc.n_permutations),
                                 n_balanced=int(idc.n_balanced), seed=int(idc.seed), progress=ctx.progress,
                                 subjects_a=subjects[0], subjects_b=subjects[1], group_by=idc.group_by)
    record = res.to_dict()
    record.update(model=m.model, init=init, pooling=m.pooling, n_dims=int(feats[0].shape[1]),
                  seconds=time.time() - t0, note=f"{m.model} ({init}) built on the {len(shared)} shared channels, "
                  f"frozen, {m.pooling}-pooled tokens under its own preprocessing, one unit per recording")
    write_json(path, record)
    rows = [{**key, "fold": "all", "metric": mm, "value": float(v)}
            for mm, v in (("auroc_full", res.auroc_full), ("auroc_pca", res.auroc_pca), ("pca_k", res.pca_k),
                          ("null_mean", record["null_mean"]), ("balanced_mean", record["balanced_mean"]),
                          ("n_features", res.n_features))]
    ctx.store.append(unit, rows)
    ctx.note(f"identity {names[0]} vs {names[1]} on {m.model} ({init}): AUROC full {res.auroc_full:.4f}, "
             f"PCA-{res.pca_k} {res.auroc_pca:.4f}, null {record['null_mean']:.4f}")
    return record
