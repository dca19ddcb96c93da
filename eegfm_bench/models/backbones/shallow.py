"""shallow adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any

import torch
from braindecode.models import ShallowFBCSPNet
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.backbones.common import FromScratchBaseline, check_reserved, check_time, quiet


class ShallowFBCSPNetAdapter(FromScratchBaseline):
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
        check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        self.model = quiet(ShallowFBCSPNet, n_chans=len(self.ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, **kwargs)
        self._probe_shape(time_axis=2)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """``(batch, n_chans, n_times)`` → ``(batch, T', n_filters)``."""
        self._check_same_montage(x, ch_names)
        check_time(self.name, x, self.n_times)
        return self.block_to_tokens(self.model(x))

    @property
    def blocks(self) -> list[nn.Module]:
        return [self.model.conv_time_spat, self.model.drop]

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """``(batch, F, time, 1)`` → ``(batch, time, F)``."""
        return out.squeeze(-1).transpose(1, 2)

