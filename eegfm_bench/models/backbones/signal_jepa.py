"""signal_jepa adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import SignalJEPA_Contextual
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, check_time, channel_info,
                                                 gather, build_interpolated, no_mha_fastpath, quiet)


class SignalJEPAAdapter(BackboneAdapter):
    """braindecode ``SignalJEPA_Contextual`` [Guetschel2024]_: per-channel conv features + spatial attention.

    A convolutional feature encoder turns each channel into a sequence of local features (one per second at
    128 Hz: ``P = 3`` for 4 s), each gets a channel embedding (initialised from its 3-D position) and a temporal
    encoding, and a transformer encoder attends across all (channel, time) tokens. ``tokens`` returns its output
    ``(batch, C·P, 64)``, channel-major, before braindecode's separable classifier (replaced by the head).

    Channels: positions from MNE's standard 10-05 montage (``chs_info``), fixed after construction (the
    contextual model's channel embedding table is indexed by build position). ``channel_embedding="scratch"``
    (default) builds the table from the dataset's positions (hub ``braindecode/signal-jepa_without-chans``);
    ``"pretrain_aligned"`` uses the 62 pretraining channels' table (hub ``braindecode/signal-jepa``; every channel
    must be one of them). ``interpolate=True`` uses braindecode's ``InterpolatedSignalJEPA`` (spline onto the 62).

    Preprocessing: 128 Hz, 0.5–40 Hz band-pass, µV (braindecode SignalJEPA docs: "Pre-trained at 128 Hz on EEG
    bandpass-filtered between 0.5 and 40 Hz and rescaled by a factor of 10^6").

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 128 Hz.
    n_outputs : int
        Passed to braindecode.
    interpolate : bool
        Use ``InterpolatedSignalJEPA``.
    **kwargs
        ``SignalJEPA_Contextual`` arguments (``channel_embedding``, ``transformer__num_encoder_layers``,
        ``transformer__d_model``, ``transformer__nhead``, ``feature_encoder__conv_layers_spec``, ...).

    Notes
    -----
    The unused transformer decoder of ``nn.Transformer`` (pretraining only) is removed; its checkpoint keys are
    dropped at load and reported. ``blocks`` are ``transformer.encoder.layers`` (8). ``lora_targets``:
    ``self_attn``, ``linear1``, ``linear2``; torch's fused fast path (which would bypass adapters in eval mode) is
    disabled inside ``tokens``.

    References
    ----------
    .. [Guetschel2024] Guetschel, Moreau, Tangermann (2024). S-JEPA: towards seamless cross-dataset transfer
       through dynamic spatial attention. 9th Graz BCI Conference.
    """

    name = "signal_jepa"
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=0.5, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0, reference="average",
        source="Guetschel et al. 2024 (S-JEPA) and braindecode SignalJEPA docs: 128 Hz, 0.5-40 Hz band-pass, "
               "volts x 1e6 (µV)")
    lora_targets: ClassVar[list[str]] = ["self_attn", "linear1", "linear2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "transformer.decoder.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, interpolate: bool = False,
                 **kwargs: Any):
        check_reserved(self.name, kwargs)
        opts = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        self.interpolate = bool(interpolate)
        common = dict(n_times=self.n_times, sfreq=self.preprocessing.sfreq, n_outputs=self.n_outputs)
        if self.interpolate:
            self.model, self.model_ch_names = build_interpolated(self.name, "InterpolatedSignalJEPA", self.ch_names,
                                                            **common, **kwargs)
        else:
            self.model = quiet(SignalJEPA_Contextual, chs_info=channel_info(self.ch_names), **common, **kwargs)
            self.model_ch_names = list(self.ch_names)
        self.model.final_layer = nn.Identity()
        self.model.transformer.decoder = nn.Identity()
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            self._n_tokens = int(self.tokens(torch.zeros(1, len(self.ch_names), self.n_times)).shape[1])
        self.model.train(was)

    @property
    def channel_contract(self) -> ChannelContract:
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                    n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.transformer.d_model)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"signal_jepa was built for {len(self.ch_names)} channels, not {n_chans}")
        return self._n_tokens

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Contextual features ``(batch, n_chans, n_times)`` → ``(batch, C·P, 64)``."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = gather(self.name, x, names, self.ch_names)
        check_time(self.name, x, self.n_times)
        with no_mha_fastpath():
            return self.model(x, return_features=True)["features"]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.transformer.encoder.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·P, d)`` (batch-first)."""
        return out

