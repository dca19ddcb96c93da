"""eegnet adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any

import torch
from braindecode.models import EEGNet
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.backbones.common import FromScratchBaseline, check_reserved, quiet


class EEGNetAdapter(FromScratchBaseline):
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
        check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        self.model = quiet(EEGNet, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
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
