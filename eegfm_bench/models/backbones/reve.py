"""reve adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from braindecode.models import REVE
from torch import nn

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.data.cache import default_cache_dir
from eegfm_bench.data.montage import standard_1005
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, positions_tensor,
                                                 quiet, resolve_channels, variable_inputs)


def reve_positions_dir(folder: str | os.PathLike | None = None) -> Path:
    """Write MNE's standard 10-05 positions as ``reve_positions.json`` and return its folder (never downloads).

    braindecode's ``REVE`` constructor loads a position bank ``{name: [x, y, z]}`` from
    ``$REVE_POSITIONS_PATH/reve_positions.json`` and downloads it from the hub if that file is missing
    (ENVIRONMENT.md). This writes the file from :func:`eegfm_bench.data.montage.standard_1005` (343 names,
    metres, MNE "head" frame) so the download never happens; the adapter passes positions explicitly at every
    forward anyway.

    Parameters
    ----------
    folder : path, optional
        Default: ``<window cache>/reve`` (:func:`eegfm_bench.data.cache.default_cache_dir`).

    Returns
    -------
    Path
        The folder holding ``reve_positions.json`` (rewritten atomically only when its content differs).
    """
    if folder is None:
        folder = Path(default_cache_dir()) / "reve"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bank = {n: [float(v) for v in p] for n, p in standard_1005().get_positions()["ch_pos"].items()}
    text = json.dumps(bank, indent=0, sort_keys=False)
    path = folder / "reve_positions.json"
    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)
    return folder


class _ResidualPair(nn.ModuleList):
    """``[attention, feed-forward]`` of one REVE layer, running REVE's residual steps as its own forward.

    braindecode's ``TransformerBackbone.forward`` computes ``x = attn(x) + x; x = ff(x) + x`` over plain
    ``ModuleList`` pairs, so no module's output is the layer output and forward hooks cannot see it. Same
    parameter names; equality with the unmodified model is tested.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, ff = self[0], self[1]
        x = attn(x) + x
        return ff(x) + x


def _reve_backbone_forward(self, x, return_out_layers=False):
    """braindecode ``reve.TransformerBackbone.forward`` calling each (re-classed) layer as a module."""
    out_layers = [x] if return_out_layers else []
    for layer in self.layers:
        x = layer(x)
        if return_out_layers:
            out_layers.append(x)
    return out_layers if return_out_layers else x


class REVEAdapter(BackboneAdapter):
    """braindecode ``REVE`` [ElOuahidi2025]_: patch tokens with a 4-D (x, y, z, t) Fourier positional encoding.

    Each channel is cut into 1-s patches (200 samples) with 20 samples of overlap (``P = ceil((n_times - 200) /
    180)`` + 1 when exact; 4 for 4 s), each linearly embedded and given the Fourier + MLP encoding of its
    electrode's 3-D position and patch index. ``tokens`` returns the transformer output ``(batch, C·P, 512)``,
    channel-major, before REVE's own head.

    **Positions.** Taken from MNE's standard 10-05 montage (:func:`eegfm_bench.data.montage.positions`, metres)
    and passed at every forward; the position bank braindecode's constructor insists on is written locally by
    :func:`reve_positions_dir` (``REVE_POSITIONS_PATH`` is set only while the model is built), so nothing is
    downloaded. REVE's published bank holds positions collected from its 92 pretraining datasets; whether their
    coordinate frame and scale match MNE's (metres, head frame) could not be checked offline: load a pretrained
    checkpoint only after comparing a few entries (e.g. Cz) with the hub's ``reve-positions``.

    **Channels.** Variable: any channels with a 10-05 position, any subset at inference (``tokens(x_subset,
    names_subset)`` removes channels truly, no zero-filling).

    **Amplitude.** REVE z-scores each channel and clips at 15 standard deviations during pretraining (braindecode
    REVE docs); ``tokens`` does the same per window and channel (``zscore_clip=15``; ``None`` disables it).

    Preprocessing: 200 Hz (braindecode docs: "Input data must be sampled at 200 Hz"), band-pass 0.5–99.5 Hz as
    in the REVE paper's pretraining pipeline (capped below Nyquist by the preprocessing), µV before the z-score.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels (each needs a 10-05 position).
    n_times : int
        Window length in samples at 200 Hz (at least 200).
    n_outputs : int
        Passed to braindecode.
    zscore_clip : float or None
        Per-window, per-channel z-score then clip to ``±zscore_clip`` (default 15).
    **kwargs
        ``REVE`` arguments (``embed_dim``, ``depth``, ``heads``, ``head_dim``, ``mlp_dim_ratio``, ...).

    Notes
    -----
    ``blocks`` are ``transformer.layers`` (22); each layer is re-classed to run its two residual steps in its own
    forward (same parameters). ``lora_targets``: ``to_qkv``, ``to_out`` (attention projections).

    References
    ----------
    .. [ElOuahidi2025] El Ouahidi et al. (2025). REVE: a foundation model for EEG — adapting to any setup with
       large-scale pretraining on 25,000 subjects. NeurIPS.
    """

    name = "reve"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.5, h_freq=99.5, scale=1e6, unit="µV, then z-score per channel, clipped at ±15",
        window_s=4.0, reference="average",
        source="El Ouahidi et al. 2025 (REVE) and braindecode REVE docs: 200 Hz, 0.5-99.5 Hz band-pass, per-channel "
               "z-score clipped at 15 SD (applied inside the adapter)")
    lora_targets: ClassVar[list[str]] = ["to_qkv", "to_out"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.", "cls_query_token")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, zscore_clip: float | None = 15.0,
                 channels=None, n_layers: int | None = None, **kwargs: Any):
        check_reserved(self.name, kwargs)
        if n_layers is not None and "depth" in kwargs:  # n_layers: braindecode's `depth` (reve_truncated's cut)
            raise ValueError("reve: give the number of layers as n_layers or depth, not both")
        kwargs_arch = {} if n_layers is None else {"depth": int(n_layers)}
        if kwargs.get("attention_pooling"):
            raise ValueError("reve: attention_pooling is REVE's own head; the pooling heads of eegfm_bench replace "
                             "it (use head: attention)")
        clip = None if zscore_clip is None else float(zscore_clip)
        arch: dict = {"zscore_clip": clip}  # recorded as arch_kwargs: the options given
        if channels is not None:
            arch["channels"] = list(channels)
        if n_layers is not None:
            arch["n_layers"] = int(n_layers)
        super().__init__(ch_names, n_times, n_outputs, **arch, **kwargs)
        self.zscore_clip = clip
        self.model_ch_names = resolve_channels(self.name, self.arch_kwargs.get("channels"), self.ch_names)
        folder = reve_positions_dir()
        saved = os.environ.get("REVE_POSITIONS_PATH")
        os.environ["REVE_POSITIONS_PATH"] = str(folder)
        try:
            self.model = quiet(REVE, n_chans=len(self.model_ch_names), n_times=self.n_times,
                                n_outputs=self.n_outputs, **kwargs, **kwargs_arch)
        finally:
            if saved is None:
                os.environ.pop("REVE_POSITIONS_PATH", None)
            else:
                os.environ["REVE_POSITIONS_PATH"] = saved
        self.model.final_layer = nn.Identity()
        backbone = self.model.transformer
        for layer in backbone.layers:
            layer.__class__ = _ResidualPair
        backbone.forward = _reve_backbone_forward.__get__(backbone)
        self._step = int(self.model.patch_size - self.model.patch_overlap)
        self._bank_sha256 = hashlib.sha256((folder / "reve_positions.json").read_bytes()).hexdigest()

    def provenance(self) -> dict[str, str]:
        """The sha256 of the position bank REVE was built with (``reve_positions.json``)."""
        return {"reve_positions_sha256": self._bank_sha256}

    @property
    def input_channels(self) -> list[str] | None:
        """The dataset channels this model reads (:meth:`~eegfm_bench.models.base.BackboneAdapter.reference_selection`
        re-references them when they are a subset); ``None`` (every channel given) unless ``channels`` was set."""
        return list(self.model_ch_names) if self.arch_kwargs.get("channels") is not None else None

    @property
    def channel_contract(self) -> ChannelContract:
        return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=True,
                                    n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def _patches(self) -> int:
        return (self.n_times - int(self.model.patch_size)) // self._step + 1

    def n_tokens(self, n_chans: int | None = None) -> int:
        n = len(self.model_ch_names) if n_chans is None or n_chans == len(self.ch_names) else int(n_chans)
        return n * self._patches()

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Per-window, per-channel z-score clipped at ``±zscore_clip``, ``(batch, n_chans, n_times)``."""
        if self.zscore_clip is None:
            return x
        z = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-6)
        return z.clamp(-self.zscore_clip, self.zscore_clip)

    def _names_in(self, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str]]:
        return variable_inputs(self, x, ch_names)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Transformer output ``(batch, n_chans, n_times)`` → ``(batch, C·P, d_model)`` (channel-major).

        Raises
        ------
        ChannelContractError
            If a channel has no 10-05 position, or the window length differs from the build.
        """
        x, names = self._names_in(x, ch_names)
        pos = positions_tensor(names, x.shape[0], x)
        feats = self.model(self.normalise(x), pos=pos, return_features=True)["features"]  # (B, C, P, D)
        return feats.flatten(1, 2)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.transformer.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·P, d)``."""
        return out


# --------------------------------------------------------------------------------------------- BENDR
