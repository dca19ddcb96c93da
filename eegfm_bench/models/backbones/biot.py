"""biot adapter (see :mod:`eegfm_bench.models.backbones`)."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from braindecode.models import BIOT
from torch import nn

from eegfm_bench.data.montage import BIOT_BIPOLAR_16, BIOT_BIPOLAR_18, bipolar_derivations, bipolar_names
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.models.base import BackboneAdapter, ChannelContract, ChannelContractError
from eegfm_bench.models.backbones.common import (NamedChannelContract, check_reserved, check_time,
                                                 gather, build_interpolated, quiet)


class _BIOTBlock(nn.ModuleList):
    """One BIOT transformer layer ``[PreNorm(attention), PreNorm(feed-forward)]`` with its residuals.

    ``linear_attention_transformer.SequentialSequence`` applies ``x = x + f(x); x = x + g(x)`` to plain
    ``ModuleList`` pairs, so no module's output is the layer output and forward hooks cannot see it. This
    subclass holds the same two modules (same parameter names, so checkpoints load unchanged) and runs the
    same two residual steps as its ``forward``. Equality with the unmodified braindecode model is tested.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, ff = self[0], self[1]
        x = x + attn(x)
        return x + ff(x)


class _BIOTLayers(nn.Module):
    """Replacement for ``SequentialSequence`` (no layer dropout, no routed kwargs: BIOT passes none)."""

    def __init__(self, pairs: nn.ModuleList):
        super().__init__()
        self.layers = nn.ModuleList([_BIOTBlock(list(pair)) for pair in pairs])

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if kwargs:
            raise TypeError(f"BIOT layers take no routed arguments, got {sorted(kwargs)}")
        for block in self.layers:
            x = block(x)
        return x


class BIOTAdapter(BackboneAdapter):
    """braindecode ``BIOT`` [Yang2023]_: per-channel STFT tokens and a linear-attention transformer.

    BIOT's ``forward`` returns only the token mean ``(batch, 256)``; ``tokens`` captures the transformer
    output before that mean with a forward hook: ``(batch, C·F, d_model)``, channel-major, with
    ``F = (n_times - 200) // 100 + 1`` STFT frames per channel (n_fft = 200 = 1 s, hop 100; 7 for 4 s).

    **Montage.** The pretrained BIOT checkpoints expect the 16- or 18-channel bipolar (double-banana) montage;
    each position of that montage has a learned channel token: use :class:`BIOTBipolarAdapter`
    (``biot_bipolar``) for them. This adapter is built with the dataset's *monopolar* channels as BIOT's
    ``n_chans`` (one channel token per dataset channel, in order), which is what a from-scratch or fully
    fine-tuned BIOT sees. Any subset of the build channels is accepted at inference (each channel keeps its own
    channel token), so *removed*-channel dropout works. Loading a 16/18-channel pretrained checkpoint into a
    monopolar build of another size fails at the strict load (``encoder.channel_tokens.weight`` shape).
    ``interpolate=True`` uses braindecode's ``InterpolatedBIOT`` instead (spline onto the 18 bipolar channels'
    midpoints: braindecode's own documented simplification; fixed montage).

    **Amplitude normalisation.** BIOT's data loaders divide each channel of each sample by its 95th
    percentile of absolute amplitude: ``X / (quantile(|X|, 0.95, axis=-1) + 1e-8)`` (github.com/ycq091044/BIOT
    ``utils.py``). This adapter does the same inside ``tokens`` (``percentile_norm=True``, per window and
    channel, linear interpolation as ``np.quantile``), so the declared ``scale`` (µV) has no effect on the
    tokens; it only fixes the unit in which perturbations are defined.

    Preprocessing: 200 Hz. BIOT's own TUAB/TUEV scripts only resample to 200 Hz; we additionally band-pass
    0.1–75 Hz (LaBraM's protocol on the same corpora) with the mains notch, so every 200-Hz backbone sees
    comparably filtered data.

    Parameters
    ----------
    ch_names : list of str
        The dataset's channels; each gets a channel token, in order.
    n_times : int
        Window length in samples at 200 Hz (at least 200).
    n_outputs : int
        Passed to braindecode (its classifier is replaced by the pooling head).
    percentile_norm : bool
        Apply BIOT's per-channel 95th-percentile normalisation (default ``True``).
    interpolate : bool
        Use braindecode's ``InterpolatedBIOT`` (see above).
    **kwargs
        ``BIOT`` arguments, e.g. ``embed_dim``, ``num_heads``, ``num_layers``, ``hop_length``, ``drop_prob``.

    Notes
    -----
    ``blocks`` are the transformer layers; to make them hookable, braindecode's
    ``encoder.transformer.layers`` (a ``SequentialSequence`` over plain ``ModuleList`` pairs) is replaced by
    an equivalent module whose layers compute ``x + attn(x)`` then ``+ ff(·)`` in their own ``forward``; the
    parameter names are unchanged. ``lora_targets`` are ``to_q``, ``to_k``, ``to_v``, ``to_out``.
    """

    name = "biot"
    preprocessing = Preprocessing(
        sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e6,
        unit="µV, then ÷ per-channel 95th percentile of abs. amplitude", window_s=4.0, reference="average",
        source="Yang et al. 2023 (BIOT) code: 200 Hz, per-channel 95th-percentile normalisation in the loader "
               "(applied inside the adapter); 0.1-75 Hz band-pass added as in LaBraM's TUAB protocol")
    lora_targets: ClassVar[list[str]] = ["to_q", "to_k", "to_v", "to_out"]
    checkpoint_drop: ClassVar[tuple[str, ...]] = ("final_layer.",)
    checkpoint_hint: ClassVar[str] = (
        "BIOT's pretrained checkpoints hold 16 or 18 channel tokens for the bipolar (double-banana) montage; this "
        "build gives one channel token per monopolar dataset channel, so encoder.channel_tokens differs: use the "
        "biot_bipolar backbone (bipolar derivations built from the monopolar montage)")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, percentile_norm: bool = True,
                 interpolate: bool = False, **kwargs: Any):
        check_reserved(self.name, kwargs)
        # percentile_norm / interpolate are recorded in arch_kwargs (config / checkpoint / token-cache keys)
        extra = {"interpolate": True} if interpolate else {}
        super().__init__(ch_names, n_times, n_outputs, percentile_norm=bool(percentile_norm), **extra, **kwargs)
        self.percentile_norm = bool(percentile_norm)
        self.interpolate = bool(interpolate)
        self._build(kwargs)

    def _token_names(self) -> list[str]:
        """Names of BIOT's channel tokens, in token order (here: the build montage)."""
        return list(self.ch_names)

    def _build(self, kwargs: dict) -> None:
        common = dict(n_times=self.n_times, n_outputs=self.n_outputs, sfreq=int(self.preprocessing.sfreq))
        if self.interpolate:
            self.model, names = build_interpolated(self.name, "InterpolatedBIOT", self.ch_names, **common, **kwargs)
        else:
            names = self._token_names()
            self.model = quiet(BIOT, n_chans=len(names), **common, **kwargs)
        self.model.final_layer = nn.Identity()
        transformer = self.model.encoder.transformer
        transformer.layers = _BIOTLayers(transformer.layers.layers)
        self._token_list = names
        self._channel_index = {c: i for i, c in enumerate(names)}

    @property
    def channel_contract(self) -> ChannelContract:
        if self.arch_kwargs.get("interpolate"):
            return NamedChannelContract(kind="positions", sfreq=self.preprocessing.sfreq, variable=False,
                                        n_times=self.n_times)
        return ChannelContract(kind="any", sfreq=self.preprocessing.sfreq, variable=True,
                               n_times=self.n_times)

    @property
    def d_model(self) -> int:
        return int(self.model.embed_dim)

    def _frames(self, n_times: int) -> int:
        enc = self.model.encoder
        return (n_times - enc.n_fft) // enc.hop_length + 1

    def n_tokens(self, n_chans: int | None = None) -> int:
        if self.interpolate:
            if n_chans is not None and n_chans != len(self.ch_names):
                raise ChannelContractError(f"biot (interpolated) was built for {len(self.ch_names)} channels, "
                                           f"not {n_chans}")
            return len(self._token_list) * self._frames(self.n_times)
        n = len(self.ch_names) if n_chans is None else int(n_chans)
        return n * self._frames(self.n_times)

    @staticmethod
    def normalise(x: torch.Tensor) -> torch.Tensor:
        """BIOT's per-channel scaling: ``x / (q95(|x|) + 1e-8)`` over time, ``(batch, n_chans, n_times)``.

        The 95th percentile uses linear interpolation between order statistics, as ``np.quantile``'s default
        (BIOT's loaders); it is computed by sorting because ``torch.quantile`` refuses inputs above 2**24
        elements.
        """
        s = x.abs().sort(dim=-1).values
        pos = 0.95 * (x.shape[-1] - 1)
        lo = int(pos)
        hi = min(lo + 1, x.shape[-1] - 1)
        q = s[..., lo:lo + 1] + (pos - lo) * (s[..., hi:hi + 1] - s[..., lo:lo + 1])
        return x / (q + 1e-8)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Transformer output before BIOT's mean, ``(batch, n_chans, n_times)`` → ``(batch, C·F, d_model)``.

        Raises
        ------
        ChannelContractError
            If a name in ``ch_names`` is not one of the build channels (no channel token for it).
        """
        names = self.ch_names if ch_names is None else list(ch_names)
        if x.ndim != 3 or x.shape[1] != len(names):
            raise ChannelContractError(f"{self.name}: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        if self.interpolate:  # fixed source montage -> BIOT's 18 canonical (bipolar-midpoint) channels
            x = self.model.interpolation_layer(gather(self.name, x, names, self.ch_names))
            names = list(self._token_list)
        return self._encode(x, names)

    def _encode(self, x: torch.Tensor, names: list[str]) -> torch.Tensor:
        """Percentile scaling, then BIOT's encoder with one channel token per name; output before the mean."""
        unknown = [c for c in names if c not in self._channel_index]
        if unknown:
            raise ChannelContractError(
                f"{self.name} was built with channel tokens for {self._token_list}; it has none for {unknown}; fix: "
                "build the backbone on a montage that contains them")
        if self.percentile_norm:
            x = self.normalise(x)
        enc = self.model.encoder
        captured: list[torch.Tensor] = []
        hook = enc.transformer.register_forward_hook(lambda _m, _i, out: captured.append(out))
        saved_index = enc.index
        try:
            if names != self._token_list:  # each input channel keeps its own channel token
                enc.index = torch.tensor([self._channel_index[c] for c in names], dtype=torch.long,
                                         device=saved_index.device)
            enc(x)
        finally:
            enc.index = saved_index
            hook.remove()
        return captured[0]

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.model.encoder.transformer.layers.layers)

    def block_to_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """Block output is already ``(batch, C·F, d)``."""
        return out


# --------------------------------------------------------------------------------------------- BIOT, bipolar
class BIOTBipolarAdapter(BIOTAdapter):
    """BIOT on its published bipolar montage, built by named subtraction from a monopolar dataset [Yang2023]_.

    The dataset's monopolar channels are turned into BIOT's longitudinal bipolar (double-banana) derivations
    ``Fp1-F7, F7-T7, T7-P7, P7-O1, Fp2-F8, F8-T8, T8-P8, P8-O2, Fp1-F3, F3-C3, C3-P3, P3-O1, Fp2-F4, F4-C4, C4-P4,
    P4-O2`` (:data:`eegfm_bench.data.montage.BIOT_BIPOLAR_16`, BIOT's channel-token order), optionally followed by
    ``C3-A2, C4-A1`` (``derivations="bipolar18"``), each an exact subtraction ``V(anode) - V(cathode)``
    (:func:`eegfm_bench.data.montage.bipolar_derivations`), as paper 001 §3.1 does for its ``BIOT-bipolar16``
    rows. Derivation ``k`` uses BIOT's channel token ``k``. With the default ``n_channel_tokens=18`` the model
    has the 18 tokens of the ``six-datasets-18chs`` / ``shhs-prest-18chs`` checkpoints and the 16 derivations use
    the first 16 (paper 001: "the last two derivations are omitted without zero-padding"); use
    ``n_channel_tokens=16`` for ``prest-16chs``.

    Tokens, blocks, percentile scaling and ``lora_targets`` are those of :class:`BIOTAdapter`:
    ``(batch, D·F, 256)`` for ``D`` derivations and ``F`` STFT frames.

    **Channel removal.** Variable-channel: ``tokens(x_subset, names_subset)`` builds only the derivations whose
    two electrodes are both present (a removed electrode removes every derivation that uses it; each remaining
    derivation keeps its own channel token).

    Parameters
    ----------
    ch_names : list of str
        The dataset's monopolar channels; must contain every electrode of the chosen derivations (else
        :class:`~eegfm_bench.models.base.ChannelContractError` naming the missing ones).
    n_times : int
        Window length in samples at 200 Hz.
    n_outputs : int
        Passed to braindecode.
    derivations : {"bipolar16", "bipolar18"}
        Which derivations to build (``bipolar18`` also needs A1 and A2).
    n_channel_tokens : {16, 18}
        BIOT's number of channel tokens (the checkpoint's layout); at least the number of derivations.
    percentile_norm : bool
        BIOT's per-channel 95th-percentile scaling, applied to the derivations.
    **kwargs
        ``BIOT`` architecture arguments.
    """

    name = "biot_bipolar"
    input_montage: ClassVar[str] = "bipolar"
    checkpoint_hint: ClassVar[str] = ("BIOT checkpoints hold 16 (prest-16chs) or 18 (shhs-prest-18chs, "
                                      "six-datasets-18chs) channel tokens: set n_channel_tokens accordingly")

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, derivations: str = "bipolar16",
                 n_channel_tokens: int = 18, percentile_norm: bool = True, **kwargs: Any):
        if derivations not in ("bipolar16", "bipolar18"):
            raise ValueError(f"biot_bipolar: derivations must be 'bipolar16' or 'bipolar18', got {derivations!r}")
        pairs = BIOT_BIPOLAR_16 if derivations == "bipolar16" else BIOT_BIPOLAR_18
        if int(n_channel_tokens) not in (16, 18) or int(n_channel_tokens) < len(pairs):
            raise ValueError(f"biot_bipolar: n_channel_tokens must be 16 or 18 and at least the {len(pairs)} "
                             f"derivations, got {n_channel_tokens}")
        if kwargs.get("interpolate"):
            raise ValueError("biot_bipolar builds its derivations by subtraction; use `biot` with interpolate=true "
                             "for braindecode's InterpolatedBIOT")
        check_reserved(self.name, kwargs)
        self._pairs = tuple(pairs)
        self._n_channel_tokens = int(n_channel_tokens)
        BackboneAdapter.__init__(self, ch_names, n_times, n_outputs, derivations=derivations,
                                 n_channel_tokens=int(n_channel_tokens), percentile_norm=bool(percentile_norm),
                                 **kwargs)
        self.percentile_norm = bool(percentile_norm)
        self.interpolate = False
        self._build(kwargs)

    def _token_names(self) -> list[str]:
        return bipolar_names(BIOT_BIPOLAR_18)[: self._n_channel_tokens]

    @property
    def derivation_names(self) -> list[str]:
        """Names of the derivations built from the full build montage, e.g. ``"Fp1-F7"``."""
        return bipolar_names(self._pairs)

    @property
    def channel_contract(self) -> ChannelContract:
        pairs = self._pairs if hasattr(self, "_pairs") else ()
        needed: list[str] = []
        for a, c in pairs:
            for e in (a, c):
                if e not in needed:
                    needed.append(e)
        return ChannelContract(kind="bipolar", sfreq=self.preprocessing.sfreq, names=tuple(needed), variable=True,
                               n_times=self.n_times)

    def n_tokens(self, n_chans: int | None = None) -> int:
        """``D·F`` for the build montage (``n_chans`` = its channel count, or ``None``).

        Raises
        ------
        ValueError
            For another channel count: which derivations survive depends on *which* electrodes are removed; use
            :meth:`n_tokens_for`.
        """
        if n_chans is not None and n_chans != len(self.ch_names):
            raise ValueError("biot_bipolar: the token count after removing electrodes depends on which ones; call "
                             "n_tokens_for(ch_names)")
        return len(self._pairs) * self._frames(self.n_times)

    def available_pairs(self, ch_names: list[str]) -> list[tuple[str, str]]:
        """The derivations whose two electrodes are both in ``ch_names`` (BIOT order)."""
        have = {c.lower() for c in ch_names}
        return [(a, c) for a, c in self._pairs if a.lower() in have and c.lower() in have]

    def n_tokens_for(self, ch_names: list[str]) -> int:
        """Token count for input channels ``ch_names`` (surviving derivations × STFT frames)."""
        return len(self.available_pairs(ch_names)) * self._frames(self.n_times)

    def bipolar(self, x: torch.Tensor, ch_names: list[str] | None = None) -> tuple[torch.Tensor, list[str]]:
        """Derivations ``(batch, D, n_times)`` by named subtraction and their names (same unit as ``x``).

        Raises
        ------
        ChannelContractError
            If no derivation can be built from ``ch_names`` (names the electrodes BIOT's montage needs).
        """
        names = self.ch_names if ch_names is None else list(ch_names)
        if x.ndim != 3 or x.shape[1] != len(names):
            raise ChannelContractError(f"biot_bipolar: x has shape {tuple(x.shape)} but {len(names)} channel names "
                                       "were given; expected (batch, len(ch_names), n_times)")
        pairs = self.available_pairs(names)
        if not pairs:
            raise ChannelContractError(f"biot_bipolar: no bipolar derivation can be built from {names}; it needs "
                                       f"electrodes {list(self.channel_contract.names)}")
        return bipolar_derivations(x, names, pairs), bipolar_names(pairs)

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Monopolar ``(batch, n_chans, n_times)`` → derivations → ``(batch, D·F, d_model)`` (derivation-major)."""
        check_time(self.name, x, self.n_times)
        xb, names = self.bipolar(x, ch_names)
        return self._encode(xb, names)

