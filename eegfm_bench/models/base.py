"""The backbone adapter contract (docs/guide/architecture.md, "Contracts") and channel contracts.

A backbone adapter wraps one braindecode model (never a re-implementation) and exposes

* ``tokens(x, ch_names) -> (batch, n_tokens, d_model)``: the representation before any pooling;
* ``blocks -> list[nn.Module]``: transformer / conv blocks in order, for hooks;
* ``channel_contract``: which channels it accepts, whether the set may vary, the sampling rate and window
  length it needs (checked against the dataset before training: :meth:`ChannelContract.check`);
* ``lora_targets``: module-name patterns peft must wrap;
* ``preprocessing``: the :class:`~eegfm_bench.data.preprocessing.Preprocessing` it expects.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from eegfm_bench.data.preprocessing import Preprocessing


class ChannelContractError(ValueError):
    """The dataset's channels, sampling rate or window length do not meet a backbone's contract."""


@dataclass(frozen=True)
class ChannelContract:
    """What a backbone accepts as input.

    Parameters
    ----------
    kind : {"any", "names", "bipolar", "positions"}
        ``any``: a fixed number of channels set at construction (e.g. EEGNet); ``names``: channels are
        selected and reordered by name from ``names``; ``bipolar``: derivations built by subtraction;
        ``positions``: any channel with a 10-05 position.
    names : tuple of str
        Accepted channel names (``kind="names"``) or required electrodes (``"bipolar"``). Empty = any.
    variable : bool
        Whether the model accepts a subset of channels at inference without retraining (paper 003 App. D.2
        "variable-channel"): needed for *removed* channel dropout.
    sfreq : float
        Required sampling rate in Hz.
    n_times : int or None
        Required window length in samples (``None``: any length that is a multiple of ``patch``).
    patch : int or None
        Patch length in samples for patch-based models.
    """

    kind: str
    sfreq: float
    names: tuple[str, ...] = ()
    variable: bool = False
    n_times: int | None = None
    patch: int | None = None
    max_chans: int | None = None

    def check(self, ch_names: list[str], sfreq: float, n_times: int, model: str = "backbone") -> None:
        """Raise :class:`ChannelContractError` naming what is missing or mismatched.

        Parameters
        ----------
        ch_names : list of str
            The dataset's canonical channel names, in order.
        sfreq : float
            The windows' sampling rate in Hz.
        n_times : int
            Window length in samples.
        """
        if abs(sfreq - self.sfreq) > 1e-6:
            raise ChannelContractError(
                f"{model} needs data at {self.sfreq:g} Hz, got {sfreq:g} Hz; fix: use the backbone's declared "
                "preprocessing (the DataModule resamples automatically when `preprocessing: auto`)")
        if self.n_times is not None and n_times != self.n_times:
            raise ChannelContractError(f"{model} needs windows of {self.n_times} samples "
                                       f"({self.n_times / self.sfreq:g} s at {self.sfreq:g} Hz), got {n_times}; "
                                       "fix: set the task's window_s accordingly")
        if self.patch is not None and n_times % self.patch:
            raise ChannelContractError(f"{model} needs a window length that is a multiple of {self.patch} samples "
                                       f"({self.patch / self.sfreq:g} s), got {n_times}; fix: change window_s")
        if self.kind in ("names", "bipolar") and self.names:
            accepted = {n.lower() for n in self.names}
            if self.kind == "names":
                unknown = [c for c in ch_names if c.lower() not in accepted]
                if unknown:
                    raise ChannelContractError(
                        f"{model} has no embedding for channels {unknown}; fix: drop them from the task "
                        f"(`exclude`) or use a montage within its {len(self.names)} known channels")
            else:
                have = {c.lower() for c in ch_names}
                missing = [n for n in self.names if n.lower() not in have]
                if missing:
                    raise ChannelContractError(
                        f"{model} needs electrodes {missing} that the dataset lacks (it has {ch_names}); "
                        "fix: use a dataset with these electrodes or an Interpolated* variant")
        if self.max_chans is not None and len(ch_names) > self.max_chans:
            raise ChannelContractError(f"{model} accepts at most {self.max_chans} channels, got {len(ch_names)}")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class BackboneAdapter(nn.Module):
    """Base class of all backbone adapters (the backbone-adapter contract, docs/guide/architecture.md).

    Subclasses set the class attributes and implement :meth:`build`, :meth:`tokens`, :attr:`blocks`.

    Parameters
    ----------
    ch_names : list of str
        Canonical 10-05 names of the dataset's channels, in the order of the input's channel axis.
    n_times : int
        Window length in samples at ``preprocessing.sfreq``.
    n_outputs : int
        Number of classes (braindecode models need it to build; their own classifier is not used
        except by supervised baselines).
    **kwargs
        Architecture overrides passed to the braindecode constructor (e.g. tiny configs in tests).
    """

    name: ClassVar[str] = "base"
    is_foundation_model: ClassVar[bool] = True
    preprocessing: ClassVar[Preprocessing]
    lora_targets: ClassVar[list[str]] = []
    derived_from: ClassVar[str | None] = None  # set by variants (e.g. depth truncation) of another backbone
    input_montage: ClassVar[str] = "monopolar"  # what its channel tokens see; checkpoints must match (checkpoints.py)

    def __init__(self, ch_names: list[str], n_times: int, n_outputs: int = 2, **kwargs):
        super().__init__()
        self.ch_names = list(ch_names)
        self.n_times = int(n_times)
        self.n_outputs = int(n_outputs)
        self.arch_kwargs = dict(kwargs)
        self.channel_contract.check(self.ch_names, self.preprocessing.sfreq, self.n_times, self.name)

    @property
    def channel_contract(self) -> ChannelContract:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def d_model(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def n_tokens(self, n_chans: int | None = None) -> int:
        """Number of tokens ``tokens`` returns for ``n_chans`` channels (default: the build montage)."""
        raise NotImplementedError

    def tokens(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Representation before pooling.

        Parameters
        ----------
        x : Tensor, shape (batch, n_chans, n_times)
            Preprocessed windows in the unit of ``preprocessing``.
        ch_names : list of str, optional
            Channel names of ``x`` (default: the build montage). Variable-channel models accept a subset. Channels
            given in another order are put in the build montage's order first (:meth:`canonical_order`), so the
            tokens — and a flatten head's weights tied to token positions — do not depend on the input's order.

        Returns
        -------
        Tensor, shape (batch, n_tokens, d_model)
        """
        raise NotImplementedError

    def canonical_order(self, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str] | None]:
        """``x`` with its channels in the build montage's order (a subset keeps that relative order; names the
        montage lacks stay last, in their order, for the adapter's own contract check to name them)."""
        if ch_names is None or list(ch_names) == list(self.ch_names):
            return x, ch_names
        pos = {c.lower(): i for i, c in enumerate(self.ch_names)}
        order = sorted(range(len(ch_names)), key=lambda i: (pos.get(str(ch_names[i]).lower(), len(pos) + i), i))
        if order == list(range(len(ch_names))):
            return x, ch_names
        return x[:, order], [ch_names[i] for i in order]

    def provenance(self) -> dict[str, str]:
        """Extra provenance of the built model (files it read at construction, e.g. REVE's position bank sha256);
        recorded in every result row. Empty by default."""
        return {}

    @property
    def input_channels(self) -> list[str] | None:
        """The dataset channels the model reads (a selecting adapter's choice, e.g. EEG-DINO's 19 of 64), or
        ``None`` when it reads every channel it is given (interpolating variants included)."""
        return None

    @property
    def data_reference(self) -> str:
        """The reference of the windows this adapter is given (``average`` or ``none``): set from the window set
        by :class:`~eegfm_bench.models.module.FMClassifier`, else the backbone's declared preprocessing."""
        return getattr(self, "_data_reference", None) or self.preprocessing.reference

    @data_reference.setter
    def data_reference(self, value: str | None) -> None:
        self._data_reference = value

    def reference_selection(self, x: torch.Tensor, ch_names: list[str] | None) -> tuple[torch.Tensor, list[str] | None]:
        """Keep only :attr:`input_channels` of ``x`` and recompute the common average over them.

        A model that reads a subset of an average-referenced montage would otherwise get channels whose mean is
        not 0 (the reference was computed over channels it never sees). Re-referencing over the subset gives
        exactly the average reference over it (:func:`~eegfm_bench.data.preprocessing.reference_windows`).

        Parameters
        ----------
        x : Tensor, shape (batch, n_chans, n_times)
        ch_names : list of str or None
            Names of ``x``'s channels (default: the build montage).

        Returns
        -------
        x, ch_names
            Unchanged when every given channel is read or the data are not average-referenced; else the read
            channels, in the given order, re-referenced.
        """
        read = self.input_channels
        if read is None or self.data_reference != "average":
            return x, ch_names
        given = list(ch_names) if ch_names is not None else list(self.ch_names)
        wanted = {c.lower() for c in read}
        keep = [i for i, c in enumerate(given) if c.lower() in wanted]
        if len(keep) == len(given) or not keep or x.ndim != 3 or x.shape[1] != len(given):
            return x, ch_names
        x = x[:, keep]
        return x - x.mean(dim=1, keepdim=True), [given[i] for i in keep]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "tokens" in cls.__dict__ and not getattr(cls.__dict__["tokens"], "_canonical", False):
            impl = cls.__dict__["tokens"]

            def tokens(self, x, ch_names=None, *args, _impl=impl, **kw):
                x, ch_names = self.canonical_order(x, ch_names)
                x, ch_names = self.reference_selection(x, ch_names)
                return _impl(self, x, ch_names, *args, **kw)

            tokens.__doc__, tokens.__name__, tokens._canonical = impl.__doc__, "tokens", True
            cls.tokens = tokens

    @property
    def blocks(self) -> list[nn.Module]:
        """Transformer / conv blocks in forward order (for probe and attention hooks)."""
        raise NotImplementedError


def state_dict_sha256(module: nn.Module) -> str:
    """sha256 (hex) of a module's state dict: every entry's name, dtype, shape and bytes, in order.

    Recorded for the backbone at the start of every fold (``backbone_sha256`` in the rows), so a reader can check
    that two cells started from the same weights (the same random init under the same seed, or the same checkpoint).
    """
    h = hashlib.sha256()
    for k, v in module.state_dict().items():
        t = v.detach().to("cpu").contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def checkpoint_dir() -> Path:
    """Folder holding local checkpoints and ``manifest.json`` (``$EEGFM_CHECKPOINTS`` or ``<repo>/checkpoints``)."""
    env = os.environ.get("EEGFM_CHECKPOINTS")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[2] / "checkpoints"
