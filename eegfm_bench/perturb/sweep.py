"""Test-time perturbation sweep: every App. D condition on a fitted model's test windows (paper 003 §3, App. D, H).

Each fold's fitted model (the cv run's ``best.ckpt``) is evaluated on that fold's test windows under every
condition of :mod:`eegfm_bench.perturb.conditions` — clean first — with no retraining: same windows, same
weights, one result row per condition × metric (``balanced_accuracy``, ``auroc``, ``cohen_kappa``) whose
``condition`` column holds the condition string.

Pieces
------
:func:`iter_sweep`
    The engine: windows already in memory ``(n_windows, n_chans, n_times)``, one or more models, a list of
    conditions; yields the :class:`ConditionResult` of every model for each condition, in order. The fold's
    windows are read from disk once (by the caller); each condition perturbs them once, batch by batch with its
    own noise Generator (:func:`~eegfm_bench.perturb.conditions.condition_rng`, consumed in window order, so
    the noise of a window does not depend on the batch size), and every model of the fold runs on those same
    batches, while up to ``workers`` background threads perturb the next conditions (numpy / scipy FFT and
    torch release the GIL).
:class:`TestSweep`
    The same as a Lightning callback: attached to ``trainer.test``, it applies every condition to each test
    batch as it streams past (``on_test_batch_end``) and computes the rows at ``on_test_epoch_end``.
:func:`sweep_main`
    ``eegfm-bench sweep --config X.yaml``: every per-fold checkpoint a ``cv`` run left, resumable, with the
    report (:mod:`eegfm_bench.perturb.report`: ``sweep.md``, degradation curves).

Rules
-----
* **Removed channels** (``*_removed``) run only for models whose ``backbone.channel_contract.variable`` is
  True and whose head accepts a different token count (not ``flatten``); every other model gets a
  *not-applicable* row (``metric="not_applicable"``, ``value=NaN``, ``note`` = the reason) and the sweep goes on
  (paper 003 App. D.2: removal is tested for variable-channel models only).
* **Filters**: the noise goes through the band-pass and notch of the dataset's preprocessing as it was
  applied (``WindowSet.meta["preprocessing"]``: ``l_freq``, ``h_freq`` after Nyquist capping, ``notch``),
  designed at the windows' sampling rate (:func:`filter_from_preprocessing`).
* **Units**: noise is added to the windows as the model receives them (already scaled to its input unit, e.g.
  µV or 100 µV); the SNR is a power ratio, so the scale does not matter.
* **Masks**: the dropout mask of every condition is recorded by channel name in the row's ``details`` JSON
  column and, for the whole sweep, in ``dropout_masks.json`` (as App. D.2 Table 5).
* **Failures**: an error inside one condition is recorded (``failures.json``) and the sweep continues; rows
  are written condition by condition (:meth:`~eegfm_bench.results.ResultStore.append`, atomic), so a crash
  loses none already written. A rerun skips conditions whose
  rows exist (:data:`~eegfm_bench.results.KEY_COLUMNS`) and retries the failed ones.
* **Checkpoints** are loaded with ``weights_only=True``: nothing but tensors and plain containers is
  unpickled.
* **Rows** carry the cv's identifying columns (experiment, model, init, regime, head, fold, training ``seed``)
  plus ``perturb_seed``, ``checkpoint``, ``note`` and ``details``; they go to the sweep's own store
  (``out_dir``), so the cv's clean rows are never overwritten. One ``out_dir`` holds one perturbation seed
  (a rerun with another seed is refused).

The sweep config (YAML or dict; ``configs/experiment/sweep_tiny.yaml``)::

    cv_out_dir: results/tiny       # the cv run's out_dir (config.yaml, splits.json, results.csv, checkpoints)
    # cv_config: configs/experiment/tiny_ci.yaml   # ... or the cv config (its out_dir is used); not both
    out_dir: null                  # default <cv out_dir>/sweep
    conditions: null               # default: all of App. D for the task (paper 003 App. D.1-D.3, D.5)
    seed: 0                        # perturbation seed (dropout masks and noise), fixed for the sweep
    reference: eegnet              # model of the ∗/∇ marks (Tables 10-17); null: no marks
    folds: null                    # subset of the cv folds
    models: null                   # subset of the cv models
    batch_size: 64
    device: auto                   # auto | cpu | cuda | cuda:N
    workers: 1                     # background perturbation threads (0: perturb in the main thread)
    save_predictions: true         # predictions/<model>-<regime>-<head>-fold<k>/<condition>.csv
    alpha: 0.05                    # family-wise level of the marks (Holm across models)

References
----------
Paper 003 (seed 003), §3 "Robustness to Perturbations", App. D (conditions), App. H (Tables 10-17).
"""
from __future__ import annotations

import json
import os
import time
import traceback
import warnings
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import yaml
from lightning.pytorch.callbacks import Callback

from eegfm_bench.config import ConfigError, merge_config, resolve_device
from eegfm_bench.perturb.channels import dropout_mask
from eegfm_bench.perturb.conditions import (
    ChannelDropout,
    Clean,
    Condition,
    PerturbContext,
    condition_rng,
    default_conditions,
    parse_condition,
)
from eegfm_bench.perturb.noise import FilterSpec
from eegfm_bench.perturb.regions import REGION_ROLES, MissingElectrodesWarning, paper_task, resolve_region

SWEEP_METRICS: tuple[str, ...] = ("balanced_accuracy", "auroc", "cohen_kappa")
"""Metrics written for every applicable condition (as the cv rows)."""

NOT_APPLICABLE = "not_applicable"
"""``metric`` of the row written for a condition a model cannot take (``value`` NaN, reason in ``note``)."""

SWEEP_DEFAULTS: dict[str, Any] = {
    "cv_out_dir": None, "cv_config": None, "out_dir": None, "conditions": None, "seed": 0, "reference": "eegnet",
    "folds": None, "models": None, "batch_size": 64, "device": "auto", "workers": 1, "save_predictions": True,
    "alpha": 0.05,
}
_PRECISIONS = {"32-true": None, "32": None, 32: None, "bf16-mixed": "bfloat16", "16-mixed": "float16"}


# ------------------------------------------------------------------------------------------------------------------
# Filters and context
# ------------------------------------------------------------------------------------------------------------------
def filter_from_preprocessing(applied: dict) -> tuple[FilterSpec, list[str]]:
    """The noise filters matching a window set's applied preprocessing (paper 003 App. D.1).

    Parameters
    ----------
    applied : dict
        ``WindowSet.meta["preprocessing"]`` as written by
        :func:`~eegfm_bench.data.preprocessing.apply_preprocessing`: ``sfreq`` (Hz, of the windows), ``l_freq``,
        ``h_freq`` (Hz, after Nyquist capping; ``None`` = no edge) and ``notch`` (Hz or ``None``).

    Returns
    -------
    filt : FilterSpec
        Band-pass ``l_freq``–``h_freq`` and the mains notch, designed at the windows' rate ``sfreq``.
    notes : list of str
        What differs from the data's pipeline, for the record: the data were notched at their native rate,
        so a notch at or above the windows' Nyquist frequency (``sfreq / 2``) is omitted for the noise — the
        resampling already removed everything there.

    Raises
    ------
    KeyError
        If ``applied`` lacks ``sfreq``, ``l_freq``, ``h_freq`` or ``notch`` (a window cache written before the
        applied preprocessing was recorded; fix: delete the cache folder to rebuild it).
    """
    missing = [k for k in ("sfreq", "l_freq", "h_freq", "notch") if k not in applied]
    if missing:
        raise KeyError(f"the window set's preprocessing record lacks {missing}; the noise filters cannot match the "
                       "data. fix: delete the window cache folder (EEGFM_CACHE) so that it is rebuilt")
    sfreq = float(applied["sfreq"])
    notch = applied["notch"]
    notes = []
    if notch is not None and float(notch) >= sfreq / 2:
        notes.append(f"notch {notch} Hz omitted for the noise: at or above the windows' Nyquist frequency "
                     f"({sfreq / 2:g} Hz); the data's notch was applied at the native rate before resampling")
        notch = None
    return FilterSpec(sfreq, applied["l_freq"], applied["h_freq"], notch), notes


def perturb_context(meta: dict, task: str, seed: int) -> tuple[PerturbContext, list[str]]:
    """:class:`PerturbContext` of a window set (dataset name, task, matching filters, perturbation seed).

    Parameters
    ----------
    meta : dict
        ``WindowSet.meta`` (``dataset`` and ``preprocessing``).
    task : str
        Task name (selects the regions of Table 6).
    seed : int
        Perturbation seed.

    Returns
    -------
    ctx : PerturbContext
    notes : list of str
        See :func:`filter_from_preprocessing`.
    """
    filt, notes = filter_from_preprocessing(meta["preprocessing"])
    return PerturbContext(dataset=meta["dataset"], task=task, filter=filt, seed=int(seed)), notes


def not_applicable_reason(condition: Condition, model: Any) -> str | None:
    """Why ``model`` cannot be evaluated under ``condition`` (``None`` if it can).

    Removing channels (``*_removed``) needs a backbone whose ``channel_contract.variable`` is True (paper 003
    App. D.2: "accepts a subset of the training channels at inference without retraining or padding") and a
    head that accepts a different number of tokens (the ``flatten`` head's weights are tied to token
    positions).

    Parameters
    ----------
    condition : Condition
    model : FMClassifier
        Fitted model (``backbone`` adapter and ``head``).
    """
    if not condition.needs_variable_channels:
        return None
    contract = model.backbone.channel_contract
    name = getattr(model.backbone, "name", type(model.backbone).__name__)
    if not contract.variable:
        return (f"{name} has a fixed channel set (channel_contract.variable=False): removing channels needs a "
                "variable-channel model (paper 003 App. D.2); the zero-padded variants (*_zero) apply")
    if getattr(model.head, "name", "") == "flatten":
        return (f"the flatten head of {name} is tied to the build-time token count ({model.head.n_tokens}); removing "
                "channels changes it; the zero-padded variants (*_zero) apply, or use the mean/attention head")
    return None


# ------------------------------------------------------------------------------------------------------------------
# Engine
# ------------------------------------------------------------------------------------------------------------------
@dataclass
class ConditionResult:
    """The outcome of one condition on one model and fold.

    Attributes
    ----------
    condition : str
        Condition string.
    status : {"ok", "not_applicable", "failed"}
    model : hashable
        Key of the model in :func:`iter_sweep` (``None`` for a single model).
    metrics : dict
        ``balanced_accuracy``, ``auroc``, ``cohen_kappa`` (``ok`` only).
    probs : ndarray, shape (n_windows, n_classes), or None
        Class probabilities per window, in window order (``ok`` only).
    note : str
        Reason for ``not_applicable``; empty otherwise.
    details : dict
        ``Condition.details`` (dropped channels, region channels and missing electrodes, filter) plus
        ``n_chans`` (channels the model received).
    error : str
        ``"Type: message"`` for ``failed``.
    traceback : str
    seconds : float
        Wall time of this condition for this model in the main thread: waiting for the perturbation plus the
        model's forward passes.
    """

    condition: str
    status: str
    model: Any = None
    metrics: dict = field(default_factory=dict)
    probs: np.ndarray | None = None
    note: str = ""
    details: dict = field(default_factory=dict)
    error: str = ""
    traceback: str = ""
    seconds: float = 0.0


def _autocast(device: Any, precision: Any):
    import torch

    if precision not in _PRECISIONS:
        raise ValueError(f"unsupported precision {precision!r}; valid: {sorted(map(str, _PRECISIONS))}")
    dtype = _PRECISIONS[precision]
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, dtype))


def perturb_batches(condition: Condition, X: np.ndarray, ch_names: Sequence[str], ctx: PerturbContext,
                    batch_size: int) -> list[tuple[np.ndarray, list[str]]]:
    """Apply ``condition`` to ``X`` batch by batch with one Generator for the whole set.

    Parameters
    ----------
    condition : Condition
    X : ndarray, shape (n_windows, n_chans, n_times)
        Clean windows in the model's input unit.
    ch_names : sequence of str
        Channel names of ``X``.
    ctx : PerturbContext
    batch_size : int

    Returns
    -------
    list of (ndarray float32 of shape (batch, n_chans_out, n_times), list of str)
        Perturbed batches in window order with their channel names.
    """
    rng = condition_rng(ctx.seed, condition)
    out = []
    for start in range(0, len(X), batch_size):
        xb, names = condition.apply(X[start:start + batch_size], ch_names, rng, ctx)
        out.append((np.ascontiguousarray(xb, dtype=np.float32), list(names)))
    return out


def predict_proba(model: Any, batches: Iterable[tuple[np.ndarray, list[str]]], device: Any = "cpu",
                  precision: Any = "32-true") -> np.ndarray:
    """Softmax probabilities of ``model`` over perturbed batches.

    Parameters
    ----------
    model : FMClassifier
        In eval mode on ``device``; called as ``model(x, ch_names)``.
    batches : iterable of (ndarray, shape (batch, n_chans, n_times), list of str)
    device : str or torch.device
    precision : {"32-true", "bf16-mixed", "16-mixed"}
        Lightning precision of the cv run (autocast for the mixed ones).

    Returns
    -------
    ndarray, shape (n_windows, n_classes), float32
    """
    import torch

    out = []
    with torch.inference_mode(), _autocast(device, precision):
        for xb, names in batches:
            logits = model(torch.from_numpy(xb).to(device, non_blocking=True), names)
            out.append(logits.float().softmax(-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def predict_proba_shared(models: Mapping[Any, Any], batches: Iterable[tuple[np.ndarray, list[str]]],
                         device: Any = "cpu", precision: Any = "32-true") -> dict[Any, np.ndarray]:
    """Softmax probabilities of several head-only models that share one frozen backbone, from one forward.

    The backbone's tokens are computed once per batch and every model's head is applied to them; each model's
    output equals ``model(x, ch_names)`` (its forward is ``head(backbone.tokens(x, ch_names))``). The caller
    guarantees that the backbones are identical (:func:`shared_backbone_groups`).

    Parameters
    ----------
    models : mapping of key -> FMClassifier
        ``regime="head_only"`` models whose backbones hold the same weights, in eval mode on ``device``.
    batches, device, precision
        As :func:`predict_proba`.

    Returns
    -------
    dict of key -> ndarray, shape (n_windows, n_classes), float32
    """
    import torch

    keys = list(models)
    backbone = models[keys[0]].backbone
    out: dict[Any, list] = {k: [] for k in keys}
    with torch.inference_mode(), _autocast(device, precision):
        for xb, names in batches:
            tokens = backbone.tokens(torch.from_numpy(xb).to(device, non_blocking=True), names)
            for k in keys:
                out[k].append(models[k].head(tokens).float().softmax(-1).cpu().numpy())
    return {k: np.concatenate(v) if v else np.zeros((0, 0), dtype=np.float32) for k, v in out.items()}


def backbone_fingerprint(backbone: Any) -> str:
    """sha256 over a backbone's state dict (names, dtypes, shapes and bytes), to find identical frozen backbones."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, t in backbone.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def shared_backbone_groups(models: Mapping[Any, Any], precision: Mapping[Any, Any]) -> list[list[Any]]:
    """Partition model keys so that head-only models with identical frozen backbones share one forward pass.

    Two models share when both are ``regime="head_only"`` (backbone frozen and in eval mode), their backbones
    are of one class with identical weights and buffers (:func:`backbone_fingerprint`) and they run under the
    same precision; every other model is a group of its own. In the quickstart, LaBraM head-only with the
    ``mean`` and ``flatten`` heads shares one random-init backbone per fold, which halves the sweep's cost.

    Returns
    -------
    list of list of key
        In the order of ``models``.
    """
    groups: dict[Any, list] = {}
    for k, m in models.items():
        if getattr(m, "regime", None) == "head_only":
            gkey = ("shared", type(m.backbone).__qualname__, backbone_fingerprint(m.backbone), str(precision[k]))
        else:
            gkey = ("own", k)
        groups.setdefault(gkey, []).append(k)
    return list(groups.values())


def _metrics(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    from eegfm_bench.results import classification_metrics

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="test set holds one class")
        m = classification_metrics(y, probs)
    return {k: float(m[k]) for k in SWEEP_METRICS}


def _details(condition: Condition, ch_names: Sequence[str], ctx: PerturbContext) -> dict:
    d = dict(condition.details(ch_names, ctx))
    n = len(ch_names)
    if condition.needs_variable_channels:
        dropped = d.get("dropped", d.get("channels", []))
        n -= len(dropped)
    d["n_chans"] = n
    return d


def iter_sweep(models: Any, X: np.ndarray, y: np.ndarray, ch_names: Sequence[str], conditions: Sequence[Condition],
               ctx: PerturbContext, *, todo: Mapping[Any, Iterable[str]] | None = None, batch_size: int = 64,
               device: Any = "cpu", precision: Any = "32-true", workers: int = 1,
               share_backbones: bool = True) -> Iterator[list[ConditionResult]]:
    """Evaluate fitted models under every condition on the same in-memory windows (no retraining).

    Each condition perturbs the windows once (batch by batch, one noise Generator for the whole set) and every
    model that needs it runs on the same perturbed batches: models of one fold and preprocessing see exactly
    the same noise and masks, and the perturbation is not recomputed per model.

    Parameters
    ----------
    models : FMClassifier or mapping of key -> FMClassifier
        Fitted models; each is put in eval mode and moved to ``device``. A single model gets the key ``None``.
    X : ndarray, shape (n_windows, n_chans, n_times)
        The fold's clean test windows in the models' input unit, already in memory (read from disk once).
    y : ndarray of int, shape (n_windows,)
    ch_names : sequence of str
        Channel names of ``X``.
    conditions : sequence of Condition
        In evaluation order (clean first by convention).
    ctx : PerturbContext
        Dataset, task, filters and perturbation seed.
    todo : mapping of key -> iterable of str, optional
        Condition names to evaluate per model (default: all). A condition no model needs is not perturbed.
    batch_size : int
        Windows per forward pass.
    device : str or torch.device
    precision : str or mapping of key -> str
        Lightning precision of the cv run (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``).
    workers : int
        Background threads perturbing the next ``workers`` conditions while the models run the current one
        (0: perturb in the calling thread). Results do not depend on it. Memory: each condition in flight
        holds one perturbed copy of ``X``, so about ``workers + 2`` copies at once.
    share_backbones : bool
        Run one backbone forward for head-only models with identical frozen backbones
        (:func:`shared_backbone_groups`); the results are the same as running each model on its own.

    Yields
    ------
    list of ConditionResult
        One list per condition that some model needs, in the order given, with one result per such model
        (``model`` = its key): ``ok`` (metrics, probabilities), ``not_applicable`` (reason in ``note``; see
        :func:`not_applicable_reason`) or ``failed`` (error and traceback; the next conditions still run).

    Raises
    ------
    ValueError
        If ``X`` is not 3-D, ``y`` or ``ch_names`` do not match it, or ``batch_size`` / ``workers`` are invalid.
    """
    X = np.asarray(X)
    if X.ndim != 3 or len(y) != len(X) or len(ch_names) != X.shape[1]:
        raise ValueError(f"expected X (n_windows, n_chans, n_times) with one label per window and one name per "
                         f"channel; got X{tuple(X.shape)}, {len(y)} labels, {len(ch_names)} names")
    if batch_size < 1 or workers < 0:
        raise ValueError(f"batch_size must be ≥ 1 and workers ≥ 0, got {batch_size} and {workers}")
    models = dict(models) if isinstance(models, Mapping) else {None: models}
    for m in models.values():
        m.eval().to(device)
    prec = dict(precision) if isinstance(precision, Mapping) else {k: precision for k in models}
    groups = shared_backbone_groups(models, prec) if share_backbones else [[k] for k in models]
    want = {k: set(todo[k]) if todo is not None else {c.name for c in conditions} for k in models}
    y = np.asarray(y)
    # per condition: the models that need it, split into runnable and not applicable; details resolved once
    plan = []
    for cond in conditions:
        keys = [k for k in models if cond.name in want[k]]
        if not keys:
            continue
        try:
            details, err = _details(cond, ch_names, ctx), None
        except Exception as e:  # a mask / region that cannot be resolved: this condition fails, not the sweep
            details, err = {"condition": cond.name}, (f"{type(e).__name__}: {e}", traceback.format_exc())
        reasons = {k: not_applicable_reason(cond, models[k]) for k in keys}
        plan.append((cond, keys, details, err, reasons))
    runnable = deque(i for i, (_, keys, _, err, reasons) in enumerate(plan)
                     if err is None and any(reasons[k] is None for k in keys))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="perturb") if workers else None
    pending: deque[tuple[int, Future]] = deque()

    def fill() -> None:  # keep the current condition and the next `workers` ones in the pool
        while pool is not None and runnable and len(pending) <= workers:
            j = runnable.popleft()
            pending.append((j, pool.submit(perturb_batches, plan[j][0], X, ch_names, ctx, batch_size)))

    try:
        for i, (cond, keys, details, err, reasons) in enumerate(plan):
            out = [ConditionResult(cond.name, NOT_APPLICABLE, model=k, note=reasons[k], details=details)
                   for k in keys if reasons[k] is not None]
            run = [k for k in keys if reasons[k] is None]
            if err is not None:
                yield out + [ConditionResult(cond.name, "failed", model=k, details=details, error=err[0],
                                             traceback=err[1]) for k in run]
                continue
            if not run:
                yield out
                continue
            t0 = time.perf_counter()
            try:
                if pool is None:
                    batches = perturb_batches(cond, X, ch_names, ctx, batch_size)
                else:
                    fill()
                    j, fut = pending.popleft()
                    if j != i:
                        raise RuntimeError(f"perturbation queue out of order ({j} != {i})")
                    fill()
                    batches = fut.result()
            except KeyboardInterrupt:
                raise
            except Exception as e:  # the perturbation failed: this condition fails for every model
                tb = "".join(traceback.format_exception(e))
                yield out + [ConditionResult(cond.name, "failed", model=k, details=details,
                                             error=f"{type(e).__name__}: {e}", traceback=tb) for k in run]
                continue
            t_perturb = time.perf_counter() - t0
            for group in groups:
                gk = [k for k in group if k in run]
                if not gk:
                    continue
                t1 = time.perf_counter()
                try:
                    if len(gk) == 1:
                        probs_by = {gk[0]: predict_proba(models[gk[0]], batches, device, prec[gk[0]])}
                    else:
                        probs_by = predict_proba_shared({k: models[k] for k in gk}, batches, device, prec[gk[0]])
                    secs = t_perturb + time.perf_counter() - t1
                    out += [ConditionResult(cond.name, "ok", model=k, metrics=_metrics(y, probs_by[k]),
                                            probs=probs_by[k], details=details, seconds=secs) for k in gk]
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # one failing model (or shared backbone) must not lose the others
                    tb = "".join(traceback.format_exception(e))
                    out += [ConditionResult(cond.name, "failed", model=k, details=details,
                                            error=f"{type(e).__name__}: {e}", traceback=tb,
                                            seconds=time.perf_counter() - t1) for k in gk]
            del batches
            yield out
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def condition_rows(result: ConditionResult, base: dict) -> list[dict]:
    """Result rows of one condition (DESIGN.md "Result row"): one per metric, or one not-applicable row.

    Parameters
    ----------
    result : ConditionResult
        ``ok`` or ``not_applicable`` (a ``failed`` result has no rows).
    base : dict
        The identifying and bookkeeping columns shared by the rows (experiment, task, model, init, regime,
        head, fold, seed, n_windows, n_subjects, fold_unit, config_hash, code_version, ...).

    Returns
    -------
    list of dict
        With ``condition``, ``metric``, ``value``, ``note`` and ``details`` (JSON) added.

    Raises
    ------
    ValueError
        For a ``failed`` result.
    """
    details = json.dumps(result.details, sort_keys=True)
    common = {**base, "condition": result.condition, "details": details}
    if result.status == "ok":
        return [{**common, "metric": m, "value": result.metrics[m], "note": ""} for m in SWEEP_METRICS]
    if result.status == NOT_APPLICABLE:
        return [{**common, "metric": NOT_APPLICABLE, "value": float("nan"), "note": result.note}]
    raise ValueError(f"condition {result.condition} failed ({result.error}); failed conditions have no rows")


# ------------------------------------------------------------------------------------------------------------------
# Lightning callback
# ------------------------------------------------------------------------------------------------------------------
class TestSweep(Callback):
    """Lightning callback: every condition on each test batch as it streams past (paper 003 App. D).

    Attach it to ``trainer.test(model, datamodule)``; the test loop reads each window once, and for each batch
    the callback applies every condition (each with its own noise Generator, consumed in loader order) and
    runs the model on the result. At the end of the test epoch, :attr:`results` holds one
    :class:`ConditionResult` per condition, :attr:`rows` the result rows (if ``base`` was given) and, with a
    ``store``, the rows are appended to it. A condition that raises is marked failed and skipped for the rest
    of the epoch; the others go on.

    Parameters
    ----------
    conditions : sequence of Condition or str
        Conditions in order (parsed with :func:`~eegfm_bench.perturb.conditions.parse_condition`).
    ctx : PerturbContext
        Dataset, task, filters (:func:`perturb_context`) and perturbation seed.
    base : dict, optional
        Row columns shared by every row (see :func:`condition_rows`); ``n_windows`` is filled in.
    store : ResultStore, optional
        Where to append the rows at the end of the test epoch.
    precision : str
        Autocast setting (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``).

    Raises
    ------
    RuntimeError
        In ``on_test_batch_end`` if the batch holds cached tokens instead of windows (head-only token mode);
        fix: ``datamodule.use_tokens(None)`` before ``trainer.test``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, conditions: Sequence[Condition | str], ctx: PerturbContext, *, base: dict | None = None,
                 store: Any = None, precision: Any = "32-true"):
        super().__init__()
        self.conditions = [parse_condition(c) if isinstance(c, str) else c for c in conditions]
        self.ctx, self.base, self.store, self.precision = ctx, base, store, precision
        self.results: list[ConditionResult] = []
        self.rows: list[dict] = []

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._rng = {c.name: condition_rng(self.ctx.seed, c) for c in self.conditions}
        self._probs: dict[str, list[np.ndarray]] = {c.name: [] for c in self.conditions}
        self._y: list[np.ndarray] = []
        self._seconds = {c.name: 0.0 for c in self.conditions}
        self._failed: dict[str, tuple[str, str]] = {}
        self._reasons = {c.name: r for c in self.conditions if (r := not_applicable_reason(c, pl_module)) is not None}
        self.results, self.rows = [], []

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx: int = 0) -> None:
        import torch

        if "x" not in batch:
            raise RuntimeError("TestSweep needs the raw windows, but the test batches hold cached tokens (head-only "
                               "token mode); fix: call datamodule.use_tokens(None) before trainer.test")
        x = batch["x"].detach().cpu().numpy()
        names = list(pl_module.ch_names)
        self._y.append(batch["y"].detach().cpu().numpy())
        for cond in self.conditions:
            if cond.name in self._reasons or cond.name in self._failed:
                continue
            t0 = time.perf_counter()
            try:
                xb, nb = cond.apply(x, names, self._rng[cond.name], self.ctx)
                with torch.inference_mode(), _autocast(pl_module.device, self.precision):
                    logits = pl_module(torch.from_numpy(np.ascontiguousarray(xb, dtype=np.float32)).to(pl_module.device),
                                       list(nb))
                self._probs[cond.name].append(logits.float().softmax(-1).cpu().numpy())
            except Exception as err:  # one failing condition must not stop the others
                self._failed[cond.name] = (f"{type(err).__name__}: {err}", "".join(traceback.format_exception(err)))
            self._seconds[cond.name] += time.perf_counter() - t0

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        y = np.concatenate(self._y) if self._y else np.zeros(0, dtype=np.int64)
        names = list(pl_module.ch_names)
        for cond in self.conditions:
            try:
                details = _details(cond, names, self.ctx)
            except Exception as err:
                self.results.append(ConditionResult(cond.name, "failed", error=f"{type(err).__name__}: {err}",
                                                    traceback=traceback.format_exc()))
                continue
            if cond.name in self._reasons:
                res = ConditionResult(cond.name, NOT_APPLICABLE, note=self._reasons[cond.name], details=details)
            elif cond.name in self._failed:
                err, tb = self._failed[cond.name]
                res = ConditionResult(cond.name, "failed", details=details, error=err, traceback=tb)
            else:
                try:
                    probs = np.concatenate(self._probs[cond.name])
                    res = ConditionResult(cond.name, "ok", metrics=_metrics(y, probs), probs=probs, details=details,
                                          seconds=self._seconds[cond.name])
                except Exception as err:
                    res = ConditionResult(cond.name, "failed", details=details, error=f"{type(err).__name__}: {err}",
                                          traceback=traceback.format_exc())
            self.results.append(res)
        if self.base is not None:
            base = {**self.base, "n_windows": int(len(y))}
            self.rows = [r for res in self.results if res.status != "failed" for r in condition_rows(res, base)]
            if self.store is not None:
                self.store.append(self.rows)


# ------------------------------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------------------------------
def _config_error(msg: str) -> Exception:
    return ConfigError(msg)


def run_label(model: str, regime: str, head: str) -> str:
    """Folder-style name of a cv run × head (``eegnet-full-flatten``), as the cv runner names checkpoints."""
    return f"{model}-{regime}-{head}"


def resolve_conditions(names: Sequence[str] | None, task: str) -> list[Condition]:
    """The sweep's conditions, clean first.

    Parameters
    ----------
    names : list of str or None
        Condition strings (grammar: :data:`~eegfm_bench.perturb.conditions.CONDITION_GRAMMAR`); ``None``: all
        App. D conditions for the task, removed-channel ones included (fixed-channel models get
        not-applicable rows for those). ``clean`` is always evaluated, first (the deltas need it).
    task : str
        Task name (its region assignment must exist).

    Returns
    -------
    list of Condition

    Raises
    ------
    UnknownNameError
        Unknown condition kind, region role, channel handling or task (the message lists the valid ones).
    ValueError
        A non-finite SNR, a probability outside (0, 1), a duplicate, or an attribution-only condition
        (``region_sub``, App. D.4: not an accuracy condition).
    """
    paper_task(task)
    if names is None:
        return default_conditions(task, variable_channels=True)
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise _config_error(f"conditions must be a list of condition strings, got {names!r}; "
                            "e.g. [clean, white_snr=-5dB, dropout_p=0.5_zero]")
    conds = [parse_condition(n) for n in names]
    seen = [c.name for c in conds]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise _config_error(f"conditions {dup} are listed more than once; fix: list each once")
    attr = [c.name for c in conds if c.attribution_only]
    if attr:
        raise _config_error(f"{attr} are attribution-only conditions (paper 003 App. D.4), not accuracy conditions; "
                            "fix: remove them from the sweep's conditions")
    conds = [c for c in conds if not isinstance(c, Clean)]
    return [Clean(), *conds]


def load_sweep_config(path_or_dict: str | os.PathLike | dict) -> dict:
    """Read and validate a sweep config, before any data or model is touched.

    Resolves ``cv_out_dir`` (from ``cv_config`` if given), ``out_dir`` (default ``<cv out_dir>/sweep``), the
    conditions, the cv's resolved config (``config.yaml``) and its clean result rows (the cells to sweep).

    Returns
    -------
    dict
        The filled config plus private keys ``_cv`` (the cv config), ``_cells`` (DataFrame of the cv's clean
        balanced-accuracy rows to sweep) and ``_conditions`` (list of Condition).

    Raises
    ------
    ConfigError
        Unknown keys, neither or both of ``cv_out_dir`` / ``cv_config``, a cv folder without ``config.yaml`` /
        ``splits.json`` / ``results.csv``, unknown folds or models, an invalid ``seed`` / ``batch_size`` /
        ``workers``, a ``reference`` that is not among the cv's models, or a missing checkpoint file.
    UnknownNameError, ValueError
        From the condition strings (see :func:`resolve_conditions`).
    """
    import pandas as pd

    from eegfm_bench.runs.cv import load_config as load_cv_config

    raw = path_or_dict if isinstance(path_or_dict, dict) else yaml.safe_load(Path(path_or_dict).read_text())
    cfg = merge_config(SWEEP_DEFAULTS, raw or {}, "")
    if (cfg["cv_out_dir"] is None) == (cfg["cv_config"] is None):
        raise _config_error("set exactly one of `cv_out_dir` (the cv run's out_dir) and `cv_config` (its config "
                            "YAML); fix: e.g. `cv_out_dir: results/tiny`")
    if cfg["cv_config"] is not None:
        cfg["cv_out_dir"] = load_cv_config(cfg["cv_config"])["out_dir"]
    cv_dir = Path(cfg["cv_out_dir"])
    need = [n for n in ("config.yaml", "splits.json", "results.csv") if not (cv_dir / n).is_file()]
    if need:
        raise _config_error(f"cv folder {cv_dir} lacks {need}; fix: run `eegfm-bench cv --config ...` first, or point "
                            "`cv_out_dir` at its out_dir")
    if not isinstance(cfg["seed"], int) or isinstance(cfg["seed"], bool):
        raise _config_error(f"seed must be an int (the perturbation seed), got {cfg['seed']!r}")
    for k, lo in (("batch_size", 1), ("workers", 0)):
        if not isinstance(cfg[k], int) or cfg[k] < lo:
            raise _config_error(f"{k} must be an int ≥ {lo}, got {cfg[k]!r}")
    for k in ("models", "folds"):
        if cfg[k] is not None and (isinstance(cfg[k], (str, int)) or not isinstance(cfg[k], (list, tuple))):
            raise _config_error(f"{k} must be a list or null, got {cfg[k]!r}; e.g. `{k}: [{'eegnet' if k == 'models' else 0}]`")
    if not (isinstance(cfg["alpha"], (int, float)) and 0 < cfg["alpha"] < 1):
        raise _config_error(f"alpha must be in (0, 1), got {cfg['alpha']!r}")
    cv = load_cv_config(cv_dir / "config.yaml")
    cfg["_cv"] = cv
    cfg["_conditions"] = resolve_conditions(cfg["conditions"], cv["task"])
    cfg["out_dir"] = str(cfg["out_dir"] or cv_dir / "sweep")
    df = pd.read_csv(cv_dir / "results.csv")
    cells = df[(df["experiment"] == cv["experiment"]) & (df["condition"] == "clean")
               & (df["metric"] == "balanced_accuracy")].copy()
    if cells.empty:
        raise _config_error(f"{cv_dir / 'results.csv'} holds no clean rows of experiment {cv['experiment']!r}; "
                            "fix: let the cv run finish at least one fold")
    if "checkpoint" not in cells.columns:
        raise _config_error(f"{cv_dir / 'results.csv'} has no `checkpoint` column; fix: rerun the cv with this version")
    if cfg["models"] is not None:
        unknown = sorted(set(cfg["models"]) - set(cells["model"]))
        if unknown:
            raise _config_error(f"models {unknown} are not in the cv results; valid: {sorted(set(cells['model']))}")
        cells = cells[cells["model"].isin(cfg["models"])]
    if cfg["folds"] is not None:
        unknown = sorted(set(cfg["folds"]) - set(cells["fold"].astype(int)))
        if unknown:
            raise _config_error(f"folds {unknown} are not in the cv results; valid: {sorted(set(cells['fold']))}")
        cells = cells[cells["fold"].astype(int).isin(cfg["folds"])]
    if cfg["reference"] is not None and cfg["reference"] not in set(cells["model"]):
        raise _config_error(f"reference model {cfg['reference']!r} is not among the swept models "
                            f"{sorted(set(cells['model']))}; fix: set `reference:` to one of them, or "
                            "`reference: null` for no significance marks")
    missing = [str(p) for p in cells["checkpoint"] if not (isinstance(p, str) and Path(p).is_file())]
    if missing:
        raise _config_error(f"checkpoints {missing[:5]} (of {len(missing)}) listed in {cv_dir / 'results.csv'} do not "
                            "exist (from this working directory); fix: run the sweep from the folder the cv ran in, "
                            "or rerun the cv")
    cfg["_cells"] = cells.sort_values(["model", "regime", "head", "fold"]).reset_index(drop=True)
    return cfg


def _public(cfg: dict) -> dict:
    out = {k: v for k, v in cfg.items() if not k.startswith("_")}
    out["conditions"] = [c.name for c in cfg["_conditions"]]
    return out


def _check_resume(out: Path, cfg: dict) -> None:
    path = out / "sweep.yaml"
    if path.is_file():
        old = yaml.safe_load(path.read_text()) or {}
        for key in ("seed", "cv_out_dir"):
            if str(old.get(key)) != str(cfg[key]):
                raise _config_error(
                    f"{out} holds a sweep with {key}={old.get(key)!r}, this config has {cfg[key]!r}; resuming would mix "
                    f"the two. fix: use a new out_dir, or set {key}: {old.get(key)!r}")


def _precision_for(cv: dict, model: str, regime: str, head: str) -> Any:
    tr = cv["trainer"]
    for run in cv["runs"]:
        if run["model"] == model and run.get("regime", "full") == regime and head in run.get("heads", []):
            tr = merge_config(cv["trainer"], run.get("trainer") or {}, "trainer.")
            break
    return tr["precision"]


def _device(name: str):
    import torch

    return torch.device(resolve_device(name, ConfigError))


def load_fitted(checkpoint: str | os.PathLike, device: Any = "cpu"):
    """Load a cv fold's fitted :class:`~eegfm_bench.models.module.FMClassifier` with ``weights_only=True``.

    Only tensors and plain containers are unpickled. The pretrained weights are not fetched again
    (``pretrained=None``): the checkpoint's state dict holds every weight.

    Raises
    ------
    FileNotFoundError
        If the file is missing.
    """
    from eegfm_bench.models.module import FMClassifier

    path = Path(checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found; fix: rerun the cv for this fold")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = FMClassifier.load_from_checkpoint(path, map_location="cpu", weights_only=True, pretrained=None)
    return model.eval().to(device)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def dropout_masks_record(ch_names: Sequence[str], dataset: str, seed: int, conditions: Sequence[Condition]) -> list[dict]:
    """The random dropout masks of a sweep by channel name (paper 003 App. D.2, Table 5).

    Returns
    -------
    list of dict
        One per dropout probability in ``conditions`` (ascending): ``dataset``, ``seed``, ``p``, ``n_chans``,
        ``n_dropped``, ``dropped`` (montage order).
    """
    ps = sorted({c.p for c in conditions if isinstance(c, ChannelDropout)})
    return [dropout_mask(ch_names, p, seed, dataset).as_dict() for p in ps]


def sweep_main(config: str | os.PathLike | dict, *, progress: bool = True, raise_on_failure: bool = True):
    """Run the perturbation sweep on every per-fold checkpoint of a cv run, then write the report.

    For each group of models sharing a preprocessing, the task's windows are loaded once; for each fold its
    test windows are read into memory once, and every model of that fold is evaluated under every condition
    (:func:`iter_sweep`). Rows go to ``<out_dir>/results.csv`` / ``.parquet`` condition by condition; conditions
    already there are skipped (a rerun writes nothing new). Errors inside a condition go to ``failures.json``.

    Parameters
    ----------
    config : path or dict
        Sweep config (see the module docstring).
    progress : bool
        Show a progress bar.
    raise_on_failure : bool
        Raise :class:`RuntimeError` at the end if a condition or a checkpoint failed (after everything else
        ran and the report was written).

    Returns
    -------
    pandas.DataFrame
        The degradation table of the report (Δ balanced accuracy in pp, ranked by average).

    Raises
    ------
    ConfigError, UnknownNameError, ValueError
        Config problems, before any model runs (see :func:`load_sweep_config`); also if the cv's test folds no
        longer hold the windows the cv tested (data changed since), or a region / dropout mask cannot be
        resolved on the montage.
    RuntimeError
        At the end, if something failed (see ``failures.json``).
    """
    import torch
    from tqdm.auto import tqdm
    from eegfm_bench.data.windows import load_windows
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.perturb.report import write_report
    from eegfm_bench.results import KEY_COLUMNS, ResultStore, code_version, config_hash

    cfg = load_sweep_config(config)
    cv, cells, conditions = cfg["_cv"], cfg["_cells"], cfg["_conditions"]
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    _check_resume(out, cfg)
    device = _device(cfg["device"])
    d = cv["data"]
    split = json.loads((Path(cfg["cv_out_dir"]) / "splits.json").read_text())
    group_by = split["spec"]["group_by"]

    # -- everything that can fail on names or data, before any model runs -------------------------------------
    groups: dict[tuple, dict] = {}
    for model_name in sorted(set(cells["model"])):
        prep = BACKBONES.get(model_name).preprocessing
        key = (prep.sfreq, prep.l_freq, prep.h_freq, prep.scale, prep.window_s, prep.reference)
        groups.setdefault(key, {"prep": prep, "models": []})["models"].append(model_name)
    notes, masks = [], {}
    for g in groups.values():
        ws = load_windows(cv["task"], g["prep"], data_root=d["data_root"], subjects=d["subjects"],
                          cache_dir=d["cache_dir"], max_windows_per_subject=d["max_windows_per_subject"],
                          progress=progress)
        ctx, fnotes = perturb_context(ws.meta, cv["task"], cfg["seed"])
        notes += [n for n in fnotes if n not in notes]
        for cond in conditions:  # resolves every region and mask on this montage (raises with the fix)
            _details(cond, ws.ch_names, ctx)
        for role in REGION_ROLES:
            if any(getattr(c, "role", None) == role for c in conditions):
                resolve_region(cv["task"], role, ws.ch_names, warn=True)
        gid = np.asarray(ws.subject if group_by == "subject" else ws.recording).astype(str)
        g.update(ws=ws, ctx=ctx, gid=gid)
        masks[ws.meta["dataset"]] = {"ch_names": list(ws.ch_names),
                                     "masks": dropout_masks_record(ws.ch_names, ws.meta["dataset"], cfg["seed"],
                                                                   conditions)}
        for _, row in cells[cells["model"].isin(g["models"])].iterrows():
            test_groups = split["folds"][int(row["fold"])]["test"]
            n = int(np.isin(gid, test_groups).sum())
            if n != int(row["n_windows"]):
                raise _config_error(
                    f"fold {row['fold']} of {row['model']} now holds {n} test windows, the cv tested {row['n_windows']}; "
                    "the data or window cache changed since the cv run. fix: rerun the cv, or restore the data")
    (out / "sweep.yaml").write_text(yaml.safe_dump(_public(cfg), sort_keys=False, allow_unicode=True))
    _write_json(out / "dropout_masks.json", masks)

    store = ResultStore(out)
    done_cols = [c for c in KEY_COLUMNS if c not in ("metric", "config_hash")]
    existing = store.load()
    done = set(map(tuple, existing[done_cols].astype(str).to_numpy())) if not existing.empty else set()
    code, failures = code_version(), []
    n_todo = len(cells) * len(conditions)
    bar = tqdm(total=n_todo, desc=f"sweep {cv['experiment']}", disable=not progress, unit="cond")

    def fail(row, condition: str, error: str, tb: str) -> None:
        failures.append({"model": row["model"], "init": row["init"], "regime": row["regime"], "head": row["head"],
                         "fold": int(row["fold"]), "condition": condition, "error": error, "traceback": tb})
        _write_json(out / "failures.json", failures)
        tqdm.write(f"sweep {row['model']}/{row['regime']}/{row['head']} fold {row['fold']} {condition} failed: {error}")

    with warnings.catch_warnings():
        # missing region electrodes were warned about once above and are recorded in every row's `details`
        warnings.simplefilter("ignore", MissingElectrodesWarning)
        for g in groups.values():
            ws, ctx, gid = g["ws"], g["ctx"], g["gid"]
            gcells = cells[cells["model"].isin(g["models"])]
            for fold in sorted(set(gcells["fold"].astype(int))):
                fcells = [r for _, r in gcells[gcells["fold"].astype(int) == fold].iterrows()]
                keys = {i: dict(experiment=cv["experiment"], task=cv["task"], model=r["model"], init=r["init"],
                                regime=r["regime"], head=r["head"], fold=int(fold), seed=int(r["seed"]))
                        for i, r in enumerate(fcells)}
                todo = {i: [c.name for c in conditions if tuple(str(v) for v in (*k.values(), c.name)) not in done]
                        for i, k in keys.items()}
                bar.update(sum(len(conditions) - len(t) for t in todo.values()))
                if not any(todo.values()):
                    continue
                test_idx = np.flatnonzero(np.isin(gid, split["folds"][fold]["test"]))
                X = np.asarray(ws.X[test_idx], dtype=np.float32)  # the fold's windows, read from disk once
                y = ws.y[test_idx]
                n_subjects = int(np.unique(ws.subject[test_idx]).size)
                models, bases, precision = {}, {}, {}
                for i, row in enumerate(fcells):
                    if not todo[i]:
                        continue
                    try:
                        models[i] = load_fitted(row["checkpoint"], device)
                    except Exception as err:  # this cell fails, the others go on
                        for c in todo[i]:
                            fail(row, c, f"{type(err).__name__}: {err}", traceback.format_exc())
                        bar.update(len(todo[i]))
                        continue
                    bases[i] = {**keys[i], "n_windows": int(len(test_idx)), "n_subjects": n_subjects,
                                "fold_unit": row.get("fold_unit", group_by),
                                "config_hash": config_hash({"cv_config_hash": row.get("config_hash"),
                                                            "perturb_seed": cfg["seed"], "filter": ctx.filter.as_dict()}),
                                "code_version": code, "checkpoint": row["checkpoint"], "perturb_seed": cfg["seed"]}
                    precision[i] = _precision_for(cv, row["model"], row["regime"], row["head"])
                if not models:
                    continue
                bar.set_postfix_str(f"fold {fold}: {len(models)} model(s)")
                for results in iter_sweep(models, X, y, ws.ch_names, conditions, ctx,
                                          todo={i: todo[i] for i in models}, batch_size=cfg["batch_size"],
                                          device=device, precision=precision, workers=cfg["workers"]):
                    rows = []
                    for res in results:
                        row = fcells[res.model]
                        if res.status == "failed":
                            fail(row, res.condition, res.error, res.traceback)
                            continue
                        rows += condition_rows(res, bases[res.model])
                        if cfg["save_predictions"] and res.probs is not None:
                            name = run_label(row["model"], row["regime"], row["head"])
                            _save_predictions(out / "predictions" / f"{name}-fold{fold}", res, test_idx, ws)
                    store.append(rows)  # this condition's rows, at once: a later crash cannot lose them
                    for res in results:
                        if res.status != "failed":
                            done.add(tuple(str(v) for v in (*keys[res.model].values(), res.condition)))
                    bar.update(len(results))
                del models
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    bar.close()
    _write_json(out / "failures.json", failures)
    first = next(iter(groups.values()))
    table = write_report(out, reference=cfg["reference"], alpha=cfg["alpha"], chance=1.0 / len(first["ws"].class_names),
                         filter_notes=notes, experiment=cv["experiment"], task=cv["task"])
    if failures and raise_on_failure:
        raise RuntimeError(f"{len(failures)} condition(s) failed; see {out / 'failures.json'} (every other condition "
                           "was written; a rerun retries only the failed ones)")
    return table


def _save_predictions(folder: Path, res: ConditionResult, test_idx: np.ndarray, ws) -> None:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"index": test_idx, "subject": ws.subject[test_idx], "recording": ws.recording[test_idx],
                       "y": ws.y[test_idx], "pred": res.probs.argmax(1)})
    for c in range(res.probs.shape[1]):
        df[f"p{c}"] = res.probs[:, c]
    path = folder / f"{res.condition}.csv"
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)
