"""cbramod adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import CBraMod
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import FixedMontageMixin, check_reserved, quiet


class CBraModAdapter(FixedMontageMixin, BackboneAdapter):
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
        check_reserved(self.name, kwargs)
        if kwargs.get("patch_size", 200) != 200:
            raise ValueError("cbramod: patch_size must be 200 (braindecode's CBraMod hard-codes 101 rFFT bins)")
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        self.model = quiet(CBraMod, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
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

