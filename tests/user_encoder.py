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
    activation : str
        The encoder layers' feed-forward activation (``relu`` or ``gelu``, torch's functional ones).
    """

    def __init__(self, n_chans: int, n_times: int, patch: int = 128, d_model: int = 32, depth: int = 2,
                 n_heads: int = 4, activation: str = "relu"):
        super().__init__()
        if n_times % patch:
            raise ValueError(f"n_times {n_times} is not a multiple of patch {patch}")
        self.patch = patch
        self.embed = nn.Linear(patch, d_model)
        self.channel = nn.Parameter(torch.randn(n_chans, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=2 * d_model, dropout=0.1,
                                           activation=activation, batch_first=True)
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


class SDPAAttention(nn.Module):
    """Multi-head self-attention written with ``F.scaled_dot_product_attention`` (as many new encoders are)."""

    def __init__(self, d_model: int, n_heads: int, manual: bool = False):
        super().__init__()
        self.n_heads, self.manual = n_heads, manual
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.manual:  # the same attention written by hand (no rule can be attached to it)
            o = ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1) @ v
        else:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, n, d))


class SDPABlock(nn.Module):
    """Pre-norm transformer block around :class:`SDPAAttention`, with a SiLU MLP."""

    def __init__(self, d_model: int, n_heads: int, act: type = nn.SiLU, manual: bool = False):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = SDPAAttention(d_model, n_heads, manual)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), act(), nn.Linear(2 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinySDPATransformer(TinyEEGTransformer):
    """:class:`TinyEEGTransformer` with its own attention blocks (``blocks.*``; attention ``blocks.*.attn``) and an
    MLP activation ``act``: ``silu`` or ``tanh``; ``manual``: attention written by hand instead of SDPA."""

    def __init__(self, n_chans: int, n_times: int, patch: int = 128, d_model: int = 32, depth: int = 2,
                 n_heads: int = 4, act: str = "silu", manual: bool = False):
        super().__init__(n_chans, n_times, patch, d_model, 1, n_heads)
        del self.encoder
        self.blocks = nn.ModuleList(SDPABlock(d_model, n_heads, {"silu": nn.SiLU, "tanh": nn.Tanh}[act], manual)
                                    for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patches(x).flatten(1, 2)
        for blk in self.blocks:
            t = blk(t)
        return self.norm(t)


class TinySpatialTransformer(TinySDPATransformer):
    """Attention across channels within each time patch (CBraMod-style spatial attention): each block attends over
    ``(batch · n_patches, n_chans, d_model)`` sequences."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patches(x)  # (B, C, P, d)
        b, c, n, d = p.shape
        t = p.transpose(1, 2).reshape(b * n, c, d)
        for blk in self.blocks:
            t = blk(t)
        return self.norm(t.reshape(b, n, c, d).transpose(1, 2).reshape(b, c * n, d))


class SkipsABlock(TinyEEGTransformer):
    """Declares ``extra`` among its blocks but never calls it (the dry run must refuse the declaration)."""

    def __init__(self, n_chans: int, n_times: int, patch: int = 128, d_model: int = 32, depth: int = 2,
                 n_heads: int = 4):
        super().__init__(n_chans, n_times, patch, d_model, depth, n_heads)
        self.extra = nn.Linear(d_model, d_model)


class DetachedTokens(TinyEEGTransformer):
    """Returns its tokens detached from the graph (no gradient can reach any parameter)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).detach()


class ParameterFreeTokens(TinyEEGTransformer):
    """Tokens made from the input alone; the parameters enter only multiplied by 0 (they get zero gradients)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t = x.shape
        tok = x.reshape(b, c * (t // self.patch), self.patch)[..., : self.embed.out_features] / 100.0
        return tok + 0.0 * self.channel.sum()
