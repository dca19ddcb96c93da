"""eegdino adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import EEGDINO
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.bendr import BENDR_CHANNELS
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, check_time, gather,
                                                 patch_qkv_attention, patched_attention, quiet, resolve_channels)


EEGDINO_CHANNELS = BENDR_CHANNELS
"""Default 19 channels of the ``eegdino`` adapter (standard 10-20 set, one per embedding slot, in this order)."""


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
        check_reserved(self.name, kwargs)
        arch: dict = {"include_cls": bool(include_cls)}  # recorded as arch_kwargs: the options given
        if channels is not None:
            arch["channels"] = list(channels)
        super().__init__(ch_names, n_times, n_outputs, **arch, **kwargs)
        self.include_cls = bool(include_cls)
        self.model_ch_names = self._selected()
        self.model = quiet(EEGDINO, n_chans=len(self.model_ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, **kwargs)
        self.model.final_layer = nn.Identity()
        patch_qkv_attention(self.model, patched_attention("eegdino"))
        self._n_patches = self.n_times // 200

    def _selected(self) -> list[str]:
        return resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names,
                                 default=list(EEGDINO_CHANNELS))

    @property
    def input_channels(self) -> list[str]:
        """The dataset channels this model reads (:meth:`~eegfm_bench.models.base.BackboneAdapter.reference_selection`
        re-references them when they are a subset)."""
        return list(self.model_ch_names)

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
        x = gather(self.name, x, names, self.model_ch_names)
        check_time(self.name, x, self.n_times)
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

