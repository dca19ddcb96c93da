"""Attribution maps: Gradient×Input (captum) and AttnLRP (lxt), selection and normalisation of paper 003 App. I.1.

Methods (every map has the input's shape ``(batch, n_chans, n_times)``):

* ``gxi`` — Gradient×Input ``x · ∂y_c/∂x`` through captum's :class:`captum.attr.InputXGradient`, for every
  backbone.
* ``gradcam`` — GradCAM through pytorch-grad-cam on the last transformer block / EEGNet's last convolution with an
  electrode axis (App. I.3, :mod:`eegfm_bench.interpret.gradcam`), non-negative.
* ``attnlrp`` — AttnLRP through lxt's efficient rules with a per-backbone patch map
  (:mod:`eegfm_bench.interpret.lrp`: ``labram``, ``cbramod``; ``eegnet`` gets LRP-ε with the identity rule on
  ELU, the same rules without attention). A backbone without a map is an error naming the methods it
  supports, unless the config sets ``lrp_fallback: gxi`` (then Gradient×Input is computed and recorded
  under ``gxi``).

Sample selection and normalisation (App. I.1), per fold:

1. predict the fold's test windows (clean, or under a perturbation condition: App. I.2);
2. keep the **correctly classified** windows whose confidence (max softmax probability) is **at or above the 75th
   percentile of the confidence of the correct windows** of that fold and condition (``numpy.quantile``, linear
   interpolation, as the authors' code); none left → :class:`NoWindowsSelectedError` and no map;
3. explain the predicted (= true) class logit;
4. divide each window's map by the **99th percentile of |R|** over its channels × times and clip to
   ``[−1, 1]``;
5. **|R| averaged over time**, then over the selected windows of the fold (per class, and over all selected
   windows for the class-averaged map), then over folds.

Sanity checks shipped here: :func:`conservation_check` (sum of relevance vs the explained logit with every
bias zeroed; warns beyond 5 %), :func:`randomisation_test` (maps of a model with re-initialised weights must
differ: Spearman rank correlation, ``scipy.stats.spearmanr``) and :func:`gxi_linear_check` (captum's
Gradient×Input equals ``x · W[c]`` exactly on a linear model).

Every forward and backward pass runs in a ``lightning.Trainer`` (``Trainer.predict``; with gradients enabled for the
maps): :class:`ProbaModule` predicts the windows for the selection, :class:`AttributionModule` computes the maps
and the per-window sanity checks of the selected windows (:func:`attribute_windows`); the windows come from
:class:`~eegfm_bench.perturb.dataset.PerturbedWindows`, so a condition perturbs a window exactly as in the sweep.

Entry points: :class:`~eegfm_bench.callbacks.attribution.Attribution` (Lightning callback, after fit) and
:func:`eegfm_bench.runs.interpret.attribute.run_attribution` (``eegfm-bench attribute --config ...`` over a cv run's fold
checkpoints).

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

import lightning as L
import numpy as np
import torch
from captum.attr import InputXGradient
from scipy.stats import spearmanr
from torch import nn
from torch.utils.data import Dataset, Subset

from eegfm_bench.atomic import atomic_path
from eegfm_bench.config.interpret import AttributionConfig
from eegfm_bench.interpret.gradcam import check_gradcam, gradcam
from eegfm_bench.interpret.lrp import (ATTRIBUTION_METHODS, attention_ledger, attention_sink, get_patch_map,
    lrp_copy, lrp_patched, supported_methods, user_lrp_problem, zero_biases)
from eegfm_bench.errors import UnsupportedMethodError
from eegfm_bench.interpret.sanity import CONSERVATION_TOLERANCE
from eegfm_bench.models.base import ChannelContractError
from eegfm_bench.models.user import user_spec
from eegfm_bench.perturb.conditions import PerturbContext, parse_condition
from eegfm_bench.perturb.dataset import PerturbedWindows
from eegfm_bench.perturb.evaluate import not_applicable_reason, perturb_context
from eegfm_bench.perturb.noise import FilterSpec
from eegfm_bench.trainer import predict_gathered

log = logging.getLogger(__name__)

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
    """Relevance maps ``(batch, n_chans, n_times)`` by ``method`` (``gxi``, ``attnlrp`` or ``gradcam``).

    Raises
    ------
    UnsupportedMethodError
        Unknown method, or ``attnlrp`` for a backbone without a patch map (lists what it supports).
    """
    if method == "gxi":
        return gradient_x_input(model, x, target)
    if method == "attnlrp":
        return attnlrp(model, x, target, backbone, **lrp_kwargs)[0]
    if method == "gradcam":
        return gradcam(model, x, target, backbone)
    raise UnsupportedMethodError(f"unknown attribution method {method!r}; valid: {ATTRIBUTION_METHODS}; "
                                 f"{backbone} supports {supported_methods(backbone)}")


# ============================================================================================ selection, normalisation
def select_windows(probs: np.ndarray, y: np.ndarray, percentile: float = 75.0) -> np.ndarray:
    """Correctly classified windows whose confidence is at or above the ``percentile`` of the correct windows'
    confidence (paper 003 App. I.1; the authors' code: ``quantile(conf[correct], 0.75)``, kept when ``>=``).

    Parameters
    ----------
    probs : ndarray, shape (n_windows, n_classes)
        Softmax probabilities on the test windows of one fold (and condition).
    y : ndarray of int, shape (n_windows,)
    percentile : float
        75 in App. I.1 (the top confidence quartile of the correct windows).

    Returns
    -------
    ndarray of int
        Positions into ``probs``, sorted by decreasing confidence.

    Raises
    ------
    NoWindowsSelectedError
        If no window is correctly classified (says how many windows there were).
    """
    probs, y = np.asarray(probs), np.asarray(y)
    conf = probs.max(1)
    correct = probs.argmax(1) == y
    if not correct.any():
        raise NoWindowsSelectedError(
            f"none of the {len(y)} test windows is correctly classified; no map is written for this fold/condition "
            "(App. I.1 keeps only confident correct trials)")
    cut = float(np.percentile(conf[correct], percentile))
    keep = np.flatnonzero(correct & (conf >= cut))
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
def conservation_per_window(model: nn.Module, x: torch.Tensor, target, backbone: str, *, epsilon: float = 0.0,
                            attention_rule: str = "attnlrp") -> dict[str, np.ndarray]:
    """Per-window LRP budget with every bias zeroed (the inputs of :func:`conservation_check`).

    Returns
    -------
    dict of ndarray, shape (batch,)
        ``ratio`` (Σ R_input / logit, configured rule), ``softmax_share`` (relevance absorbed inside the attention
        products / logit), ``closure`` (ratio + share) and ``ratio_cp`` (Σ R_input / logit under CP-LRP).
    """
    tgt = _as_target(target, len(x))
    out = {}
    for rule, key in ((attention_rule, "ratio"), ("cp", "ratio_cp")):
        rel, logits, sink = attnlrp(model, x, target, backbone, epsilon=epsilon, attention_rule=rule,
                                    biases_zeroed=True, return_sink=True)
        z = logits.gather(1, tgt[:, None].to(logits.device))[:, 0].double().cpu()
        r_in = rel.double().sum((1, 2)).cpu()
        out[key] = (r_in / z).numpy()
        if key == "ratio":
            out["softmax_share"] = (sink / z).numpy()
            out["closure"] = ((r_in + sink) / z).numpy()
    return out


def summarize_conservation(per: dict[str, np.ndarray], backbone: str, *, attention_rule: str = "attnlrp",
                           tolerance: float = CONSERVATION_TOLERANCE, warn: bool = True) -> dict:
    """:func:`conservation_check`'s summary of :func:`conservation_per_window` values (see there)."""
    r, closure = np.asarray(per["ratio"]), np.asarray(per["closure"])
    out = {"rule": attention_rule, "n_windows": int(len(r)), "ratio": float(np.mean(r)), "ratio_min": float(r.min()),
           "ratio_max": float(r.max()), "softmax_share": float(np.mean(per["softmax_share"])),
           "closure": float(np.mean(closure)), "closure_max_error": float(np.max(np.abs(closure - 1))),
           "ratio_cp": float(np.mean(per["ratio_cp"]))}
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
    per = conservation_per_window(model, x, target, backbone, epsilon=epsilon, attention_rule=attention_rule)
    return summarize_conservation(per, backbone, attention_rule=attention_rule, tolerance=tolerance, warn=warn)


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


def randomisation_per_window(model: nn.Module, randomised: nn.Module, x: torch.Tensor, target, method: str,
                             backbone: str, **lrp_kwargs) -> dict[str, np.ndarray]:
    """Per-window inputs of :func:`randomisation_test`: ``spearman`` / ``spearman_signed`` ``(batch,)`` and the
    normalised channel maps of both models, ``channel`` / ``channel_random`` ``(batch, n_chans)``."""
    a = normalise_maps(attribute(model, x, target, method, backbone, **lrp_kwargs).cpu().numpy())
    b = normalise_maps(attribute(randomised, x, target, method, backbone, **lrp_kwargs).cpu().numpy())
    return {"spearman": np.array([spearmanr(np.abs(a[i]).ravel(), np.abs(b[i]).ravel())[0] for i in range(len(a))]),
            "spearman_signed": np.array([spearmanr(a[i].ravel(), b[i].ravel())[0] for i in range(len(a))]),
            "channel": channel_maps(a), "channel_random": channel_maps(b)}


def summarize_randomisation(per: dict[str, np.ndarray]) -> dict:
    """:func:`randomisation_test`'s summary of :func:`randomisation_per_window` values."""
    ch = spearmanr(np.asarray(per["channel"]).mean(0), np.asarray(per["channel_random"]).mean(0))[0]
    return {"spearman": float(np.nanmean(per["spearman"])), "spearman_signed": float(np.nanmean(per["spearman_signed"])),
            "spearman_channel": float(ch), "n_windows": int(len(per["spearman"]))}


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
    return summarize_randomisation(randomisation_per_window(model, randomise_parameters(model, seed), x, target, method,
                                                            backbone, **lrp_kwargs))


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


# ============================================================================================ Lightning passes
class ArrayWindows(Dataset):
    """In-memory windows ``X`` ``(n, n_chans, n_times)`` with labels and window indices, as batch dicts."""

    def __init__(self, X: np.ndarray, y: np.ndarray, index: np.ndarray | None = None):
        self.X, self.y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.int64)
        self.rows = np.arange(len(self.y)) if index is None else np.asarray(index, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.from_numpy(self.X[i]), "y": torch.tensor(int(self.y[i])),
                "index": torch.tensor(int(self.rows[i]))}


class ProbaModule(L.LightningModule):
    """``predict_step``: softmax probabilities (float64) of a :class:`LogitModel` with the batch's labels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        return {"index": batch["index"], "y": batch["y"], "probs": self.model(batch["x"]).double().softmax(-1)}


class AttributionModule(L.LightningModule):
    """``predict_step`` (gradients enabled): every method's relevance map of each window's target class, and the
    per-window sanity checks of the windows chosen for them.

    Parameters
    ----------
    model : LogitModel
    methods : sequence of {"gxi", "attnlrp", "gradcam"}
        Methods to compute (already resolved for the backbone, :func:`resolve_method`).
    targets : mapping window index -> class
        The class whose logit is explained (the predicted = true class of the App. I.1 selection).
    conservation : set of int
        Window indices that also get :func:`conservation_per_window` (AttnLRP only).
    randomisation : set of int
        Window indices that also get :func:`randomisation_per_window` against a re-initialised copy
        (:func:`randomise_parameters` with ``seed``).
    lrp_kwargs : dict
        ``epsilon`` and ``attention_rule`` of AttnLRP.
    label_randomised : LogitModel, optional
        The same cell trained on permuted training labels (Adebayo et al. 2018's data randomisation test): the
        ``randomisation`` windows also get :func:`randomisation_per_window` against it (``drand:`` outputs).

    The step returns ``index``, ``R:<method>`` ``(batch, n_chans, n_times)`` and, NaN where not computed,
    ``cons:<key>`` ``(batch,)`` and ``rand:<method>:<key>`` (``(batch,)`` or ``(batch, n_chans)``).
    """

    def __init__(self, model: nn.Module, methods: Sequence[str], targets: dict, *, conservation=(), randomisation=(),
                 seed: int = 0, lrp_kwargs: dict | None = None, label_randomised: nn.Module | None = None):
        super().__init__()
        self.model = model
        self.methods = list(methods)
        self.targets = {int(k): int(v) for k, v in targets.items()}
        self.cons, self.rand = {int(i) for i in conservation}, {int(i) for i in randomisation}
        self.lrp_kwargs = dict(lrp_kwargs or {})
        self.randomised = randomise_parameters(model, seed) if self.rand else None
        self.label_randomised = label_randomised if self.rand else None

    @property
    def backbone(self) -> str:
        return self.model.backbone_name

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        x, idx = batch["x"], batch["index"]
        ids = idx.cpu().tolist()
        tgt = torch.tensor([self.targets[i] for i in ids], dtype=torch.long, device=x.device)
        out: dict = {"index": idx}
        with torch.enable_grad():
            for m in self.methods:
                kw = self.lrp_kwargs if m == "attnlrp" else {}
                out[f"R:{m}"] = attribute(self.model, x, tgt, m, self.backbone, **kw).float()
            mask = np.array([i in self.cons for i in ids])
            if "attnlrp" in self.methods and self.cons:
                per = conservation_per_window(self.model, x[mask], tgt[mask], self.backbone, **self.lrp_kwargs) \
                    if mask.any() else {k: np.zeros(0) for k in ("ratio", "softmax_share", "closure", "ratio_cp")}
                for k, v in per.items():
                    out[f"cons:{k}"] = _fill(v, mask)
            mask = np.array([i in self.rand for i in ids])
            if self.rand:
                for m in self.methods:
                    kw = self.lrp_kwargs if m == "attnlrp" else {}
                    if mask.any():
                        per = randomisation_per_window(self.model, self.randomised, x[mask], tgt[mask], m,
                                                       self.backbone, **kw)
                    else:
                        per = {"spearman": np.zeros(0), "spearman_signed": np.zeros(0),
                               "channel": np.zeros((0, x.shape[1])), "channel_random": np.zeros((0, x.shape[1]))}
                    for k, v in per.items():
                        out[f"rand:{m}:{k}"] = _fill(v, mask)
                    if self.label_randomised is not None:  # data randomisation: a model trained on permuted labels
                        per = randomisation_per_window(self.model, self.label_randomised, x[mask], tgt[mask], m,
                                                       self.backbone, **kw) if mask.any() else \
                            {k: v[:0] for k, v in per.items()}
                        for k, v in per.items():
                            out[f"drand:{m}:{k}"] = _fill(v, mask)
        return out


def _fill(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    full = np.full((len(mask),) + values.shape[1:], np.nan)
    full[mask] = values
    return full


def predict_proba(model: nn.Module, X: np.ndarray, batch_size: int = 32, trainer: dict | None = None) -> np.ndarray:
    """Softmax probabilities ``(n, n_classes)`` (float64) of windows ``X`` ``(n, n_chans, n_times)`` in X's order
    (``Trainer.predict`` with :class:`ProbaModule`; ``trainer``: a ``trainer:`` section, default one device)."""
    out = predict_gathered(ProbaModule(model), ArrayWindows(X, np.zeros(len(X), np.int64)), trainer,
                           batch_size=batch_size)
    return out["probs"]


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
        with atomic_path(path) as tmp_file, open(tmp_file, "wb") as fh:
            np.savez_compressed(fh, maps=self.maps, channel=self.channel, y=self.y, confidence=self.confidence,
                                window=self.window, ch_names=np.array(self.ch_names), n_test=self.n_test,
                                n_correct=self.n_correct, method=self.method, requested=self.requested,
                                checks=json.dumps(self.checks))
        return path


def resolve_method(method: str, backbone: str, fallback: str | None) -> str:
    """The method actually computed for ``backbone``: ``method``, or ``fallback`` if configured.

    Raises
    ------
    UnsupportedMethodError
        ``attnlrp`` requested for a backbone without a patch map (or a user model whose declared rules do not
        cover it, :func:`~eegfm_bench.interpret.lrp.user_lrp_problem`) and no fallback configured.
    """
    if method == "attnlrp" and user_spec(backbone):  # a user model: its declared rules, tried on one batch now
        problem = user_lrp_problem(backbone)
        if problem is None:
            return method
        if fallback:
            log.warning("%s: AttnLRP cannot run (%s); computing %s instead (lrp_fallback: %s)", backbone, problem,
                        fallback, fallback)
            return fallback
        raise UnsupportedMethodError(f"{problem if problem.startswith(backbone) else backbone + ': ' + problem}; "
                                     "or set `lrp_fallback: gxi` in the attribution config")
    if method in supported_methods(backbone):
        return method
    if method == "gradcam":
        check_gradcam(backbone)  # raises GradCAMUnsupportedError naming the fix
    if fallback:
        log.warning("%s has no %s patch map; computing %s instead (lrp_fallback: %s)", backbone, method, fallback,
                    fallback)
        return fallback
    get_patch_map(backbone)  # raises with the supported methods
    raise UnsupportedMethodError(f"{backbone} does not support {method}")  # pragma: no cover


def attribute_windows(model: nn.Module, dataset, methods: Sequence[str], *, percentile: float = 75.0,
                      max_windows: int | None = None, batch_size: int = 8, lrp_fallback: str | None = None,
                      epsilon: float = 0.0, attention_rule: str = "attnlrp", conservation_windows: int = 4,
                      randomisation_windows: int = 8, seed: int = 0, trainer: dict | None = None,
                      label_randomised: nn.Module | None = None) -> dict:
    """Select, explain and normalise windows (App. I.1) with each method, plus sanity checks, in two Trainer passes.

    1. ``Trainer.predict`` (:class:`ProbaModule`) predicts every window of ``dataset``;
    2. :func:`select_windows` keeps the correctly classified, confident ones (at most ``max_windows``, most
       confident first);
    3. ``Trainer.predict`` with gradients (:class:`AttributionModule`) explains their predicted class with each
       method and runs the conservation check (``conservation_windows`` most confident, AttnLRP) and the
       randomisation test (``randomisation_windows`` most confident).

    Parameters
    ----------
    model : LogitModel
        The fold's model with the channel names of the windows.
    dataset : Dataset
        Batch dicts (``x``, ``y``, ``index``) with a ``rows`` attribute (the window index of each position), e.g.
        :class:`~eegfm_bench.perturb.dataset.PerturbedWindows` or :class:`ArrayWindows`.
    methods : sequence of {"gxi", "attnlrp", "gradcam"}
    trainer : dict, optional
        A ``trainer:`` section (devices, strategy, precision); default one device, fp32.
    label_randomised : LogitModel, optional
        The cell trained on permuted labels: adds the data-randomisation check (``checks["data_randomisation"]``).

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
    pred = predict_gathered(ProbaModule(model), dataset, trainer, batch_size=max(int(batch_size), 32))
    probs, y, index = pred["probs"], pred["y"].astype(np.int64), pred["index"].astype(np.int64)
    sel = select_windows(probs, y, percentile)
    if max_windows:
        sel = sel[: int(max_windows)]
    ids, conf, target = index[sel], probs.max(1)[sel], probs.argmax(1)[sel]
    pos_of = {int(r): p for p, r in enumerate(np.asarray(dataset.rows))}
    lrp_kw = {"epsilon": epsilon, "attention_rule": attention_rule}
    module = AttributionModule(model, list(todo), dict(zip(ids.tolist(), target.tolist())),
                               conservation=ids[:conservation_windows].tolist() if "attnlrp" in todo else (),
                               randomisation=ids[:randomisation_windows].tolist(), seed=seed, lrp_kwargs=lrp_kw,
                               label_randomised=label_randomised)
    out = predict_gathered(module, Subset(dataset, [pos_of[int(i)] for i in ids]), trainer, batch_size=batch_size,
                           inference_mode=False)
    order = np.searchsorted(out["index"], ids)  # back to decreasing confidence
    nc, nr = min(conservation_windows, len(ids)), min(randomisation_windows, len(ids))
    res = {}
    for method, requested in todo.items():
        Rn = normalise_maps(out[f"R:{method}"][order])
        checks = {}
        if method == "attnlrp" and nc:
            per = {k: out[f"cons:{k}"][order][:nc] for k in ("ratio", "softmax_share", "closure", "ratio_cp")}
            checks["conservation"] = summarize_conservation(per, backbone, attention_rule=attention_rule)
        if nr:
            per = {k: out[f"rand:{method}:{k}"][order][:nr]
                   for k in ("spearman", "spearman_signed", "channel", "channel_random")}
            checks["randomisation"] = summarize_randomisation(per)
            if label_randomised is not None:
                per = {k: out[f"drand:{method}:{k}"][order][:nr]
                       for k in ("spearman", "spearman_signed", "channel", "channel_random")}
                checks["data_randomisation"] = summarize_randomisation(per)
        res[method] = FoldMaps(method, requested, Rn.astype(np.float16), channel_maps(Rn), y[sel], conf, ids,
                               list(model.ch_names), int(len(y)), int((probs.argmax(1) == y).sum()), checks)
    return res


def attribute_fold(model: nn.Module, X: np.ndarray, y: np.ndarray, windows: np.ndarray, methods: Sequence[str],
                   **kwargs) -> dict:
    """:func:`attribute_windows` on in-memory windows ``X`` ``(n, n_chans, n_times)`` with labels ``y`` and window
    indices ``windows`` (recorded with the maps)."""
    return attribute_windows(model, ArrayWindows(X, y, windows), methods, **kwargs)


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


# ============================================================================================ per cell and fold
def explain_fold(clf, ws, test_idx: np.ndarray, *, condition: str = "clean", acfg: AttributionConfig,
                 trainer: dict | None = None, label_randomised=None) -> dict:
    """The fold's test windows under ``condition`` (:class:`~eegfm_bench.perturb.dataset.PerturbedWindows`: the
    same per-window noise and masks as the sweep), then :func:`attribute_windows` with the config's settings
    (``label_randomised``: the cell's FMClassifier trained on permuted labels, for the data-randomisation check).

    Raises
    ------
    ChannelContractError
        A *removed*-channel condition for a fixed-montage backbone or a head tied to the token count
        (:func:`~eegfm_bench.perturb.evaluate.not_applicable_reason`; names the fix).
    """
    cond = parse_condition(condition)
    reason = not_applicable_reason(cond, clf)  # the sweep's own test: a variable montage and a head of any token count
    if reason is not None:
        raise ChannelContractError(f"condition {condition!r} (channels removed) does not apply: {reason}")
    task, seed = str(ws.meta.get("task", "")), int(acfg.perturbation_seed)
    if "preprocessing" in ws.meta:
        ctx, _ = perturb_context(ws.meta, task, seed)
    else:  # windows without a preprocessing record (synthetic): the noise is band-limited only by the sampling rate
        ctx = PerturbContext(str(ws.meta.get("dataset", "")), task, FilterSpec(float(ws.sfreq), None, None, None), seed)
    ds = PerturbedWindows(ws, np.sort(np.asarray(test_idx)), cond, ctx)
    if ds.error:
        raise RuntimeError(f"condition {condition!r} cannot be applied: {ds.error.splitlines()[0]}")
    model = LogitModel.from_classifier(clf, ds.ch_names)
    lr = LogitModel.from_classifier(label_randomised, ds.ch_names) if label_randomised is not None else None
    return attribute_windows(model, ds, acfg.methods, percentile=float(acfg.percentile), label_randomised=lr,
                             max_windows=acfg.max_windows_per_fold, batch_size=int(acfg.batch_size),
                             lrp_fallback=acfg.lrp_fallback, epsilon=float(acfg.epsilon),
                             attention_rule=acfg.attention_rule, conservation_windows=int(acfg.conservation_windows),
                             randomisation_windows=int(acfg.randomisation_windows), seed=int(acfg.seed),
                             trainer=trainer)


def fold_rows(base: dict, fm: FoldMaps) -> list[dict]:
    """Result rows of one fold's maps ``fm``: windows selected and correct, and the conservation / randomisation
    checks it ran, each a row on top of ``base``."""
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
    drnd = fm.checks.get("data_randomisation")
    if drnd:
        rows += [{**base, "metric": f"{fm.method}:data_randomisation_spearman", "value": drnd["spearman"]},
                 {**base, "metric": f"{fm.method}:data_randomisation_spearman_signed", "value": drnd["spearman_signed"]},
                 {**base, "metric": f"{fm.method}:data_randomisation_spearman_channel",
                  "value": drnd["spearman_channel"]}]
    for r in rows:
        r.setdefault("n_windows", fm.n_test)
        r["requested_method"] = fm.requested
    return rows


def _cond_dir(condition: str) -> str:
    return condition.replace("=", "-").replace("/", "_")


def cond_dir(condition: str) -> str:
    """Folder name of a condition (``white_snr-0dB``)."""
    return condition.replace("=", "-").replace("/", "_")
