"""A pooling head: the root-mean-square of every feature over the tokens, then a linear layer.

``token_pooling`` is a function of the tokens alone, so the same name is also a pooling of the block-wise probes
(``probe.poolings``) and of the negative controls (``models[].pooling``).
"""
from __future__ import annotations

import numpy as np
import torch

from eegfm_bench.models.heads import HEADS, PoolingHead


def rms_over_tokens(tokens):
    """``(batch, n_tokens, d_model)`` tokens (a Tensor or a numpy array) -> ``(batch, d_model)``."""
    if isinstance(tokens, torch.Tensor):
        return tokens.pow(2).mean(dim=1).sqrt()
    return np.sqrt(np.mean(np.square(tokens), axis=1))


@HEADS.register("rms")
class RMSHead(PoolingHead):
    """Root-mean-square over tokens, then linear (``d_model * n_classes + n_classes`` parameters)."""

    name = "rms"
    token_pooling = staticmethod(rms_over_tokens)
