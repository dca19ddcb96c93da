"""Pooling heads: tokens ``(batch, n_tokens, d_model)`` → logits ``(batch, n_classes)`` (architecture guide, "Head").

Each head pools the backbone's tokens and ends in ONE linear classifier, as in the pooling ablation of
paper 003 §4.5 ("We use linear classifiers for this ablation"):

=========== ====================================================== ==========================================
name        pooled features                                        linear layer parameters
=========== ====================================================== ==========================================
mean        mean over tokens, ``(batch, d)``                       ``d·K + K``
attention   softmax(tokens · q / sqrt(d))-weighted sum, ``(b, d)``  ``d·K + K`` (+ ``d`` for the query ``q``)
flatten     all tokens concatenated, ``(batch, N·d)``              ``N·d·K + K``
mean_tile   the mean vector repeated N times, ``(batch, N·d)``     ``N·d·K + K`` (same as flatten)
max         maximum over tokens per feature, ``(batch, d)``          ``d·K + K``
mlp         mean (or flatten) → hidden Linear-GELU-Dropout layers   ``d·h + h + h·K + K`` (one hidden layer h)
=========== ====================================================== ==========================================

(``N`` = n_tokens, ``d`` = d_model, ``K`` = n_classes.) ``mean_tile`` is paper 003's parameter-matched
control: "Mean-tile repeats the pooled vector to match the flattened input size and head parameter count,
but does not preserve individual tokens" (§4.5).

**One pooling vocabulary.** A head whose pooling is a function of the tokens alone declares it as
:attr:`PoolingHead.token_pooling` (``mean``, ``flatten``, ``max``). The block-wise probes (paper 003 App. I.5,
:mod:`eegfm_bench.interpret.probes`) and the negative controls' frozen embeddings (paper 001,
:mod:`eegfm_bench.controls.embeddings`) pool cached tokens with :func:`pool_tokens`, so a head registered here with a
``token_pooling`` reaches cv, probes and controls by its name (:func:`token_poolings` lists them). Heads with
learned pooling (``attention``, ``mlp``) or one tied to the head's size (``mean_tile``) are heads only.

``mlp`` is not a linear probe: it is the MLP head other benchmarks offer, for comparison (``head_kwargs``:
``hidden``, ``pooling``, ``hidden_dropout``). Every head is built as
``HEADS.get(name)(n_tokens, d_model, n_classes, dropout=0.0)`` and reports
:attr:`PoolingHead.n_parameters`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, ClassVar

import numpy as np
import torch
from torch import nn

from eegfm_bench.registry import Registry


class PoolingHead(nn.Module):
    """Base class: pool tokens, apply dropout, then one ``nn.Linear`` classifier.

    Parameters
    ----------
    n_tokens : int
        Number of tokens the backbone returns (``adapter.n_tokens()``).
    d_model : int
        Token dimension (``adapter.d_model``).
    n_classes : int
        Number of output logits.
    dropout : float
        Dropout probability on the pooled features before the classifier (default 0).

    Raises
    ------
    ValueError
        If a size is not positive or ``dropout`` is outside ``[0, 1)``.
    """

    name: ClassVar[str] = "base"
    #: The pooling as a function of the tokens alone, ``(batch, n_tokens, d)`` → ``(batch, features)``, for a
    #: torch Tensor or a numpy array alike (a ``staticmethod``); ``None`` when the pooling has learned parameters or
    #: depends on the head's size. Probes and controls pool frozen tokens with it (:func:`pool_tokens`).
    token_pooling: ClassVar[Callable[[Any], Any] | None] = None
    #: Whether the pooled size grows with the number of tokens (weights tied to token positions): the probes put an
    #: RMSNorm without gain before their linear layer for such a pooling, and do not z-score its features.
    tied_to_tokens: ClassVar[bool] = False

    def __init__(self, n_tokens: int, d_model: int, n_classes: int, dropout: float = 0.0):
        super().__init__()
        for arg, val in (("n_tokens", n_tokens), ("d_model", d_model), ("n_classes", n_classes)):
            if int(val) < 1:
                raise ValueError(f"{self.name} head: {arg} must be positive, got {val}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{self.name} head: dropout must be in [0, 1), got {dropout}")
        self.n_tokens, self.d_model, self.n_classes = int(n_tokens), int(d_model), int(n_classes)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.in_features, self.n_classes)

    @classmethod
    def takes_any_token_count(cls, **head_kwargs) -> bool:
        """Whether a head of this class, built with ``head_kwargs``, takes any number of tokens at forward: False
        where its weights are tied to the build-time token count (:attr:`tied_to_tokens`; ``mlp`` with ``pooling:
        flatten``). Channel-removal conditions (``*_removed``: fewer tokens from a variable-channel backbone, paper
        003 App. D.2) are not applicable to a head that does not (:func:`~eegfm_bench.perturb.evaluate.not_applicable_reason`),
        and ``plan`` does not count them. A head whose answer depends on its settings overrides this."""
        return not cls.tied_to_tokens

    @property
    def in_features(self) -> int:
        """Size of the pooled vector fed to the classifier."""
        return self.d_model

    @property
    def n_parameters(self) -> int:
        """Number of trainable parameters of the head (pooling + classifier)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(batch, n_tokens, d_model)`` → ``(batch, in_features)``: :attr:`token_pooling` unless overridden."""
        if type(self).token_pooling is None:  # pragma: no cover - a subclass without either
            raise NotImplementedError(f"{self.name} head: define pool() or token_pooling")
        return type(self).token_pooling(tokens)

    def _check(self, tokens: torch.Tensor) -> None:
        if tokens.ndim != 3 or tokens.shape[2] != self.d_model:
            raise ValueError(f"{self.name} head expects tokens of shape (batch, n_tokens, {self.d_model}), got "
                             f"{tuple(tokens.shape)}")

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits.

        Parameters
        ----------
        tokens : Tensor, shape (batch, n_tokens, d_model)

        Returns
        -------
        Tensor, shape (batch, n_classes)
        """
        self._check(tokens)
        return self.classifier(self.dropout(self.pool(tokens)))

    def extra_repr(self) -> str:
        return f"n_tokens={self.n_tokens}, d_model={self.d_model}, n_classes={self.n_classes}"


HEADS: Registry[type[PoolingHead]] = Registry("head", entry_points="eegfm_bench.heads")


@HEADS.register("mean")
class MeanHead(PoolingHead):
    """Mean over tokens, then linear. Accepts any number of tokens (e.g. after channel removal)."""

    name = "mean"
    token_pooling = staticmethod(lambda t: t.mean(1))


@HEADS.register("attention")
class AttentionHead(PoolingHead):
    """Learned-query attention pooling, then linear.

    Weights ``a = softmax_n(tokens_n · q / sqrt(d))`` with one learned query ``q`` of size ``d_model``;
    pooled ``sum_n a_n tokens_n``. ``q`` starts at zero, so the head starts as mean pooling. Accepts any
    number of tokens.
    """

    name = "attention"

    def __init__(self, n_tokens: int, d_model: int, n_classes: int, dropout: float = 0.0):
        super().__init__(n_tokens, d_model, n_classes, dropout)
        self.query = nn.Parameter(torch.zeros(self.d_model))

    def attention_weights(self, tokens: torch.Tensor) -> torch.Tensor:
        """Pooling weights ``(batch, n_tokens)``, summing to 1 over tokens."""
        return torch.softmax(tokens @ self.query / math.sqrt(self.d_model), dim=1)

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bn,bnd->bd", self.attention_weights(tokens), tokens)


class _FixedTokensHead(PoolingHead):
    @property
    def in_features(self) -> int:
        return self.n_tokens * self.d_model


@HEADS.register("flatten")
class FlattenHead(_FixedTokensHead):
    """All tokens concatenated (token-major), then linear: ``n_tokens·d_model`` input features.

    Raises
    ------
    ValueError
        At forward, if the number of tokens differs from ``n_tokens`` (e.g. channels *removed* from a
        variable-channel backbone): the head's weights are tied to token positions.
    """

    name = "flatten"
    token_pooling = staticmethod(lambda t: t.reshape(t.shape[0], -1))
    tied_to_tokens = True

    def _check(self, tokens: torch.Tensor) -> None:
        super()._check(tokens)
        if tokens.shape[1] != self.n_tokens:
            raise ValueError(f"flatten head was built for {self.n_tokens} tokens, got {tokens.shape[1]}; fix: "
                             "zero-pad removed channels, or use the mean/attention head for a varying montage")


def _max_over_tokens(t):
    return t.amax(1) if isinstance(t, torch.Tensor) else np.max(t, axis=1)


@HEADS.register("max")
class MaxHead(PoolingHead):
    """Maximum over tokens of each feature, then linear (max pooling). Accepts any number of tokens."""

    name = "max"
    token_pooling = staticmethod(_max_over_tokens)


@HEADS.register("mean_tile")
class MeanTileHead(_FixedTokensHead):
    """Mean over tokens repeated ``n_tokens`` times, then linear (paper 003 §4.5 parameter-matched control).

    The classifier has exactly as many parameters as :class:`FlattenHead`'s but sees no per-token
    information. The mean is tiled to the construction-time ``n_tokens`` whatever the input's token count.
    """

    name = "mean_tile"

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.mean(dim=1).repeat(1, self.n_tokens)


@HEADS.register("mlp")
class MLPHead(PoolingHead):
    """Pooled tokens through a small MLP, then linear (the MLP head peers offer, e.g. OpenEEGBench).

    ``pooling`` (``mean``: ``d`` features, accepts any number of tokens; ``flatten``: ``N·d``, tied to
    ``n_tokens``) feeds ``hidden`` fully connected layers, each ``Linear → GELU → Dropout(hidden_dropout)``; the
    last hidden layer feeds the classifier. Parameters: ``sum_l (in_l·h_l + h_l) + h_L·K + K`` (no hidden
    layer: the linear head of the pooling).

    Raises
    ------
    ValueError
        An unknown ``pooling``, a hidden size below 1, or (``flatten``) a token count other than ``n_tokens``.
    """

    name = "mlp"

    def __init__(self, n_tokens: int, d_model: int, n_classes: int, dropout: float = 0.0,
                 hidden: tuple[int, ...] | list[int] = (256,), pooling: str = "mean", hidden_dropout: float = 0.1):
        if pooling not in ("mean", "flatten"):
            raise ValueError(f"mlp head: pooling must be 'mean' or 'flatten', got {pooling!r}")
        if any(int(h) < 1 for h in hidden):
            raise ValueError(f"mlp head: hidden sizes must be >= 1, got {list(hidden)}")
        self.hidden, self.pooling = [int(h) for h in hidden], pooling
        super().__init__(n_tokens, d_model, n_classes, dropout)
        layers, width = [], self.d_model * (self.n_tokens if pooling == "flatten" else 1)
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.GELU(), nn.Dropout(hidden_dropout)]
            width = h
        self.mlp = nn.Sequential(*layers)

    @property
    def in_features(self) -> int:
        return self.hidden[-1] if self.hidden else self.d_model * (self.n_tokens if self.pooling == "flatten" else 1)

    @classmethod
    def takes_any_token_count(cls, pooling: str = "mean", **head_kwargs) -> bool:
        """``pooling: mean`` takes any number of tokens; ``pooling: flatten`` is tied to ``n_tokens``."""
        return pooling != "flatten"

    def _check(self, tokens: torch.Tensor) -> None:
        super()._check(tokens)
        if self.pooling == "flatten" and tokens.shape[1] != self.n_tokens:
            raise ValueError(f"mlp head (flatten pooling) was built for {self.n_tokens} tokens, got {tokens.shape[1]}; "
                             "fix: pooling: mean for a varying montage")

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        x = tokens.mean(dim=1) if self.pooling == "mean" else tokens.reshape(tokens.shape[0], -1)
        return self.mlp(x)


def token_poolings() -> list[str]:
    """Names of the registered heads whose pooling is a function of the tokens alone (:attr:`PoolingHead.token_pooling`):
    the poolings the block-wise probes and the negative controls accept."""
    return [n for n in HEADS.names() if HEADS.get(n).token_pooling is not None]


def check_token_pooling(name: str) -> type[PoolingHead]:
    """The head class of pooling ``name``.

    Raises
    ------
    ValueError
        If no registered head has a parameter-free pooling of that name (the message lists those that do).
    """
    valid = token_poolings()
    if name not in valid:
        raise ValueError(f"unknown pooling {name!r}; fix: one of {valid} (the heads whose pooling needs no learned "
                         "parameters; register a head with a token_pooling to add one)")
    return HEADS.get(name)


def pool_tokens(tokens, pooling: str):
    """Pool tokens the way head ``pooling`` does, without its classifier.

    Parameters
    ----------
    tokens : Tensor or ndarray, shape (n_windows, n_tokens, d_model)
    pooling : str
        A name of :func:`token_poolings`.

    Returns
    -------
    Tensor or ndarray (the input's kind), shape (n_windows, features)

    Raises
    ------
    ValueError
        An unknown pooling (see :func:`check_token_pooling`) or tokens that are not 3-d.
    """
    head = check_token_pooling(pooling)
    if tokens.ndim != 3:
        raise ValueError(f"tokens must be (n_windows, n_tokens, d_model), got {tuple(tokens.shape)}")
    return head.token_pooling(tokens)
