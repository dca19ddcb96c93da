"""bendr adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import BENDR
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, check_time,
                                                 gather, build_interpolated, no_mha_fastpath, quiet)


BENDR_CHANNELS = ("Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8", "P7", "P3", "Pz", "P4",
                  "P8", "O1", "O2")
"""BENDR's 19 pretraining EEG channels in checkpoint order (braindecode ``BENDR_CHANNEL_ORDER`` without SCALE;
its legacy T5/T6 are P7/P8 in 10-05 names, same positions in MNE's ``standard_1005``)."""


class BENDRAdapter(BackboneAdapter):
    """braindecode ``BENDR`` [Kostas2021]_: convolutional encoder (÷96 in time) and a transformer contextualiser.

    Input: BENDR's 19 10-20 channels selected and reordered by name (:data:`BENDR_CHANNELS`) plus the SCALE
    channel, 20 in all, as its checkpoint expects. As in DN3's ``MappingDeep1010`` (Kostas et al.'s
    pretraining code), each window is min–max normalised to [-1, 1] jointly over its EEG channels and SCALE is the
    constant ``2 · (min((max - min) / max_scale, 1) - 0.5)``, the window's amplitude range relative to the
    dataset's (``max_scale`` in µV; with ``max_scale=None`` SCALE is 0, DN3's value when a dataset has no scale
    information).

    ``tokens`` returns the contextualiser output ``(batch, T' + 1, 512)``: token 0 is the output at BENDR's fixed
    start token (its aggregate representation for downstream tasks), tokens ``1..T'`` one per encoded step of
    the ÷96 convolutional encoder (``T' = 11`` for 4 s at 256 Hz, so 12 tokens; computed at construction).

    Preprocessing: 256 Hz (BENDR's TUEG pretraining rate), µV before the normalisation; no band-pass (none is
    part of DN3's pretraining transforms as far as could be checked offline), 4-s windows.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels; must contain the 19 of :data:`BENDR_CHANNELS` (``interpolate=False``).
    n_times : int
        Window length in samples at 256 Hz.
    n_outputs : int
        Passed to braindecode.
    max_scale : float or None
        The dataset's amplitude range in µV for the SCALE channel (see above).
    interpolate : bool
        Use braindecode's ``InterpolatedBENDR`` (spline from any 10-05 montage onto the 19 channels; the SCALE
        channel is then set to the statistic above, not braindecode's spline placeholder).
    **kwargs
        ``BENDR`` arguments (``encoder_h``, ``transformer_layers``, ``transformer_heads``, ``drop_prob``,
        ``contextualizer_hidden``, ...).

    Notes
    -----
    ``blocks`` are ``contextualizer.transformer_layers`` (8; output ``(T' + 1, batch, 1536)``). ``lora_targets``:
    ``self_attn`` (the ``MultiheadAttention`` modules), ``linear1``, ``linear2``. torch's fused transformer fast
    path is disabled inside ``tokens`` so adapters are used in eval mode too.

    References
    ----------
    .. [Kostas2021] Kostas, Aroca-Ouellette, Rudzicz (2021). BENDR: using transformers and a contrastive
       self-supervised learning task to learn from massive amounts of EEG data. Front. Hum. Neurosci. 15:653659.
    """

    name = "bendr"
    preprocessing = Preprocessing(
        sfreq=256.0, l_freq=None, h_freq=None, scale=1e6,
        unit="µV, then min-max to [-1, 1] per window + SCALE channel", window_s=4.0, reference="average",
        source="Kostas et al. 2021 (BENDR) and DN3 MappingDeep1010/To1020: 256 Hz TUEG pretraining, per-window "
               "min-max to [-1, 1] with a relative-amplitude SCALE channel (applied inside the adapter)")
    lora_targets: ClassVar[list[str]] = ["self_attn", "linear1", "linear2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, max_scale: float | None = None,
                 interpolate: bool = False, **kwargs: Any):
        check_reserved(self.name, kwargs)
        if "final_layer" in kwargs:
            raise TypeError("bendr: final_layer is set by the adapter (BENDR's classifier is not used)")
        scale = None if max_scale is None else float(max_scale)
        arch: dict = {"max_scale": scale}  # recorded as arch_kwargs: the options given
        if interpolate:
            arch["interpolate"] = True
        super().__init__(ch_names, n_times, n_outputs, **arch, **kwargs)
        self.max_scale = scale
        self.interpolate = bool(interpolate)
        common = dict(n_times=self.n_times, n_outputs=self.n_outputs, final_layer=False)
        if self.interpolate:
            self.model, _ = build_interpolated(self.name, "InterpolatedBENDR", self.ch_names, **common, **kwargs)
            self._inputs = list(self.ch_names)
        else:
            self.model = quiet(BENDR, n_chans=len(BENDR_CHANNELS) + 1, **common, **kwargs)
            self._inputs = list(BENDR_CHANNELS)
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            n = self.tokens(torch.zeros(1, len(self.ch_names), self.n_times)).shape[1]
        self.model.train(was)
        self._n_tokens = int(n)

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
        return NamedChannelContract(kind="selection", sfreq=self.preprocessing.sfreq, names=BENDR_CHANNELS,
                                    variable=False, n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.encoder_h)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"bendr was built for {len(self.ch_names)} input channels, not {n_chans}")
        return self._n_tokens

    def scale_value(self, x: torch.Tensor) -> torch.Tensor:
        """DN3's SCALE value per window, ``(batch,)``: ``2·(min(range / max_scale, 1) - 0.5)``, or 0."""
        if self.max_scale is None:
            return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        rng = x.amax(dim=(1, 2)) - x.amin(dim=(1, 2))
        return 2 * (torch.clamp(rng / self.max_scale, max=1.0) - 0.5)

    @staticmethod
    def minmax(x: torch.Tensor) -> torch.Tensor:
        """DN3 ``min_max_normalize``: jointly over channels and time per window, to [-1, 1]."""
        lo = x.amin(dim=(1, 2), keepdim=True)
        hi = x.amax(dim=(1, 2), keepdim=True)
        span = torch.where(hi - lo == 0, torch.full_like(hi, 1e-6), hi - lo)
        return 2 * ((x - lo) / span - 0.5)

    def model_input(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """The 20-channel model input ``(batch, 20, n_times)``: normalised EEG channels, then SCALE."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = gather(self.name, x, names, self._inputs)
        check_time(self.name, x, self.n_times)
        scale = self.scale_value(x)
        x = self.minmax(x)
        if self.interpolate:
            x = self.model.interpolation_layer(x)[:, : len(BENDR_CHANNELS)]
        s = scale.view(-1, 1, 1).expand(-1, 1, x.shape[-1])
        return torch.cat([x, s], dim=1)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Contextualiser output ``(batch, n_chans, n_times)`` → ``(batch, T' + 1, 512)`` (start token first)."""
        inp = self.model_input(x, ch_names)
        with no_mha_fastpath():
            context = self.model.contextualizer(self.model.encoder(inp))  # (B, 512, T' + 1)
        return context.transpose(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.contextualizer.transformer_layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(T' + 1, batch, 1536)`` → ``(batch, T' + 1, 1536)``."""
        return out.transpose(0, 1)

