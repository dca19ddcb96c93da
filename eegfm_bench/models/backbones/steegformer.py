"""steegformer adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from braindecode.models import STEEGFormer
from huggingface_hub import try_to_load_from_cache
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError, checkpoint_dir
from eegfm_bench.models.backbones.common import check_reserved, check_time, gather, quiet


STEEGFORMER_REPO = "braindecode/STEEGFormer-small"
STEEGFORMER_VOCAB_FILE = "steegformer_channels.json"


def steegformer_vocabulary(path: str | os.PathLike | None = None) -> list[str]:
    """ST-EEGFormer's 145-slot channel vocabulary, from a local file (never downloaded).

    Looked up in order: ``path``; ``<checkpoints>/braindecode/STEEGFormer-small/steegformer_channels.json``; the
    Hugging Face cache (``braindecode/STEEGFormer-small``).

    Raises
    ------
    FileNotFoundError
        Naming where to put the file (braindecode downloads it from the hub on first use; offline it cannot).
    """
    tried = []
    cands = [Path(path)] if path is not None else []
    cands.append(checkpoint_dir() / STEEGFORMER_REPO / STEEGFORMER_VOCAB_FILE)
    for c in cands:
        tried.append(str(c))
        if c.is_file():
            return list(json.loads(c.read_text()))
    cached = try_to_load_from_cache(STEEGFORMER_REPO, STEEGFORMER_VOCAB_FILE)
    if isinstance(cached, str) and os.path.isfile(cached):
        return list(json.loads(Path(cached).read_text()))
    raise FileNotFoundError(
        f"ST-EEGFormer's channel vocabulary is not available offline (tried {tried} and the Hugging Face cache).\n"
        f"fix: download https://huggingface.co/{STEEGFORMER_REPO}/resolve/main/{STEEGFORMER_VOCAB_FILE} to "
        f"{cands[-1]}, or build from random initialisation with channel_slots='build_order'")


class STEEGFormerAdapter(BackboneAdapter):
    """braindecode ``STEEGFormer`` [Yang2026]_: ViT-MAE encoder over (channel, 16-sample patch) tokens.

    Each channel is cut into patches of 16 samples (32 per channel for 4 s at 128 Hz), linearly embedded, given a
    sinusoidal temporal encoding and a learned channel embedding from a 145-slot montage vocabulary, and encoded
    by a ViT (8 layers, 512 wide for the small variant). ``tokens`` returns the layer-normalised patch tokens
    without the CLS token, reordered channel-major: ``(batch, C·P, 512)``.

    **Channel slots.** ``channel_slots="vocabulary"`` (default) looks each channel up in ST-EEGFormer's
    published vocabulary (:func:`steegformer_vocabulary`, read from a local file; braindecode would download it).
    ``"build_order"`` gives channel ``i`` slot ``i``: only meaningful from random initialisation, so loading a
    pretrained checkpoint into such a build is refused. A list of ints sets the slots explicitly. The channel set
    is fixed after construction (braindecode checks the channel count).

    **Amplitude.** As in the authors' pretraining loader (github.com/LiuyinYang1101/STEEGFormer
    ``pretrain/util/eeg_dataset.py``): µV clipped to ±500, then z-scored per channel and window (``standardize``).

    Preprocessing: 128 Hz (pretraining segments of ``5 * 128`` samples), 0.1–75 Hz band-pass with notch as in
    the authors' downstream configs (capped below Nyquist), µV.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels.
    n_times : int
        Window length in samples at 128 Hz, a multiple of 16.
    n_outputs : int
        Passed to braindecode.
    channel_slots : "vocabulary", "build_order" or list of int
        See above.
    vocabulary_path : path, optional
        Local copy of ``steegformer_channels.json``.
    standardize : bool
        Clip ±500 µV and z-score per channel (default ``True``).
    **kwargs
        ``STEEGFormer`` arguments (``embed_dim``, ``depth``, ``num_heads``, ``patch_size``, ...).

    Notes
    -----
    ``blocks`` are ``encoder`` (8 blocks; output ``(batch, 1 + P·C, d)``, time-major). ``lora_targets``: the
    attention projections ``queries``, ``keys``, ``values``, ``projection``.

    References
    ----------
    .. [Yang2026] Yang, Sun, Li, Van Hulle (2026). Are EEG foundation models worth it? Comparative evaluation
       with traditional decoders in diverse BCI tasks. ICLR.
    """

    name = "steegformer"
    preprocessing = Preprocessing(
        sfreq=128.0, l_freq=0.1, h_freq=75.0, scale=1e6, unit="µV, clipped ±500, then z-score per channel",
        window_s=4.0, reference="average",
        source="Yang et al. 2026 (ST-EEGFormer), github.com/LiuyinYang1101/STEEGFormer: pretraining at 128 Hz with "
               "±500 µV clipping and per-channel z-score (inside the adapter); downstream band 0.1-75 Hz + notch")
    lora_targets: ClassVar[list[str]] = ["queries", "keys", "values", "projection"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, channel_slots="vocabulary",
                 vocabulary_path: str | None = None, standardize: bool = True, **kwargs: Any):
        check_reserved(self.name, kwargs)
        if "chan_pos_idx" in kwargs:
            raise TypeError("steegformer: set channel_slots instead of chan_pos_idx")
        slots_opt = channel_slots if isinstance(channel_slots, str) else [int(i) for i in channel_slots]
        arch: dict = {"channel_slots": slots_opt, "standardize": bool(standardize)}  # recorded as arch_kwargs
        if vocabulary_path is not None:
            arch["vocabulary_path"] = str(vocabulary_path)
        super().__init__(ch_names, n_times, n_outputs, **arch, **kwargs)
        self.standardize = bool(standardize)
        if slots_opt == "vocabulary":
            vocab = {n.upper(): i for i, n in enumerate(steegformer_vocabulary(vocabulary_path))}
            unknown = [c for c in self.ch_names if c.upper() not in vocab]
            if unknown:
                raise ChannelContractError(f"steegformer's vocabulary has no slot for channels {unknown}; fix: drop "
                                           "them or set channel_slots explicitly")
            slots = [vocab[c.upper()] for c in self.ch_names]
        elif slots_opt == "build_order":
            slots = list(range(len(self.ch_names)))
        elif isinstance(slots_opt, list):
            if len(slots_opt) != len(self.ch_names):
                raise ValueError(f"steegformer: {len(slots_opt)} channel_slots for {len(self.ch_names)} channels")
            slots = slots_opt
        else:
            raise ValueError(f"steegformer: channel_slots must be 'vocabulary', 'build_order' or a list of ints, "
                             f"got {channel_slots!r}")
        self.model = quiet(STEEGFormer, n_chans=len(self.ch_names), n_times=self.n_times,
                            n_outputs=self.n_outputs, chan_pos_idx=slots, **kwargs)
        self.model.final_layer = nn.Identity()
        self._n_patches = self.n_times // int(self.model.patch_size)

    @property
    def channel_contract(self) -> ChannelContract:
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=False, n_times=self.n_times,
                               patch=int(self.arch_kwargs.get("patch_size", 16)))

    def checkpoint_refusal(self, config: dict | None) -> str | None:
        """Why a checkpoint may not be loaded into this build (``None``: it may).

        A ``channel_slots='build_order'`` build gives channel ``i`` embedding slot ``i``; loading weights trained
        with another slot assignment (any hub checkpoint, or a saved build with other slots) would pair channels
        with foreign embeddings. ``config`` is the checkpoint folder's ``config.json`` (``None`` for hub weights).
        """
        ours = self.arch_kwargs.get("channel_slots")
        if ours != "build_order":
            return None
        theirs = (config or {}).get("arch_kwargs", {}).get("channel_slots")
        if theirs == "build_order" and (config or {}).get("ch_names") == list(self.ch_names):
            return None
        return ("steegformer was built with channel_slots='build_order' (channel i -> embedding slot i), which does "
                "not match the checkpoint's slot assignment; fix: build with channel_slots='vocabulary' (needs the "
                "vocabulary file, see steegformer_vocabulary) or explicit slots")

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def n_tokens(self, n_chans: int | None = None) -> int:
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ChannelContractError(f"steegformer was built for {len(self.ch_names)} channels, not {n_chans}")
        return len(self.ch_names) * self._n_patches

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Clip to ±500 µV, then z-score per channel over the window (the authors' pretraining loader)."""
        if not self.standardize:
            return x
        x = x.clamp(-500.0, 500.0)
        return (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True, unbiased=False) + 1e-8)

    def _channel_major(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        c = len(self.ch_names)
        return t.reshape(b, n // c, c, d).transpose(1, 2).reshape(b, n, d)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Patch tokens ``(batch, n_chans, n_times)`` → ``(batch, C·P, d_model)`` (channel-major)."""
        names = self.ch_names if ch_names is None else list(ch_names)
        x = gather(self.name, x, names, self.ch_names)
        check_time(self.name, x, self.n_times)
        return self._channel_major(self.model(self.normalise(x), return_features=True)["features"])

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output ``(batch, 1 + P·C, d)`` (CLS, then time-major) → ``(batch, C·P, d)`` (no CLS)."""
        return self._channel_major(out[:, 1:])
