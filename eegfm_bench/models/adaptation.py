"""Adaptation regimes (docs/guide/architecture.md, "Adaptation"): ``head_only``, ``full`` and ``lora`` (peft).

* ``head_only`` — linear probing in paper 003's sense: the backbone is frozen *and kept in eval mode*
  (dropout / batch-norm statistics fixed), only the pooling head trains; training reads cached tokens.
* ``full`` — full fine-tuning of every parameter.
* ``lora`` — low-rank adapters from peft on the backbone's ``lora_targets``; the head always trains.

:func:`apply_lora` injects any peft tuner in place (``peft.inject_adapter_in_model``), so the adapter object keeps
its contract (``tokens``, ``blocks``, ``channel_contract``, ``n_tokens``, ``d_model``) and ``FMClassifier``'s
parameter counts see the adapter weights as the backbone's only trainable parameters. Every target pattern must
match a module (:class:`LoraTargetError` lists the candidates) and every adapter weight must receive a gradient
in a check forward/backward (:class:`AdapterNoOpError`): braindecode models that call ``F.linear`` on a module's
weight, or torch's fused transformer fast path, would otherwise make adapters silent no-ops (ENVIRONMENT.md).
"""
from __future__ import annotations

import dataclasses
import re

import torch
from torch import nn

from eegfm_bench.config import ConfigError

REGIMES = ("head_only", "full", "lora")


class RegimeError(ValueError):
    """Unknown or inapplicable adaptation regime."""


def check_regime(regime: str) -> str:
    """Return ``regime`` or raise :class:`RegimeError` listing the valid ones."""
    if regime not in REGIMES:
        raise RegimeError(f"unknown regime {regime!r}; valid regimes: {', '.join(REGIMES)}")
    return regime


def freeze(module: nn.Module) -> nn.Module:
    """Set ``requires_grad=False`` on every parameter and put ``module`` in eval mode."""
    module.requires_grad_(False)
    module.eval()
    return module


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of (trainable) scalar parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


# --------------------------------------------------------------------------------------------- PEFT
class LoraTargetError(ValueError):
    """A PEFT target pattern matches no module of the backbone (the message lists the candidates).

    Attributes
    ----------
    unmatched : list of str
        The target patterns that matched nothing.
    candidates : list of str
        Adaptable module names of the backbone, numeric indices collapsed to ``*``.
    """

    def __init__(self, message: str, unmatched=(), candidates=()):
        super().__init__(message)
        self.unmatched = list(unmatched)
        self.candidates = list(candidates)


class AdapterNoOpError(RuntimeError):
    """Injected adapter weights receive no gradient: the backbone bypasses the wrapped module.

    This is the trap of ``F.linear(x, module.weight)`` inside an attention forward (braindecode's LaBraM and
    EEG-DINO before the adapters patch them, ENVIRONMENT.md), or of torch's fused transformer fast path.
    """


LORA_DEFAULTS = {"method": "lora", "r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
"""Defaults of :func:`apply_lora` for LoRA (``r`` 8, ``lora_alpha`` 16 so the scaling ``alpha / r`` is 2, no
dropout). Other peft methods start from their own peft defaults."""

_ADAPTABLE = None  # lazily: module types peft can wrap


def _adaptable_types():
    global _ADAPTABLE
    if _ADAPTABLE is None:
        _ADAPTABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.MultiheadAttention)
    return _ADAPTABLE


def adaptable_modules(module: nn.Module) -> list[str]:
    """Names of the modules a PEFT method can wrap (Linear, Conv1d/2d/3d, Embedding, MultiheadAttention).

    Sub-modules of a ``MultiheadAttention`` (its ``out_proj``) are left out: ``F.multi_head_attention_forward``
    reads ``out_proj.weight`` directly, so an adapter there would be a no-op; target the attention module itself.
    """
    types = _adaptable_types()
    names, mha = [], []
    for name, mod in module.named_modules():
        if isinstance(mod, nn.MultiheadAttention):
            mha.append(name + ".")
        if isinstance(mod, types) and name and not any(name.startswith(p) for p in mha if name != p[:-1]):
            names.append(name)
    return names


def _collapse(names: list[str]) -> list[str]:
    return sorted({re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", n) for n in names})


def _matches(name: str, target: str) -> bool:
    """peft's rule for a list entry: the module name equals the target or ends with ``"." + target``."""
    return name == target or name.endswith("." + target)


def resolve_targets(backbone: nn.Module, target_modules) -> list[str]:
    """Module names ``target_modules`` selects, checking that every pattern matches something.

    Parameters
    ----------
    backbone : nn.Module
        The adapter (or any module).
    target_modules : list of str or str
        A list of name suffixes (peft's list semantics: ``"attn.proj"`` matches ``"blocks.3.attn.proj"``), or
        one regular expression matched against the full module name (peft's string semantics).

    Returns
    -------
    list of str
        Full names of the matched modules.

    Raises
    ------
    LoraTargetError
        If the list is empty, or a pattern (or the regex) matches no adaptable module; lists the candidates.
    """
    cands = adaptable_modules(backbone)
    shown = _collapse(cands)
    if isinstance(target_modules, str):
        hit = [n for n in cands if re.fullmatch(target_modules, n)]
        if not hit:
            raise LoraTargetError(f"LoRA target regex {target_modules!r} matches no adaptable module; candidates: "
                                  f"{shown}; fix: set lora.target_modules to names from this list",
                                  [target_modules], shown)
        return hit
    targets = list(target_modules or [])
    if not targets:
        raise LoraTargetError(f"no LoRA target modules (the backbone declares none and the config gives none); "
                              f"candidates: {shown}; fix: set lora.target_modules", [], shown)
    unmatched = [t for t in targets if not any(_matches(n, t) for n in cands)]
    if unmatched:
        raise LoraTargetError(f"LoRA targets {unmatched} match no adaptable module; candidates: {shown}; fix: set "
                              "lora.target_modules to names (or name suffixes) from this list", unmatched, shown)
    return [n for n in cands if any(_matches(n, t) for t in targets)]


def peft_config(cfg: dict, target_modules):
    """Build the peft config object for ``cfg["method"]`` (any peft tuner: lora, ia3, loha, lokr, vera, ...).

    ``r``, ``lora_alpha`` and ``lora_dropout`` are LoRA's names; other methods take their own fields (e.g. IA3
    ``feedforward_modules``, LoHa ``alpha``); DoRA is LoRA with ``use_dora: true``.

    Raises
    ------
    ValueError
        For an unknown method (lists peft's) or a field the method's config does not have (lists its fields).
    """
    peft = import_peft()
    configs = peft.mapping.PEFT_TYPE_TO_CONFIG_MAPPING
    method = str(cfg.get("method", "lora")).lower()
    try:
        ptype = peft.PeftType[method.upper()]
        cls = configs[ptype]
    except KeyError:
        valid = sorted(p.name.lower() for p in configs)
        raise ValueError(f"unknown PEFT method {method!r}; peft {peft.__version__} offers {valid}") from None
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in cfg.items() if k not in ("method", "verify")}
    bad = sorted(set(kwargs) - fields)
    if bad:
        raise ValueError(f"PEFT method {method!r} ({cls.__name__}) has no fields {bad}; valid fields: "
                         f"{sorted(fields - {'peft_type', 'task_type', 'revision', 'base_model_name_or_path'})}")
    kwargs["target_modules"] = target_modules
    return cls(**kwargs)


def check_lora_section(cfg: dict, where: str) -> None:
    """Validate a run's ``lora:`` section before any data is read (method, fields; targets are checked on the
    built backbone).

    Raises
    ------
    ConfigError
        Not a mapping, an unknown PEFT method or a field the method's config lacks (the message lists the valid
        ones and says the fix).
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where} must be a mapping (r, lora_alpha, lora_dropout, target_modules, method, ...), got "
                          f"a {type(cfg).__name__}")
    full = dict(cfg)
    if str(full.get("method", "lora")).lower() == "lora":
        full = {**LORA_DEFAULTS, **full}
    full.pop("target_modules", None)
    try:
        peft_config(full, ["_check_"])
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{where}: {err}; fix: correct or remove the key") from None


def import_peft():
    """The ``peft`` package, imported on first use: importing it takes seconds (bitsandbytes, accelerate), and only
    the ``lora`` regime, its config check and the AttnLRP copy of an adapted model need it."""
    import peft  # reason: seconds to import, needed only by regime lora (most runs are head_only / full)

    return peft


def adapter_parameters(backbone: nn.Module) -> dict[str, nn.Parameter]:
    """The trainable parameters of a PEFT-wrapped backbone (its adapter weights), by name."""
    return {n: p for n, p in backbone.named_parameters() if p.requires_grad}


def verify_adapters(backbone: nn.Module, n_windows: int = 1) -> None:
    """One forward + backward on a random input; raise if an adapter weight gets no gradient.

    Runs in eval mode (no dropout, no batch-norm statistics update) with the global RNG state restored
    afterwards; gradients are cleared again. The input is ``(n_windows, len(ch_names), n_times)`` standard normal.

    Raises
    ------
    AdapterNoOpError
        Naming the adapter weights that received no gradient (their modules are bypassed in the forward).
    """
    params = adapter_parameters(backbone)
    if not params:
        raise AdapterNoOpError("the backbone has no trainable adapter weights after injection")
    was = backbone.training
    device = next(iter(params.values())).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        backbone.eval()
        try:
            x = torch.randn(n_windows, len(backbone.ch_names), backbone.n_times, device=device)
            with torch.enable_grad():
                tok = backbone.tokens(x, backbone.ch_names)
                if tok.requires_grad:  # else no adapter is on the path to the output at all
                    tok.float().pow(2).mean().backward()
            dead = [n for n, p in params.items() if p.grad is None]
        finally:
            for p in params.values():
                p.grad = None
            backbone.train(was)
    if dead:
        raise AdapterNoOpError(
            f"{getattr(backbone, 'name', 'backbone')}: adapter weights {dead[:6]}{' ...' if len(dead) > 6 else ''} "
            "receive no gradient, so their modules are bypassed in the forward (e.g. F.linear on the module's weight "
            "or a fused fast path); fix: choose other lora.target_modules")


def apply_lora(backbone: nn.Module, cfg: dict | None = None) -> nn.Module:
    """Inject PEFT adapters into ``backbone`` in place and freeze everything else in it.

    The adapter object keeps its class and its contract (``tokens``, ``blocks``, ``channel_contract``,
    ``n_tokens``, ``d_model``): adapters are injected with ``peft.inject_adapter_in_model``, which replaces the
    targeted layers inside the module tree and marks only adapter weights trainable. The pooling head lives
    outside the backbone (in ``FMClassifier``) and is always trained.

    Parameters
    ----------
    backbone : BackboneAdapter
        Built (and, if pretrained, loaded) adapter.
    cfg : dict, optional
        ``method`` (default ``"lora"``; any peft tuner name: ``ia3``, ``loha``, ``lokr``, ``vera``, ...),
        ``r`` (8), ``lora_alpha`` (16), ``lora_dropout`` (0.0), ``use_dora`` (DoRA), ``target_modules`` (default:
        the backbone's ``lora_targets``; a list of name suffixes or one regex), any other field of the method's
        peft config, and ``verify`` (default ``True``: one forward/backward to prove every adapter weight gets a
        gradient, see :func:`verify_adapters`).

    Returns
    -------
    BackboneAdapter
        The same object, with adapters injected.

    Raises
    ------
    LoraTargetError
        A target matches no module (lists candidate module names), or there are no targets (e.g. the
        supervised baselines, whose ``lora_targets`` is empty).
    AdapterNoOpError
        An adapter weight receives no gradient.
    ValueError
        Unknown method or config field.
    """
    cfg = dict(cfg or {})
    if str(cfg.get("method", "lora")).lower() == "lora":  # r / lora_alpha / lora_dropout defaults are LoRA's
        cfg = {**LORA_DEFAULTS, **cfg}
    verify = bool(cfg.pop("verify", True))
    targets = cfg.pop("target_modules", None)
    if targets is None:
        targets = list(getattr(backbone, "lora_targets", []))
        if not targets:
            raise LoraTargetError(
                f"{getattr(backbone, 'name', 'backbone')} declares no lora_targets (supervised baselines are trained "
                f"from scratch, not adapted); candidates: {_collapse(adaptable_modules(backbone))}; fix: use regime "
                "'full' or set lora.target_modules", [], _collapse(adaptable_modules(backbone)))
    resolve_targets(backbone, targets)
    config = peft_config(cfg, targets)
    backbone.requires_grad_(False)
    try:
        import_peft().inject_adapter_in_model(config, backbone)
    except ValueError as exc:
        raise LoraTargetError(f"peft could not wrap the targets {targets}: {exc}; candidates: "
                              f"{_collapse(adaptable_modules(backbone))}", [], []) from exc
    backbone.peft_config = config
    if verify:
        verify_adapters(backbone)
    return backbone
