"""AttnLRP patch maps per backbone (paper 003 App. I.1) on top of lxt's efficient Gradient×Input framework.

AttnLRP [Achtibat2024]_ is computed the way lxt 2.x ("efficient" mode) does it: every operation whose LRP rule
differs from the plain gradient gets a replacement forward whose *backward* implements the rule, then
relevance is ``R = x · ∂y_c/∂x`` at the input. The rules (App. I.1):

* linear layers and convolutions: the ε-rule. With ε → 0 this is exactly the plain gradient (no patch);
  ``epsilon > 0`` adds zennit's :class:`zennit.rules.Epsilon` on ``nn.Linear`` / ``nn.Conv*`` through lxt's
  zennit patch (``lxt.efficient.monkey_patch_zennit``), reverted on exit;
* element-wise non-linearities (GELU, ELU): the identity rule (``lxt.efficient.rules.identity_rule_implicit``);
* normalisations (LayerNorm, GroupNorm): the identity rule on the division by the standard deviation
  (``stop_gradient``, lxt's ``layer_norm_forward``; a GroupNorm version written here);
* the two attention products: the uniform (equal-split) rule, implemented as lxt does
  (``divide_gradient``: query and key by 4, value by 2); softmax keeps its gradient (its Taylor rule in the
  Gradient×Input framework);
* dropout and stochastic depth: identity (off).

``attention_rule="cp"`` replaces the attention rules by CP-LRP [Ali2022]_ (no relevance through the softmax:
q, k stop-gradient; the values carry it all), the variant lxt ships for torchvision's ViT.

**Conservation.** With every bias zeroed, all rules above redistribute the explained logit exactly except
AttnLRP's softmax rule, a Taylor decomposition "with bias" whose bias term absorbs relevance. The patched
attention records what enters and leaves each attention product (:func:`attention_ledger`,
:func:`attention_sink`), so :func:`eegfm_bench.interpret.attribution.conservation_check` closes the budget:
input relevance + absorbed relevance = logit. Measured on the tiny synthetic-task models of the tests: closure
1.00000 (|error| < 1e-5 per window) for CBraMod and LaBraM, CP-rule ratio 1.000 for LaBraM, CBraMod and EEGNet;
the AttnLRP input map alone carries 0.999 of the logit on LaBraM (its layer scale 0.1 keeps the attention
branch small) but 0.49–1.13 on CBraMod across training runs (near-uniform attention: the softmax Taylor term
absorbs tens of percent, of either sign per window).

**Patches are applied per module instance, never to torch classes.** lxt's own ``monkey_patch`` replaces
``forward`` on the classes (``nn.LayerNorm.forward`` ...), which changes every model in the process
(ENVIRONMENT.md). Here :func:`lrp_patched` binds the replacement forward to each instance of a deep copy of
the model and removes it on exit; the only global change, lxt's zennit patch (when ``epsilon > 0``), is undone
on exit too. Nothing leaks into other models, so AttnLRP can share a process with training.

Patch maps exist for ``labram``, ``cbramod`` (transformers, AttnLRP) and ``eegnet`` (LRP-ε with the identity
rule on ELU: the conv-net special case of the same rules). ``biot`` has none: its linear attention
(``linear_attention_transformer``: separate softmaxes over queries and keys) has no rule here, so BIOT supports
Gradient×Input only. Any leaf module of a type the map neither patches nor declares linear raises
:class:`UnsupportedModuleError` (no silent plain-gradient fallback for an unreviewed non-linearity).

References
----------
.. [Ali2022] Ali et al. (2022). XAI for transformers: better explanations through conservative propagation
   (CP-LRP). ICML.
.. [Achtibat2024] Achtibat et al. (2024). AttnLRP: attention-aware layer-wise relevance propagation for
   transformers. ICML. Code (lxt): github.com/rachtibat/LRP-eXplains-Transformers. LRP is patented; lxt is
   free for personal and scientific use (see its license).
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import math
import types
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from braindecode.models.labram import _Attention as LabramAttention
from braindecode.models.labram import _SegmentPatch
from braindecode.modules import DropPath, Ensure4d
from einops.layers.torch import Rearrange
from torch import nn
from torchmetrics import Metric, MetricCollection
from zennit.core import BasicHook, Composite
from zennit.rules import Epsilon

from eegfm_bench.errors import UnsupportedMethodError
from eegfm_bench.interpret.gradcam import GRADCAM_LAYERS
from eegfm_bench.models.adaptation import import_peft
from eegfm_bench.models.backbones.common import labram_qkv
from eegfm_bench.models.heads import AttentionHead
from eegfm_bench.models.user import (LRP_ATTENTION_MARK, UserModelError, import_object, dry_run_check, user_model_config,
    user_spec)
from eegfm_bench.config.user_model import UserModelConfig


def _lxt():
    """lxt's rule modules ``(patches, rules, zennit_patches)``, imported on first use."""
    # reason: ``import lxt.efficient`` takes about a second (it loads lxt's patch maps of language models) and only
    # AttnLRP needs it
    from lxt.efficient import patches, rules, zennit_patches

    return patches, rules, zennit_patches


def layer_norm_forward(self, x):
    return _lxt()[0].layer_norm_forward(self, x)


def divide_gradient(x, factor):
    return _lxt()[1].divide_gradient(x, factor)


def identity_rule_implicit(fn, x):
    return _lxt()[1].identity_rule_implicit(fn, x)


def stop_gradient(x):
    return _lxt()[1].stop_gradient(x)



class UnsupportedModuleError(ValueError):
    """A model holds a module whose LRP rule has not been reviewed (no patch, not declared linear)."""


# ------------------------------------------------------------------------------------------ rule forwards
def _ln_identity(self: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """LayerNorm with the identity rule on the std (lxt ``layer_norm_forward``); last-dim LayerNorm only."""
    if len(self.normalized_shape) != 1:
        raise UnsupportedModuleError(f"LayerNorm over {self.normalized_shape}: only last-dimension LayerNorm is patched")
    return layer_norm_forward(self, x)


def _gn_identity(self: nn.GroupNorm, x: torch.Tensor) -> torch.Tensor:
    """GroupNorm ``(batch, C, ...)`` with the identity rule on the std (stop-gradient), as lxt's LayerNorm."""
    b, c = x.shape[:2]
    g = x.reshape(b, self.num_groups, -1)
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) ** 2).mean(-1, keepdim=True)
    y = ((g - mean) / stop_gradient((var + self.eps).sqrt())).reshape_as(x)
    if self.affine:
        shape = (1, c) + (1,) * (x.ndim - 2)
        y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
    return y


def _make_nonlinear_identity(module: nn.Module) -> Callable:
    """Element-wise activation with the identity rule; keeps the module's own forward for the values."""
    original = type(module).forward

    def forward(self, x):
        return identity_rule_implicit(lambda t: original(self, t), x)

    return forward


def _off(self, x, *args, **kwargs):
    """Dropout / DropPath: identity (LRP is computed with every stochastic layer off)."""
    return x


ATTENTION_RULES = ("attnlrp", "cp")
"""``attnlrp``: uniform rule on both attention products + softmax Taylor rule (App. I.1, [Achtibat2024]_);
``cp``: CP-LRP [Ali2022]_, no relevance through the softmax (q, k stop-gradient), values carry it all."""


def _qkv_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rule: str):
    if rule == "attnlrp":
        return divide_gradient(q, 4), divide_gradient(k, 4), divide_gradient(v, 2)
    if rule == "cp":
        return stop_gradient(q), stop_gradient(k), v
    raise ValueError(f"unknown attention rule {rule!r}; valid: {ATTENTION_RULES}")


_LEDGER: contextvars.ContextVar[list | None] = contextvars.ContextVar("eegfm_lrp_attention_ledger", default=None)


@contextlib.contextmanager
def attention_ledger() -> Iterator[list]:
    """Record every patched attention call made inside the block, for :func:`attention_sink`.

    Each record is ``(out, q, k, v)``: the attention output ``softmax(q kᵀ) v`` and the three inputs of the
    attention rule, with ``retain_grad`` set, so that after the backward pass the relevance entering and leaving
    each attention product can be read in the Gradient×Input framework (``R_t = Σ t ⊙ ∂y/∂t``).
    """
    records: list = []
    token = _LEDGER.set(records)
    try:
        yield records
    finally:
        _LEDGER.reset(token)


def attention_sink(records: list, batch: int) -> torch.Tensor:
    """Relevance absorbed inside the attention products, per window, after the backward pass.

    For each recorded call, ``R(out) − R(q) − R(k) − R(v)`` summed over every dimension but the batch: the
    relevance that reached the attention output and did not come out at its inputs. Under the CP rule this is
    0 (the values carry it all); under AttnLRP it is the softmax Taylor rule's bias term (paper 003 App. I.1,
    [Achtibat2024]_ §3.3.1). Adding it to the input relevance closes the conservation budget.

    Parameters
    ----------
    records : list
        From :func:`attention_ledger`.
    batch : int
        Windows in the explained batch. Attention calls whose leading dimension folds other axes into the batch
        (CBraMod's criss-cross attention runs on ``(batch · patches, chans, d)`` and ``(batch · chans, patches,
        d)``) are summed back per window, assuming the window index is the outer one (a reshape of a contiguous
        ``(batch, ...)`` tensor).

    Returns
    -------
    Tensor, shape (batch,), float64

    Raises
    ------
    ValueError
        If a recorded call's leading dimension is not a multiple of ``batch``.
    """
    total = torch.zeros(batch, dtype=torch.float64)
    for out, *inputs in records:
        if out.shape[0] % batch:
            raise ValueError(f"an attention call has leading dimension {out.shape[0]}, not a multiple of the "
                             f"{batch} explained windows; its relevance cannot be assigned to windows")
        for t, sign in ((out, 1.0), *((t, -1.0) for t in inputs)):
            if t.grad is not None:
                total += sign * (t.detach().double() * t.grad.double()).cpu().reshape(batch, -1).sum(1)
    return total


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ) v`` with the attention rule (q already scaled); returns ``(attention, output)``.

    Shapes ``(batch, heads, tokens, head_dim)``. Inside :func:`attention_ledger` the call is recorded.
    """
    ledger = _LEDGER.get()
    record = ledger is not None and torch.is_grad_enabled()
    if record:
        for t in (q, k, v):
            if t.requires_grad:
                t.retain_grad()
    qq, kk, vv = _qkv_rule(q, k, v, rule)
    attn = (qq @ kk.transpose(-2, -1)).softmax(dim=-1)
    out = attn @ vv
    if record and out.requires_grad:
        out.retain_grad()
        ledger.append((out, q, k, v))
    return attn, out


def _labram_attention(self, x: torch.Tensor, return_attention: bool = False, return_qkv: bool = False):
    """braindecode LaBraM ``_Attention`` with the AttnLRP rules.

    Same computation as braindecode's forward, except (a) ``qkv`` is *called* as a module (braindecode calls
    ``F.linear(x, self.qkv.weight)``, which hooks cannot see: ENVIRONMENT.md), and (b) the uniform rule on the
    two attention products (``divide_gradient``: q, k by 4, v by 2, as lxt's attention wrapper), or CP-LRP
    (``rule="cp"``); the rule is read from ``self._lrp_attention_rule`` (set by :func:`lrp_patched`).
    """
    if self.relative_position_bias_table is not None:
        raise UnsupportedModuleError("LaBraM window attention (neural decoder mode) has no AttnLRP patch")
    b, n, _ = x.shape
    q, k, v, qkv = labram_qkv(self, x)
    attn, o = _attend(q, k, v, self._lrp_attention_rule)
    if return_attention:
        return attn
    out = self.proj(o.transpose(1, 2).reshape(b, n, -1))
    return (out, qkv) if return_qkv else out


def _mha_attention(self: nn.MultiheadAttention, query, key, value, key_padding_mask=None, need_weights=True,
                   attn_mask=None, average_attn_weights=True, is_causal=False):
    """``nn.MultiheadAttention`` (batch-first, shared embed dim, no masks) with the AttnLRP rules.

    Returns ``(output, None)`` like ``need_weights=False``. The in-projection is ``F.linear`` on
    ``in_proj_weight`` (a parameter, not a module: ε → 0 rule); ``out_proj`` is called as a module.
    """
    if not (self.batch_first and self._qkv_same_embed_dim) or attn_mask is not None or key_padding_mask is not None \
            or is_causal or self.bias_k is not None or self.add_zero_attn:
        raise UnsupportedModuleError("AttnLRP patch of nn.MultiheadAttention supports batch_first, shared embedding "
                                     "dimension and no masks / bias_k / zero attention only")
    e, h = self.embed_dim, self.num_heads
    w, bias = self.in_proj_weight, self.in_proj_bias
    bq, bk, bv = (None, None, None) if bias is None else bias.split(e)
    q = F.linear(query, w[:e], bq)
    k = F.linear(key, w[e:2 * e], bk)
    v = F.linear(value, w[2 * e:], bv)
    bsz, lq, _ = q.shape
    lk = k.shape[1]
    hd = e // h
    q = q.reshape(bsz, lq, h, hd).transpose(1, 2) / math.sqrt(hd)
    k = k.reshape(bsz, lk, h, hd).transpose(1, 2)
    v = v.reshape(bsz, lk, h, hd).transpose(1, 2)
    _, o = _attend(q, k, v, self._lrp_attention_rule)
    return self.out_proj(o.transpose(1, 2).reshape(bsz, lq, e)), None


@contextlib.contextmanager
def redirect_sdpa(fn: Callable) -> Iterator[None]:
    """Replace ``torch.nn.functional.scaled_dot_product_attention`` by ``fn`` while the block runs (restored in a
    ``finally``). Used only around one declared attention module's forward, for a user model's AttnLRP rule and
    attention maps; code that imported the function by name is not redirected."""
    saved = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = fn
    try:
        yield
    finally:
        F.scaled_dot_product_attention = saved


def _make_sdpa_attention(module: nn.Module) -> Callable:
    """A user model's declared attention module: its own forward, with every
    ``torch.nn.functional.scaled_dot_product_attention`` call it makes computed by :func:`_attend` (the attention
    rule read from ``self._lrp_attention_rule``).

    The redirection swaps the function on ``torch.nn.functional`` only while this module's forward runs (restored
    in a ``finally``), so code that imported the function by name (``from torch.nn.functional import ...``) is not
    seen: the forward then made no redirected call, and that is refused rather than explained by the plain gradient.
    """
    original = type(module).forward

    def forward(self, *args, **kwargs):
        calls = []

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **extra):
            if attn_mask is not None or is_causal or extra.get("enable_gqa"):
                raise UnsupportedModuleError(f"{type(self).__name__}: scaled_dot_product_attention with a mask, "
                                             "causal or grouped-query attention has no AttnLRP rule here; fix: method "
                                             "gxi for this model")
            calls.append(1)
            s = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
            return _attend(query * s, key, value, self._lrp_attention_rule)[1]  # eval: dropout off

        with redirect_sdpa(sdpa):
            out = original(self, *args, **kwargs)
        if not calls:
            raise UnsupportedModuleError(
                f"{getattr(self, _mark(), type(self).__name__)} ({type(self).__name__}) is declared in lrp.attention "
                "but made no call to "
                "torch.nn.functional.scaled_dot_product_attention; fix: compute its attention with "
                "F.scaled_dot_product_attention (called through the module `F`), or drop it from lrp.attention and "
                "use method gxi")
        return out

    forward._uses_attention_rule = True
    return forward


def _mark() -> str:
    return LRP_ATTENTION_MARK


def _gelu_identity(x: torch.Tensor) -> torch.Tensor:
    """``F.gelu`` with the identity rule (a ``TransformerEncoderLayer``'s functional activation)."""
    return identity_rule_implicit(F.gelu, x)


def _attention_head_pool(self, tokens: torch.Tensor) -> torch.Tensor:
    """AttentionHead pooling ``sum_n a_n t_n`` with the uniform rule on the product (both factors ÷ 2)."""
    a = self.attention_weights(tokens)
    return torch.einsum("bn,bnd->bd", divide_gradient(a, 2), divide_gradient(tokens, 2))


# ------------------------------------------------------------------------------------------ patch maps
_LINEAR_SAFE: tuple[type, ...] = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.AvgPool1d, nn.AvgPool2d, nn.Identity, nn.Flatten, nn.Unflatten,
)
"""Leaf module types whose LRP-ε (ε → 0) rule is the plain gradient (affine maps)."""


@dataclass
class PatchMap:
    """How to make one backbone's forward compute AttnLRP under Gradient×Input.

    Attributes
    ----------
    backbone : str
        Registered backbone name.
    method : str
        What the map computes (``"AttnLRP"`` or ``"LRP-eps"``), written next to the maps.
    forwards : dict
        Module class → replacement ``forward(self, ...)`` (a function) or a factory ``module -> function``
        (entries listed in ``factories``).
    factories : set of type
        Classes whose entry in ``forwards`` is a factory taking the module instance.
    linear_safe : tuple of type
        Further leaf types reviewed as affine / structural (plain gradient is their rule).
    additive_params : tuple of str
        Parameter-name suffixes that act as additive biases (zeroed, with every ``bias``, for the
        conservation check), e.g. LaBraM's positional embeddings.
    eval_only : tuple of type
        Types that are affine only in eval mode (BatchNorm); the patched copy is put in eval mode.
    """

    backbone: str
    method: str
    forwards: dict[type, Callable]
    factories: set[type] = field(default_factory=set)
    linear_safe: tuple[type, ...] = ()
    additive_params: tuple[str, ...] = ()
    eval_only: tuple[type, ...] = ()
    marked_attention: bool = False

    def lookup(self, module: nn.Module) -> Callable | None:
        if self.marked_attention:
            if getattr(module, LRP_ATTENTION_MARK, False):
                return _make_sdpa_attention(module)
        for cls in type(module).__mro__:
            if cls in self.forwards:
                fn = self.forwards[cls]
                return fn(module) if cls in self.factories else fn
        return None


def _labram_map() -> PatchMap:
    return PatchMap(
        backbone="labram", method="AttnLRP",
        forwards={nn.LayerNorm: _ln_identity, nn.GroupNorm: _gn_identity, nn.GELU: _make_nonlinear_identity,
                  nn.Dropout: _off, DropPath: _off, LabramAttention: _labram_attention},
        factories={nn.GELU}, linear_safe=(Rearrange, _SegmentPatch),
        additive_params=("cls_token", "position_embedding", "temporal_embedding", "q_bias", "v_bias"))


def _cbramod_map() -> PatchMap:
    return PatchMap(
        backbone="cbramod", method="AttnLRP",
        forwards={nn.LayerNorm: _ln_identity, nn.GroupNorm: _gn_identity, nn.GELU: _make_nonlinear_identity,
                  nn.Dropout: _off, nn.MultiheadAttention: _mha_attention},
        factories={nn.GELU}, linear_safe=(Rearrange,), additive_params=())


def _eegnet_map() -> PatchMap:
    return PatchMap(
        backbone="eegnet", method="LRP-eps",
        forwards={nn.ELU: _make_nonlinear_identity, nn.Dropout: _off},
        factories={nn.ELU}, linear_safe=(Rearrange, Ensure4d, nn.BatchNorm2d),
        eval_only=(nn.BatchNorm2d,))


USER_IDENTITY = (nn.GELU, nn.ELU, nn.SiLU, nn.ReLU, nn.LeakyReLU)
"""Element-wise activations of a user model given the identity rule without a declaration (for ReLU and
LeakyReLU it equals the gradient)."""


def _user_map(name: str, um: UserModelConfig) -> PatchMap:
    """The patch map of a user model (:mod:`eegfm_bench.models.user`): the standard rules (see
    :class:`~eegfm_bench.config.user_model.UserLRP`) plus the declaration's ``lrp`` types, attention modules and
    additive parameters.

    Raises
    ------
    UserModelError
        A declared type that does not import or is not an ``nn.Module`` class.
    """
    lrp = user_model_config(um).lrp  # a mapping as written is typed too

    def types_of(key: str) -> tuple[type, ...]:
        out = []
        for path in getattr(lrp, key) or []:
            try:
                t = import_object(path, f"user model {name}: lrp.{key} entry")
            except UserModelError as err:
                raise UserModelError(f"{err} (the import path of an nn.Module class)") from None
            if not (isinstance(t, type) and issubclass(t, nn.Module)):
                raise UserModelError(f"user model {name}: lrp.{key} entry {path!r} is not an nn.Module class")
            out.append(t)
        return tuple(out)

    identity = USER_IDENTITY + types_of("identity")
    forwards = {nn.LayerNorm: _ln_identity, nn.GroupNorm: _gn_identity, nn.Dropout: _off,
                nn.MultiheadAttention: _mha_attention, **{t: _make_nonlinear_identity for t in identity},
                **{t: _off for t in types_of("off")}}
    bn = (nn.BatchNorm1d, nn.BatchNorm2d)
    return PatchMap(backbone=name, method="AttnLRP", forwards=forwards, factories=set(identity),
                    linear_safe=bn + (nn.MaxPool1d, nn.MaxPool2d) + types_of("linear"),
                    additive_params=tuple(lrp.additive_params or ()), eval_only=bn, marked_attention=True)


PATCH_MAPS: dict[str, Callable[[], PatchMap]] = {"labram": _labram_map, "cbramod": _cbramod_map,
                                                 "eegnet": _eegnet_map}
"""Backbones with an LRP patch map (factories: a fresh map per use); user models get theirs from their declaration
(:func:`_user_map`)."""

ATTRIBUTION_METHODS = ("gxi", "attnlrp", "gradcam")


def supported_methods(backbone: str) -> list[str]:
    """Attribution methods available for ``backbone`` (``gxi`` always; ``attnlrp`` with a patch map; ``gradcam``
    with a GradCAM layer, :data:`eegfm_bench.interpret.gradcam.GRADCAM_LAYERS`)."""
    return (["gxi"] + (["attnlrp"] if backbone in PATCH_MAPS or user_spec(backbone) else [])
            + (["gradcam"] if backbone in GRADCAM_LAYERS else []))


def get_patch_map(backbone: str) -> PatchMap:
    """The patch map of ``backbone``.

    Raises
    ------
    UnsupportedMethodError
        If the backbone has none; the message lists the methods it supports.
    """
    if user_spec(backbone):
        return _user_map(backbone, user_spec(backbone))
    if backbone not in PATCH_MAPS:
        raise UnsupportedMethodError(
            f"no AttnLRP patch map for backbone {backbone!r} (maps exist for {sorted(PATCH_MAPS)}); {backbone} "
            f"supports: {supported_methods(backbone)}; fix: use method 'gxi', or set `lrp_fallback: gxi` in the "
            "attribution config to compute Gradient×Input instead (recorded as such)")
    return PATCH_MAPS[backbone]()


_USER_LRP_CHECKED: dict[str, str | None] = {}


def user_lrp_problem(backbone: str) -> str | None:
    """Why AttnLRP (paper 003 App. I.1) cannot run on a user model, found before any data is read (None when it
    can): :func:`adapter_lrp_problem` on the model built for its dry run
    (:func:`~eegfm_bench.models.user.dry_run_check`), cached per declaration."""
    return dry_run_check(backbone, lambda ad, um: adapter_lrp_problem(ad, backbone, um), _USER_LRP_CHECKED)


def _names_param(name: str, entry: str) -> bool:
    """Whether an ``additive_params`` entry names parameter ``name``: its last dotted part, or a dotted suffix
    (``channel`` and ``model.channel`` name ``model.channel``; ``han`` does not)."""
    return name == entry or name.endswith("." + entry)


LRP_CLOSURE_TOLERANCE = 1e-3
"""Largest relative error of the dry run's relevance budget (input + attention sink vs the readout)."""

_STANDARD_PARAMS = ("weight", "bias", "in_proj_weight", "in_proj_bias", "weight_ih", "weight_hh")


def adapter_lrp_problem(adapter: nn.Module, backbone: str, spec: UserModelConfig | Mapping) -> str | None:
    """Whether AttnLRP's rules (paper 003 App. I.1) cover a built user adapter: the problem's text, or None.

    Three checks, in order:

    1. every ``lrp.additive_params`` entry names a parameter;
    2. one patched forward and backward of the tokens of a random batch ``(4, n_chans, n_times)``, with
       ``F.scaled_dot_product_attention`` refused outside the declared ``lrp.attention`` modules (and every
       unreviewed leaf module refused by :func:`lrp_patched`);
    3. the relevance budget closes: with every bias and the declared additive parameters zeroed, input relevance
       plus what the attention products absorb equals a bias-free linear readout of the tokens, to
       :data:`LRP_CLOSURE_TOLERANCE` (relative). This catches what no module check can see: an undeclared
       additive embedding, softmax attention written by hand outside a declared module, a functional
       non-linearity (``F.gelu``, ``torch.tanh``) in a forward.
    """
    names = list(adapter.ch_names)
    try:
        pm = _user_map(backbone, spec)
    except UserModelError as err:
        return str(err)
    params = [n for n, _ in adapter.named_parameters()]
    for a in pm.additive_params:
        if not any(_names_param(n, a) for n in params):
            return (f"lrp.additive_params {a!r} matches no parameter of {backbone}; fix: a name (suffix) among "
                    f"{[n for n in params if n.rsplit('.', 1)[-1] not in _STANDARD_PARAMS][:20] or params[:20]}")

    def outside(*args, **kwargs):
        raise UnsupportedModuleError(
            f"{backbone}: a torch.nn.functional.scaled_dot_product_attention call outside the modules declared in "
            "lrp.attention; fix: declare the module that makes it in lrp.attention (a module-name pattern), or use "
            "method gxi")

    try:
        m = lrp_copy(adapter)
        zero_biases(m, pm)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(4, len(names), int(adapter.n_times), generator=gen).requires_grad_(True)
        with lrp_patched(m, pm) as mm, attention_ledger() as records, redirect_sdpa(outside):
            t = mm.tokens(x, names)
            w = torch.randn(t.shape[1:], generator=gen, dtype=t.dtype)
            out = (t * w).sum((1, 2))  # a bias-free linear readout per window
            out.sum().backward()
            sink = attention_sink(records, len(x))
    except (UnsupportedModuleError, UserModelError) as err:
        return str(err)
    r = (x * x.grad).detach().double().sum((1, 2))
    z = out.detach().double()
    ok = z.abs() > 0.1 * z.abs().max()
    err = ((r + sink - z).abs() / z.abs())[ok]
    if err.numel() and float(err.max()) > LRP_CLOSURE_TOLERANCE:
        owners = {n for n, mod in adapter.named_modules() if next(mod.children(), None) is not None}
        cand = [n for n in params if n.rsplit(".", 1)[-1] not in _STANDARD_PARAMS  # held by a container module:
                and n.rpartition(".")[0] in owners  # an embedding added to activations, not a leaf layer's weight
                and not any(_names_param(n, a) for a in pm.additive_params)]
        return (f"{backbone}: with biases and lrp.additive_params zeroed the relevance does not close (input + "
                f"attention sink = {float(((r + sink) / z)[ok].mean()):.3f} x the readout, relative error up to "
                f"{float(err.max()):.1e}), so some operation has no LRP rule here; fix: declare additive parameters "
                f"(positional / channel embeddings, CLS tokens) in lrp.additive_params"
                + (f" (undeclared candidates: {cand[:10]})" if cand else "")
                + ", put hand-written softmax attention in a module computing it with F.scaled_dot_product_attention "
                "and declare it in lrp.attention, or replace functional non-linearities (F.gelu, torch.tanh) by "
                "modules; or use method gxi")
    return None


# ------------------------------------------------------------------------------------------ application
def _is_metric(m: nn.Module) -> bool:
    return isinstance(m, (Metric, MetricCollection))


def _is_leaf(m: nn.Module) -> bool:
    return next(m.children(), None) is None


@contextlib.contextmanager
def lrp_patched(model: nn.Module, patch_map: PatchMap, *, epsilon: float = 0.0,
                attention_rule: str = "attnlrp") -> Iterator[nn.Module]:
    """Patch ``model`` in place (per instance) for AttnLRP; undo on exit.

    Parameters
    ----------
    model : nn.Module
        Usually a deep copy (see :func:`lrp_copy`); put in eval mode here.
    patch_map : PatchMap
    epsilon : float
        ε of the ε-rule on ``nn.Linear`` / ``nn.Conv*`` modules. ``0``: plain gradient (the ε → 0 limit);
        ``> 0``: zennit's Epsilon rule through lxt's zennit patch (global on zennit's ``BasicHook``, reverted
        on exit).
    attention_rule : {"attnlrp", "cp"}
        Rule for the attention products: AttnLRP (default, paper 003 App. I.1) or CP-LRP.

    Yields
    ------
    nn.Module
        The patched model.

    Raises
    ------
    UnsupportedModuleError
        If a leaf module is neither patched nor declared linear (names every such module).
    """
    if attention_rule not in ATTENTION_RULES:
        raise ValueError(f"unknown attention rule {attention_rule!r}; valid: {ATTENTION_RULES}")
    model.eval()
    undo: list[tuple[nn.Module, str, bool, object]] = []

    def bind(m: nn.Module, attr: str, fn: Callable) -> None:
        had = attr in m.__dict__
        undo.append((m, attr, had, m.__dict__.get(attr)))
        setattr(m, attr, types.MethodType(fn, m))

    unreviewed = []
    safe = _LINEAR_SAFE + patch_map.linear_safe
    try:
        for name, m in model.named_modules():
            if _is_metric(m) or ".parametrizations." in f".{name}.":  # metrics; weight parametrizations
                continue
            if isinstance(m, AttentionHead):
                bind(m, "pool", _attention_head_pool)
                continue
            if isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)) \
                    and "activation" in m.__dict__:  # a functional activation (a module one is a child)
                act = m.__dict__["activation"]
                if act is F.gelu:
                    undo.append((m, "activation", True, act))
                    m.activation = _gelu_identity
                elif act is not F.relu:  # relu: the identity rule is its gradient
                    unreviewed.append(f"{name}.activation ({getattr(act, '__name__', act)})")
            fn = patch_map.lookup(m)
            if fn is not None:
                bind(m, "forward", fn)
                if fn in (_labram_attention, _mha_attention) or getattr(fn, "_uses_attention_rule", False):
                    undo.append((m, "_lrp_attention_rule", "_lrp_attention_rule" in m.__dict__,
                                 m.__dict__.get("_lrp_attention_rule")))
                    m._lrp_attention_rule = attention_rule
            elif _is_leaf(m) and not isinstance(m, safe):
                unreviewed.append(f"{name} ({type(m).__name__})")
        if unreviewed:
            shown = unreviewed[:6] + ([f"… {len(unreviewed) - 6} more"] if len(unreviewed) > 6 else [])
            raise UnsupportedModuleError(
                f"{patch_map.backbone} {patch_map.method}: no LRP rule reviewed for {shown}; fix: "
                + (f"declare each type's rule in user_models.{patch_map.backbone}.lrp (identity: element-wise "
                   "non-linear; linear: affine or structural; off: dropout-like; attention: modules computing "
                   "attention with F.scaled_dot_product_attention), or use method gxi" if patch_map.marked_attention
                   else "add the type to the backbone's patch map in eegfm_bench/interpret/lrp.py (a rule, or "
                   "linear_safe if affine)"))
        with _zennit_epsilon(model, epsilon):
            yield model
    finally:
        for m, attr, had, old in reversed(undo):
            if had:
                setattr(m, attr, old)
            else:
                delattr(m, attr)


@contextlib.contextmanager
def _zennit_epsilon(model: nn.Module, epsilon: float) -> Iterator[None]:
    if epsilon < 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a finite number ≥ 0, got {epsilon}")
    if epsilon == 0:
        yield
        return
    zennit_patches = _lxt()[2]
    rule = Epsilon(epsilon)

    def module_map(ctx, name, module):
        # parametrized convolutions (EEGNet's max-norm conv) cannot be modified by zennit's ParamMod: ε = 0 there
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)) and not hasattr(module, "parametrizations"):
            return rule
        return None

    saved = {k: BasicHook.__dict__[k] for k in ("forward", "backward")}
    composite = Composite(module_map=module_map)
    BasicHook.forward, BasicHook.backward = zennit_patches.forward, zennit_patches.backward
    try:
        composite.register(model)
        yield
    finally:
        composite.remove()
        BasicHook.forward, BasicHook.backward = saved["forward"], saved["backward"]


def zero_biases(model: nn.Module, patch_map: PatchMap | None = None) -> list[str]:
    """Set every ``*bias`` parameter, BatchNorm running mean and the map's additive parameters to 0, in place.

    Used by the conservation check: with no bias terms, LRP relevance sums to the explained logit.

    Returns
    -------
    list of str
        Names of the zeroed parameters.
    """
    extra = patch_map.additive_params if patch_map else ()
    zeroed = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias" or leaf.endswith("_bias") or any(_names_param(name, e) for e in extra):
                p.zero_()
                zeroed.append(name)
        for name, m in model.named_modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.zero_()  # eval-mode BatchNorm: (x - mean) / std · w + b, the mean is a bias
                zeroed.append(f"{name}.running_mean")
    return zeroed


def lrp_copy(model: nn.Module) -> nn.Module:
    """A deep copy in eval mode whose parameters do not require gradients (only the input does).

    peft adapter layers (LoRA, DoRA, IA3, … injected by ``regime: lora``) are merged into their base layers and
    the wrappers replaced by the merged ``nn.Linear`` / ``nn.Conv*`` (peft's ``merge`` + ``get_base_layer``, the
    steps of ``merge_and_unload``): in eval mode an adapted linear layer is still one affine map, so its LRP rule is
    the base layer's, and the copy computes the same function as ``model``.
    """
    m = copy.deepcopy(model).eval()
    _merge_peft_layers(m)
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def _merge_peft_layers(model: nn.Module) -> int:
    """Merge every peft tuner layer of ``model`` in place and swap in its base layer; returns how many."""
    tuner_layer = import_peft().tuners.tuners_utils.BaseTunerLayer
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, tuner_layer)]
    for name, layer in targets:
        with torch.no_grad():
            layer.merge()
        parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        setattr(parent, name.rpartition(".")[2], layer.get_base_layer())
    return len(targets)
