"""A backbone: a small convolutional encoder trained from scratch. Each channel's signal is cut into 0.5 s patches
embedded by one shared convolution; a second convolution mixes the channels; the tokens are the patches
``(batch, n_patches, d_model)``."""
from __future__ import annotations

import torch
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.base import BackboneAdapter, ChannelContract


@BACKBONES.register("patch_conv")
class PatchConvAdapter(BackboneAdapter):
    """Patch embedding per channel, then a channel-mixing convolution.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (any names; fixed after construction).
    n_times : int
        Window length in samples at 128 Hz.
    n_outputs : int
        Number of classes (the pooling head classifies; unused here).
    d_model : int
        Features per token.
    """

    name = "patch_conv"
    is_foundation_model = False  # trained from scratch: no pretrained weights, no LoRA targets
    preprocessing = Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0,
                                  reference="average", source="the example's own choice (µV, 1-40 Hz, 128 Hz)")

    def __init__(self, ch_names, n_times, n_outputs=2, d_model: int = 8):
        super().__init__(ch_names, n_times, n_outputs, d_model=d_model)  # kwargs are recorded in arch_kwargs
        self.patch = 64  # 0.5 s at 128 Hz
        self._d = d_model
        self.embed = nn.Conv1d(1, d_model, kernel_size=self.patch, stride=self.patch)
        self.mix = nn.Sequential(nn.Conv2d(d_model, d_model, kernel_size=(len(self.ch_names), 1)), nn.GELU())

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return self._d

    def n_tokens(self, n_chans=None) -> int:
        return self.n_times // self.patch

    def tokens(self, x: torch.Tensor, ch_names=None) -> torch.Tensor:
        """``(batch, n_chans, n_times)`` µV -> ``(batch, n_times // 64, d_model)``."""
        b, c, t = x.shape
        z = self.embed(x.reshape(b * c, 1, t))  # (batch * chans, d_model, patches)
        z = z.reshape(b, c, self._d, -1).transpose(1, 2)  # (batch, d_model, chans, patches)
        return self.mix(z).squeeze(2).transpose(1, 2)  # (batch, patches, d_model)

    @property
    def blocks(self) -> list[nn.Module]:  # the modules the block-wise probes hook, in forward order
        return [self.mix]

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """The hooked block's output ``(batch, d_model, 1, patches)`` as ``(batch, patches, d_model)``."""
        return out.squeeze(2).transpose(1, 2)
