
"""Frozen encoder embeddings for the controls, and row alignment across preprocessings (paper 001 §3.5, §4.2.2).

Every representation a control compares must sit on the *same windows*: the handcrafted features are computed
under the controls' feature preprocessing, each backbone reads windows under its own declared preprocessing
(sampling rate, band, unit), and a cv run's predictions index the rows of that backbone's window set. Rows are
therefore matched by their identity ``(recording, window_index)`` (:func:`align_rows`), never by position, and a
mismatch raises instead of silently dropping windows.

A frozen embedding is the feature cache's tokens (:func:`eegfm_bench.models.features.extract_features`: a
``Trainer.predict`` pass, computed once per backbone weights, window set and precision) pooled over tokens: ``mean`` gives ``(n_windows, d_model)``,
``flatten`` gives ``(n_windows, n_tokens · d_model)`` (paper 001 §3.5: REVE mean-pooled on CHB-MIT, flattened on
TUAB). The backbone is built exactly as :class:`~eegfm_bench.models.module.FMClassifier` builds it (same seed
handling), so a matched fully random initialisation (§4.2.2, Control 2) is the same architecture with the same
``init_seed`` and its tokens are shared with a cv run's ``head_only`` cells of that seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from eegfm_bench.config import ConfigError
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.checkpoints import load_pretrained
from eegfm_bench.models.features import extract_features
from eegfm_bench.models.heads import check_token_pooling, pool_tokens

class RowAlignmentError(ValueError):
    """Two window sets (or a window set and saved predictions) do not hold the same windows."""


def row_keys(recording, window_index) -> np.ndarray:
    """Identity of each window, ``"<recording>#<window_index>"``, shape ``(n_windows,)``."""
    rec = np.asarray(recording).astype(str)
    wi = np.asarray(window_index).astype(np.int64).astype(str)
    return np.char.add(np.char.add(rec, "#"), wi)


def align_rows(ref_keys: np.ndarray, other_keys: np.ndarray, what: str, ref_name: str = "feature windows") -> np.ndarray:
    """Indices into ``other_keys`` that put its rows in the order of ``ref_keys``.

    Parameters
    ----------
    ref_keys : ndarray of str, shape (n,)
        Row identities of the reference (the handcrafted-feature window set), see :func:`row_keys`.
    other_keys : ndarray of str, shape (m,)
        Row identities of the other source (a backbone's window set, or a cv run's predictions).
    what : str
        Name of the other source, for the error message.
    ref_name : str
        Name of the reference, for the error message.

    Returns
    -------
    ndarray of int64, shape (n,)
        ``other[idx]`` lines up with ``ref`` row by row.

    Raises
    ------
    RowAlignmentError
        If either side holds windows the other lacks, or a key repeats (the message lists examples and the fix).
    """
    ref_keys, other_keys = np.asarray(ref_keys), np.asarray(other_keys)
    for keys, name in ((ref_keys, ref_name), (other_keys, what)):
        u, c = np.unique(keys, return_counts=True)
        if (c > 1).any():
            raise RowAlignmentError(f"{name} hold repeated windows {u[c > 1][:3].tolist()}; fix: rebuild that window "
                                    "cache / predictions (one row per recording window)")
    only_ref = np.setdiff1d(ref_keys, other_keys)
    only_other = np.setdiff1d(other_keys, ref_keys)
    if only_ref.size or only_other.size:
        raise RowAlignmentError(
            f"{what} and the {ref_name} hold different windows: {only_ref.size} only in the {ref_name} "
            f"(e.g. {only_ref[:3].tolist()}), {only_other.size} only in {what} (e.g. {only_other[:3].tolist()}); "
            "paired comparisons need identical windows. fix: use the same data.subjects / "
            "data.max_windows_per_subject as that source, and the same window length (window_s) for every "
            "preprocessing")
    order = np.argsort(other_keys, kind="stable")
    return order[np.searchsorted(other_keys[order], ref_keys)].astype(np.int64)


def pool_cached_tokens(tokens: np.ndarray, pooling: str = "mean", batch: int = 256) -> np.ndarray:
    """Pool cached tokens to one vector per window, the way head ``pooling`` does
    (:func:`eegfm_bench.models.heads.pool_tokens`: one pooling vocabulary for heads, probes and controls).

    Parameters
    ----------
    tokens : ndarray, shape (n_windows, n_tokens, d_model)
        Token cache (may be memory-mapped; read in chunks of ``batch`` rows).
    pooling : str
        A name of :func:`eegfm_bench.models.heads.token_poolings`: ``mean`` (over tokens), ``flatten`` (all tokens
        concatenated, token-major), ``max`` (over tokens), or a registered head's.

    Returns
    -------
    ndarray, float64, shape (n_windows, features): ``d_model`` (mean, max) or ``n_tokens · d_model`` (flatten)

    Raises
    ------
    ValueError
        For an unknown pooling or tokens that are not 3-D.
    """
    check_token_pooling(pooling)
    if tokens.ndim != 3:
        raise ValueError(f"tokens must be (n_windows, n_tokens, d_model), got {tokens.shape}")
    parts = [pool_tokens(np.asarray(tokens[s:s + batch], dtype=np.float64), pooling)
             for s in range(0, tokens.shape[0], batch)]
    return np.concatenate(parts, axis=0)

def build_encoder(model: str, ch_names: list[str], n_times: int, n_classes: int, *, init_seed: int = 0,
                  pretrained: str | None = None, backbone_kwargs: dict | None = None):
    """Build a registered backbone as :class:`~eegfm_bench.models.module.FMClassifier` does.

    The architecture is constructed under ``torch.manual_seed(init_seed)`` inside a forked RNG (so a random
    initialisation is reproducible and identical to a cv run's ``init_seed``), then pretrained weights are loaded
    when ``pretrained`` is given (strict loading, sha256-checked: :func:`~eegfm_bench.models.checkpoints.load_pretrained`).

    Parameters
    ----------
    model : str
        Registered backbone name.
    ch_names : list of str
        The window set's montage.
    n_times : int
        Window length in samples at the backbone's rate.
    n_classes : int
        Passed as ``n_outputs`` (the backbone's own classifier is replaced by an identity).
    init_seed : int
        Seed of the random initialisation.
    pretrained : str, optional
        Hub id or local folder; None for a fully random initialisation. For a user model
        (:mod:`eegfm_bench.models.user`) ``"declared"`` loads the weights its declaration names, and None builds it
        without them.
    backbone_kwargs : dict, optional
        Architecture overrides.

    Returns
    -------
    adapter : BackboneAdapter
        In eval mode.
    init : str
        ``"random"`` or ``"pretrained:<id>@<sha12>"``.

    Raises
    ------
    UnknownNameError, ChannelContractError, CheckpointError
        From the registry, the channel contract and the checkpoint loader.
    ConfigError
        A user model given a ``pretrained`` other than ``declared`` (its weights come from its declaration).
    """
    cls = BACKBONES.get(model)
    user = getattr(cls, "user_spec", None) is not None
    if user and pretrained not in (None, "declared"):
        raise ConfigError(f"{model} is a user model: its weights come from its declaration "
                          f"(user_models.{model}.pretrained), not {pretrained!r}; fix: pretrained: null")
    extra = {"declared_weights": pretrained == "declared"} if user else {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(init_seed))
        adapter = cls(list(ch_names), int(n_times), n_outputs=int(n_classes), **extra, **(backbone_kwargs or {}))
    init = getattr(adapter, "init_label", None) or "random"
    if pretrained and not user:
        init = load_pretrained(adapter, pretrained)
    return adapter.eval(), init


@dataclass
class FrozenEmbedding:
    """A frozen representation on the feature windows' rows.

    Attributes
    ----------
    X : ndarray, shape (n_windows, n_dims)
        Pooled embedding, rows in the order of the feature window set.
    init : str
        ``random`` or ``pretrained:<id>@<sha12>``.
    init_seed : int
    pooling : str
    n_tokens, d_model : int
        Shape of the token cache it was pooled from.
    """

    X: np.ndarray
    init: str
    init_seed: int
    pooling: str
    n_tokens: int
    d_model: int


def frozen_embedding(model: str, ws_model, ref_keys: np.ndarray, *, init_seed: int = 0, pretrained: str | None = None,
                     pooling: str = "mean", backbone_kwargs: dict | None = None, cache_dir=None,
                     trainer: dict | None = None, batch_size: int = 32, progress: bool = True) -> FrozenEmbedding:
    """Pooled frozen embedding of every window, aligned with the feature windows (paper 001 §3.5, §4.2.2).

    Parameters
    ----------
    model : str
        Registered backbone.
    ws_model : WindowSet
        The task's windows under the backbone's declared preprocessing, ``X`` of shape
        ``(n_windows, n_chans, n_times)`` in its unit.
    ref_keys : ndarray of str, shape (n_windows,)
        Row identities of the feature window set (:func:`row_keys`); the output follows this order.
    init_seed, pretrained, backbone_kwargs
        See :func:`build_encoder`.
    pooling : str
        A name of :func:`eegfm_bench.models.heads.token_poolings`.
        See :func:`pool_cached_tokens`.
    cache_dir : path, optional
        Token-cache root (default: the window cache root).
    trainer : dict, optional
        The ``trainer:`` section of the ``Trainer.predict`` pass (devices, precision); default one device, fp32.
    batch_size : int
        Windows per forward pass.
    progress : bool
        Progress bar over token batches.

    Returns
    -------
    FrozenEmbedding

    Raises
    ------
    RowAlignmentError
        If the backbone's windows differ from the feature windows.
    """
    idx = align_rows(ref_keys, row_keys(ws_model.recording, ws_model.window_index), f"{model} windows")
    adapter, init = build_encoder(model, ws_model.ch_names, ws_model.n_times, len(ws_model.class_names),
                                  init_seed=init_seed, pretrained=pretrained, backbone_kwargs=backbone_kwargs)
    # keyed by the weights: a cv run's head_only cells of the same init and seed share the entry
    tokens = extract_features(adapter, ws_model, parts=("tokens",), trainer=trainer, batch_size=batch_size,
                              cache_dir=cache_dir, progress=progress).array("tokens")
    X = pool_cached_tokens(tokens, pooling)[idx]
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{model} ({init}, seed {init_seed}) produced NaN/inf embeddings; fix: check the input "
                         "unit against the backbone's preprocessing, or delete the token cache file and recompute")
    return FrozenEmbedding(X, init, int(init_seed), pooling, int(tokens.shape[1]), int(tokens.shape[2]))


__all__ = ["RowAlignmentError", "row_keys", "align_rows", "pool_cached_tokens", "build_encoder",
           "FrozenEmbedding", "frozen_embedding"]
