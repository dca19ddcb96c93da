"""eegpt adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import EEGPT
from braindecode.models.eegpt import EEGPT_CHANNELS
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, check_time, channel_info,
                                                 gather, build_interpolated, quiet, resolve_channels)


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
        check_reserved(self.name, kwargs)
        arch = {"chan_proj_type": chan_proj_type}  # recorded as arch_kwargs: the options given
        if channels is not None:
            arch["channels"] = channels if isinstance(channels, str) else list(channels)
        if interpolate:
            arch["interpolate"] = True
        super().__init__(ch_names, n_times, n_outputs, **arch, **kwargs)
        self.interpolate = bool(interpolate)
        if self.interpolate:
            self.model, self.model_ch_names = build_interpolated(self.name, "InterpolatedEEGPT", self.ch_names,
                                                            n_times=self.n_times, n_outputs=self.n_outputs,
                                                            chan_proj_type="none", **kwargs)
            self._inputs = list(self.ch_names)
        else:
            self.model_ch_names = self._selected()
            self._inputs = self.model_ch_names
            self.model = quiet(EEGPT, n_chans=len(self.model_ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, chs_info=channel_info(self.model_ch_names),
                                chan_proj_type=chan_proj_type, **kwargs)
        self.model.final_layer = nn.Identity()

    def _selected(self) -> list[str]:
        proj = self.arch_kwargs.get("chan_proj_type", "none")
        vocab = EEGPT_CHANNELS if proj == "none" else None
        return resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names, vocab)

    @property
    def input_channels(self) -> list[str]:
        """The dataset channels this model reads (:meth:`~eegfm_bench.models.base.BackboneAdapter.reference_selection`
        re-references them when they are a subset)."""
        return list(self._inputs)

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
        x = gather(self.name, x, names, self._inputs)
        check_time(self.name, x, self.n_times)
        return self.model(x, return_features=True)["features"]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.target_encoder.blocks)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch·P, C + S, D)`` → ``(batch, P·(C + S), D)`` (patch-major)."""
        p = int(self.model.n_patches)
        return out.reshape(out.shape[0] // p, p * out.shape[1], out.shape[2])

