"""Shared helpers of the backbone adapters (channel selection, fixed montages, LaBraM-style q/k/v patch)."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import braindecode.models as bm
import torch
from braindecode.models.eegdino import _Attention as EEGDINOAttention
from braindecode.models.labram import _Attention as LabramAttention
from torch import nn

from eegfm_bench.data.montage import positions, standard_1005
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError


_RESERVED = ("n_chans", "n_times", "n_outputs", "sfreq", "chs_info", "input_window_seconds")


def check_reserved(name: str, kwargs: dict) -> None:
    """Refuse model kwargs the adapter sets itself (:data:`_RESERVED`: channels, window length, outputs, rate).

    Raises
    ------
    TypeError
        When ``kwargs`` holds one of them."""
    bad = sorted(set(kwargs) & set(_RESERVED))
    if bad:
        raise TypeError(f"{name}: {bad} are set by the adapter from ch_names / n_times / the declared "
                        "preprocessing and cannot be overridden; fix: remove them from the model kwargs")


def quiet(factory, *args, **kwargs):
    """Build a braindecode model, silencing its deprecation chatter (not its errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return factory(*args, **kwargs)


class FixedMontageMixin:
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
            pos = standard_1005().get_positions()["ch_pos"]
            bad = [c for c in ch_names if c not in pos]
            if bad:
                raise ChannelContractError(
                    f"{model} embeds electrode positions, but channels {bad} have no standard 10-05 position; fix: "
                    "rename them to canonical 10-05 names (data.montage.canonical_names) or drop them")


def channel_info(names: list[str]) -> list[dict]:
    """braindecode ``chs_info`` for 10-05 names: ``{"ch_name", "kind": "eeg", "loc": (x, y, z) in metres}``."""
    return [{"ch_name": n, "kind": "eeg", "loc": np.asarray(p, dtype=float)}
            for n, p in zip(names, positions(list(names)))]


def positions_tensor(names: list[str], batch: int, like: torch.Tensor) -> torch.Tensor:
    """MNE standard 10-05 positions (metres) of ``names`` as ``(batch, n_chans, 3)`` on ``like``'s device/dtype."""
    pos = torch.as_tensor(positions(list(names)), dtype=like.dtype, device=like.device)
    return pos.unsqueeze(0).expand(batch, -1, -1)


def resolve_channels(model: str, spec, ch_names: list[str], vocabulary=None, default=None) -> list[str]:
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


def gather(model: str, x: torch.Tensor, ch_names: list[str], wanted: list[str]) -> torch.Tensor:
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


def check_time(model: str, x: torch.Tensor, n_times: int) -> None:
    """Refuse a batch ``x`` (..., time) whose length is not the ``n_times`` samples the backbone was built for.

    Raises
    ------
    ChannelContractError
        On another window length."""
    if x.shape[-1] != n_times:
        raise ChannelContractError(f"{model} was built for windows of {n_times} samples, got {x.shape[-1]}; fix: "
                                   "use the backbone's declared window length (Preprocessing.window_s)")


def variable_inputs(adapter, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str]]:
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
    check_time(adapter.name, x, adapter.n_times)
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
def no_mha_fastpath():
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


def build_interpolated(model: str, cls_name: str, src_names: list[str], **kwargs):
    """Build braindecode's ``Interpolated<cls_name>`` for the source montage ``src_names``.

    Returns
    -------
    model : nn.Module
        Its frozen ``interpolation_layer`` (MNE spherical-spline matrix, non-persistent buffer) maps the source
        channels onto the model's canonical channels before the backbone.
    targets : list of str
        The canonical channel names the backbone sees.
    """
    cls = getattr(bm, cls_name)
    net = quiet(cls, chs_info=channel_info(src_names), **kwargs)
    return net, [c["ch_name"] for c in cls._TARGET_CHS_INFO]


# --------------------------------------------------------------------------------------------- EEGNet
class FromScratchBaseline(FixedMontageMixin, BackboneAdapter):
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


def patch_qkv_attention(model: nn.Module, patched: type) -> int:
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


def patched_attention(kind: str) -> type:
    """The re-classed attention type for ``kind`` in {"labram", "eegdino"} (created on first use).

    A subclass of braindecode's private ``_Attention`` of that model whose ``forward`` calls ``self.qkv`` as a
    module; it is registered as a module global (``_LabramAttention`` / ``_EEGDINOAttention``) so instances
    pickle by name.
    """
    if kind not in _PATCHED:
        if kind == "labram":
            base = LabramAttention
            fwd, name = _labram_attention_forward, "_LabramAttention"
        elif kind == "eegdino":
            base = EEGDINOAttention
            fwd, name = _eegdino_attention_forward, "_EEGDINOAttention"
        else:  # pragma: no cover - internal
            raise KeyError(kind)
        cls = type(name, (base,), {"forward": fwd, "__module__": __name__,
                                   "__doc__": f"braindecode {kind} attention calling ``self.qkv`` as a module."})
        cls.__qualname__ = name
        globals()[name] = cls
        _PATCHED[kind] = cls
    return _PATCHED[kind]

