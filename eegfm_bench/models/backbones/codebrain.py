"""codebrain adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

import re
from typing import Any, ClassVar

import torch
from braindecode.models import CodeBrain
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import FixedMontageMixin, check_reserved, check_time, quiet


class CodeBrainAdapter(FixedMontageMixin, BackboneAdapter):
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
        check_reserved(self.name, kwargs)
        super().__init__(ch_names, n_times, n_outputs, **kwargs)
        self.model = quiet(CodeBrain, n_chans=len(self.ch_names), n_times=self.n_times, n_outputs=self.n_outputs,
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
        check_time(self.name, x, self.n_times)
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
