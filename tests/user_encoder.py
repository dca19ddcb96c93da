"""A small transformer encoder defined outside the package: the README's "bring your own model" example.

``TinyEEGTransformer`` cuts each channel into 1 s patches, embeds every patch with one linear layer plus a learned
channel embedding, and runs a standard ``nn.TransformerEncoder``; its output, ``(batch, n_chans · n_patches,
d_model)``, is the token sequence the pooling heads read.
"""
from __future__ import annotations

import torch
from torch import nn


class TinyEEGTransformer(nn.Module):
    """Patch transformer over (batch, n_chans, n_times) windows in µV.

    Parameters
    ----------
    n_chans, n_times : int
        Passed by eegfm_bench (the constructor declares them by name).
    patch : int
        Samples per patch.
    d_model, depth, n_heads : int
        Transformer width, layers and heads.
    """

    def __init__(self, n_chans: int, n_times: int, patch: int = 128, d_model: int = 32, depth: int = 2,
                 n_heads: int = 4):
        super().__init__()
        if n_times % patch:
            raise ValueError(f"n_times {n_times} is not a multiple of patch {patch}")
        self.patch = patch
        self.embed = nn.Linear(patch, d_model)
        self.channel = nn.Parameter(torch.randn(n_chans, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=2 * d_model, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, C, T) -> (batch, C, P, d_model) patch embeddings (a 4-D tensor: not tokens)."""
        b, c, t = x.shape
        p = self.embed(x.reshape(b, c, t // self.patch, self.patch) / 100.0)
        return p + self.channel[None, :, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, C, T) -> (batch, C·P, d_model)."""
        p = self.patches(x)
        return self.norm(self.encoder(p.flatten(1, 2)))
