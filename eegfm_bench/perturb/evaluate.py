"""Evaluating fitted models under App. D conditions as a Lightning test loop (paper 003 §3, App. D, H).

:class:`SweepModule` is the LightningModule of a sweep: it holds the fitted
:class:`~eegfm_bench.models.module.FMClassifier` models of one fold that run on the same windows (several
head-only models sharing one frozen backbone run **one** backbone forward per batch: the tokens are computed once
and every head applied to them), and ``trainer.test`` runs it over one dataloader per condition
(:class:`~eegfm_bench.perturb.dataset.PerturbedWindows`). The per-window probabilities are collected per condition
and model; :class:`~eegfm_bench.callbacks.sweep.TestSweep` gathers them across ranks, removes the sampler's padding
by window index and turns each condition into result rows as soon as its dataloader ends
(:func:`eegfm_bench.runs.sweep.command.evaluate_conditions` runs the loops).

The pure pieces the runner and the report share live here too: the noise filters matching a window set's applied
preprocessing, the not-applicable rule for removed channels, the shared-backbone grouping, the result rows of one
condition and the condition list of a sweep.

Rules
-----
* **Removed channels** (``*_removed``) run only for models whose ``backbone.channel_contract.variable`` is True
  and whose head accepts a different token count (not ``flatten``); every other model gets a *not-applicable*
  row (``metric="not_applicable"``, ``value=NaN``, ``note`` = the reason) (paper 003 App. D.2).
* **Filters**: the noise goes through the band-pass and notch of the dataset's preprocessing as applied
  (``WindowSet.meta["preprocessing"]``), designed at the windows' sampling rate (:func:`filter_from_preprocessing`).
* **Units**: noise is added to the windows as the model receives them; the SNR is a power ratio, so the scale does
  not matter.
"""
from __future__ import annotations

import hashlib
import json
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import lightning as L
import numpy as np
import torch
from torch import nn

from eegfm_bench.config import ConfigError
from eegfm_bench.metrics import classification_metrics
from eegfm_bench.perturb.channels import dropout_mask
from eegfm_bench.perturb.conditions import ChannelDropout, Clean, Condition, PerturbContext, default_conditions, parse_condition
from eegfm_bench.perturb.noise import FilterSpec
from eegfm_bench.perturb.regions import paper_task

SWEEP_METRICS: tuple[str, ...] = ("balanced_accuracy", "auroc", "cohen_kappa")
"""Metrics written for every applicable condition (as the cv rows)."""

NOT_APPLICABLE = "not_applicable"
"""``metric`` of the row written for a condition a model cannot take (``value`` NaN, reason in ``note``)."""

SWEEP_DEFAULTS: dict[str, Any] = {
    "cv_out_dir": None, "cv_config": None, "out_dir": None, "conditions": None, "seed": 0, "reference": "eegnet",
    "folds": None, "models": None, "batch_size": 64, "device": "auto", "workers": 1, "save_predictions": True,
    "alpha": 0.05,
}


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
        Band-pass ``l_freq``–``h_freq`` and the mains notch, designed at the data's native rate ``native_sfreq``
        and followed by the resampling to ``sfreq`` when the two differ (the data's own path; noise.py).
    notes : list of str
        How the noise's filter path was set, for the record.

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
    native = applied.get("native_sfreq")
    native = float(native) if isinstance(native, (int, float)) and abs(float(native) - sfreq) > 1e-9 else None
    notch = applied["notch"]
    notes = []
    if native is None and notch is not None and float(notch) >= sfreq / 2:
        notes.append(f"notch {notch} Hz omitted for the noise: at or above the windows' Nyquist frequency "
                     f"({sfreq / 2:g} Hz)")
        notch = None
    if native is not None:
        notes.append(f"noise filtered as the data: band-pass and notch designed at the native {native:g} Hz, then "
                     f"the resampling to {sfreq:g} Hz (nothing above {min(native, sfreq) / 2:g} Hz)")
    elif isinstance(applied.get("native_sfreq"), list):
        raise ValueError(f"the window set mixes native rates {applied['native_sfreq']}; the noise cannot follow one "
                         "filter path. fix: sweep recordings of one native rate (a task per rate)")
    return FilterSpec(sfreq, applied["l_freq"], applied["h_freq"], notch, native_sfreq=native), notes


def perturb_context(meta: dict, task: str, seed: int, *, order: str = "before_reference",
                    region_power: str = "montage", mask: str = "paper") -> tuple[PerturbContext, list[str]]:
    """:class:`PerturbContext` of a window set (dataset name, task, matching filters, perturbation seed).

    Parameters
    ----------
    meta : dict
        ``WindowSet.meta`` (``dataset`` and ``preprocessing``).
    task : str
        Task name (selects the regions of Table 6).
    seed : int
        Perturbation seed.
    order, region_power, mask : str
        See :class:`~eegfm_bench.perturb.conditions.PerturbContext`; the data's reference is read from ``meta``.

    Returns
    -------
    ctx : PerturbContext
    notes : list of str
        See :func:`filter_from_preprocessing`.
    """
    filt, notes = filter_from_preprocessing(meta["preprocessing"])
    ref = meta["preprocessing"].get("reference", "none")
    ref = "average" if ref == "average" else "none"
    return PerturbContext(dataset=meta["dataset"], task=task, filter=filt, seed=int(seed), reference=ref, order=order,
                          region_power=region_power, mask=mask), notes


def not_applicable_reason(condition: Condition, model: Any) -> str | None:
    """Why ``model`` cannot be evaluated under ``condition`` (``None`` if it can).

    Removing channels (``*_removed``) needs a backbone whose ``channel_contract.variable`` is True (paper 003
    App. D.2: "accepts a subset of the training channels at inference without retraining or padding") and a
    head that accepts a different number of tokens
    (:meth:`~eegfm_bench.models.heads.PoolingHead.takes_any_token_count`: the ``flatten`` head's weights, and
    ``mlp``'s with ``pooling: flatten``, are tied to token positions).

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
    head = model.head
    if not type(head).takes_any_token_count(**(model.hparams.get("head_kwargs") or {})):
        return (f"the {head.name} head of {name} is tied to the build-time token count ({head.n_tokens}); removing "
                "channels changes it; the zero-padded variants (*_zero) apply, or use a head that pools any number "
                "of tokens (mean, attention, max)")
    return None


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
        Class probabilities per window, in the order of ``index`` (``ok`` only).
    index : ndarray of int, shape (n_windows,), or None
        WindowSet rows of ``probs`` (ascending; each test window once).
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
    index: np.ndarray | None = None
    note: str = ""
    details: dict = field(default_factory=dict)
    error: str = ""
    traceback: str = ""
    seconds: float = 0.0


def backbone_fingerprint(backbone: Any) -> str:
    """sha256 over a backbone's state dict (names, dtypes, shapes and bytes), to find identical frozen backbones."""
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


def probability_metrics(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """The sweep's metrics (:data:`SWEEP_METRICS`) of labels ``y`` (n,) against class probabilities ``probs`` (n,
    n_classes); a one-class test set's warning is silenced (the metric says it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="test set holds one class")
        m = classification_metrics(y, probs)
    return {k: float(m[k]) for k in SWEEP_METRICS}


def condition_details(condition: Condition, ch_names: Sequence[str], ctx: PerturbContext) -> dict:
    """What ``condition`` did to a window of ``ch_names`` (its own details) plus ``n_chans``, the channels the model
    saw."""
    details = dict(condition.details(ch_names, ctx))
    n = len(ch_names)
    if condition.needs_variable_channels:
        dropped = details.get("dropped", details.get("channels", []))
        n -= len(dropped)
    details["n_chans"] = n
    return details


def condition_rows(result: ConditionResult, base: dict) -> list[dict]:
    """Result rows of one condition (architecture guide, "Result row"): one per metric, or one not-applicable row.

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
        raise ConfigError(f"conditions must be a list of condition strings, got {names!r}; "
                            "e.g. [clean, white_snr=-5dB, dropout_p=0.5_zero]")
    conds = [parse_condition(n) for n in names]
    seen = [c.name for c in conds]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise ConfigError(f"conditions {dup} are listed more than once; fix: list each once")
    attr = [c.name for c in conds if c.attribution_only]
    if attr:
        raise ConfigError(f"{attr} are attribution-only conditions (paper 003 App. D.4), not accuracy conditions; "
                            "fix: remove them from the sweep's conditions")
    conds = [c for c in conds if not isinstance(c, Clean)]
    return [Clean(), *conds]


def dropout_masks_record(ch_names: Sequence[str], dataset: str, seed: int, conditions: Sequence[Condition],
                         rule: str = "paper") -> list[dict]:
    """The random dropout masks of a sweep by channel name (paper 003 App. D.2, Table 5).

    Returns
    -------
    list of dict
        One per dropout probability in ``conditions`` (ascending): ``dataset``, ``seed``, ``p``, ``n_chans``,
        ``n_dropped``, ``dropped`` (montage order).
    """
    ps = sorted({c.p for c in conditions if isinstance(c, ChannelDropout)})
    return [{**dropout_mask(ch_names, p, seed, dataset, rule=rule).as_dict(), "rule": rule} for p in ps]

# ------------------------------------------------------------------------------------------------------------------
# The LightningModule of a sweep
# ------------------------------------------------------------------------------------------------------------------
@dataclass
class SweepCondition:
    """One dataloader of a sweep's test loop.

    Attributes
    ----------
    condition : Condition
    ch_names : list of str
        Channel names of the perturbed windows (what the models are told they receive).
    keys : list of str
        The models (keys of :class:`SweepModule`) to run on it; the others are not applicable or done.
    details : dict
        :func:`condition_details` of the condition on the montage (written with every row).
    """

    condition: Condition
    ch_names: list[str]
    keys: list[str]
    details: dict = field(default_factory=dict)


class SweepModule(L.LightningModule):
    """Fitted models of one fold under every condition of a sweep, as one ``trainer.test`` loop.

    Parameters
    ----------
    models : mapping str -> FMClassifier
        Fitted models, evaluated as they are (no retraining). When ``shared`` is True they are head-only models
        with identical frozen backbones (:func:`shared_backbone_groups`): the first one's backbone computes the
        tokens once per batch and every model's head is applied to them; the probabilities equal running each
        model on its own.
    conditions : sequence of SweepCondition
        Dataloader ``i`` of ``trainer.test`` serves ``conditions[i]``.
    shared : bool

    Notes
    -----
    ``test_step`` stores ``(index, probs)`` per model; :meth:`take` hands one condition's outputs to the
    :class:`~eegfm_bench.callbacks.sweep.TestSweep` callback and frees them. An error inside a model's forward marks
    that model failed for the rest of that condition (the other models and conditions go on); a batch that carries
    an ``error`` (the perturbation itself failed, :class:`~eegfm_bench.perturb.dataset.PerturbedWindows`) marks every
    model of the condition failed.
    """

    def __init__(self, models: Mapping[str, Any], conditions: Sequence[SweepCondition], shared: bool = False):
        super().__init__()
        self.models = nn.ModuleDict({str(k): m.eval() for k, m in models.items()})
        self.conditions = list(conditions)
        self.shared = bool(shared) and len(self.models) > 1
        self._out: dict[int, dict[str, list]] = {}
        self._failed: dict[int, dict[str, tuple[str, str]]] = {}

    def on_test_epoch_start(self) -> None:
        self._out = {i: {k: [] for k in c.keys} for i, c in enumerate(self.conditions)}
        self._failed = {i: {} for i in range(len(self.conditions))}

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        cond = self.conditions[dataloader_idx]
        failed = self._failed[dataloader_idx]
        err = batch.get("error")
        if err is not None and len(err) and err[0]:
            for k in cond.keys:
                failed.setdefault(k, (err[0].splitlines()[0], err[0]))
            return
        keys = [k for k in cond.keys if k not in failed]
        if not keys:
            return
        x, index = batch["x"], batch["index"].detach().cpu().numpy()

        def run(ks, fn):
            try:
                for k, probs in zip(ks, fn()):
                    self._out[dataloader_idx][k].append((index, probs.float().softmax(-1).detach().cpu().numpy()))
            except Exception as e:  # noqa: BLE001  (one failing model must not lose the others)
                for k in ks:
                    failed[k] = (f"{type(e).__name__}: {e}", "".join(traceback.format_exception(e)))

        if self.shared:
            first = self.models[keys[0]]
            run(keys, lambda: (lambda t: [self.models[k].head(t) for k in keys])(first.backbone.tokens(x, cond.ch_names)))
        else:
            for k in keys:
                run([k], lambda k=k: [self.models[k](x, cond.ch_names)])

    def take(self, dataloader_idx: int) -> tuple[dict[str, dict], dict[str, tuple[str, str]]]:
        """This rank's outputs of one condition: ``{key: {"index", "probs"}}`` and ``{key: (error, traceback)}``."""
        out = {}
        for k, parts in self._out.get(dataloader_idx, {}).items():
            if parts:
                out[k] = {"index": np.concatenate([p[0] for p in parts]), "probs": np.concatenate([p[1] for p in parts])}
            else:
                out[k] = {"index": np.zeros(0, np.int64), "probs": np.zeros((0, 0), np.float32)}
        self._out[dataloader_idx] = {}
        return out, dict(self._failed.get(dataloader_idx, {}))
