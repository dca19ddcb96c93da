"""Backbone adapters over braindecode models (DESIGN.md "Backbone adapter").

Each adapter wraps one braindecode model, built for the dataset's montage, and exposes the representation
before any pooling as ``tokens(x, ch_names) -> (batch, n_tokens, d_model)``. The braindecode model's own
classifier (``final_layer``) is replaced by :class:`torch.nn.Identity`: classification is the job of the
pooling heads (:mod:`eegfm_bench.models.heads`). A pretrained checkpoint's ``final_layer.*`` weights are
therefore dropped explicitly at load time (each adapter's ``checkpoint_drop``; braindecode's hub
checkpoints ship that head randomly initialised).

Beyond the base contract, adapters define ``block_to_tokens(block_output)`` (reshape a hooked block output
to ``(batch, n_tokens_b, d_b)``), ``checkpoint_drop`` / ``adapt_state_dict`` (used by
:mod:`eegfm_bench.models.checkpoints`). Adapter options that are not braindecode arguments (``include_cls``, ``percentile_norm``) are recorded
in ``arch_kwargs`` too, so configs, checkpoints and token-cache keys capture them.

Registered adapters (``BACKBONES.get(name)``):

======= ===== =========================== =============================== =========================== ========
name    sfreq input unit                  tokens                          blocks                      channels
======= ===== =========================== =============================== =========================== ========
eegnet  128   µV                          (B, T', F2), T' = n_times // 32 ``drop_1``, ``drop_2`` (2)  fixed
labram  200   100 µV (= 0.1 mV)           (B, C·P [+1 CLS], 200)          ``blocks`` (12)             by name
cbramod 200   100 µV                      (B, C·P, 200)                   ``encoder.layers`` (12)     fixed
biot    200   µV, then ÷ q95(|x|) per ch. (B, C·F, 256), F STFT frames    transformer layers (4)      subset
======= ===== =========================== =============================== =========================== ========

(B = batch, C = channels, P = n_times // 200 patches; tokens are channel-major: token ``k`` is channel
``k // P``, patch ``k % P``.)

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
"""
from __future__ import annotations

import warnings
from typing import Any, ClassVar

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


# --------------------------------------------------------------------------------------------- EEGNet
@BACKBONES.register("eegnet")
class EEGNetAdapter(_FixedMontageMixin, BackboneAdapter):
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
    is_foundation_model = False
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0, reference="average",
        source="Lawhern et al. 2018 (EEGNet), data section: resampled to 128 Hz, band-pass 1-40 Hz (P300/ERN); µV")
    lora_targets: ClassVar[list[str]] = []
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs: Any):
        _check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        from braindecode.models import EEGNet

        self.model = _quiet(EEGNet, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            **kwargs)
        self.model.final_layer = nn.Identity()
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model(torch.zeros(1, len(self.ch_names), self.n_times))
        self.model.train(was)
        self._d_model, self._n_tokens = int(out.shape[1]), int(out.shape[-1])

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        """F2 (16 by default)."""
        return self._d_model

    def n_tokens(self, n_chans: int | None = None) -> int:
        """Pooled time steps ``T'`` (independent of the channel count, which is fixed)."""
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"eegnet was built for {len(self.ch_names)} channels, not {n_chans}")
        return self._n_tokens

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

    Notes
    -----
    ``lora_targets`` are ``attn.proj``, ``mlp.0`` and ``mlp.2`` (attention output projection and the two MLP
    layers). Not ``qkv``: braindecode's attention calls ``F.linear(x, self.qkv.weight)``, bypassing the
    module, so a LoRA wrapper there would receive no gradient and change nothing (ENVIRONMENT.md).
    """

    name = "labram"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0, reference="average",
        source="Jiang et al. 2024 (LaBraM) pre-training preprocessing and braindecode Labram docs: "
               "0.1-75 Hz band-pass, notch, 200 Hz, amplitudes in 0.1 mV units")
    lora_targets: ClassVar[list[str]] = ["attn.proj", "mlp.0", "mlp.2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, include_cls: bool = False,
                 **kwargs: Any):
        _check_reserved(self.name, kwargs)
        # include_cls is recorded in arch_kwargs (config / checkpoint / token-cache keys), not passed to braindecode
        super().__init__(ch_names, n_times, n_outputs, include_cls=bool(include_cls), **kwargs)
        from braindecode.models import Labram

        self.include_cls = bool(include_cls)
        self.model = _quiet(Labram, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            **kwargs)
        self.model.final_layer = nn.Identity()
        self._patch = int(self.model.patch_size)
        self._n_patches = self.n_times // self._patch

    @property
    def channel_contract(self) -> ChannelContract:
        from braindecode.models.labram import LABRAM_CHANNEL_ORDER

        patch = int(self.arch_kwargs.get("patch_size", 200))
        return ChannelContract(kind="names", sfreq=self.preprocessing.sfreq, names=tuple(LABRAM_CHANNEL_ORDER),
                               variable=True, n_times=self.n_times, patch=patch)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
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

    **Montage (spine version).** The pretrained BIOT checkpoints expect the 16- or 18-channel bipolar
    (double-banana) montage; each position of that montage has a learned channel token. Here the model is
    built with the dataset's *monopolar* channels as BIOT's ``n_chans`` (one channel token per dataset
    channel, in order), which is what a from-scratch or fully fine-tuned BIOT sees. Any subset of the build
    channels is accepted at inference (each channel keeps its own channel token), so *removed*-channel dropout
    works. Loading a 16/18-channel pretrained checkpoint into a monopolar build fails at the strict load
    (``encoder.channel_tokens.weight`` shape); the bipolar builder comes in a later issue.

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
        "spine build gives one channel token per monopolar dataset channel, so encoder.channel_tokens differs "
        "until the bipolar montage builder lands")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, percentile_norm: bool = True,
                 **kwargs: Any):
        _check_reserved(self.name, kwargs)
        # percentile_norm is recorded in arch_kwargs (config / checkpoint / token-cache keys), not passed to braindecode
        super().__init__(ch_names, n_times, n_outputs, percentile_norm=bool(percentile_norm), **kwargs)
        from braindecode.models import BIOT

        self.percentile_norm = bool(percentile_norm)
        self.model = _quiet(BIOT, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
                            sfreq=int(self.preprocessing.sfreq), **kwargs)
        self.model.final_layer = nn.Identity()
        transformer = self.model.encoder.transformer
        transformer.layers = _BIOTLayers(transformer.layers.layers)
        self._channel_index = {c: i for i, c in enumerate(self.ch_names)}

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=True,
                               n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def _frames(self, n_times: int) -> int:
        enc = self.model.encoder
        return (n_times - enc.n_fft) // enc.hop_length + 1

    def n_tokens(self, n_chans: int | None = None) -> int:
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
            raise ChannelContractError(f"biot: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        unknown = [c for c in names if c not in self._channel_index]
        if unknown:
            raise ChannelContractError(
                f"biot was built with channel tokens for {self.ch_names}; it has none for {unknown}; fix: build "
                "the backbone on a montage that contains them")
        if self.percentile_norm:
            x = self.normalise(x)
        enc = self.model.encoder
        captured: list[torch.Tensor] = []
        hook = enc.transformer.register_forward_hook(lambda _m, _i, out: captured.append(out))
        saved_index = enc.index
        try:
            if names != self.ch_names:  # each input channel keeps its own channel token
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
