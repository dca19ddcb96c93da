"""The user-model declaration's schema (``user_models:`` in a cv / controls config; :mod:`eegfm_bench.models.user`
checks a declaration against the module it names and turns it into a registered backbone).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses; jsonargparse reads their ``Args:`` blocks for
``--help``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from eegfm_bench.config import ConfigRecord


@dataclass(frozen=True)
class UserChannels(ConfigRecord):
    """The channel contract of a user model.

    Args:
        kind: ``any`` (a fixed number of channels set at construction), ``names`` (exactly these channels,
            selected from the data and put in this order by name, so weights trained on a fixed montage see it in
            their order; a declared channel the data lacks is named before any cell trains; the data's other
            channels are left out, with a line saying which) or ``positions`` (any channel with a 10-05 position).
        names: the channels of ``kind: names``.
        variable: whether a subset of channels may be given at inference (removed-channel perturbations).
    """

    kind: Literal["any", "names", "positions"] = "any"
    names: list[str] = field(default_factory=list)
    variable: bool = False


@dataclass(frozen=True)
class UserPretrained(ConfigRecord):
    """Local pretrained weights: a ``.safetensors`` or ``.pt`` state dict of the module, and its sha256.

    Args:
        path: the weights file (relative paths are read from the working directory).
        sha256: the file's expected sha256 (hex); a file with another digest is refused. Null: not checked, and the
            rows record the digest computed from the file.
    """

    path: str
    sha256: Optional[str] = None


@dataclass(frozen=True)
class UserLRP(ConfigRecord):
    """What AttnLRP needs to know about a user encoder (paper 003 App. I.1; :mod:`eegfm_bench.interpret.lrp`).

    Without it the standard rules apply: ``nn.MultiheadAttention`` (batch-first, no masks) gets the AttnLRP
    attention rule, LayerNorm / GroupNorm the identity rule on the normalisation, GELU / ELU / SiLU / ReLU /
    LeakyReLU the identity rule, dropout is off, Linear / Conv / pooling / BatchNorm (eval) the ε-rule; a torch
    ``TransformerEncoderLayer``'s functional activation (relu, gelu) is covered too. Any other leaf module is
    refused by name, never given the plain gradient silently.

    Args:
        attention: module-name patterns (as ``blocks``) of the encoder's own attention modules, which must compute
            ``softmax(q kᵀ) v`` with ``torch.nn.functional.scaled_dot_product_attention`` (no mask, not causal):
            that call gets the attention rule while the module runs.
        identity: import paths of further element-wise non-linear module types (identity rule).
        linear: import paths of further leaf module types that are affine or structural (ε-rule).
        off: import paths of module types that are the identity at inference (dropout-like).
        additive_params: parameter-name suffixes that act as additive biases (positional / channel embeddings),
            zeroed with every bias in the conservation check.
    """

    attention: list[str] = field(default_factory=list)
    identity: list[str] = field(default_factory=list)
    linear: list[str] = field(default_factory=list)
    off: list[str] = field(default_factory=list)
    additive_params: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UserModelConfig(ConfigRecord):
    """A user encoder, by import path, and what the adapter contract needs to know about it.

    Args:
        class_path: ``package.module.Class`` of an ``nn.Module``.
        init_args: constructor arguments.
        tokens: where the tokens ``(batch, n_tokens, d_model)`` come from: ``output`` (the forward's output),
            ``module:<path>`` (a submodule's output, by a forward hook) or ``method:<name>`` (a method taking x).
        blocks: pattern over ``named_modules()`` names, matched per dot-separated segment (``layers.*``): the
            blocks of block probes and attention maps.
        channels: the channel contract.
        sfreq: sampling rate the encoder expects, Hz.
        window_s: window length, s.
        unit: input unit (``µV``, ``mV``, ``V``).
        scale: multiplier from volts to the input unit (default from ``unit``: µV 1e6, mV 1e3, V 1).
        l_freq: band-pass low edge, Hz (null: none).
        h_freq: band-pass high edge, Hz (null: none).
        reference: ``average`` (common average reference) or ``none``.
        lora_targets: name suffixes of the modules LoRA wraps (peft's list semantics: ``linear1`` matches
            ``model.layers.0.linear1``; nn.Linear / Conv layers).
        foundation_model: false for a supervised baseline trained from scratch (no LoRA, no frozen probe claim).
        pretrained: local weights (``init=pretrained:<file>@<sha256[:12]>`` in the rows).
        lrp: the AttnLRP declaration (:class:`UserLRP`); not in the cell hash (attribution only).
        token_layout: how the tokens map to channels, for per-channel attention maps (paper 003 App. I.4):
            ``channel_major`` (channel 0's patches first: token ``k`` → channel ``k // P``), ``patch_major``
            (time patch 0's channels first: ``k % C``) or null (no attention maps). Not in the cell hash.
        cls_tokens: leading tokens of the attention sequence that belong to no channel (a CLS token: 1),
            excluded as query and key. Not in the cell hash.
        pretraining_corpora: the datasets the declared weights were pretrained on (gate iii of the negative
            controls, paper 001 §3.6); null: not declared, so the gate is ``missing`` for a pretrained claim. Not in
            the cell hash.
    """

    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)
    tokens: str = "output"
    blocks: Optional[str] = None
    channels: UserChannels = field(default_factory=UserChannels)
    sfreq: float = 128.0
    window_s: float = 4.0
    unit: str = "µV"
    scale: Optional[float] = None
    l_freq: Optional[float] = 0.5
    h_freq: Optional[float] = 40.0
    reference: Literal["average", "none"] = "average"
    lora_targets: list[str] = field(default_factory=list)
    foundation_model: bool = True
    pretrained: Optional[UserPretrained] = None
    lrp: UserLRP = field(default_factory=UserLRP)
    pretraining_corpora: Optional[list[str]] = None
    token_layout: Optional[Literal["channel_major", "patch_major"]] = None
    cls_tokens: int = 0
