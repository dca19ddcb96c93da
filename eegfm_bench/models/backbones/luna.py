"""luna adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import LUNA
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, channel_info, no_mha_fastpath,
                                                 positions_tensor, quiet, resolve_channels, variable_inputs)


class LUNAAdapter(BackboneAdapter):
    """braindecode ``LUNA`` [Doner2025]_: channel-unifying cross-attention, then a temporal transformer.

    Each channel is cut into patches of 40 samples (CNN + FFT features, plus a NeRF encoding of the electrode's
    3-D position); at every patch a set of ``Q = 4`` learned queries cross-attends to all channels, so the
    temporal transformer sees one token per patch whatever the montage. ``tokens`` returns its normalised output
    ``(batch, P, Q·D)`` = ``(batch, n_times // 40, 256)`` (the input to LUNA's classification head), independent
    of the number of channels.

    **Channels.** Variable: positions from MNE's standard 10-05 montage are passed explicitly at every forward
    (braindecode would otherwise fall back to evenly spaced dummy locations); any subset at inference removes
    channels truly. LUNA min–max normalises the positions over the montage.

    Preprocessing: 256 Hz, 0.1–75 Hz band-pass with mains notch, 5-s windows (1280 samples, 32 patches), as in
    LUNA's TUEG + Siena pretraining (NeuralBench's LUNA page: "pretrained on TUEG plus Siena at 256 Hz"; patch 40
    samples). Amplitudes in µV; the paper's amplitude normalisation could not be checked offline.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 256 Hz, a multiple of ``patch_size`` (40).
    n_outputs : int
        Passed to braindecode.
    **kwargs
        ``LUNA`` arguments (``embed_dim``, ``num_queries``, ``depth``, ``num_heads``, ``patch_size``, ...).

    Notes
    -----
    ``blocks`` are ``blocks`` (8 rotary transformer blocks, output ``(batch, P, Q·D)``). ``lora_targets``:
    ``attn.qkv_proj``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2`` of those blocks.

    References
    ----------
    .. [Doner2025] Döner, Ingolfsson, Benini, Li (2025). LUNA: efficient and topology-agnostic foundation model for
       EEG signal analysis. NeurIPS.
    """

    name = "luna"
    preprocessing = Preprocessing(
        sfreq=256.0, l_freq=0.1, h_freq=75.0, scale=1e6, unit="µV", window_s=5.0, reference="average",
        source="Doner et al. 2025 (LUNA) pretraining on TUEG + Siena: 256 Hz, 0.1-75 Hz, notch, 5-s windows, "
               "patch 40 samples (amplitude normalisation: see paper, not verified offline)")
    lora_targets: ClassVar[list[str]] = ["attn.qkv_proj", "attn.proj", "mlp.fc1", "mlp.fc2"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "decoder_head.", "channel_emb.")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channels=None, **kwargs: Any):
        check_reserved(self.name, kwargs)
        opts = {"channels": list(channels)} if channels is not None else {}
        super().__init__(ch_names, n_times, n_outputs, **opts, **kwargs)
        self.model_ch_names = resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names)
        self.model = quiet(LUNA, n_chans=len(self.model_ch_names), n_times=self.n_times,
                            n_outputs=max(int(self.n_outputs), 1), chs_info=channel_info(self.model_ch_names), **kwargs)
        self.model.final_layer = nn.Identity()

    @property
    def input_channels(self) -> list[str] | None:
        """The dataset channels this model reads (:meth:`~eegfm_bench.models.base.BackboneAdapter.reference_selection`
        re-references them when they are a subset); ``None`` (every channel given) unless ``channels`` was set."""
        return list(self.model_ch_names) if self.arch_kwargs.get("channels") is not None else None

    @property
    def channel_contract(self) -> ChannelContract:
        patch = int(self.arch_kwargs.get("patch_size", 40))
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=True,
                                    n_times=self.n_times, patch=patch)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim * self.model.num_queries)

    def n_tokens(self, n_chans: int | None = None) -> int:
        """``n_times // patch_size`` whatever the channel count."""
        return self.n_times // int(self.model.patch_size)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Latent tokens ``(batch, n_chans, n_times)`` → ``(batch, P, Q·D)``."""
        x, names = variable_inputs(self, x, ch_names)
        with no_mha_fastpath():  # its channel-unification block uses torch's TransformerEncoder
            return self.model(x, channel_locations=positions_tensor(names, x.shape[0], x))

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.blocks)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, P, Q·D)``."""
        return out

    def adapt_state_dict(self, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Rename the released checkpoint's keys with braindecode's ``LUNA.mapping`` (reported)."""
        notes = []
        mapping = getattr(self.model, "mapping", {})
        out = {}
        for k, v in state.items():
            if k in mapping and mapping[k] not in state:
                notes.append(f"{k} -> {mapping[k]} (braindecode LUNA.mapping)")
                out[mapping[k]] = v
            else:
                out[k] = v
        return out, notes


# --------------------------------------------------------------------------------------------- EEG-DINO
