"""labram adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import Labram
from braindecode.models.labram import LABRAM_CHANNEL_ORDER
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, gather,
                                                 build_interpolated, patch_qkv_attention, patched_attention, quiet)


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
        check_reserved(self.name, kwargs)
        # include_cls / interpolate are recorded in arch_kwargs (config / checkpoint / token-cache keys)
        extra = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, include_cls=bool(include_cls), **extra, **kwargs)
        self.include_cls = bool(include_cls)
        self.interpolate = bool(interpolate)
        if self.interpolate:
            self.model, self._targets = build_interpolated(self.name, "InterpolatedLaBraM", self.ch_names,
                                                      n_times=self.n_times, n_outputs=self.n_outputs, **kwargs)
        else:
            self.model = quiet(Labram, n_chans=len(self.ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, **kwargs)
            self._targets = None
        self.model.final_layer = nn.Identity()
        patch_qkv_attention(self.model, patched_attention("labram"))
        self._patch = int(self.model.patch_size)
        self._n_patches = self.n_times // self._patch

    @property
    def channel_contract(self) -> ChannelContract:
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
            x = gather(self.name, x, names, self.ch_names)
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

