"""Backbone adapters over braindecode models (DESIGN.md "Backbone adapter").

Each adapter wraps one braindecode model, built for the dataset's montage, and exposes the representation
before any pooling as ``tokens(x, ch_names) -> (batch, n_tokens, d_model)``. The braindecode model's own
classifier (``final_layer``) is replaced by :class:`torch.nn.Identity`: classification is the job of the
pooling heads (:mod:`eegfm_bench.models.heads`). A pretrained checkpoint's ``final_layer.*`` weights are
therefore dropped explicitly at load time (each adapter's ``checkpoint_drop``; braindecode's hub
checkpoints ship that head randomly initialised).

Beyond the base contract, adapters define ``block_to_tokens(block_output)`` (reshape a hooked block output
to ``(batch, n_tokens_b, d_b)``), ``checkpoint_drop`` / ``adapt_state_dict`` (used by
:mod:`eegfm_bench.models.checkpoints`). Adapter options that are not braindecode arguments (``include_cls``,
``percentile_norm``, ``channels``, ``interpolate``, ``zscore_clip``, ``max_scale``, ``channel_slots``, ...) are
recorded in ``arch_kwargs`` too, so configs, checkpoints and token-cache keys capture them.

Registered adapters (``BACKBONES.get(name)``); tokens are channel-major (token ``k`` is channel ``k // P``, patch
``k % P``) unless noted; ``catalogue.yaml`` holds parameter counts, hub ids and pretraining corpora:

============ ===== ================================== =========================== ======================== ===========
name         sfreq input unit                         tokens                      blocks                   channels
============ ===== ================================== =========================== ======================== ===========
eegnet       128   µV                                 (B, T', 16), T'=n_times//32 ``drop_1``, ``drop_2``    fixed
shallow      250   µV                                 (B, T', 40)                 conv, dropout (2)        fixed
labram       200   100 µV                             (B, C·P [+1 CLS], 200)      ``blocks`` (12)          by name
cbramod      200   100 µV                             (B, C·P, 200)               ``encoder.layers`` (12)  fixed
biot         200   µV ÷ q95(|x|) per channel           (B, C·F, 256), F frames     transformer layers (4)   subset
biot_bipolar 200   as biot, on 16 bipolar derivations (B, 16·F, 256)              transformer layers (4)   bipolar
eegpt        256   mV                                 (B, P, 4·512), P = 31       encoder blocks (8)       by name
reve         200   z-score per channel, clip ±15      (B, C·P, 512), P = 4        transformer layers (22)  positions
bendr        256   min-max [-1, 1] + SCALE channel     (B, T'+1, 512), start first contextualiser (8)      19 by name
signal_jepa  128   µV                                 (B, C·P, 64), P = 3         encoder layers (8)       positions
luna         256   µV                                 (B, P, 256), P = n/40       rotary blocks (8)        positions
eegdino      200   100 µV                             (B, C·P [+1], 200)          ``encoder_layers`` (12)  19 by name
codebrain    200   100 µV                             (B, C·P, 200)               residual blocks (8)      fixed
steegformer  128   ±500 µV clip, z-score per channel  (B, C·P, 512), P = n/16     encoder blocks (8)       fixed
============ ===== ================================== =========================== ======================== ===========

(B = batch, C = channels, P = patches; sampling rates in Hz; windows 4 s except LUNA's 5 s.) "positions":
any channel with an MNE standard 10-05 position; "by name": selection and reordering by name within the model's
channel vocabulary (``channels`` option where it exists); "subset"/"bipolar"/"positions" (REVE, LUNA): channels
can be removed truly at inference (variable-channel models); the others refuse a montage without a build channel.
``interpolate=True`` selects braindecode's ``Interpolated*`` variant for labram, biot, eegpt, bendr, signal_jepa.

Every PEFT target in ``lora_targets`` is proven to receive gradients (:func:`eegfm_bench.models.adaptation.
apply_lora` runs one check forward/backward): LaBraM's and EEG-DINO's attention modules are re-classed to call
their ``qkv`` module (braindecode calls ``F.linear`` on its weight), and torch's fused transformer fast path,
which would bypass adapters in eval mode, is disabled inside BENDR's and S-JEPA's ``tokens``.

Every adapter forwards architecture overrides (``**kwargs``) to the braindecode constructor, so tests can
build tiny configurations (e.g. ``BACKBONES.get("labram")(ch_names, 400, num_layers=2, conv_out_channels=4,
num_heads=2)``). The signal arguments (``n_chans``, ``n_times``, ``n_outputs``, ``sfreq``, ``chs_info``,
``input_window_seconds``) are owned by the adapter and may not be overridden.

References
----------
.. [Lawhern2018] Lawhern et al. (2018). EEGNet: a compact convolutional neural network for EEG-based
   brain-computer interfaces. J. Neural Eng. 15(5):056013.
.. [Jiang2024] Jiang, Zhao, Lu (2024). Large brain model for learning generic representations with
   tremendous EEG data in BCI (LaBraM). ICLR.
.. [Wang2025] Wang et al. (2025). CBraMod: a criss-cross brain foundation model for EEG decoding. ICLR.
.. [Yang2023] Yang, Westover, Sun (2023). BIOT: biosignal transformer for cross-data learning in the wild.
   NeurIPS. Code: github.com/ycq091044/BIOT.

The other adapters cite their papers in their own docstrings.
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BACKBONES, BackboneAdapter, ChannelContract, ChannelContractError

_RESERVED = ("n_chans", "n_times", "n_outputs", "sfreq", "chs_info", "input_window_seconds")


def _check_reserved(name: str, kwargs: dict) -> None:
    bad = sorted(set(kwargs) & set(_RESERVED))
    if bad:
        raise TypeError(f"{name}: {bad} are set by the adapter from ch_names / n_times / the declared "
                        "preprocessing and cannot be overridden; fix: remove them from the model kwargs")


def _quiet(factory, *args, **kwargs):
    """Build a braindecode model, silencing its deprecation chatter (not its errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return factory(*args, **kwargs)


class _FixedMontageMixin:
    """``tokens`` for models whose channel set is fixed at construction (no subsets, no reordering)."""

    ch_names: list[str]
    name: str

    def _check_same_montage(self, x: torch.Tensor, ch_names: list[str] | None) -> None:
        if x.ndim != 3:
            raise ValueError(f"{self.name}: expected x of shape (batch, n_chans, n_times), got {tuple(x.shape)}")
        if ch_names is not None and list(ch_names) != self.ch_names:
            missing = [c for c in self.ch_names if c not in ch_names]
            extra = [c for c in ch_names if c not in self.ch_names]
            raise ChannelContractError(
                f"{self.name} was built for a fixed montage of {len(self.ch_names)} channels and cannot take a "
                f"different set or order; missing {missing}, unexpected {extra}"
                + ("" if missing or extra else " (same channels, different order)")
                + "; fix: zero-pad removed channels (perturb.channels, mode='zero') or use a variable-channel "
                "backbone (labram, biot)")
        if x.shape[1] != len(self.ch_names):
            raise ChannelContractError(f"{self.name} was built for {len(self.ch_names)} channels, x has "
                                       f"{x.shape[1]}")


# --------------------------------------------------------------------------------------------- shared helpers
@dataclass(frozen=True)
class NamedChannelContract(ChannelContract):
    """Channel contract kinds the base class leaves to the adapters.

    * ``"selection"``: the model reads the channels ``names`` (fixed set and order), selected and reordered by
      name from the dataset's channels; extra dataset channels are ignored; a missing one is an error naming it.
    * ``"positions"``: any channel with a position in MNE's standard 10-05 montage (the model embeds positions,
      :func:`eegfm_bench.data.montage.positions`); a channel without one is an error naming it.
    """

    def check(self, ch_names: list[str], sfreq: float, n_times: int, model: str = "backbone") -> None:
        """As :meth:`ChannelContract.check`, plus the name / position checks of this contract's kind.

        Raises
        ------
        ChannelContractError
            Naming the missing electrodes (``selection``) or the channels without a 10-05 position
            (``positions``), or the sampling-rate / window-length mismatch.
        """
        super().check(ch_names, sfreq, n_times, model)
        if self.kind == "selection":
            have = {c.lower() for c in ch_names}
            missing = [n for n in self.names if n.lower() not in have]
            if missing:
                raise ChannelContractError(
                    f"{model} needs electrodes {missing} that the dataset lacks (it has {list(ch_names)}); fix: use "
                    "a dataset that records them, choose other channels with the backbone's `channels` option, or "
                    "an Interpolated variant (`interpolate: true`) where braindecode ships one")
        elif self.kind == "positions":
            from eegfm_bench.data.montage import standard_1005

            pos = standard_1005().get_positions()["ch_pos"]
            bad = [c for c in ch_names if c not in pos]
            if bad:
                raise ChannelContractError(
                    f"{model} embeds electrode positions, but channels {bad} have no standard 10-05 position; fix: "
                    "rename them to canonical 10-05 names (data.montage.canonical_names) or drop them")


def _chs_info(names: list[str]) -> list[dict]:
    """braindecode ``chs_info`` for 10-05 names: ``{"ch_name", "kind": "eeg", "loc": (x, y, z) in metres}``."""
    from eegfm_bench.data.montage import positions

    return [{"ch_name": n, "kind": "eeg", "loc": np.asarray(p, dtype=float)}
            for n, p in zip(names, positions(list(names)))]


def _positions_tensor(names: list[str], batch: int, like: torch.Tensor) -> torch.Tensor:
    """MNE standard 10-05 positions (metres) of ``names`` as ``(batch, n_chans, 3)`` on ``like``'s device/dtype."""
    from eegfm_bench.data.montage import positions

    pos = torch.as_tensor(positions(list(names)), dtype=like.dtype, device=like.device)
    return pos.unsqueeze(0).expand(batch, -1, -1)


def _resolve_channels(model: str, spec, ch_names: list[str], vocabulary=None, default=None) -> list[str]:
    """The channels a selecting adapter feeds its model, from its ``channels`` option.

    Parameters
    ----------
    model : str
        Adapter name (for messages).
    spec : None, "known" or list of str
        ``None``: ``default`` if given, else every dataset channel; ``"known"``: the dataset channels present in
        ``vocabulary``, in dataset order; a list: exactly these names, in this order.
    ch_names : list of str
        The dataset's channels.
    vocabulary : sequence of str, optional
        The names the model has embeddings for (case-insensitive).

    Raises
    ------
    ChannelContractError
        A selected name is outside ``vocabulary`` (named, with the fix), or ``"known"`` selects nothing.
    """
    vocab = {v.lower() for v in vocabulary} if vocabulary is not None else None
    if spec is None:
        spec = default
    if spec is None:
        sel = list(ch_names)
    elif isinstance(spec, str):
        if spec != "known" or vocab is None:
            allowed = "None, a list of names or 'known'" if vocab is not None else "None or a list of names"
            raise ValueError(f"{model}: channels must be {allowed}, got {spec!r}")
        sel = [c for c in ch_names if c.lower() in vocab]
        if not sel:
            raise ChannelContractError(f"{model} has embeddings for none of the dataset's channels {ch_names}")
    else:
        sel = [str(c) for c in spec]
    if vocab is not None:
        unknown = [c for c in sel if c.lower() not in vocab]
        if unknown:
            known = [c for c in ch_names if c.lower() in vocab]
            raise ChannelContractError(
                f"{model} has no embedding for channels {unknown}; fix: set the backbone option `channels: known` "
                f"(the {len(known)} dataset channels it knows) or list a subset explicitly")
    if len({c.lower() for c in sel}) != len(sel):
        raise ValueError(f"{model}: channels {sel} hold a name twice")
    return sel


def _gather(model: str, x: torch.Tensor, ch_names: list[str], wanted: list[str]) -> torch.Tensor:
    """Select and reorder ``x``'s channel axis by name to ``wanted`` (fixed-channel models).

    Raises
    ------
    ChannelContractError
        If ``x`` does not match ``ch_names`` or a wanted channel is absent: a fixed-channel model cannot drop an
        input it was built with (the message says so and names the channels).
    """
    if x.ndim != 3 or x.shape[1] != len(ch_names):
        raise ChannelContractError(f"{model}: x has shape {tuple(x.shape)} but {len(ch_names)} channel names were "
                                   "given; expected (batch, len(ch_names), n_times)")
    index = {c.lower(): i for i, c in enumerate(ch_names)}
    missing = [c for c in wanted if c.lower() not in index]
    if missing:
        raise ChannelContractError(
            f"{model} is a fixed-channel model: it was built for {wanted} and cannot take a montage without "
            f"{missing} (channels cannot be removed, only zeroed); fix: zero-pad removed channels "
            "(perturb.channels, mode='zero') or use a variable-channel backbone (labram, biot, biot_bipolar, reve, "
            "luna)")
    idx = [index[c.lower()] for c in wanted]
    if idx == list(range(x.shape[1])):
        return x
    return x[:, idx]


def _check_time(model: str, x: torch.Tensor, n_times: int) -> None:
    if x.shape[-1] != n_times:
        raise ChannelContractError(f"{model} was built for windows of {n_times} samples, got {x.shape[-1]}; fix: "
                                   "use the backbone's declared window length (Preprocessing.window_s)")


def _variable_inputs(adapter, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str]]:
    """Inputs of a variable-channel, position-embedding adapter (REVE, LUNA): true channel removal.

    Keeps the channels given (restricted to the adapter's ``channels`` selection when one was set), checks
    that each has a 10-05 position and that the window length matches the build.

    Raises
    ------
    ChannelContractError
        Shape mismatch, a channel without a position, or no channel left.
    """
    names = adapter.ch_names if ch_names is None else list(ch_names)
    if x.ndim != 3 or x.shape[1] != len(names):
        raise ChannelContractError(f"{adapter.name}: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                   "were given; expected (batch, len(ch_names), n_times)")
    _check_time(adapter.name, x, adapter.n_times)
    if adapter.arch_kwargs.get("channels") is not None:  # keep the selected ones that are present
        keep = {c.lower() for c in adapter.model_ch_names}
        idx = [i for i, c in enumerate(names) if c.lower() in keep]
        x, names = x[:, idx], [names[i] for i in idx]
    if not names:
        raise ChannelContractError(f"{adapter.name}: no channel left after removal / selection")
    NamedChannelContract(kind="positions", sfreq=adapter.preprocessing.sfreq).check(
        names, adapter.preprocessing.sfreq, x.shape[-1], adapter.name)
    return x, names


@contextlib.contextmanager
def _no_mha_fastpath():
    """Disable torch's fused transformer / multi-head-attention fast path for the duration.

    In eval mode without gradients, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` run a fused
    kernel that reads ``linear1.weight`` etc. directly: PEFT adapters on those layers would be bypassed at
    validation and test time. Disabling it makes eval and train forwards run the same modules.
    """
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def _interpolated(model: str, cls_name: str, src_names: list[str], **kwargs):
    """Build braindecode's ``Interpolated<cls_name>`` for the source montage ``src_names``.

    Returns
    -------
    model : nn.Module
        Its frozen ``interpolation_layer`` (MNE spherical-spline matrix, non-persistent buffer) maps the source
        channels onto the model's canonical channels before the backbone.
    targets : list of str
        The canonical channel names the backbone sees.
    """
    import braindecode.models as bm

    cls = getattr(bm, cls_name)
    net = _quiet(cls, chs_info=_chs_info(src_names), **kwargs)
    return net, [c["ch_name"] for c in cls._TARGET_CHS_INFO]


# --------------------------------------------------------------------------------------------- EEGNet
class _FromScratchBaseline(_FixedMontageMixin, BackboneAdapter):
    """Shared parts of the supervised baselines (EEGNet, ShallowFBCSPNet): a fixed montage, no LoRA targets,
    braindecode's classifier replaced by ``Identity`` and the token shape read off one dry forward pass.

    Subclasses set ``self.model`` and call :meth:`_probe_shape` with the axis of the feature map that holds time.
    """

    is_foundation_model = False
    lora_targets: ClassVar[list[str]] = []
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def _probe_shape(self, time_axis: int) -> None:
        """Record ``d_model`` (feature axis 1) and ``n_tokens`` (``time_axis``) of the classifier-free output."""
        self.model.final_layer = nn.Identity()
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model(torch.zeros(1, len(self.ch_names), self.n_times))
        self.model.train(was)
        self._d_model, self._n_tokens = int(out.shape[1]), int(out.shape[time_axis])

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        """Feature maps of the last block (EEGNet: F2, 16 by default; ShallowFBCSPNet: n_filters_time, 40)."""
        return self._d_model

    def n_tokens(self, n_chans: int | None = None) -> int:
        """Pooled time steps ``T'`` (the channel count is fixed at construction)."""
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"{self.name} was built for {len(self.ch_names)} channels, not {n_chans}")
        return self._n_tokens


@BACKBONES.register("eegnet")
class EEGNetAdapter(_FromScratchBaseline):
    """braindecode ``EEGNet`` (v4) trained from scratch: the supervised baseline [Lawhern2018]_.

    Tokens are EEGNet's feature map before its final classifier, ``(batch, F2, 1, T')`` after the second
    block's pooling and dropout, reshaped to ``(batch, n_tokens=T', d_model=F2)`` (one token per pooled
    time step). With the defaults (pool sizes 4 and 8) ``T' = n_times // 32`` (16 tokens for 4 s at 128 Hz).

    Preprocessing: 128 Hz, 1–40 Hz band-pass, amplitudes in µV. [Lawhern2018]_ downsampled every dataset
    to 128 Hz and band-passed 1–40 Hz (P300, ERN) or 4–40 Hz (SMR); 1–40 Hz is the task-agnostic choice here
    (a motor-imagery task may narrow it in its own config).

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (any names; the set and order are fixed after construction).
    n_times : int
        Window length in samples at 128 Hz.
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    **kwargs
        ``EEGNet`` architecture arguments (``F1``, ``D``, ``F2``, ``kernel_length``, ``drop_prob``, ...).

    Notes
    -----
    ``blocks`` are the two dropout layers that close Lawhern's block 1 (temporal conv → depthwise spatial
    conv → BN → ELU → pool → dropout) and block 2 (separable conv → BN → ELU → pool → dropout):
    braindecode builds EEGNet as one flat ``nn.Sequential``, so a forward hook on them sees each block's
    output, shape ``(batch, F1·D or F2, 1, time)``. ``lora_targets`` is empty: LoRA does not apply to this
    from-scratch baseline.
    """

    name = "eegnet"
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0, reference="average",
        source="Lawhern et al. 2018 (EEGNet), data section: resampled to 128 Hz, band-pass 1-40 Hz (P300/ERN); µV")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        from braindecode.models import EEGNet

        self.model = _quiet(EEGNet, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            **kwargs)
        self._probe_shape(time_axis=-1)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Feature map before the classifier, ``(batch, n_chans, n_times)`` → ``(batch, T', F2)``."""
        self._check_same_montage(x, ch_names)
        out = self.model(x)  # (batch, F2, 1, T')
        return out.squeeze(2).transpose(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return [self.model.drop_1, self.model.drop_2]

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, F, 1, time)`` → ``(batch, time, F)``."""
        return out.squeeze(2).transpose(1, 2)


def _patch_qkv_attention(model: nn.Module, patched: type) -> int:
    """Re-class every attention module of ``model`` that ``patched`` subclasses to ``patched`` (in place).

    The patched classes keep every parameter and buffer (so checkpoints load unchanged) and only replace the
    ``F.linear(x, self.qkv.weight, bias)`` call by ``self.qkv(x) + bias``, so a PEFT adapter on ``qkv`` is used.

    Returns
    -------
    int
        Number of modules re-classed.
    """
    base = patched.__mro__[1]
    n = 0
    for mod in model.modules():
        if type(mod) is base:
            mod.__class__ = patched
            n += 1
    return n


def labram_qkv(attn: nn.Module, x: torch.Tensor):
    """LaBraM attention's queries (scaled), keys and values, computed by *calling* ``attn.qkv``.

    braindecode 1.8.1 ``labram._Attention.forward`` computes ``F.linear(x, self.qkv.weight, cat(q_bias, 0,
    v_bias))``, which module hooks and peft adapters cannot see (ENVIRONMENT.md); ``qkv`` has no bias of its own,
    so ``self.qkv(x) + cat(q_bias, 0, v_bias)`` is the same value. Shared by the LoRA patch below and the AttnLRP
    patch (:mod:`eegfm_bench.interpret.lrp`).

    Parameters
    ----------
    attn : braindecode ``labram._Attention``
    x : Tensor, shape (batch, n_tokens, d_model)

    Returns
    -------
    q, k, v : Tensor, shape (batch, n_heads, n_tokens, head_dim)
        ``q`` multiplied by ``attn.scale``; ``q_norm`` / ``k_norm`` applied when present.
    qkv : Tensor, shape (3, batch, n_heads, n_tokens, head_dim)
        Before normalisation and scaling (braindecode's ``return_qkv`` output).
    """
    B, N, _ = x.shape
    qkv = attn.qkv(x)
    if attn.q_bias is not None:
        qkv = qkv + torch.cat((attn.q_bias, torch.zeros_like(attn.v_bias, requires_grad=False), attn.v_bias))
    qkv = qkv.reshape(B, N, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if attn.q_norm is not None:
        q = attn.q_norm(q).type_as(v)
    if attn.k_norm is not None:
        k = attn.k_norm(k).type_as(v)
    return q * attn.scale, k, v, qkv


def _labram_attention_forward(self, x: torch.Tensor, return_attention: bool = False, return_qkv: bool = False):
    """braindecode 1.8.1 ``labram._Attention.forward`` with the q/k/v of :func:`labram_qkv`; the rest unchanged."""
    B, N, _ = x.shape
    q, k, v, qkv = labram_qkv(self, x)
    attn = q @ k.transpose(-2, -1)
    if self.relative_position_bias_table is not None:
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1] + 1, self.window_size[0] * self.window_size[1] + 1, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
    attn = attn.softmax(dim=-1)
    attn = self.attn_drop(attn)
    if return_attention:
        return attn
    x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
    x = self.proj_drop(self.proj(x))
    if return_qkv:
        return x, qkv
    return x


def _eegdino_attention_forward(self, x: torch.Tensor) -> torch.Tensor:
    """braindecode 1.8.1 ``eegdino._Attention.forward`` with ``self.qkv(x) + bias`` instead of ``F.linear``."""
    bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
    qkv = self.qkv(x) + bias
    batch, tokens, _ = qkv.shape
    query, key, value = qkv.reshape(batch, tokens, 3, self.nhead, -1).permute(2, 0, 3, 1, 4).unbind(0)
    attn = (query * self.scale @ key.transpose(-2, -1)).softmax(dim=-1)
    attn = self.attn_drop(attn)
    out = (attn @ value).transpose(1, 2).flatten(2)
    return self.proj_drop(self.proj(out))


_PATCHED: dict[str, type] = {}


def _patched_attention(kind: str) -> type:
    """The re-classed attention type for ``kind`` in {"labram", "eegdino"} (created on first use).

    A subclass of braindecode's private ``_Attention`` of that model whose ``forward`` calls ``self.qkv`` as a
    module; it is registered as a module global (``_LabramAttention`` / ``_EEGDINOAttention``) so instances
    pickle by name.
    """
    if kind not in _PATCHED:
        if kind == "labram":
            from braindecode.models.labram import _Attention as base
            fwd, name = _labram_attention_forward, "_LabramAttention"
        elif kind == "eegdino":
            from braindecode.models.eegdino import _Attention as base
            fwd, name = _eegdino_attention_forward, "_EEGDINOAttention"
        else:  # pragma: no cover - internal
            raise KeyError(kind)
        cls = type(name, (base,), {"forward": fwd, "__module__": __name__,
                                   "__doc__": f"braindecode {kind} attention calling ``self.qkv`` as a module."})
        cls.__qualname__ = name
        globals()[name] = cls
        _PATCHED[kind] = cls
    return _PATCHED[kind]


# --------------------------------------------------------------------------------------------- LaBraM
@BACKBONES.register("labram")
class LabramAdapter(BackboneAdapter):
    """braindecode ``Labram`` (LaBraM-Base) [Jiang2024]_, variable channels by name.

    The input is cut into 1-s patches (200 samples) per channel; each patch becomes a token with a learned
    spatial embedding selected by channel name from LaBraM's 128-name list (``LABRAM_CHANNEL_ORDER``,
    upper-case, matched case-insensitively: ``'Fp1'`` → ``'FP1'``) and a temporal embedding per patch index.
    ``tokens`` returns the transformer output after the final LayerNorm, ``(batch, C·P, d_model)``
    (``(batch, 1 + C·P, d_model)`` with the CLS token first when ``include_cls=True``), channel-major.

    Any subset of LaBraM's channels works at inference (``tokens(x_subset, subset_names)``), which is what
    *removed*-channel dropout needs (paper 003 App. D.2). The patch count is fixed at construction (the
    temporal embedding has ``n_times // 200 + 1`` rows).

    Preprocessing: 200 Hz, 0.1–75 Hz band-pass, notch at the mains frequency, amplitudes in units of
    0.1 mV = 100 µV (``scale=1e4`` from volts), as in [Jiang2024]_ (pre-training data preprocessing) and
    braindecode's Labram docs.

    Parameters
    ----------
    ch_names : list of str
        Canonical 10-05 names; each must be in LaBraM's list (else :class:`ChannelContractError`).
    n_times : int
        Window length in samples at 200 Hz; a multiple of ``patch_size`` (200).
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    include_cls : bool
        Prepend the CLS token to the tokens (default ``False``: patch tokens only, as LaBraM's own
        fine-tuning averages patch tokens).
    **kwargs
        ``Labram`` arguments, e.g. ``num_layers``, ``num_heads``, ``conv_out_channels`` (``d_model`` =
        ``conv_out_channels · patch_size / 8``: 8 → 200, 4 → 100), ``drop_path_prob``.

    interpolate : bool
        Use braindecode's ``InterpolatedLaBraM`` (default ``False``): a frozen MNE spherical-spline matrix maps
        the dataset's channels (any with a 10-05 position) onto LaBraM's 128 canonical channels, so the tokens
        are ``(batch, 128·P, d_model)`` and the montage is fixed (no channel removal).

    Notes
    -----
    ``lora_targets`` are ``attn.qkv``, ``attn.proj``, ``mlp.0`` and ``mlp.2``. braindecode's attention computes
    ``F.linear(x, self.qkv.weight, bias)``, bypassing the ``qkv`` module, so a PEFT wrapper there would receive
    no gradient and change nothing (ENVIRONMENT.md). This adapter therefore re-classes every attention module
    to a subclass (``_LabramAttention``) whose forward is braindecode's with ``self.qkv(x) + bias`` in place of the
    ``F.linear`` call (same parameters and names, identical outputs: tested).
    """

    name = "labram"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0, reference="average",
        source="Jiang et al. 2024 (LaBraM) pre-training preprocessing and braindecode Labram docs: "
               "0.1-75 Hz band-pass, notch, 200 Hz, amplitudes in 0.1 mV units")
    lora_targets: ClassVar[list[str]] = ["attn.qkv", "attn.proj", "mlp.0", "mlp.2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, include_cls: bool = False,
                 interpolate: bool = False, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        # include_cls / interpolate are recorded in arch_kwargs (config / checkpoint / token-cache keys)
        extra = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, include_cls=bool(include_cls), **extra, **kwargs)
        from braindecode.models import Labram

        self.include_cls = bool(include_cls)
        self.interpolate = bool(interpolate)
        if self.interpolate:
            self.model, self._targets = _interpolated(self.name, "InterpolatedLaBraM", self.ch_names,
                                                      n_times=self.n_times, n_outputs=self.n_outputs, **kwargs)
        else:
            self.model = _quiet(Labram, n_chans=len(self.ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, **kwargs)
            self._targets = None
        self.model.final_layer = nn.Identity()
        _patch_qkv_attention(self.model, _patched_attention("labram"))
        self._patch = int(self.model.patch_size)
        self._n_patches = self.n_times // self._patch

    @property
    def channel_contract(self) -> ChannelContract:
        from braindecode.models.labram import LABRAM_CHANNEL_ORDER

        patch = int(self.arch_kwargs.get("patch_size", 200))
        if self.arch_kwargs.get("interpolate"):
            return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                        n_times=self.n_times, patch=patch)
        return ChannelContract(kind="names", sfreq=self.preprocessing.sfreq, names=tuple(LABRAM_CHANNEL_ORDER),
                               variable=True, n_times=self.n_times, patch=patch)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if self._targets is not None:
            if n_chans is not None and n_chans != len(self.ch_names):
                raise ChannelContractError(f"labram (interpolated) was built for {len(self.ch_names)} channels, "
                                           f"not {n_chans}")
            return len(self._targets) * self._n_patches + int(self.include_cls)
        n = len(self.ch_names) if n_chans is None else int(n_chans)
        return n * self._n_patches + int(self.include_cls)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Patch tokens ``(batch, n_chans, n_times)`` → ``(batch, C·P [+1], d_model)``.

        Raises
        ------
        ChannelContractError
            If ``ch_names`` holds a name outside LaBraM's list, or ``x`` does not match ``ch_names``.
        """
        names = self.ch_names if ch_names is None else list(ch_names)
        if x.ndim != 3 or x.shape[1] != len(names):
            raise ChannelContractError(f"labram: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        if x.shape[2] != self.n_times:
            raise ChannelContractError(f"labram was built for windows of {self.n_times} samples, got {x.shape[2]}")
        if self._targets is not None:  # interpolated: fixed source montage -> LaBraM's 128 channels
            x = _gather(self.name, x, names, self.ch_names)
            out = self.model(x, ch_names=self._targets, return_features=True)
        else:
            self.channel_contract.check(names, self.preprocessing.sfreq, x.shape[2], self.name)
            out = self.model(x, ch_names=names, return_features=True)
        feats = out["features"]  # (batch, C·P, d_model)
        if self.include_cls:
            feats = torch.cat([out["cls_token"].unsqueeze(1), feats], dim=1)
        return feats

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.blocks)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, 1 + C·P, d)`` → tokens as :meth:`tokens` orders them (CLS per ``include_cls``)."""
        return out if self.include_cls else out[:, 1:]

    def adapt_state_dict(self, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Truncate a longer pretrained temporal embedding to this window's patch count.

        LaBraM's reference code slices ``time_embed[:, 0:n_patches]`` at every forward
        (github.com/935963004/LaBraM ``modeling_finetune.py``); braindecode instead sizes
        ``temporal_embedding`` to ``n_times // patch_size + 1`` rows at construction. A checkpoint built for
        longer windows is therefore cut to the first rows, as the reference code does at run time. A
        checkpoint with *fewer* rows than needed is left as is (the strict load then reports the mismatch).
        """
        notes = []
        key = "temporal_embedding"
        if key in state:
            want = self.model.temporal_embedding.shape
            have = state[key].shape
            if len(have) == 3 and have[0] == want[0] and have[2] == want[2] and have[1] > want[1]:
                state = dict(state)
                state[key] = state[key][:, : want[1]].clone()
                notes.append(f"{key}: truncated {tuple(have)} -> {tuple(want)} (first {want[1]} rows, as "
                             "LaBraM's reference code slices time_embed)")
        return state, notes


# --------------------------------------------------------------------------------------------- CBraMod
@BACKBONES.register("cbramod")
class CBraModAdapter(_FixedMontageMixin, BackboneAdapter):
    """braindecode ``CBraMod`` [Wang2025]_: criss-cross transformer over 1-s patches, fixed montage.

    ``tokens`` returns the encoder output ``(batch, C, P, 200)`` flattened channel-major to
    ``(batch, C·P, 200)``. braindecode's ``proj_out`` (the pretraining reconstruction projection) is replaced
    by :class:`torch.nn.Identity`, as CBraMod's reference fine-tuning code does
    (``backbone.proj_out = nn.Identity()``); its checkpoint weights are dropped explicitly at load.

    The channel set and order are fixed at construction: CBraMod's convolutional positional encoding runs
    over the channel axis, so removing channels changes every neighbour relation (not a variable-channel
    model in paper 003 App. D.2).

    Preprocessing: 200 Hz, 0.3–75 Hz band-pass, mains notch, amplitudes in units of 100 µV (``scale=1e4``),
    as in [Wang2025]_ (TUEG pre-training preprocessing) and braindecode's CBraMod docs.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (set and order fixed after construction).
    n_times : int
        Window length in samples at 200 Hz, a multiple of 200 (``patch_size`` is fixed at 200 by
        braindecode's spectral embedding, which hard-codes 101 rFFT bins).
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    **kwargs
        ``CBraMod`` arguments, e.g. ``n_layer``, ``nhead`` (must divide 100), ``dim_feedforward``,
        ``drop_prob``.

    Notes
    -----
    ``lora_targets`` are ``linear1`` and ``linear2`` (the feed-forward layers). Not the attention
    ``out_proj``: ``nn.MultiheadAttention`` reads ``out_proj.weight`` directly inside
    ``F.multi_head_attention_forward``, so a LoRA wrapper there would be a no-op.
    """

    name = "cbramod"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.3, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0, reference="average",
        source="Wang et al. 2025 (CBraMod) pre-training preprocessing and braindecode CBraMod docs: "
               "0.3-75 Hz band-pass, notch, 200 Hz, amplitudes in 100 µV units")
    lora_targets: ClassVar[list[str]] = ["linear1", "linear2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "proj_out.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        if kwargs.get("patch_size", 200) != 200:
            raise ValueError("cbramod: patch_size must be 200 (braindecode's CBraMod hard-codes 101 rFFT bins)")
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        from braindecode.models import CBraMod

        self.model = _quiet(CBraMod, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            **kwargs)
        self.model.final_layer = nn.Identity()
        self.model.proj_out = nn.Identity()
        self._n_patches = self.n_times // 200

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times,
                               patch=200)

    @property
    def d_model(self) -> int:
        return int(self.model.patch_embedding.d_model)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"cbramod was built for {len(self.ch_names)} channels, not {n_chans}")
        return len(self.ch_names) * self._n_patches

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Encoder output ``(batch, n_chans, n_times)`` → ``(batch, C·P, 200)``."""
        self._check_same_montage(x, ch_names)
        if x.shape[2] != self.n_times:
            raise ChannelContractError(f"cbramod was built for windows of {self.n_times} samples, got {x.shape[2]}")
        feats = self.model(x, return_features=True)["features"]  # (batch, C, P, d)
        return feats.flatten(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, C, P, d)`` → ``(batch, C·P, d)``."""
        return out.flatten(1, 2)


# --------------------------------------------------------------------------------------------- BIOT
class _BIOTBlock(nn.ModuleList):
    """One BIOT transformer layer ``[PreNorm(attention), PreNorm(feed-forward)]`` with its residuals.

    ``linear_attention_transformer.SequentialSequence`` applies ``x = x + f(x); x = x + g(x)`` to plain
    ``ModuleList`` pairs, so no module's output is the layer output and forward hooks cannot see it. This
    subclass holds the same two modules (same parameter names, so checkpoints load unchanged) and runs the
    same two residual steps as its ``forward``. Equality with the unmodified braindecode model is tested.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, ff = self[0], self[1]
        x = x + attn(x)
        return x + ff(x)


class _BIOTLayers(nn.Module):
    """Replacement for ``SequentialSequence`` (no layer dropout, no routed kwargs: BIOT passes none)."""

    def __init__(self, pairs: nn.ModuleList):
        super().__init__()
        self.layers = nn.ModuleList([_BIOTBlock(list(pair)) for pair in pairs])

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if kwargs:
            raise TypeError(f"BIOT layers take no routed arguments, got {sorted(kwargs)}")
        for block in self.layers:
            x = block(x)
        return x


@BACKBONES.register("biot")
class BIOTAdapter(BackboneAdapter):
    """braindecode ``BIOT`` [Yang2023]_: per-channel STFT tokens and a linear-attention transformer.

    BIOT's ``forward`` returns only the token mean ``(batch, 256)``; ``tokens`` captures the transformer
    output before that mean with a forward hook: ``(batch, C·F, d_model)``, channel-major, with
    ``F = (n_times - 200) // 100 + 1`` STFT frames per channel (n_fft = 200 = 1 s, hop 100; 7 for 4 s).

    **Montage.** The pretrained BIOT checkpoints expect the 16- or 18-channel bipolar (double-banana) montage;
    each position of that montage has a learned channel token: use :class:`BIOTBipolarAdapter`
    (``biot_bipolar``) for them. This adapter is built with the dataset's *monopolar* channels as BIOT's
    ``n_chans`` (one channel token per dataset channel, in order), which is what a from-scratch or fully
    fine-tuned BIOT sees. Any subset of the build channels is accepted at inference (each channel keeps its own
    channel token), so *removed*-channel dropout works. Loading a 16/18-channel pretrained checkpoint into a
    monopolar build of another size fails at the strict load (``encoder.channel_tokens.weight`` shape).
    ``interpolate=True`` uses braindecode's ``InterpolatedBIOT`` instead (spline onto the 18 bipolar channels'
    midpoints: braindecode's own documented simplification; fixed montage).

    **Amplitude normalisation.** BIOT's data loaders divide each channel of each sample by its 95th
    percentile of absolute amplitude: ``X / (quantile(|X|, 0.95, axis=-1) + 1e-8)`` (github.com/ycq091044/BIOT
    ``utils.py``). This adapter does the same inside ``tokens`` (``percentile_norm=True``, per window and
    channel, linear interpolation as ``np.quantile``), so the declared ``scale`` (µV) has no effect on the
    tokens; it only fixes the unit in which perturbations are defined.

    Preprocessing: 200 Hz. BIOT's own TUAB/TUEV scripts only resample to 200 Hz; we additionally band-pass
    0.1–75 Hz (LaBraM's protocol on the same corpora) with the mains notch, so every 200-Hz backbone sees
    comparably filtered data.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels; each gets a channel token, in order.
    n_times : int
        Window length in samples at 200 Hz (at least 200).
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    percentile_norm : bool
        Apply BIOT's per-channel 95th-percentile normalisation (default ``True``).
    interpolate : bool
        Use braindecode's ``InterpolatedBIOT`` (see above).
    **kwargs
        ``BIOT`` arguments, e.g. ``embed_dim``, ``num_heads``, ``num_layers``, ``hop_length``, ``drop_prob``.

    Notes
    -----
    ``blocks`` are the transformer layers; to make them hookable, braindecode's
    ``encoder.transformer.layers`` (a ``SequentialSequence`` over plain ``ModuleList`` pairs) is replaced by
    an equivalent module whose layers compute ``x + attn(x)`` then ``+ ff(·)`` in their own ``forward``; the
    parameter names are unchanged. ``lora_targets`` are ``to_q``, ``to_k``, ``to_v``, ``to_out``.
    """

    name = "biot"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e6,
        unit="µV, then ÷ per-channel 95th percentile of abs. amplitude", window_s=4.0, reference="average",
        source="Yang et al. 2023 (BIOT) code: 200 Hz, per-channel 95th-percentile normalisation in the loader "
               "(applied inside the adapter); 0.1-75 Hz band-pass added as in LaBraM's TUAB protocol")
    lora_targets: ClassVar[list[str]] = ["to_q", "to_k", "to_v", "to_out"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)
    checkpoint_hint: ClassVar[str] = (
        "BIOT's pretrained checkpoints hold 16 or 18 channel tokens for the bipolar (double-banana) montage; this "
        "build gives one channel token per monopolar dataset channel, so encoder.channel_tokens differs: use the "
        "biot_bipolar backbone (bipolar derivations built from the monopolar montage)")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, percentile_norm: bool = True,
                 interpolate: bool = False, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        # percentile_norm / interpolate are recorded in arch_kwargs (config / checkpoint / token-cache keys)
        extra = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, percentile_norm=bool(percentile_norm), **extra, **kwargs)
        self.percentile_norm = bool(percentile_norm)
        self.interpolate = bool(interpolate)
        self._build(kwargs)

    def _token_names(self) -> list[str]:
        """Names of BIOT's channel tokens, in token order (here: the build montage)."""
        return list(self.ch_names)

    def _build(self, kwargs: dict) -> None:
        from braindecode.models import BIOT

        common = dict(n_times=self.n_times, n_outputs=self.n_outputs, sfreq=int(self.preprocessing.sfreq))
        if self.interpolate:
            self.model, names = _interpolated(self.name, "InterpolatedBIOT", self.ch_names, **common, **kwargs)
        else:
            names = self._token_names()
            self.model = _quiet(BIOT, n_chans=len(names), **common, **kwargs)
        self.model.final_layer = nn.Identity()
        transformer = self.model.encoder.transformer
        transformer.layers = _BIOTLayers(transformer.layers.layers)
        self._token_list = names
        self._channel_index = {c: i for i, c in enumerate(names)}

    @property
    def channel_contract(self) -> ChannelContract:
        if self.arch_kwargs.get("interpolate"):
            return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                        n_times=self.n_times)
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=True,
                               n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def _frames(self, n_times: int) -> int:
        enc = self.model.encoder
        return (n_times - enc.n_fft) // enc.hop_length + 1

    def n_tokens(self, n_chans: int | None = None) -> int:
        if self.interpolate:
            if n_chans is not None and n_chans != len(self.ch_names):
                raise ChannelContractError(f"biot (interpolated) was built for {len(self.ch_names)} channels, "
                                           f"not {n_chans}")
            return len(self._token_list) * self._frames(self.n_times)
        n = len(self.ch_names) if n_chans is None else int(n_chans)
        return n * self._frames(self.n_times)

    @staticmethod
    def normalise(x: torch.Tensor) -> torch.Tensor:
        """BIOT's per-channel scaling: ``x / (q95(|x|) + 1e-8)`` over time, ``(batch, n_chans, n_times)``.

        The 95th percentile uses linear interpolation between order statistics, as ``np.quantile``'s default
        (BIOT's loaders); it is computed by sorting because ``torch.quantile`` refuses inputs above 2**24
        elements.
        """
        s = x.abs().sort(dim=-1).values
        pos = 0.95 * (x.shape[-1] - 1)
        lo = int(pos)
        hi = min(lo + 1, x.shape[-1] - 1)
        q = s[..., lo:lo + 1] + (pos - lo) * (s[..., hi:hi + 1] - s[..., lo:lo + 1])
        return x / (q + 1e-8)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Transformer output before BIOT's mean, ``(batch, n_chans, n_times)`` → ``(batch, C·F, d_model)``.

        Raises
        ------
        ChannelContractError
            If a name in ``ch_names`` is not one of the build channels (no channel token for it).
        """
        names = self.ch_names if ch_names is None else list(ch_names)
        if x.ndim != 3 or x.shape[1] != len(names):
            raise ChannelContractError(f"{self.name}: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        if self.interpolate:  # fixed source montage -> BIOT's 18 canonical (bipolar-midpoint) channels
            x = self.model.interpolation_layer(_gather(self.name, x, names, self.ch_names))
            names = list(self._token_list)
        return self._encode(x, names)

    def _encode(self, x: torch.Tensor, names: list[str]) -> torch.Tensor:
        """Percentile scaling, then BIOT's encoder with one channel token per name; output before the mean."""
        unknown = [c for c in names if c not in self._channel_index]
        if unknown:
            raise ChannelContractError(
                f"{self.name} was built with channel tokens for {self._token_list}; it has none for {unknown}; fix: "
                "build the backbone on a montage that contains them")
        if self.percentile_norm:
            x = self.normalise(x)
        enc = self.model.encoder
        captured: list[torch.Tensor] = []
        hook = enc.transformer.register_forward_hook(lambda _m, _i, out: captured.append(out))
        saved_index = enc.index
        try:
            if names != self._token_list:  # each input channel keeps its own channel token
                enc.index = torch.tensor([self._channel_index[c] for c in names], dtype=torch.long,
                                         device=saved_index.device)
            enc(x)
        finally:
            enc.index = saved_index
            hook.remove()
        return captured[0]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder.transformer.layers.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·F, d)``."""
        return out


# --------------------------------------------------------------------------------------------- BIOT, bipolar
@BACKBONES.register("biot_bipolar")
class BIOTBipolarAdapter(BIOTAdapter):
    """BIOT on its published bipolar montage, built by named subtraction from a monopolar dataset [Yang2023]_.

    The dataset's monopolar channels are turned into BIOT's longitudinal bipolar (double-banana) derivations
    ``Fp1-F7, F7-T7, T7-P7, P7-O1, Fp2-F8, F8-T8, T8-P8, P8-O2, Fp1-F3, F3-C3, C3-P3, P3-O1, Fp2-F4, F4-C4, C4-P4,
    P4-O2`` (:data:`eegfm_bench.data.montage.BIOT_BIPOLAR_16`, BIOT's channel-token order), optionally followed by
    ``C3-A2, C4-A1`` (``derivations="bipolar18"``), each an exact subtraction ``V(anode) - V(cathode)``
    (:func:`eegfm_bench.data.montage.bipolar_derivations`), as paper 001 §3.1 does for its ``BIOT-bipolar16``
    rows. Derivation ``k`` uses BIOT's channel token ``k``. With the default ``n_channel_tokens=18`` the model
    has the 18 tokens of the ``six-datasets-18chs`` / ``shhs-prest-18chs`` checkpoints and the 16 derivations use
    the first 16 (paper 001: "the last two derivations are omitted without zero-padding"); use
    ``n_channel_tokens=16`` for ``prest-16chs``.

    Tokens, blocks, percentile scaling and ``lora_targets`` are those of :class:`BIOTAdapter`:
    ``(batch, D·F, 256)`` for ``D`` derivations and ``F`` STFT frames.

    **Channel removal.** Variable-channel: ``tokens(x_subset, names_subset)`` builds only the derivations whose
    two electrodes are both present (a removed electrode removes every derivation that uses it; each remaining
    derivation keeps its own channel token).

    Parameters
    ----------
    ch_names : list of str
        The dataset's monopolar channels; must contain every electrode of the chosen derivations (else
        :class:`~eegfm_bench.models.base.ChannelContractError` naming the missing ones).
    n_times : int
        Window length in samples at 200 Hz.
    n_outputs : int
        Passed to braindecode.
    derivations : {"bipolar16", "bipolar18"}
        Which derivations to build (``bipolar18`` also needs A1 and A2).
    n_channel_tokens : {16, 18}
        BIOT's number of channel tokens (the checkpoint's layout); at least the number of derivations.
    percentile_norm : bool
        BIOT's per-channel 95th-percentile scaling, applied to the derivations.
    **kwargs
        ``BIOT`` architecture arguments.
    """

    name = "biot_bipolar"
    checkpoint_hint: ClassVar[str] = ("BIOT checkpoints hold 16 (prest-16chs) or 18 (shhs-prest-18chs, "
                                      "six-datasets-18chs) channel tokens: set n_channel_tokens accordingly")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, derivations: str = "bipolar16",
                 n_channel_tokens: int = 18, percentile_norm: bool = True, **kwargs: Any):
        from eegfm_bench.data.montage import BIOT_BIPOLAR_16, BIOT_BIPOLAR_18

        if derivations not in ("bipolar16", "bipolar18"):
            raise ValueError(f"biot_bipolar: derivations must be 'bipolar16' or 'bipolar18', got {derivations!r}")
        pairs = BIOT_BIPOLAR_16 if derivations == "bipolar16" else BIOT_BIPOLAR_18
        if int(n_channel_tokens) not in (16, 18) or int(n_channel_tokens) < len(pairs):
            raise ValueError(f"biot_bipolar: n_channel_tokens must be 16 or 18 and at least the {len(pairs)} "
                             f"derivations, got {n_channel_tokens}")
        if kwargs.get("interpolate"):
            raise ValueError("biot_bipolar builds its derivations by subtraction; use `biot` with interpolate=true "
                             "for braindecode's InterpolatedBIOT")
        _check_reserved(self.name, kwargs)
        self._pairs = tuple(pairs)
        self._n_channel_tokens = int(n_channel_tokens)
        BackboneAdapter.__init__(self, ch_names, n_times, n_outputs, derivations=derivations,
                                 n_channel_tokens=int(n_channel_tokens), percentile_norm=bool(percentile_norm),
                                 **kwargs)
        self.percentile_norm = bool(percentile_norm)
        self.interpolate = False
        self._build(kwargs)

    def _token_names(self) -> list[str]:
        from eegfm_bench.data.montage import BIOT_BIPOLAR_18, bipolar_names

        return bipolar_names(BIOT_BIPOLAR_18)[: self._n_channel_tokens]

    @property
    def derivation_names(self) -> list[str]:
        """Names of the derivations built from the full build montage, e.g. ``"Fp1-F7"``."""
        from eegfm_bench.data.montage import bipolar_names

        return bipolar_names(self._pairs)

    @property
    def channel_contract(self) -> ChannelContract:
        pairs = self._pairs if hasattr(self, "_pairs") else ()
        needed: list[str] = []
        for a, c in pairs:
            for e in (a, c):
                if e not in needed:
                    needed.append(e)
        return ChannelContract(kind="bipolar", sfreq=self.preprocessing.sfreq, names=tuple(needed), variable=True,
                               n_times=self.n_times)

    def n_tokens(self, n_chans: int | None = None) -> int:
        """``D·F`` for the build montage (``n_chans`` = its channel count, or ``None``).

        Raises
        ------
        ValueError
            For another channel count: which derivations survive depends on *which* electrodes are removed; use
            :meth:`n_tokens_for`.
        """
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ValueError("biot_bipolar: the token count after removing electrodes depends on which ones; call "
                             "n_tokens_for(ch_names)")
        return len(self._pairs) * self._frames(self.n_times)

    def available_pairs(self, ch_names: list[str]) -> list[tuple[str, str]]:
        """The derivations whose two electrodes are both in ``ch_names`` (BIOT order)."""
        have = {c.lower() for c in ch_names}
        return [(a, c) for a, c in self._pairs if a.lower() in have and c.lower() in have]

    def n_tokens_for(self, ch_names: list[str]) -> int:
        """Token count for input channels ``ch_names`` (surviving derivations × STFT frames)."""
        return len(self.available_pairs(ch_names)) * self._frames(self.n_times)

    def bipolar(self, x: torch.Tensor, ch_names: list[str] | None = None) -> tuple[torch.Tensor, list[str]]:
        """Derivations ``(batch, D, n_times)`` by named subtraction and their names (same unit as ``x``).

        Raises
        ------
        ChannelContractError
            If no derivation can be built from ``ch_names`` (names the electrodes BIOT's montage needs).
        """
        from eegfm_bench.data.montage import bipolar_derivations, bipolar_names

        names = self.ch_names if ch_names is None else list(ch_names)
        if x.ndim != 3 or x.shape[1] != len(names):
            raise ChannelContractError(f"biot_bipolar: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        pairs = self.available_pairs(names)
        if not pairs:
            raise ChannelContractError(f"biot_bipolar: no bipolar derivation can be built from {names}; it needs "
                                       f"electrodes {list(self.channel_contract.names)}")
        return bipolar_derivations(x, names, pairs), bipolar_names(pairs)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Monopolar ``(batch, n_chans, n_times)`` → derivations → ``(batch, D·F, d_model)`` (derivation-major)."""
        _check_time(self.name, x, self.n_times)
        xb, names = self.bipolar(x, ch_names)
        return self._encode(xb, names)


# --------------------------------------------------------------------------------------------- ShallowFBCSPNet
@BACKBONES.register("shallow")
class ShallowFBCSPNetAdapter(_FromScratchBaseline):
    """braindecode ``ShallowFBCSPNet`` trained from scratch: the second supervised baseline [Schirrmeister2017]_.

    Temporal convolution → spatial convolution → batch norm → square → mean pooling → log → dropout, then
    braindecode's classifier convolution, which is replaced here by the pooling head. Tokens are the feature map
    after the dropout, ``(batch, n_filters, T', 1)`` reshaped to ``(batch, T', n_filters)`` (one token per pooled
    time step; 40 filters by default).

    Preprocessing: 250 Hz, 4–38 Hz band-pass, amplitudes in µV, 4-s windows. [Schirrmeister2017]_ resampled to
    250 Hz and high-passed at 4 Hz (one of their two settings); the 38-Hz low-pass is braindecode's motor-imagery
    tutorial band for this model. Their electrode-wise exponential moving standardisation is not applied.

    Parameters
    ----------
    ch_names : list of str
        Any channels (fixed set and order after construction).
    n_times : int
        Window length in samples at 250 Hz.
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    **kwargs
        ``ShallowFBCSPNet`` arguments (``n_filters_time``, ``filter_time_length``, ``pool_time_length``, ...).

    Notes
    -----
    ``blocks`` are the combined temporal-spatial convolution and the final dropout (outputs
    ``(batch, F, time, 1)``). ``lora_targets`` is empty: LoRA does not apply to a from-scratch baseline.

    References
    ----------
    .. [Schirrmeister2017] Schirrmeister et al. (2017). Deep learning with convolutional neural networks for EEG
       decoding and visualization. Human Brain Mapping 38(11):5391-5420.
    """

    name = "shallow"
    preprocessing = Preprocessing(
        sfreq=250.0, l_freq=4.0, h_freq=38.0, scale=1e6, unit="µV", window_s=4.0, reference="average",
        source="Schirrmeister et al. 2017 (ShallowFBCSPNet): 250 Hz, 4 Hz high-pass setting; 38 Hz low-pass as in "
               "braindecode's MI tutorial; µV (exponential moving standardisation not applied)")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        from braindecode.models import ShallowFBCSPNet

        self.model = _quiet(ShallowFBCSPNet, n_chans=len(self.ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, **kwargs)
        self._probe_shape(time_axis=2)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """``(batch, n_chans, n_times)`` → ``(batch, T', n_filters)``."""
        self._check_same_montage(x, ch_names)
        _check_time(self.name, x, self.n_times)
        return self.block_to_tokens(self.model(x))

    @property
    def blocks(self) -> list[nn.Module]:
        return [self.model.conv_time_spat, self.model.drop]

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """``(batch, F, time, 1)`` → ``(batch, time, F)``."""
        return out.squeeze(-1).transpose(1, 2)


# --------------------------------------------------------------------------------------------- EEGPT
@BACKBONES.register("eegpt")
class EEGPTAdapter(BackboneAdapter):
    """braindecode ``EEGPT`` [Wang2024eegpt]_: per-channel patches with learned channel embeddings and summary tokens.

    The window is cut into patches of 64 samples with stride 32 (``P = (n_times - 64) // 32 + 1`` patches after
    braindecode's end padding: 31 for 4 s at 256 Hz); at each patch the transformer sees every channel's patch
    token plus ``S = 4`` learned summary tokens and keeps only the summary tokens. ``tokens`` returns them,
    ``(batch, P, S·D)`` (braindecode's ``return_features``; ``D = 512``, ``d_model = 2048``): one token per
    patch, the concatenated summary tokens as its features (what EEGPT's own linear probe reads).

    **Channels.** By default (``chan_proj_type="none"``) the channels are selected and reordered by name and each
    keeps EEGPT's pretrained channel embedding (one of 62 10-20/10-10 names, ``EEGPT_CHANNELS``); the set is fixed
    after construction (no removal). ``channels`` chooses them: ``None`` (every dataset channel; each must be
    one of the 62), ``"known"`` (the dataset channels EEGPT knows) or a list. ``chan_proj_type=
    "conv1d_constraint"`` instead learns a 1×1 channel projection onto EEGPT's 19 probe channels (the original
    linear-probe recipe; that projection is randomly initialised, so it is not frozen-feature compatible).
    ``interpolate=True`` uses braindecode's ``InterpolatedEEGPT`` (spline onto the 62 canonical channels).

    Preprocessing: 256 Hz, 4-s windows (1024 samples, EEGPT's pretraining crop), low-pass 38 Hz, amplitudes in
    mV (``scale=1e3``), following the authors' downstream pipelines (github.com/BINE022/EEGPT; not re-verified
    offline here).

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels.
    n_times : int
        Window length in samples at 256 Hz (at least 64).
    n_outputs : int
        Passed to braindecode.
    channels : None, "known" or list of str
        Channel selection (see above).
    chan_proj_type : {"none", "conv1d_constraint", "linear"}
        braindecode's channel adaptation (default ``"none"``: names → pretrained channel embeddings).
    interpolate : bool
        Use ``InterpolatedEEGPT``.
    **kwargs
        ``EEGPT`` arguments (``depth``, ``embed_dim``, ``num_heads``, ``embed_num``, ``patch_size``, ...).

    Notes
    -----
    ``blocks`` are ``target_encoder.blocks`` (8); a block's output is ``(batch·P, C + S, D)``.
    ``lora_targets``: ``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2`` (``attn.qkv`` names the module
    precisely; a bare ``qkv`` would also be tried on other modules, ENVIRONMENT.md).

    References
    ----------
    .. [Wang2024eegpt] Wang et al. (2024). EEGPT: pretrained transformer for universal and reliable
       representation of EEG signals. NeurIPS 37.
    """

    name = "eegpt"
    preprocessing = Preprocessing(
        sfreq=256.0, l_freq=None, h_freq=38.0, scale=1e3, unit="mV", window_s=4.0, reference="average",
        source="Wang et al. 2024 (EEGPT) and github.com/BINE022/EEGPT downstream scripts: 256 Hz, 4-s crops "
               "(1024 samples), low-pass 38 Hz, mV (band/unit from the authors' scripts, not re-verified offline)")
    lora_targets: ClassVar[list[str]] = ["attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "chan_proj.", "predictor.", "reconstructor.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channels=None,
                 chan_proj_type: str = "none", interpolate: bool = False, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        opts = {"chan_proj_type": chan_proj_type}
        if channels is not None:
            opts["channels"] = channels if isinstance(channels, str) else list(channels)
        if interpolate:
            opts["interpolate"] = True
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import EEGPT

        self.interpolate = bool(interpolate)
        if self.interpolate:
            self.model, self.model_ch_names = _interpolated(self.name, "InterpolatedEEGPT", self.ch_names,
                                                            n_times=self.n_times, n_outputs=self.n_outputs,
                                                            chan_proj_type="none", **kwargs)
            self._inputs = list(self.ch_names)
        else:
            self.model_ch_names = self._selected()
            self._inputs = self.model_ch_names
            self.model = _quiet(EEGPT, n_chans=len(self.model_ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, chs_info=_chs_info(self.model_ch_names),
                                chan_proj_type=chan_proj_type, **kwargs)
        self.model.final_layer = nn.Identity()

    def _selected(self) -> list[str]:
        from braindecode.models.eegpt import EEGPT_CHANNELS

        proj = self.arch_kwargs.get("chan_proj_type", "none")
        vocab = EEGPT_CHANNELS if proj == "none" else None
        return _resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names, vocab)

    @property
    def channel_contract(self) -> ChannelContract:
        if self.arch_kwargs.get("interpolate"):
            return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                        n_times=self.n_times)
        return NamedChannelContract(kind="selection", sfreq=self.preprocessing.sfreq, names=tuple(self._selected()),
                                    variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_num * self.model.embed_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"eegpt was built for {len(self.ch_names)} input channels, not {n_chans}")
        return int(self.model.n_patches)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Summary tokens ``(batch, n_chans, n_times)`` → ``(batch, P, S·D)``."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = _gather(self.name, x, names, self._inputs)
        _check_time(self.name, x, self.n_times)
        return self.model(x, return_features=True)["features"]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.target_encoder.blocks)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch·P, C + S, D)`` → ``(batch, P·(C + S), D)`` (patch-major)."""
        p = int(self.model.n_patches)
        return out.reshape(out.shape[0] // p, p * out.shape[1], out.shape[2])


# --------------------------------------------------------------------------------------------- REVE
def reve_positions_dir(folder: str | os.PathLike | None = None) -> Path:
    """Write MNE's standard 10-05 positions as ``reve_positions.json`` and return its folder (never downloads).

    braindecode's ``REVE`` constructor loads a position bank ``{name: [x, y, z]}`` from
    ``$REVE_POSITIONS_PATH/reve_positions.json`` and downloads it from the hub if that file is missing
    (ENVIRONMENT.md). This writes the file from :func:`eegfm_bench.data.montage.standard_1005` (343 names,
    metres, MNE "head" frame) so the download never happens; the adapter passes positions explicitly at every
    forward anyway.

    Parameters
    ----------
    folder : path, optional
        Default: ``<window cache>/reve`` (:func:`eegfm_bench.data.windows.default_cache_dir`).

    Returns
    -------
    Path
        The folder holding ``reve_positions.json`` (rewritten atomically only when its content differs).
    """
    from eegfm_bench.data.montage import standard_1005

    if folder is None:
        from eegfm_bench.data.windows import default_cache_dir

        folder = Path(default_cache_dir()) / "reve"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bank = {n: [float(v) for v in p] for n, p in standard_1005().get_positions()["ch_pos"].items()}
    text = json.dumps(bank, indent=0, sort_keys=False)
    path = folder / "reve_positions.json"
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return folder


class _ResidualPair(nn.ModuleList):
    """``[attention, feed-forward]`` of one REVE layer, running REVE's residual steps as its own forward.

    braindecode's ``TransformerBackbone.forward`` computes ``x = attn(x) + x; x = ff(x) + x`` over plain
    ``ModuleList`` pairs, so no module's output is the layer output and forward hooks cannot see it. Same
    parameter names; equality with the unmodified model is tested.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, ff = self[0], self[1]
        x = attn(x) + x
        return ff(x) + x


def _reve_backbone_forward(self, x, return_out_layers=False):
    """braindecode ``reve.TransformerBackbone.forward`` calling each (re-classed) layer as a module."""
    out_layers = [x] if return_out_layers else []
    for layer in self.layers:
        x = layer(x)
        if return_out_layers:
            out_layers.append(x)
    return out_layers if return_out_layers else x


@BACKBONES.register("reve")
class REVEAdapter(BackboneAdapter):
    """braindecode ``REVE`` [ElOuahidi2025]_: patch tokens with a 4-D (x, y, z, t) Fourier positional encoding.

    Each channel is cut into 1-s patches (200 samples) with 20 samples of overlap (``P = ceil((n_times - 200) /
    180)`` + 1 when exact; 4 for 4 s), each linearly embedded and given the Fourier + MLP encoding of its
    electrode's 3-D position and patch index. ``tokens`` returns the transformer output ``(batch, C·P, 512)``,
    channel-major, before REVE's own head.

    **Positions.** Taken from MNE's standard 10-05 montage (:func:`eegfm_bench.data.montage.positions`, metres)
    and passed at every forward; the position bank braindecode's constructor insists on is written locally by
    :func:`reve_positions_dir` (``REVE_POSITIONS_PATH`` is set only while the model is built), so nothing is
    downloaded. REVE's published bank holds positions collected from its 92 pretraining datasets; whether their
    coordinate frame and scale match MNE's (metres, head frame) could not be checked offline: load a pretrained
    checkpoint only after comparing a few entries (e.g. Cz) with the hub's ``reve-positions``.

    **Channels.** Variable: any channels with a 10-05 position, any subset at inference (``tokens(x_subset,
    names_subset)`` removes channels truly, no zero-filling).

    **Amplitude.** REVE z-scores each channel and clips at 15 standard deviations during pretraining (braindecode
    REVE docs); ``tokens`` does the same per window and channel (``zscore_clip=15``; ``None`` disables it).

    Preprocessing: 200 Hz (braindecode docs: "Input data must be sampled at 200 Hz"), band-pass 0.5–99.5 Hz as
    in the REVE paper's pretraining pipeline (capped below Nyquist by the preprocessing), µV before the z-score.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 200 Hz (at least 200).
    n_outputs : int
        Passed to braindecode.
    zscore_clip : float or None
        Per-window, per-channel z-score then clip to ``±zscore_clip`` (default 15).
    **kwargs
        ``REVE`` arguments (``embed_dim``, ``depth``, ``heads``, ``head_dim``, ``mlp_dim_ratio``, ...).

    Notes
    -----
    ``blocks`` are ``transformer.layers`` (22); each layer is re-classed to run its two residual steps in its own
    forward (same parameters). ``lora_targets``: ``to_qkv``, ``to_out`` (attention projections).

    References
    ----------
    .. [ElOuahidi2025] El Ouahidi et al. (2025). REVE: a foundation model for EEG — adapting to any setup with
       large-scale pretraining on 25,000 subjects. NeurIPS.
    """

    name = "reve"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.5, h_freq=99.5, scale=1e6, unit="µV, then z-score per channel, clipped at ±15",
        window_s=4.0, reference="average",
        source="El Ouahidi et al. 2025 (REVE) and braindecode REVE docs: 200 Hz, 0.5-99.5 Hz band-pass, per-channel "
               "z-score clipped at 15 SD (applied inside the adapter)")
    lora_targets: ClassVar[list[str]] = ["to_qkv", "to_out"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "cls_query_token")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, zscore_clip: float | None = 15.0,
                 channels=None, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        if kwargs.get("attention_pooling"):
            raise ValueError("reve: attention_pooling is REVE's own head; the pooling heads of eegfm_bench replace "
                             "it (use head: attention)")
        opts = {"zscore_clip": None if zscore_clip is None else float(zscore_clip)}
        if channels is not None:
            opts["channels"] = list(channels)
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import REVE

        self.zscore_clip = opts["zscore_clip"]
        self.model_ch_names = _resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names)
        folder = reve_positions_dir()
        saved = os.environ.get("REVE_POSITIONS_PATH")
        os.environ["REVE_POSITIONS_PATH"] = str(folder)
        try:
            self.model = _quiet(REVE, n_chans=len(self.model_ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, **kwargs)
        finally:
            if saved is None:
                os.environ.pop("REVE_POSITIONS_PATH", None)
            else:
                os.environ["REVE_POSITIONS_PATH"] = saved
        self.model.final_layer = nn.Identity()
        backbone = self.model.transformer
        for layer in backbone.layers:
            layer.__class__ = _ResidualPair
        backbone.forward = _reve_backbone_forward.__get__(backbone)
        self._step = int(self.model.patch_size - self.model.patch_overlap)

    @property
    def channel_contract(self) -> ChannelContract:
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=True,
                                    n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def _patches(self) -> int:
        return (self.n_times - int(self.model.patch_size)) // self._step + 1

    def n_tokens(self, n_chans: int | None = None) -> int:
        n = len(self.model_ch_names) if n_chans is None or n_chans == len(self.ch_names) else int(n_chans)
        return n * self._patches()

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Per-window, per-channel z-score clipped at ``±zscore_clip``, ``(batch, n_chans, n_times)``."""
        if self.zscore_clip is None:
            return x
        z = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-6)
        return z.clamp(-self.zscore_clip, self.zscore_clip)

    def _names_in(self, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str]]:
        return _variable_inputs(self, x, ch_names)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Transformer output ``(batch, n_chans, n_times)`` → ``(batch, C·P, d_model)`` (channel-major).

        Raises
        ------
        ChannelContractError
            If a channel has no 10-05 position, or the window length differs from the build.
        """
        x, names = self._names_in(x, ch_names)
        pos = _positions_tensor(names, x.shape[0], x)
        feats = self.model(self.normalise(x), pos=pos, return_features=True)["features"]  # (B, C, P, D)
        return feats.flatten(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.transformer.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·P, d)``."""
        return out


# --------------------------------------------------------------------------------------------- BENDR
BENDR_CHANNELS = ("Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8", "P7", "P3", "Pz", "P4",
                  "P8", "O1", "O2")
"""BENDR's 19 pretraining EEG channels in checkpoint order (braindecode ``BENDR_CHANNEL_ORDER`` without SCALE;
its legacy T5/T6 are P7/P8 in 10-05 names, same positions in MNE's ``standard_1005``)."""


@BACKBONES.register("bendr")
class BENDRAdapter(BackboneAdapter):
    """braindecode ``BENDR`` [Kostas2021]_: convolutional encoder (÷96 in time) and a transformer contextualiser.

    Input: BENDR's 19 10-20 channels selected and reordered by name (:data:`BENDR_CHANNELS`) plus the SCALE
    channel, 20 in all, as its checkpoint expects. As in DN3's ``MappingDeep1010`` (Kostas et al.'s
    pretraining code), each window is min–max normalised to [-1, 1] jointly over its EEG channels and SCALE is the
    constant ``2 · (min((max - min) / max_scale, 1) - 0.5)``, the window's amplitude range relative to the
    dataset's (``max_scale`` in µV; with ``max_scale=None`` SCALE is 0, DN3's value when a dataset has no scale
    information).

    ``tokens`` returns the contextualiser output ``(batch, T' + 1, 512)``: token 0 is the output at BENDR's fixed
    start token (its aggregate representation for downstream tasks), tokens ``1..T'`` one per encoded step of
    the ÷96 convolutional encoder (``T' = 11`` for 4 s at 256 Hz, so 12 tokens; computed at construction).

    Preprocessing: 256 Hz (BENDR's TUEG pretraining rate), µV before the normalisation; no band-pass (none is
    part of DN3's pretraining transforms as far as could be checked offline), 4-s windows.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels; must contain the 19 of :data:`BENDR_CHANNELS` (``interpolate=False``).
    n_times : int
        Window length in samples at 256 Hz.
    n_outputs : int
        Passed to braindecode.
    max_scale : float or None
        The dataset's amplitude range in µV for the SCALE channel (see above).
    interpolate : bool
        Use braindecode's ``InterpolatedBENDR`` (spline from any 10-05 montage onto the 19 channels; the SCALE
        channel is then set to the statistic above, not braindecode's spline placeholder).
    **kwargs
        ``BENDR`` arguments (``encoder_h``, ``transformer_layers``, ``transformer_heads``, ``drop_prob``,
        ``contextualizer_hidden``, ...).

    Notes
    -----
    ``blocks`` are ``contextualizer.transformer_layers`` (8; output ``(T' + 1, batch, 1536)``). ``lora_targets``:
    ``self_attn`` (the ``MultiheadAttention`` modules), ``linear1``, ``linear2``. torch's fused transformer fast
    path is disabled inside ``tokens`` so adapters are used in eval mode too.

    References
    ----------
    .. [Kostas2021] Kostas, Aroca-Ouellette, Rudzicz (2021). BENDR: using transformers and a contrastive
       self-supervised learning task to learn from massive amounts of EEG data. Front. Hum. Neurosci. 15:653659.
    """

    name = "bendr"
    preprocessing = Preprocessing(
        sfreq=256.0, l_freq=None, h_freq=None, scale=1e6,
        unit="µV, then min-max to [-1, 1] per window + SCALE channel", window_s=4.0, reference="average",
        source="Kostas et al. 2021 (BENDR) and DN3 MappingDeep1010/To1020: 256 Hz TUEG pretraining, per-window "
               "min-max to [-1, 1] with a relative-amplitude SCALE channel (applied inside the adapter)")
    lora_targets: ClassVar[list[str]] = ["self_attn", "linear1", "linear2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, max_scale: float | None = None,
                 interpolate: bool = False, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        if "final_layer" in kwargs:
            raise TypeError("bendr: final_layer is set by the adapter (BENDR's classifier is not used)")
        opts: dict = {"max_scale": None if max_scale is None else float(max_scale)}
        if interpolate:
            opts["interpolate"] = True
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import BENDR

        self.max_scale = opts["max_scale"]
        self.interpolate = bool(interpolate)
        common = dict(n_times=self.n_times, n_outputs=self.n_outputs, final_layer=False)
        if self.interpolate:
            self.model, _ = _interpolated(self.name, "InterpolatedBENDR", self.ch_names, **common, **kwargs)
            self._inputs = list(self.ch_names)
        else:
            self.model = _quiet(BENDR, n_chans=len(BENDR_CHANNELS) + 1, **common, **kwargs)
            self._inputs = list(BENDR_CHANNELS)
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            n = self.tokens(torch.zeros(1, len(self.ch_names), self.n_times)).shape[1]
        self.model.train(was)
        self._n_tokens = int(n)

    @property
    def channel_contract(self) -> ChannelContract:
        if self.arch_kwargs.get("interpolate"):
            return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                        n_times=self.n_times)
        return NamedChannelContract(kind="selection", sfreq=self.preprocessing.sfreq, names=BENDR_CHANNELS,
                                    variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.encoder_h)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"bendr was built for {len(self.ch_names)} input channels, not {n_chans}")
        return self._n_tokens

    def scale_value(self, x: torch.Tensor) -> torch.Tensor:
        """DN3's SCALE value per window, ``(batch,)``: ``2·(min(range / max_scale, 1) - 0.5)``, or 0."""
        if self.max_scale is None:
            return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        rng = x.amax(dim=(1, 2)) - x.amin(dim=(1, 2))
        return 2 * (torch.clamp(rng / self.max_scale, max=1.0) - 0.5)

    @staticmethod
    def minmax(x: torch.Tensor) -> torch.Tensor:
        """DN3 ``min_max_normalize``: jointly over channels and time per window, to [-1, 1]."""
        lo = x.amin(dim=(1, 2), keepdim=True)
        hi = x.amax(dim=(1, 2), keepdim=True)
        span = torch.where(hi - lo == 0, torch.full_like(hi, 1e-6), hi - lo)
        return 2 * ((x - lo) / span - 0.5)

    def model_input(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """The 20-channel model input ``(batch, 20, n_times)``: normalised EEG channels, then SCALE."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = _gather(self.name, x, names, self._inputs)
        _check_time(self.name, x, self.n_times)
        scale = self.scale_value(x)
        x = self.minmax(x)
        if self.interpolate:
            x = self.model.interpolation_layer(x)[:, : len(BENDR_CHANNELS)]
        s = scale.view(-1, 1, 1).expand(-1, 1, x.shape[-1])
        return torch.cat([x, s], dim=1)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Contextualiser output ``(batch, n_chans, n_times)`` → ``(batch, T' + 1, 512)`` (start token first)."""
        inp = self.model_input(x, ch_names)
        with _no_mha_fastpath():
            context = self.model.contextualizer(self.model.encoder(inp))  # (B, 512, T' + 1)
        return context.transpose(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.contextualizer.transformer_layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(T' + 1, batch, 1536)`` → ``(batch, T' + 1, 1536)``."""
        return out.transpose(0, 1)


# --------------------------------------------------------------------------------------------- SignalJEPA
@BACKBONES.register("signal_jepa")
class SignalJEPAAdapter(BackboneAdapter):
    """braindecode ``SignalJEPA_Contextual`` [Guetschel2024]_: per-channel conv features + spatial attention.

    A convolutional feature encoder turns each channel into a sequence of local features (one per second at
    128 Hz: ``P = 3`` for 4 s), each gets a channel embedding (initialised from its 3-D position) and a temporal
    encoding, and a transformer encoder attends across all (channel, time) tokens. ``tokens`` returns its output
    ``(batch, C·P, 64)``, channel-major, before braindecode's separable classifier (replaced by the head).

    Channels: positions from MNE's standard 10-05 montage (``chs_info``), fixed after construction (the
    contextual model's channel embedding table is indexed by build position). ``channel_embedding="scratch"``
    (default) builds the table from the dataset's positions (hub ``braindecode/signal-jepa_without-chans``);
    ``"pretrain_aligned"`` uses the 62 pretraining channels' table (hub ``braindecode/signal-jepa``; every channel
    must be one of them). ``interpolate=True`` uses braindecode's ``InterpolatedSignalJEPA`` (spline onto the 62).

    Preprocessing: 128 Hz, 0.5–40 Hz band-pass, µV (braindecode SignalJEPA docs: "Pre-trained at 128 Hz on EEG
    bandpass-filtered between 0.5 and 40 Hz and rescaled by a factor of 10^6").

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 128 Hz.
    n_outputs : int
        Passed to braindecode.
    interpolate : bool
        Use ``InterpolatedSignalJEPA``.
    **kwargs
        ``SignalJEPA_Contextual`` arguments (``channel_embedding``, ``transformer__num_encoder_layers``,
        ``transformer__d_model``, ``transformer__nhead``, ``feature_encoder__conv_layers_spec``, ...).

    Notes
    -----
    The unused transformer decoder of ``nn.Transformer`` (pretraining only) is removed; its checkpoint keys are
    dropped at load and reported. ``blocks`` are ``transformer.encoder.layers`` (8). ``lora_targets``:
    ``self_attn``, ``linear1``, ``linear2``; torch's fused fast path (which would bypass adapters in eval mode) is
    disabled inside ``tokens``.

    References
    ----------
    .. [Guetschel2024] Guetschel, Moreau, Tangermann (2024). S-JEPA: towards seamless cross-dataset transfer
       through dynamic spatial attention. 9th Graz BCI Conference.
    """

    name = "signal_jepa"
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=0.5, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0, reference="average",
        source="Guetschel et al. 2024 (S-JEPA) and braindecode SignalJEPA docs: 128 Hz, 0.5-40 Hz band-pass, "
               "volts x 1e6 (µV)")
    lora_targets: ClassVar[list[str]] = ["self_attn", "linear1", "linear2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "transformer.decoder.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, interpolate: bool = False,
                 **kwargs: Any):
        _check_reserved(self.name, kwargs)
        opts = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import SignalJEPA_Contextual

        self.interpolate = bool(interpolate)
        common = dict(n_times=self.n_times, sfreq=self.preprocessing.sfreq, n_outputs=self.n_outputs)
        if self.interpolate:
            self.model, self.model_ch_names = _interpolated(self.name, "InterpolatedSignalJEPA", self.ch_names,
                                                            **common, **kwargs)
        else:
            self.model = _quiet(SignalJEPA_Contextual, chs_info=_chs_info(self.ch_names), **common, **kwargs)
            self.model_ch_names = list(self.ch_names)
        self.model.final_layer = nn.Identity()
        self.model.transformer.decoder = nn.Identity()
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            self._n_tokens = int(self.tokens(torch.zeros(1, len(self.ch_names), self.n_times)).shape[1])
        self.model.train(was)

    @property
    def channel_contract(self) -> ChannelContract:
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                    n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.transformer.d_model)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"signal_jepa was built for {len(self.ch_names)} channels, not {n_chans}")
        return self._n_tokens

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Contextual features ``(batch, n_chans, n_times)`` → ``(batch, C·P, 64)``."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = _gather(self.name, x, names, self.ch_names)
        _check_time(self.name, x, self.n_times)
        with _no_mha_fastpath():
            return self.model(x, return_features=True)["features"]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.transformer.encoder.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·P, d)`` (batch-first)."""
        return out


# --------------------------------------------------------------------------------------------- LUNA
@BACKBONES.register("luna")
class LUNAAdapter(BackboneAdapter):
    """braindecode ``LUNA`` [Doner2025]_: channel-unifying cross-attention, then a temporal transformer.

    Each channel is cut into patches of 40 samples (CNN + FFT features, plus a NeRF encoding of the electrode's
    3-D position); at every patch a set of ``Q = 4`` learned queries cross-attends to all channels, so the
    temporal transformer sees one token per patch whatever the montage. ``tokens`` returns its normalised output
    ``(batch, P, Q·D)`` = ``(batch, n_times // 40, 256)`` (the input to LUNA's classification head), independent
    of the number of channels.

    **Channels.** Variable: positions from MNE's standard 10-05 montage are passed explicitly at every forward
    (braindecode would otherwise fall back to evenly spaced dummy locations); any subset at inference removes
    channels truly. LUNA min–max normalises the positions over the montage.

    Preprocessing: 256 Hz, 0.1–75 Hz band-pass with mains notch, 5-s windows (1280 samples, 32 patches), as in
    LUNA's TUEG + Siena pretraining (NeuralBench's LUNA page: "pretrained on TUEG plus Siena at 256 Hz"; patch 40
    samples). Amplitudes in µV; the paper's amplitude normalisation could not be checked offline.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 256 Hz, a multiple of ``patch_size`` (40).
    n_outputs : int
        Passed to braindecode.
    **kwargs
        ``LUNA`` arguments (``embed_dim``, ``num_queries``, ``depth``, ``num_heads``, ``patch_size``, ...).

    Notes
    -----
    ``blocks`` are ``blocks`` (8 rotary transformer blocks, output ``(batch, P, Q·D)``). ``lora_targets``:
    ``attn.qkv_proj``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2`` of those blocks.

    References
    ----------
    .. [Doner2025] Döner, Ingolfsson, Benini, Li (2025). LUNA: efficient and topology-agnostic foundation model for
       EEG signal analysis. NeurIPS.
    """

    name = "luna"
    preprocessing = Preprocessing(
        sfreq=256.0, l_freq=0.1, h_freq=75.0, scale=1e6, unit="µV", window_s=5.0, reference="average",
        source="Doner et al. 2025 (LUNA) pretraining on TUEG + Siena: 256 Hz, 0.1-75 Hz, notch, 5-s windows, "
               "patch 40 samples (amplitude normalisation: see paper, not verified offline)")
    lora_targets: ClassVar[list[str]] = ["attn.qkv_proj", "attn.proj", "mlp.fc1", "mlp.fc2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "decoder_head.", "channel_emb.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channels=None, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        opts = {"channels": list(channels)} if channels is not None else {}
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import LUNA

        self.model_ch_names = _resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names)
        self.model = _quiet(LUNA, n_chans=len(self.model_ch_names), n_times=self.n_times,
                            n_outputs=max(int(self.n_outputs), 1), chs_info=_chs_info(self.model_ch_names), **kwargs)
        self.model.final_layer = nn.Identity()

    @property
    def channel_contract(self) -> ChannelContract:
        patch = int(self.arch_kwargs.get("patch_size", 40))
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=True,
                                    n_times=self.n_times, patch=patch)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim * self.model.num_queries)

    def n_tokens(self, n_chans: int | None = None) -> int:
        """``n_times // patch_size`` whatever the channel count."""
        return self.n_times // int(self.model.patch_size)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Latent tokens ``(batch, n_chans, n_times)`` → ``(batch, P, Q·D)``."""
        x, names = _variable_inputs(self, x, ch_names)
        with _no_mha_fastpath():  # its channel-unification block uses torch's TransformerEncoder
            return self.model(x, channel_locations=_positions_tensor(names, x.shape[0], x))

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.blocks)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, P, Q·D)``."""
        return out

    def adapt_state_dict(self, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Rename the released checkpoint's keys with braindecode's ``LUNA.mapping`` (reported)."""
        notes = []
        mapping = getattr(self.model, "mapping", {})
        out = {}
        for k, v in state.items():
            if k in mapping and mapping[k] not in state:
                notes.append(f"{k} -> {mapping[k]} (braindecode LUNA.mapping)")
                out[mapping[k]] = v
            else:
                out[k] = v
        return out, notes


# --------------------------------------------------------------------------------------------- EEG-DINO
EEGDINO_CHANNELS = BENDR_CHANNELS
"""Default 19 channels of the ``eegdino`` adapter (standard 10-20 set, one per embedding slot, in this order)."""


@BACKBONES.register("eegdino")
class EEGDINOAdapter(BackboneAdapter):
    """braindecode ``EEGDINO`` [Wang2025eegdino]_: CBraMod-style patch embedding, ViT encoder, global token.

    Each channel is cut into 1-s patches (200 samples) embedded by CBraMod's time-frequency embedding plus a
    one-hot *slot* embedding (input channel ``i`` → slot ``i`` of ``n_channel_embeddings = 19``) and a depthwise
    temporal convolution; a global token joins after the first layer. ``tokens`` returns the patch tokens
    ``(batch, C·P, 200)`` (``include_cls=True`` prepends the global token).

    **Channels.** Slots are positional, not named, so the channel set and order are fixed at construction
    (``channels``, default the 19 10-20 channels of :data:`EEGDINO_CHANNELS`, selected and reordered by name; at
    most 19). The order of the released checkpoint's slots could not be checked offline.

    Preprocessing: 200 Hz, 0.3–75 Hz band-pass with notch, amplitudes in 100 µV (braindecode EEG-DINO docs:
    "pre-trained on EEG in microvolts scaled by 1/100"; the band follows CBraMod, whose embedding and
    preprocessing EEG-DINO reuses).

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels.
    n_times : int
        Window length in samples at 200 Hz, a multiple of 200.
    n_outputs : int
        Passed to braindecode.
    channels : list of str, optional
        The (at most ``n_channel_embeddings``) channels, in slot order.
    include_cls : bool
        Prepend the global token.
    **kwargs
        ``EEGDINO`` arguments (``n_layer``, ``nhead``, ``dim_feedforward``, ``drop_prob``, ...).

    Notes
    -----
    ``lora_targets``: ``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2``. braindecode's attention calls
    ``F.linear(x, self.qkv.weight, bias)``; every attention module is re-classed (``_EEGDINOAttention``) to call
    ``self.qkv(x) + bias`` instead, so an adapter on ``qkv`` is used (identical outputs: tested). ``blocks`` are
    ``encoder_layers`` (12).

    References
    ----------
    .. [Wang2025eegdino] Wang et al. (2025). EEG-DINO: learning EEG foundation models via hierarchical
       self-distillation. MICCAI.
    """

    name = "eegdino"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.3, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0, reference="average",
        source="braindecode EEGDINO docs (Wang et al. 2025): 200 Hz, microvolts / 100; band 0.3-75 Hz as CBraMod, "
               "whose tokenizer EEG-DINO reuses")
    lora_targets: ClassVar[list[str]] = ["attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channels=None,
                 include_cls: bool = False, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        opts: dict = {"include_cls": bool(include_cls)}
        if channels is not None:
            opts["channels"] = list(channels)
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import EEGDINO

        self.include_cls = bool(include_cls)
        self.model_ch_names = self._selected()
        self.model = _quiet(EEGDINO, n_chans=len(self.model_ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, **kwargs)
        self.model.final_layer = nn.Identity()
        _patch_qkv_attention(self.model, _patched_attention("eegdino"))
        self._n_patches = self.n_times // 200

    def _selected(self) -> list[str]:
        return _resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names,
                                 default=list(EEGDINO_CHANNELS))

    @property
    def channel_contract(self) -> ChannelContract:
        return NamedChannelContract(kind="selection", sfreq=self.preprocessing.sfreq, names=tuple(self._selected()),
                                    variable=False, n_times=self.n_times, patch=200)

    @property
    def d_model(self) -> int:
        return int(self.model.emb_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"eegdino was built for {len(self.ch_names)} input channels, not {n_chans}")
        return len(self.model_ch_names) * self._n_patches + int(self.include_cls)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Patch tokens ``(batch, n_chans, n_times)`` → ``(batch, C·P [+1], 200)``."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = _gather(self.name, x, names, self.model_ch_names)
        _check_time(self.name, x, self.n_times)
        out = self.model(x, return_features=True)
        feats = out["features"]
        if self.include_cls:
            feats = torch.cat([out["cls_token"].unsqueeze(1), feats], dim=1)
        return feats

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder_layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, [G +] C·P, d)`` → tokens as :meth:`tokens` orders them."""
        n_patch = len(self.model_ch_names) * self._n_patches
        g = out.shape[1] - n_patch
        if g == 0:
            return out
        return out[:, g - 1:] if self.include_cls else out[:, g:]


# --------------------------------------------------------------------------------------------- CodeBrain
@BACKBONES.register("codebrain")
class CodeBrainAdapter(_FixedMontageMixin, BackboneAdapter):
    """braindecode ``CodeBrain`` [Ding2025]_ (EEGSSM backbone): patch embedding, SGConv SSM + sliding attention.

    The window is cut into 1-s patches (200 samples) per channel, embedded by a convolutional + spectral
    tokenizer with a depthwise convolutional positional encoding over (channel, patch), and processed as one
    sequence of ``C·P`` steps by residual blocks (structured state-space convolution + sliding-window attention,
    summed skip connections). ``tokens`` returns the normalised output ``(batch, C·P, 200)``, channel-major.

    Channels: fixed set and order (the positional convolution runs over the channel axis, as CBraMod's).

    Preprocessing: 200 Hz, 0.3–75 Hz band-pass with notch, amplitudes in 100 µV, following CBraMod's TUEG
    pipeline which CodeBrain's code builds on (not re-verified offline).

    Parameters
    ----------
    ch_names : list of str
        Any channels (fixed after construction).
    n_times : int
        Window length in samples at 200 Hz, a multiple of 200.
    n_outputs : int
        Passed to braindecode.
    **kwargs
        ``CodeBrain`` arguments (``num_res_layers``, ``res_channels``, ``skip_channels``, ``out_channels``,
        ``s4_lmax``, ``s4_d_state``, ...).

    Notes
    -----
    braindecode's pretraining heads ``lm_head_t`` / ``lm_head_f`` and classifier are removed (their checkpoint
    keys are dropped and reported). ``blocks`` are ``residual_layer.residual_blocks`` (8); a block returns
    ``(residual, skip)``, both ``(batch, 200, C·P)``; only the skips reach the output, so the last block's
    residual branch (``res_conv``, its ``rms_norm``) is unused by braindecode's forward (it gets no gradient).
    ``lora_targets``: each block's input expansion ``conv_layer.conv``, the SSM output ``sgconv.output_linear``
    and the skip projection ``skip_conv`` (all on the path to the output).

    References
    ----------
    .. [Ding2025] Ding et al. (2025). CodeBrain: scalable code EEG pre-training for unified downstream BCI tasks.
       arXiv:2506.09110.
    """

    name = "codebrain"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.3, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0, reference="average",
        source="Ding et al. 2025 (CodeBrain), TUEG pretraining at 200 Hz with 1-s patches; band and 100-µV unit as "
               "CBraMod's pipeline that CodeBrain's code builds on (not re-verified offline)")
    lora_targets: ClassVar[list[str]] = ["conv_layer.conv", "sgconv.output_linear", "skip_conv"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "lm_head_t.", "lm_head_f.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        from braindecode.models import CodeBrain

        self.model = _quiet(CodeBrain, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            **kwargs)
        self.model.final_layer = nn.Identity()
        self.model.lm_head_t = nn.Identity()
        self.model.lm_head_f = nn.Identity()
        self._n_patches = self.n_times // int(self.model.patch_size)

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times,
                               patch=int(self.arch_kwargs.get("patch_size", 200)))

    @property
    def d_model(self) -> int:
        return int(self.model.out_channels)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"codebrain was built for {len(self.ch_names)} channels, not {n_chans}")
        return len(self.ch_names) * self._n_patches

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """``(batch, n_chans, n_times)`` → ``(batch, C·P, 200)``."""
        self._check_same_montage(x, ch_names)
        _check_time(self.name, x, self.n_times)
        return self.model(x, return_features=True)["features"].flatten(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.residual_layer.residual_blocks)

    def block_to_tokens(self, out) -> torch.Tensor:
        """Block output ``(residual, skip)``, each ``(batch, d, C·P)`` → residual stream ``(batch, C·P, d)``."""
        res = out[0] if isinstance(out, tuple) else out
        return res.transpose(1, 2)

    def adapt_state_dict(self, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Apply braindecode ``CodeBrain.load_state_dict``'s key remapping for upstream checkpoints (reported).

        ``module.`` prefix removed; ``.S41.`` → ``.sgconv.``; ``.sn.`` → ``.rms_norm.``; ``.D`` → ``.skip_weight``;
        ``.kernel_list.N.kernel`` → ``.kernel_list.N``; ``weight_g`` / ``weight_v`` → weight-norm
        ``parametrizations.weight.original0`` / ``original1``.
        """
        import re

        out, n = {}, 0
        for k, v in state.items():
            new = k.removeprefix("module.").replace(".S41.", ".sgconv.").replace(".sn.", ".rms_norm.")
            if new.endswith(".D"):
                new = new[:-2] + ".skip_weight"
            new = re.sub(r"\.kernel_list\.(\d+)\.kernel$", r".kernel_list.\1", new)
            new = new.replace(".weight_g", ".parametrizations.weight.original0")
            new = new.replace(".weight_v", ".parametrizations.weight.original1")
            n += new != k
            out[new] = v
        return out, ([f"{n} keys renamed from the upstream CodeBrain layout (braindecode's remapping)"] if n else [])


# --------------------------------------------------------------------------------------------- ST-EEGFormer
STEEGFORMER_REPO = "braindecode/STEEGFormer-small"
STEEGFORMER_VOCAB_FILE = "steegformer_channels.json"


def steegformer_vocabulary(path: str | os.PathLike | None = None) -> list[str]:
    """ST-EEGFormer's 145-slot channel vocabulary, from a local file (never downloaded).

    Looked up in order: ``path``; ``<checkpoints>/braindecode/STEEGFormer-small/steegformer_channels.json``; the
    Hugging Face cache (``braindecode/STEEGFormer-small``).

    Raises
    ------
    FileNotFoundError
        Naming where to put the file (braindecode downloads it from the hub on first use; offline it cannot).
    """
    from eegfm_bench.models.checkpoints import checkpoint_dir

    tried = []
    cands = [Path(path)] if path is not None else []
    cands.append(checkpoint_dir() / STEEGFORMER_REPO / STEEGFORMER_VOCAB_FILE)
    for c in cands:
        tried.append(str(c))
        if c.is_file():
            return list(json.loads(c.read_text()))
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(STEEGFORMER_REPO, STEEGFORMER_VOCAB_FILE)
        if isinstance(cached, str) and os.path.isfile(cached):
            return list(json.loads(Path(cached).read_text()))
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        pass
    raise FileNotFoundError(
        f"ST-EEGFormer's channel vocabulary is not available offline (tried {tried} and the Hugging Face cache).\n"
        f"fix: download https://huggingface.co/{STEEGFORMER_REPO}/resolve/main/{STEEGFORMER_VOCAB_FILE} to "
        f"{cands[-1]}, or build from random initialisation with channel_slots='build_order'")


@BACKBONES.register("steegformer")
class STEEGFormerAdapter(BackboneAdapter):
    """braindecode ``STEEGFormer`` [Yang2026]_: ViT-MAE encoder over (channel, 16-sample patch) tokens.

    Each channel is cut into patches of 16 samples (32 per channel for 4 s at 128 Hz), linearly embedded, given a
    sinusoidal temporal encoding and a learned channel embedding from a 145-slot montage vocabulary, and encoded
    by a ViT (8 layers, 512 wide for the small variant). ``tokens`` returns the layer-normalised patch tokens
    without the CLS token, reordered channel-major: ``(batch, C·P, 512)``.

    **Channel slots.** ``channel_slots="vocabulary"`` (default) looks each channel up in ST-EEGFormer's
    published vocabulary (:func:`steegformer_vocabulary`, read from a local file; braindecode would download it).
    ``"build_order"`` gives channel ``i`` slot ``i``: only meaningful from random initialisation, so loading a
    pretrained checkpoint into such a build is refused. A list of ints sets the slots explicitly. The channel set
    is fixed after construction (braindecode checks the channel count).

    **Amplitude.** As in the authors' pretraining loader (github.com/LiuyinYang1101/STEEGFormer
    ``pretrain/util/eeg_dataset.py``): µV clipped to ±500, then z-scored per channel and window (``standardize``).

    Preprocessing: 128 Hz (pretraining segments of ``5 * 128`` samples), 0.1–75 Hz band-pass with notch as in
    the authors' downstream configs (capped below Nyquist), µV.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels.
    n_times : int
        Window length in samples at 128 Hz, a multiple of 16.
    n_outputs : int
        Passed to braindecode.
    channel_slots : "vocabulary", "build_order" or list of int
        See above.
    vocabulary_path : path, optional
        Local copy of ``steegformer_channels.json``.
    standardize : bool
        Clip ±500 µV and z-score per channel (default ``True``).
    **kwargs
        ``STEEGFormer`` arguments (``embed_dim``, ``depth``, ``num_heads``, ``patch_size``, ...).

    Notes
    -----
    ``blocks`` are ``encoder`` (8 blocks; output ``(batch, 1 + P·C, d)``, time-major). ``lora_targets``: the
    attention projections ``queries``, ``keys``, ``values``, ``projection``.

    References
    ----------
    .. [Yang2026] Yang, Sun, Li, Van Hulle (2026). Are EEG foundation models worth it? Comparative evaluation
       with traditional decoders in diverse BCI tasks. ICLR.
    """

    name = "steegformer"
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=0.1, h_freq=75.0, scale=1e6, unit="µV, clipped ±500, then z-score per channel",
        window_s=4.0, reference="average",
        source="Yang et al. 2026 (ST-EEGFormer), github.com/LiuyinYang1101/STEEGFormer: pretraining at 128 Hz with "
               "±500 µV clipping and per-channel z-score (inside the adapter); downstream band 0.1-75 Hz + notch")
    lora_targets: ClassVar[list[str]] = ["queries", "keys", "values", "projection"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channel_slots="vocabulary",
                 vocabulary_path: str | None = None, standardize: bool = True, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        if "chan_pos_idx" in kwargs:
            raise TypeError("steegformer: set channel_slots instead of chan_pos_idx")
        slots_opt = channel_slots if isinstance(channel_slots, str) else [int(i) for i in channel_slots]
        opts: dict = {"channel_slots": slots_opt, "standardize": bool(standardize)}
        if vocabulary_path is not None:
            opts["vocabulary_path"] = str(vocabulary_path)
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        from braindecode.models import STEEGFormer

        self.standardize = bool(standardize)
        if slots_opt == "vocabulary":
            vocab = {n.upper(): i for i, n in enumerate(steegformer_vocabulary(vocabulary_path))}
            unknown = [c for c in self.ch_names if c.upper() not in vocab]
            if unknown:
                raise ChannelContractError(f"steegformer's vocabulary has no slot for channels {unknown}; fix: drop "
                                           "them or set channel_slots explicitly")
            slots = [vocab[c.upper()] for c in self.ch_names]
        elif slots_opt == "build_order":
            slots = list(range(len(self.ch_names)))
        elif isinstance(slots_opt, list):
            if len(slots_opt) != len(self.ch_names):
                raise ValueError(f"steegformer: {len(slots_opt)} channel_slots for {len(self.ch_names)} channels")
            slots = slots_opt
        else:
            raise ValueError(f"steegformer: channel_slots must be 'vocabulary', 'build_order' or a list of ints, "
                             f"got {channel_slots!r}")
        self.model = _quiet(STEEGFormer, n_chans=len(self.ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, chan_pos_idx=slots, **kwargs)
        self.model.final_layer = nn.Identity()
        self._n_patches = self.n_times // int(self.model.patch_size)

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times,
                               patch=int(self.arch_kwargs.get("patch_size", 16)))

    def checkpoint_refusal(self, config: dict | None) -> str | None:
        """Why a checkpoint may not be loaded into this build (``None``: it may).

        A ``channel_slots='build_order'`` build gives channel ``i`` embedding slot ``i``; loading weights trained
        with another slot assignment (any hub checkpoint, or a saved build with other slots) would pair channels
        with foreign embeddings. ``config`` is the checkpoint folder's ``config.json`` (``None`` for hub weights).
        """
        ours = self.arch_kwargs.get("channel_slots")
        if ours != "build_order":
            return None
        theirs = (config or {}).get("arch_kwargs", {}).get("channel_slots")
        if theirs == "build_order" and (config or {}).get("ch_names") == list(self.ch_names):
            return None
        return ("steegformer was built with channel_slots='build_order' (channel i -> embedding slot i), which does "
                "not match the checkpoint's slot assignment; fix: build with channel_slots='vocabulary' (needs the "
                "vocabulary file, see steegformer_vocabulary) or explicit slots")

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"steegformer was built for {len(self.ch_names)} channels, not {n_chans}")
        return len(self.ch_names) * self._n_patches

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Clip to ±500 µV, then z-score per channel over the window (the authors' pretraining loader)."""
        if not self.standardize:
            return x
        x = x.clamp(-500.0, 500.0)
        return (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True, unbiased=False) + 1e-8)

    def _channel_major(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        c = len(self.ch_names)
        return t.reshape(b, n // c, c, d).transpose(1, 2).reshape(b, n, d)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Patch tokens ``(batch, n_chans, n_times)`` → ``(batch, C·P, d_model)`` (channel-major)."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = _gather(self.name, x, names, self.ch_names)
        _check_time(self.name, x, self.n_times)
        return self._channel_major(self.model(self.normalise(x), return_features=True)["features"])

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, 1 + P·C, d)`` (CLS, then time-major) → ``(batch, C·P, d)`` (no CLS)."""
        return self._channel_major(out[:, 1:])
