"""Attribution maps: Gradient×Input (captum) and AttnLRP (lxt), selection and normalisation of paper 003 App. I.1.

Methods (every map has the input's shape ``(batch, n_chans, n_times)``):

* ``gxi`` — Gradient×Input ``x · ∂y_c/∂x`` through captum's :class:`captum.attr.InputXGradient`, for every
  backbone.
* ``attnlrp`` — AttnLRP through lxt's efficient rules with a per-backbone patch map
  (:mod:`eegfm_bench.interpret.lrp`: ``labram``, ``cbramod``; ``eegnet`` gets LRP-ε with the identity rule on
  ELU, the same rules without attention). A backbone without a map is an error naming the methods it
  supports, unless the config sets ``lrp_fallback: gxi`` (then Gradient×Input is computed and recorded
  under ``gxi``).

Sample selection and normalisation (App. I.1), per fold:

1. predict the fold's test windows (clean, or under a perturbation condition: App. I.2);
2. keep the **correctly classified** windows whose confidence (max softmax probability) **exceeds the 75th
   percentile** of the confidence of all test windows of that fold and condition (the top quartile); none
   left → :class:`NoWindowsSelectedError` and no map;
3. explain the predicted (= true) class logit;
4. divide each window's map by the **99th percentile of |R|** over its channels × times and clip to
   ``[−1, 1]``;
5. **|R| averaged over time**, then over the selected windows of the fold (per class, and over all selected
   windows for the class-averaged map), then over folds.

Sanity checks shipped here: :func:`conservation_check` (sum of relevance vs the explained logit with every
bias zeroed; warns beyond 5 %), :func:`randomisation_test` (maps of a model with re-initialised weights must
differ: Spearman rank correlation, ``scipy.stats.spearmanr``) and :func:`gxi_linear_check` (captum's
Gradient×Input equals ``x · W[c]`` exactly on a linear model).

Entry points: :class:`Attribution` (Lightning callback, after fit) and :func:`run_attribution`
(``eegfm-bench attribute --config ...`` over a cv run's fold checkpoints).

References
----------
Achtibat et al. (2024), AttnLRP, ICML. Adebayo et al. (2018), Sanity checks for saliency maps, NeurIPS.
Ancona et al. (2018), Towards better understanding of gradient-based attribution methods, ICLR.
"""
from __future__ import annotations

import copy
import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from eegfm_bench.interpret.lrp import (ATTRIBUTION_METHODS, UnsupportedMethodError, attention_ledger, attention_sink,
                                       get_patch_map, lrp_copy, lrp_patched, supported_methods, zero_biases)

log = logging.getLogger(__name__)

CONSERVATION_TOLERANCE = 0.05
"""Relative deviation of ``sum(R) / logit`` from 1 above which :func:`conservation_check` warns."""


class NoWindowsSelectedError(RuntimeError):
    """No correctly classified window exceeds the confidence cut: no map is written."""


class ConservationWarning(UserWarning):
    """LRP relevance does not sum to the explained logit within the tolerance."""


# ============================================================================================ model wrapper
class LogitModel(nn.Module):
    """``x (batch, n_chans, n_times) → logits (batch, n_classes)`` of a backbone adapter and a pooling head.

    Attribution runs on this wrapper rather than on the LightningModule (no metrics, no trainer), with the
    channel names fixed (they may be a subset after a *removed*-channel perturbation).

    Parameters
    ----------
    backbone : BackboneAdapter
    head : PoolingHead
    ch_names : sequence of str
        Channel names of the inputs to explain.
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, ch_names: Sequence[str]):
        super().__init__()
        self.backbone, self.head, self.ch_names = backbone, head, list(ch_names)

    @classmethod
    def from_classifier(cls, model, ch_names: Sequence[str] | None = None) -> "LogitModel":
        """Wrap an :class:`~eegfm_bench.models.module.FMClassifier` (shares its modules)."""
        return cls(model.backbone, model.head, list(ch_names) if ch_names is not None else list(model.ch_names))

    @property
    def backbone_name(self) -> str:
        return getattr(self.backbone, "name", type(self.backbone).__name__)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone.tokens(x, self.ch_names))


def _as_target(target, n: int) -> torch.Tensor:
    t = torch.as_tensor(target, dtype=torch.long)
    return t.expand(n).clone() if t.ndim == 0 else t


# ============================================================================================ methods
def gradient_x_input(model: nn.Module, x: torch.Tensor, target) -> torch.Tensor:
    """Gradient×Input ``x · ∂y_target/∂x`` (captum ``InputXGradient``).

    Parameters
    ----------
    model : nn.Module
        ``(batch, n_chans, n_times) → (batch, n_classes)`` (e.g. :class:`LogitModel`); put in eval mode here.
    x : Tensor, shape (batch, n_chans, n_times)
        Windows in the backbone's unit.
    target : int or Tensor of int, shape (batch,)
        Class whose logit is explained.

    Returns
    -------
    Tensor, shape (batch, n_chans, n_times)
        Relevance in (logit units); detached.
    """
    from captum.attr import InputXGradient

    model.eval()
    x = x.detach().clone().requires_grad_(True)
    return InputXGradient(model).attribute(x, target=_as_target(target, len(x))).detach()


def attnlrp(model: nn.Module, x: torch.Tensor, target, backbone: str, *, epsilon: float = 0.0,
            attention_rule: str = "attnlrp", biases_zeroed: bool = False, return_sink: bool = False):
    """AttnLRP relevance of the ``target`` logit (lxt efficient rules, per-backbone patch map).

    A deep copy of ``model`` is patched per module instance and discarded; ``model`` itself and torch's
    classes are never modified (:func:`eegfm_bench.interpret.lrp.lrp_patched`).

    Parameters
    ----------
    model : nn.Module
        :class:`LogitModel` (or any module whose backbone has a patch map).
    x : Tensor, shape (batch, n_chans, n_times)
    target : int or Tensor of int, shape (batch,)
    backbone : str
        Registered backbone name selecting the patch map.
    epsilon : float
        ε of the ε-rule on Linear / Conv modules (0: the ε → 0 limit, i.e. the plain gradient).
    attention_rule : {"attnlrp", "cp"}
        AttnLRP (paper) or CP-LRP on the attention products.
    biases_zeroed : bool
        Zero every bias (and the map's additive parameters) first: the setting of the conservation check.
    return_sink : bool
        Also return the relevance absorbed inside the attention products
        (:func:`eegfm_bench.interpret.lrp.attention_sink`).

    Returns
    -------
    relevance : Tensor, shape (batch, n_chans, n_times)
    logits : Tensor, shape (batch, n_classes)
        Of the (possibly bias-zeroed) copy.
    sink : Tensor, shape (batch,), float64
        Only with ``return_sink``.

    Raises
    ------
    UnsupportedMethodError
        If ``backbone`` has no patch map.
    """
    pm = get_patch_map(backbone)
    m = lrp_copy(model)
    if biases_zeroed:
        zero_biases(m, pm)
    tgt = _as_target(target, len(x)).to(x.device)
    with lrp_patched(m, pm, epsilon=epsilon, attention_rule=attention_rule) as mm, attention_ledger() as records:
        xx = x.detach().clone().requires_grad_(True)
        logits = mm(xx)
        logits.gather(1, tgt[:, None]).sum().backward()
        rel = (xx * xx.grad).detach()
        sink = attention_sink(records, len(x))
        records.clear()
    return (rel, logits.detach(), sink) if return_sink else (rel, logits.detach())


def attribute(model: nn.Module, x: torch.Tensor, target, method: str, backbone: str, **lrp_kwargs) -> torch.Tensor:
    """Relevance maps ``(batch, n_chans, n_times)`` by ``method`` (``gxi`` or ``attnlrp``).

    Raises
    ------
    UnsupportedMethodError
        Unknown method, or ``attnlrp`` for a backbone without a patch map (lists what it supports).
    """
    if method == "gxi":
        return gradient_x_input(model, x, target)
    if method == "attnlrp":
        return attnlrp(model, x, target, backbone, **lrp_kwargs)[0]
    raise UnsupportedMethodError(f"unknown attribution method {method!r}; valid: {ATTRIBUTION_METHODS}; "
                                 f"{backbone} supports {supported_methods(backbone)}")


# ============================================================================================ selection, normalisation
def select_windows(probs: np.ndarray, y: np.ndarray, percentile: float = 75.0) -> np.ndarray:
    """Correctly classified windows whose confidence exceeds the ``percentile`` of all windows' confidence.

    Parameters
    ----------
    probs : ndarray, shape (n_windows, n_classes)
        Softmax probabilities on the test windows of one fold (and condition).
    y : ndarray of int, shape (n_windows,)
    percentile : float
        75 in App. I.1 (the top confidence quartile).

    Returns
    -------
    ndarray of int
        Positions into ``probs``, sorted by decreasing confidence. When the percentile equals the largest
        confidence (ties at the top, e.g. a saturated softmax of 1.0), the windows *at* the cut are kept.

    Raises
    ------
    NoWindowsSelectedError
        If no correctly classified window is above the cut (says how many were correct and the cut).
    """
    probs, y = np.asarray(probs), np.asarray(y)
    conf = probs.max(1)
    cut = float(np.percentile(conf, percentile))
    correct = probs.argmax(1) == y
    keep = np.flatnonzero(correct & (conf > cut))
    if keep.size == 0 and cut == conf.max():  # the top quartile is tied at the maximum (saturated softmax)
        keep = np.flatnonzero(correct & (conf >= cut))
    if keep.size == 0:
        raise NoWindowsSelectedError(
            f"no correctly classified window has confidence above the {percentile:g}th percentile ({cut:.4f}) of the "
            f"{len(y)} test windows ({int(correct.sum())} correct, max confidence {conf.max():.4f}); no map is "
            "written for this fold/condition (App. I.1 keeps only confident correct trials)")
    return keep[np.argsort(-conf[keep], kind="stable")]


def normalise_maps(R: np.ndarray, q: float = 99.0) -> np.ndarray:
    """Per window: divide by the ``q``-th percentile of ``|R|`` over channels × times, clip to ``[-1, 1]``.

    Parameters
    ----------
    R : ndarray, shape (batch, n_chans, n_times)

    Returns
    -------
    ndarray, same shape, float32. A map that is zero everywhere stays zero.
    """
    R = np.asarray(R, dtype=np.float64)
    scale = np.percentile(np.abs(R).reshape(len(R), -1), q, axis=1)
    scale = np.where(scale > 0, scale, 1.0)
    return np.clip(R / scale[:, None, None], -1.0, 1.0).astype(np.float32)


def channel_maps(Rn: np.ndarray) -> np.ndarray:
    """``|R|`` averaged over time: ``(batch, n_chans, n_times)`` → ``(batch, n_chans)``."""
    return np.abs(np.asarray(Rn)).mean(-1)


# ============================================================================================ sanity checks
def conservation_check(model: nn.Module, x: torch.Tensor, target, backbone: str, *, epsilon: float = 0.0,
                       attention_rule: str = "attnlrp", tolerance: float = CONSERVATION_TOLERANCE,
                       warn: bool = True) -> dict:
    """Sum of LRP relevance vs the explained logit, with every bias zeroed (paper 003 App. I.1).

    With no bias terms, LRP's rules redistribute the logit exactly, except where a rule is not conservative
    by design: AttnLRP's softmax rule (a Taylor decomposition at the input, "with bias") absorbs relevance in
    its bias term ([Achtibat2024]_ §3.3.1). The check therefore closes the budget: the relevance absorbed inside
    every attention product is measured during the same backward pass
    (:func:`eegfm_bench.interpret.lrp.attention_sink`), and ``closure = (Σ R_input + Σ sink) / logit`` must be 1
    for a correct patch map whatever the attention rule. ``ratio = Σ R_input / logit`` says how much of the logit
    the input map itself carries; ``ratio_cp`` repeats it under CP-LRP (no relevance through the softmax),
    where nothing is absorbed and the ratio itself must be 1.

    Parameters
    ----------
    model : nn.Module
    x : Tensor, shape (batch, n_chans, n_times)
    target : int or Tensor of int, shape (batch,)
    backbone : str
    epsilon, attention_rule
        As :func:`attnlrp`.
    tolerance : float
        Relative tolerance (0.05).
    warn : bool
        Emit :class:`ConservationWarning` when the closure or the CP ratio is off by more than ``tolerance``
        (a rule of the patch map is wrong), or when the input map carries less than ``1 − tolerance`` of the
        logit (the softmax rule absorbed the rest; the share is in the message).

    Returns
    -------
    dict
        ``ratio`` (mean over windows of ``Σ R_input / logit``, configured rule), ``ratio_min``, ``ratio_max``,
        ``softmax_share`` (mean of ``sink / logit``), ``closure`` (mean of ``(Σ R_input + sink) / logit``),
        ``closure_max_error`` (max over windows of ``|closure − 1|``), ``ratio_cp`` (CP rule), ``n_windows``,
        ``rule``, ``ok`` (input ratio within tolerance), ``ok_closure``, ``ok_cp``.
    """
    out = {"rule": attention_rule, "n_windows": int(len(x))}
    tgt = _as_target(target, len(x))
    for rule, key in ((attention_rule, "ratio"), ("cp", "ratio_cp")):
        rel, logits, sink = attnlrp(model, x, target, backbone, epsilon=epsilon, attention_rule=rule,
                                    biases_zeroed=True, return_sink=True)
        z = logits.gather(1, tgt[:, None].to(logits.device))[:, 0].double().cpu()
        r_in = rel.double().sum((1, 2)).cpu()
        r = (r_in / z).numpy()
        out[key] = float(np.mean(r))
        if key == "ratio":
            closure = ((r_in + sink) / z).numpy()
            out["ratio_min"], out["ratio_max"] = float(r.min()), float(r.max())
            out["softmax_share"] = float(np.mean((sink / z).numpy()))
            out["closure"] = float(np.mean(closure))
            out["closure_max_error"] = float(np.max(np.abs(closure - 1)))
    out["ok"] = bool(abs(out["ratio"] - 1) <= tolerance)
    out["ok_closure"] = bool(out["closure_max_error"] <= tolerance)
    out["ok_cp"] = bool(abs(out["ratio_cp"] - 1) <= tolerance)
    if warn and not (out["ok_cp"] and out["ok_closure"]):
        warnings.warn(f"{backbone}: with biases zeroed, LRP relevance (input + attention sink) sums to "
                      f"{out['closure']:.3f} × the logit under {attention_rule} (worst window off by "
                      f"{out['closure_max_error']:.3f}) and the input relevance to {out['ratio_cp']:.3f} × under the "
                      f"CP rule (tolerance {tolerance:.0%}): a rule of the {backbone} patch map is not conservative; "
                      "check eegfm_bench/interpret/lrp.py", ConservationWarning, stacklevel=2)
    elif warn and not out["ok"]:
        warnings.warn(f"{backbone}: the {attention_rule} input map carries {out['ratio']:.3f} × the logit (range "
                      f"{out['ratio_min']:.3f}–{out['ratio_max']:.3f}) with biases zeroed, beyond {tolerance:.0%}; the "
                      f"budget closes ({out['closure']:.3f}) once the {out['softmax_share']:.3f} × logit absorbed by the "
                      "softmax Taylor rule's bias term is added, so the patch map is correct and the loss is AttnLRP's "
                      "own (near-uniform attention absorbs most)", ConservationWarning, stacklevel=2)
    return out


def randomise_parameters(model: nn.Module, seed: int = 0) -> nn.Module:
    """A copy with every parameter re-initialised (model-parameter randomisation, Adebayo et al. 2018).

    Modules with ``reset_parameters`` use it; any parameter it leaves unchanged (e.g. LaBraM's embeddings)
    is redrawn from a normal distribution with the original tensor's standard deviation (0.02 if that is 0).
    Buffers (BatchNorm statistics) are kept.
    """
    m = copy.deepcopy(model)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for mod in m.modules():
            if hasattr(mod, "reset_parameters") and not hasattr(mod, "parametrizations"):
                mod.reset_parameters()
            elif hasattr(mod, "parametrizations"):
                for name in list(mod.parametrizations):
                    orig = mod.parametrizations[name].original
                    orig.normal_(0, float(orig.std()) or 0.02)
        for k, p in m.named_parameters():
            if torch.equal(p, before[k]) and p.numel() > 0:
                p.normal_(0, float(before[k].std()) if p.numel() > 1 and float(before[k].std()) > 0 else 0.02)
    return m


def randomisation_test(model: nn.Module, x: torch.Tensor, target, method: str, backbone: str, *, seed: int = 0,
                       **lrp_kwargs) -> dict:
    """Maps of ``model`` vs a weight-randomised copy on the same windows and target class.

    Returns
    -------
    dict
        ``spearman`` — mean over windows of the Spearman rank correlation of the normalised ``|R|`` maps
        (channels × times); ``spearman_signed`` — the same on the signed maps (for Gradient×Input the
        ``|R|`` correlation keeps a floor from the shared ``|x|`` factor, Adebayo et al. 2018);
        ``spearman_channel`` — Spearman correlation of the window-averaged channel maps
        (``|R|`` over time, as in the topomaps); ``n_windows``. A faithful method gives low values.
    """
    from scipy.stats import spearmanr

    rand = randomise_parameters(model, seed)
    a = normalise_maps(attribute(model, x, target, method, backbone, **lrp_kwargs).cpu().numpy())
    b = normalise_maps(attribute(rand, x, target, method, backbone, **lrp_kwargs).cpu().numpy())
    per = [spearmanr(np.abs(a[i]).ravel(), np.abs(b[i]).ravel())[0] for i in range(len(a))]
    signed = [spearmanr(a[i].ravel(), b[i].ravel())[0] for i in range(len(a))]
    ch = spearmanr(channel_maps(a).mean(0), channel_maps(b).mean(0))[0]
    return {"spearman": float(np.nanmean(per)), "spearman_signed": float(np.nanmean(signed)),
            "spearman_channel": float(ch), "n_windows": int(len(a))}


def gxi_linear_check(n_chans: int = 4, n_times: int = 16, n_classes: int = 3, batch: int = 5, seed: int = 0) -> float:
    """Max ``|GxI − x · W[c]|`` on a random linear model ``y = W vec(x) + b`` (float64); 0 means exact.

    Gradient×Input of a linear model is ``x · ∂y_c/∂x = x · W[c]``: captum's result must equal it bit for bit.
    """
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(n_chans * n_times, n_classes).double()
    with torch.no_grad():
        lin.weight.copy_(torch.randn(lin.weight.shape, generator=g, dtype=torch.float64))
        lin.bias.copy_(torch.randn(lin.bias.shape, generator=g, dtype=torch.float64))
    model = nn.Sequential(nn.Flatten(), lin)
    x = torch.randn(batch, n_chans, n_times, generator=g, dtype=torch.float64)
    target = torch.randint(0, n_classes, (batch,), generator=g)
    got = gradient_x_input(model, x, target)
    want = x * lin.weight.detach()[target].reshape(batch, n_chans, n_times)
    return float((got - want).abs().max())


# ============================================================================================ per fold
@torch.no_grad()
def predict_proba(model: nn.Module, X: np.ndarray, batch_size: int = 32, device: str = "cpu") -> np.ndarray:
    """Softmax probabilities ``(n, n_classes)`` (float64) of windows ``X`` ``(n, n_chans, n_times)``."""
    model.eval().to(device)
    out = [model(torch.from_numpy(np.asarray(X[s:s + batch_size], dtype=np.float32)).to(device)).double().softmax(-1)
           for s in range(0, len(X), batch_size)]
    return torch.cat(out).cpu().numpy()


@dataclass
class FoldMaps:
    """Attribution of one fold, condition and method.

    Attributes
    ----------
    method : str
        Method computed (``gxi`` / ``attnlrp``); ``requested`` is what the config asked for.
    maps : ndarray, shape (n_selected, n_chans, n_times), float16
        Normalised maps (99th-percentile scaling, clipped to [−1, 1]).
    channel : ndarray, shape (n_selected, n_chans)
        ``|R|`` averaged over time.
    y, confidence, window : ndarray, shape (n_selected,)
        True (= predicted) class, confidence, index into the WindowSet.
    ch_names : list of str
    n_test, n_correct : int
    """

    method: str
    requested: str
    maps: np.ndarray
    channel: np.ndarray
    y: np.ndarray
    confidence: np.ndarray
    window: np.ndarray
    ch_names: list[str]
    n_test: int
    n_correct: int
    checks: dict = field(default_factory=dict)

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, maps=self.maps, channel=self.channel, y=self.y, confidence=self.confidence,
                            window=self.window, ch_names=np.array(self.ch_names), n_test=self.n_test,
                            n_correct=self.n_correct, method=self.method, requested=self.requested,
                            checks=json.dumps(self.checks))
        return path


def resolve_method(method: str, backbone: str, fallback: str | None) -> str:
    """The method actually computed for ``backbone``: ``method``, or ``fallback`` if configured.

    Raises
    ------
    UnsupportedMethodError
        ``attnlrp`` requested for a backbone without a patch map and no fallback configured.
    """
    if method in supported_methods(backbone):
        return method
    if fallback:
        log.warning("%s has no %s patch map; computing %s instead (lrp_fallback: %s)", backbone, method, fallback,
                    fallback)
        return fallback
    get_patch_map(backbone)  # raises with the supported methods
    raise UnsupportedMethodError(f"{backbone} does not support {method}")  # pragma: no cover


def attribute_fold(model: LogitModel, X: np.ndarray, y: np.ndarray, windows: np.ndarray, methods: Sequence[str], *,
                   percentile: float = 75.0, max_windows: int | None = None, batch_size: int = 8,
                   lrp_fallback: str | None = None, epsilon: float = 0.0, attention_rule: str = "attnlrp",
                   conservation_windows: int = 4, randomisation_windows: int = 8, seed: int = 0,
                   device: str = "cpu", probs: np.ndarray | None = None) -> dict[str, FoldMaps]:
    """Select, explain and normalise one fold's test windows (App. I.1) with each method, plus sanity checks.

    Parameters
    ----------
    model : LogitModel
        The fold's model with the channel names of ``X``.
    X : ndarray, shape (n_test, n_chans, n_times)
        Test windows (possibly perturbed), backbone unit.
    y : ndarray of int, shape (n_test,)
    windows : ndarray of int, shape (n_test,)
        WindowSet indices of the rows of ``X`` (recorded with the maps).
    methods : sequence of {"gxi", "attnlrp"}
    max_windows : int, optional
        Keep at most this many selected windows (highest confidence first).
    conservation_windows, randomisation_windows : int
        Windows (highest confidence) for :func:`conservation_check` (LRP methods) and
        :func:`randomisation_test`; 0 skips.
    probs : ndarray, optional
        Precomputed probabilities of ``X``.

    Returns
    -------
    dict of method → FoldMaps

    Raises
    ------
    NoWindowsSelectedError
        No correctly classified window above the confidence cut.
    UnsupportedMethodError
        ``attnlrp`` for a backbone without a patch map and no ``lrp_fallback``.
    """
    backbone = model.backbone_name
    todo: dict[str, str] = {}
    for m in methods:
        todo.setdefault(resolve_method(m, backbone, lrp_fallback), m)
    probs = predict_proba(model, X, device=device) if probs is None else probs
    sel = select_windows(probs, y, percentile)
    if max_windows:
        sel = sel[: int(max_windows)]
    conf = probs.max(1)[sel]
    target = torch.as_tensor(probs.argmax(1)[sel], dtype=torch.long)
    Xs = torch.from_numpy(np.asarray(X[sel], dtype=np.float32)).to(device)
    lrp_kw = {"epsilon": epsilon, "attention_rule": attention_rule}
    out = {}
    for method, requested in todo.items():
        kw = lrp_kw if method == "attnlrp" else {}
        parts = [attribute(model, Xs[s:s + batch_size], target[s:s + batch_size], method, backbone, **kw).cpu().numpy()
                 for s in range(0, len(Xs), batch_size)]
        Rn = normalise_maps(np.concatenate(parts))
        checks = {}
        if method == "attnlrp" and conservation_windows:
            n = min(conservation_windows, len(Xs))
            checks["conservation"] = conservation_check(model, Xs[:n], target[:n], backbone, **lrp_kw)
        if randomisation_windows:
            n = min(randomisation_windows, len(Xs))
            checks["randomisation"] = randomisation_test(model, Xs[:n], target[:n], method, backbone, seed=seed, **kw)
        out[method] = FoldMaps(method, requested, Rn.astype(np.float16), channel_maps(Rn), np.asarray(y)[sel],
                               conf, np.asarray(windows)[sel], list(model.ch_names), int(len(y)),
                               int((probs.argmax(1) == y).sum()), checks)
    return out


# ============================================================================================ aggregation
def aggregate(folds: Sequence[FoldMaps] | Sequence[dict], n_classes: int) -> dict:
    """Average fold maps: ``|R|`` over time (done), then over trials within a fold, then over folds.

    Parameters
    ----------
    folds : sequence of FoldMaps or of dicts with ``channel`` ``(n_sel, n_chans)`` and ``y`` ``(n_sel,)``
    n_classes : int

    Returns
    -------
    dict
        ``class_averaged`` ``(n_chans,)`` (mean over all selected windows per fold, then over folds),
        ``per_class`` ``(n_classes, n_chans)`` (NaN for a class with no selected window in any fold),
        ``fold_maps`` ``(n_folds, n_chans)``, ``n_windows`` total, ``n_windows_per_class``.
    """
    get = (lambda f, k: getattr(f, k)) if folds and isinstance(folds[0], FoldMaps) else (lambda f, k: f[k])
    fold_maps = np.stack([get(f, "channel").mean(0) for f in folds])
    per_class, counts = [], []
    for c in range(n_classes):
        ms = [get(f, "channel")[get(f, "y") == c].mean(0) for f in folds if np.any(get(f, "y") == c)]
        counts.append(int(sum(np.sum(get(f, "y") == c) for f in folds)))
        per_class.append(np.mean(ms, 0) if ms else np.full(fold_maps.shape[1], np.nan))
    return {"class_averaged": fold_maps.mean(0), "per_class": np.stack(per_class), "fold_maps": fold_maps,
            "n_windows": int(sum(len(get(f, "y")) for f in folds)), "n_windows_per_class": counts}


# ============================================================================================ CLI / callback glue
def _perturb(X: np.ndarray, ch_names: list[str], condition: str, ws, seed: int) -> tuple[np.ndarray, list[str]]:
    from eegfm_bench.perturb.conditions import PerturbContext, condition_rng, parse_condition
    from eegfm_bench.perturb.noise import FilterSpec

    cond = parse_condition(condition)
    if cond.name == "clean":
        return X, list(ch_names)
    p = ws.meta.get("preprocessing") or {}
    filt = FilterSpec(float(ws.sfreq), p.get("l_freq"), p.get("h_freq"), p.get("notch"))
    ctx = PerturbContext(dataset=str(ws.meta.get("dataset", "")), task=str(ws.meta.get("task", "")), filter=filt,
                         seed=int(seed))
    xo, names = cond.apply(np.asarray(X, dtype=np.float32), list(ch_names), condition_rng(int(seed), cond), ctx)
    return np.asarray(xo, dtype=np.float32), list(names)


def explain_fold(clf, ws, test_idx: np.ndarray, *, condition: str = "clean", acfg: dict, device: str = "cpu",
                 ) -> dict[str, FoldMaps]:
    """Perturb (``condition``) the fold's test windows, then :func:`attribute_fold` with the config's settings.

    Raises
    ------
    ChannelContractError
        A *removed*-channel condition for a fixed-montage backbone (names the fix).
    """
    from eegfm_bench.models.base import ChannelContractError
    from eegfm_bench.perturb.conditions import parse_condition

    cond = parse_condition(condition)
    if cond.needs_variable_channels and not clf.backbone.channel_contract.variable:
        raise ChannelContractError(f"{clf.backbone.name} has a fixed montage and cannot take condition {condition!r} "
                                   "(channels removed); fix: use the *_zero variant for this backbone")
    test_idx = np.sort(np.asarray(test_idx))
    X, names = _perturb(np.asarray(ws.X[test_idx]), list(ws.ch_names), condition, ws, acfg["perturbation_seed"])
    model = LogitModel.from_classifier(clf, names)
    return attribute_fold(model, X, np.asarray(ws.y)[test_idx], test_idx, acfg["methods"],
                          percentile=float(acfg["percentile"]), max_windows=acfg["max_windows_per_fold"],
                          batch_size=int(acfg["batch_size"]), lrp_fallback=acfg["lrp_fallback"],
                          epsilon=float(acfg["epsilon"]), attention_rule=acfg["attention_rule"],
                          conservation_windows=int(acfg["conservation_windows"]),
                          randomisation_windows=int(acfg["randomisation_windows"]), seed=int(acfg["seed"]),
                          device=device)


def _fold_rows(base: dict, fm: FoldMaps) -> list[dict]:
    rows = [{**base, "metric": f"{fm.method}:n_selected", "value": float(len(fm.y))},
            {**base, "metric": f"{fm.method}:n_correct", "value": float(fm.n_correct)}]
    cons = fm.checks.get("conservation")
    if cons:
        rows += [{**base, "metric": f"{fm.method}:conservation_ratio", "value": cons["ratio"],
                  "attention_rule": cons["rule"]},
                 {**base, "metric": f"{fm.method}:conservation_softmax_share", "value": cons["softmax_share"],
                  "attention_rule": cons["rule"]},
                 {**base, "metric": f"{fm.method}:conservation_closure", "value": cons["closure"],
                  "attention_rule": cons["rule"]},
                 {**base, "metric": f"{fm.method}:conservation_ratio_cp", "value": cons["ratio_cp"]}]
    rnd = fm.checks.get("randomisation")
    if rnd:
        rows += [{**base, "metric": f"{fm.method}:randomisation_spearman", "value": rnd["spearman"]},
                 {**base, "metric": f"{fm.method}:randomisation_spearman_signed", "value": rnd["spearman_signed"]},
                 {**base, "metric": f"{fm.method}:randomisation_spearman_channel", "value": rnd["spearman_channel"]}]
    for r in rows:
        r.setdefault("n_windows", fm.n_test)
        r["requested_method"] = fm.requested
    return rows


def _cond_dir(condition: str) -> str:
    return condition.replace("=", "-").replace("/", "_")


def write_cell_maps(cell_dir: Path, method: str, condition: str, class_names: Sequence[str], title: str) -> dict | None:
    """Aggregate the fold npz files of one cell / condition / method; write ``maps.npz`` and ``topomap.png``."""
    from eegfm_bench.interpret.topomap import plot_topomap_grid

    d = cell_dir / _cond_dir(condition) / method
    files = sorted(d.glob("fold*.npz"))
    if not files:
        return None
    folds = []
    for f in files:
        z = np.load(f, allow_pickle=False)
        folds.append({"channel": z["channel"], "y": z["y"], "ch_names": [str(c) for c in z["ch_names"]]})
    names = folds[0]["ch_names"]
    if any(f["ch_names"] != names for f in folds):
        raise ValueError(f"{d}: folds differ in channels; cannot average")
    agg = aggregate(folds, len(class_names))
    np.savez(d / "maps.npz", class_averaged=agg["class_averaged"], per_class=agg["per_class"],
             fold_maps=agg["fold_maps"], ch_names=np.array(names), class_names=np.array(list(class_names)),
             n_windows=agg["n_windows"], n_windows_per_class=np.array(agg["n_windows_per_class"]),
             folds=np.array([f.stem for f in files]))
    maps = np.vstack([agg["class_averaged"][None], agg["per_class"]])
    cols = ["class-averaged"] + [f"{c} (n={n})" for c, n in zip(class_names, agg["n_windows_per_class"])]
    png = plot_topomap_grid({method: maps}, names, d / "topomap.png", col_titles=cols, cmap="Reds",
                            shared_scale="row", unit="mean |R| (normalised)",
                            title=f"{title}\n{len(files)} folds, {agg['n_windows']} windows")
    return {"png": png, "npz": d / "maps.npz", **agg, "ch_names": names}


def run_attribution(config, *, progress: bool = True) -> dict:
    """``eegfm-bench attribute``: maps of every selected cv cell, fold, condition and method.

    Writes under ``<out_dir>/attribution/``: ``<cell>/<condition>/<method>/fold<k>.npz`` (normalised maps,
    channel maps, selection), ``maps.npz`` + ``topomap.png`` per cell/condition/method (class-averaged and
    per-class), ``overview_<condition>.png`` (all cells and methods), ``results.csv`` (rows: selected
    windows, conservation ratios, randomisation correlations) and ``checks.md`` (conservation and
    randomisation summary per model).

    Returns
    -------
    dict
        Paths written and the summary table of the checks.
    """
    from tqdm.auto import tqdm

    from eegfm_bench.interpret.config import load_interpret_config
    from eegfm_bench.interpret.runs import CVRun, load_fold_model
    from eegfm_bench.interpret.topomap import plot_topomap_grid
    from eegfm_bench.results import ResultStore, code_version, config_hash

    cfg = load_interpret_config(config)
    acfg, sel = cfg["attribution"], cfg["select"]
    run = CVRun(cfg["cv_dir"])
    root = Path(cfg["out_dir"]) / "attribution"
    store = ResultStore(root)
    cks = run.checkpoints(sel["models"], sel["regimes"], sel["heads"], sel["folds"])
    from eegfm_bench.interpret.topomap import check_positions

    for ck in cks:  # check methods and montage before any computation (MOABB-style)
        for m in acfg["methods"]:
            resolve_method(m, ck.model, acfg["lrp_fallback"])
    for model in sorted({ck.model for ck in cks}):
        check_positions(run.windows(model).ch_names)
    chash = config_hash({k: acfg[k] for k in sorted(acfg)})
    code = code_version()
    skipped = []
    for ck in tqdm(cks, desc="attribution", disable=not progress, unit="fold"):
        ws = run.windows(ck.model)
        _, _, te = run.fold_indices(ws, ck.fold)
        clf = load_fold_model(ck.path)
        for condition in acfg["conditions"]:
            try:
                res = explain_fold(clf, ws, te, condition=condition, acfg=acfg, device=cfg["device"])
            except NoWindowsSelectedError as err:
                log.warning("%s fold %d %s: %s", ck.cell, ck.fold, condition, err)
                skipped.append({"cell": ck.cell, "fold": ck.fold, "condition": condition, "reason": str(err)})
                continue
            base = {"experiment": run.experiment, "task": run.task, "model": ck.model, "init": ck.init,
                    "regime": ck.regime, "head": ck.head, "fold": ck.fold, "seed": int(run.config["seed"]),
                    "condition": condition, "n_subjects": int(np.unique(np.asarray(ws.subject)[te]).size),
                    "fold_unit": run.group_by, "config_hash": chash, "code_version": code,
                    "checkpoint": str(ck.path)}
            rows = []
            for method, fm in res.items():
                fm.save(root / ck.cell / _cond_dir(condition) / method / f"fold{ck.fold}.npz")
                rows += _fold_rows(base, fm)
            store.append(rows)
    if skipped:
        (root / "skipped.json").write_text(json.dumps(skipped, indent=1))
    # aggregate per cell / condition / method, overview per condition
    paths: dict = {"results": store.csv}
    class_names = run.windows(cks[0].model).class_names
    for condition in acfg["conditions"]:
        rows_maps, names_map = {}, {}
        for cell in sorted({ck.cell for ck in cks}):
            for method in sorted({resolve_method(m, cell.split("-")[0], acfg["lrp_fallback"])
                                  for m in acfg["methods"]}):
                agg = write_cell_maps(root / cell, method, condition, class_names,
                                      f"{cell} on {run.task}, {condition}: {_method_label(method, cell.split('-')[0])}")
                if agg is None:
                    continue
                label = f"{cell}\n{_method_label(method, cell.split('-')[0])}"
                rows_maps[label] = np.vstack([agg["class_averaged"][None], agg["per_class"]])
                names_map[label] = agg["ch_names"]
                paths[f"{cell}/{condition}/{method}"] = agg["png"]
        if rows_maps:
            paths[f"overview_{condition}"] = plot_topomap_grid(
                rows_maps, names_map, root / f"overview_{_cond_dir(condition)}.png",
                col_titles=["class-averaged"] + list(class_names), cmap="Reds", shared_scale="row",
                unit="mean |R|", title=f"{run.task}, {condition}: attribution topomaps (App. I.1 selection)")
    table = checks_table(store.load())
    (root / "checks.md").write_text(_checks_markdown(table))
    paths["checks"] = root / "checks.md"
    paths["checks_table"] = table
    return paths


def _method_label(method: str, backbone: str) -> str:
    if method == "gxi":
        return "Gradient×Input"
    from eegfm_bench.interpret.lrp import PATCH_MAPS

    return PATCH_MAPS[backbone]().method if backbone in PATCH_MAPS else method


def checks_table(df):
    """Mean ± std over folds of the sanity-check metrics per (model, regime, head, condition, metric)."""
    import pandas as pd

    m = df["metric"].astype(str)
    df = df[m.str.contains("conservation|randomisation|n_selected")]
    if df.empty:
        return pd.DataFrame()
    g = df.groupby(["model", "regime", "head", "condition", "metric"])["value"]
    return pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "min": g.min(), "max": g.max(),
                         "n_folds": g.count()}).reset_index()


def _checks_markdown(table) -> str:
    if table.empty:
        return "(no attribution rows)\n"
    lines = ["# Attribution sanity checks (per model; mean ± std over folds)", "",
             "conservation_ratio: sum of input R / logit with biases zeroed (configured attention rule); "
             "conservation_softmax_share: relevance / logit absorbed inside the attention products (AttnLRP's softmax "
             "Taylor rule); conservation_closure: (input R + absorbed) / logit (must be 1: checks every rule of the "
             "patch map); conservation_ratio_cp: input R / logit with the CP rule (nothing absorbed: must be 1). "
             f"Warning threshold |ratio − 1| > {CONSERVATION_TOLERANCE:.0%}. randomisation_spearman: Spearman rank "
             "correlation of |R| maps (channels × times) of the trained vs a weight-randomised model, _signed: of the signed "
             "maps, _channel: of the topomap values (low = passes; |R| keeps a floor from the shared |x| factor).", "",
             "| model | regime | head | condition | metric | mean ± std | min | max | folds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        std = 0.0 if np.isnan(r.std) else r.std
        flag = ""
        if r.metric.endswith(("conservation_ratio", "conservation_ratio_cp", "conservation_closure")):
            flag = " ⚠" if abs(r.mean - 1) > CONSERVATION_TOLERANCE else ""
        lines.append(f"| {r.model} | {r.regime} | {r.head} | {r.condition} | {r.metric} | {r.mean:.3f} ± {std:.3f}"
                     f"{flag} | {r.min:.3f} | {r.max:.3f} | {r.n_folds} |")
    return "\n".join(lines) + "\n"


try:
    import lightning as L

    _CallbackBase = L.Callback
except ImportError:  # pragma: no cover
    _CallbackBase = object


class Attribution(_CallbackBase):
    """Lightning callback: attribution maps of the fold's test windows after ``fit`` (App. I.1, I.2).

    Uses the best checkpoint when a ``ModelCheckpoint`` recorded one (else the final weights), the
    DataModule's test windows (:class:`~eegfm_bench.data.datamodule.EEGDataModule`), and writes per-fold
    npz files, result rows and, after each fold, the fold-averaged topomaps of every fold present in
    ``out_dir`` (same layout as :func:`run_attribution`, cell ``<backbone>-<regime>-<head>``).

    Parameters
    ----------
    out_dir : path
    methods : sequence of {"gxi", "attnlrp"}
    conditions : sequence of str
        Condition strings (App. I.2), ``clean`` by default.
    experiment : str
    **settings
        Any key of the config's ``attribution`` section (``percentile``, ``max_windows_per_fold``,
        ``lrp_fallback``, ``attention_rule``, ``epsilon``, ``conservation_windows``, ...).
    """

    def __init__(self, out_dir: str | Path, methods: Sequence[str] = ("gxi", "attnlrp"),
                 conditions: Sequence[str] = ("clean",), experiment: str = "attribution", **settings):
        super().__init__()
        from eegfm_bench.interpret.config import DEFAULTS, InterpretConfigError

        bad = set(settings) - set(DEFAULTS["attribution"])
        if bad:
            raise InterpretConfigError(f"Attribution: unknown settings {sorted(bad)}; valid: "
                                       f"{sorted(DEFAULTS['attribution'])}")
        self.out_dir = Path(out_dir)
        self.acfg = {**DEFAULTS["attribution"], **settings, "methods": list(methods), "conditions": list(conditions)}
        self.experiment = experiment

    def on_fit_end(self, trainer, pl_module) -> None:
        from eegfm_bench.results import ResultStore, code_version, config_hash

        dm = trainer.datamodule
        from eegfm_bench.interpret.runs import best_fitted

        clf, best = best_fitted(trainer, pl_module)
        clf = clf.cpu().eval()
        hp = pl_module.hparams
        cell = f"{hp.backbone}-{hp.regime}-{hp.head}"
        for m in self.acfg["methods"]:
            resolve_method(m, hp.backbone, self.acfg["lrp_fallback"])
        store = ResultStore(self.out_dir)
        for condition in self.acfg["conditions"]:
            try:
                res = explain_fold(clf, dm.ws, dm.test_idx, condition=condition, acfg=self.acfg)
            except NoWindowsSelectedError as err:
                log.warning("%s fold %s %s: %s", cell, dm.fold, condition, err)
                continue
            base = {"experiment": self.experiment, "task": str(dm.hparams.task), "model": hp.backbone,
                    "init": str(pl_module.init), "regime": hp.regime, "head": hp.head, "fold": int(dm.fold),
                    "seed": 0, "condition": condition,
                    "n_subjects": int(np.unique(np.asarray(dm.ws.subject)[dm.test_idx]).size), "fold_unit": "subject",
                    "config_hash": config_hash(self.acfg), "code_version": code_version(), "checkpoint": str(best)}
            rows = []
            for method, fm in res.items():
                fm.save(self.out_dir / cell / _cond_dir(condition) / method / f"fold{int(dm.fold)}.npz")
                rows += _fold_rows(base, fm)
                write_cell_maps(self.out_dir / cell, method, condition, dm.ws.class_names,
                                f"{cell}, {condition}: {_method_label(method, hp.backbone)}")
            store.append(rows)
