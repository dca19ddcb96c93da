"""Per-channel attention per block (paper 003 App. I.4) and topomap inputs on tiny LaBraM / CBraMod."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from eegfm_bench.interpret.attention import channel_attention, check_attention_support
from eegfm_bench.errors import UnsupportedMethodError
from eegfm_bench.interpret.topomap import TopomapError, check_positions, plot_topomap_grid

CHS = ["C3", "Cz", "C4", "Pz", "O1", "O2"]
TINY_CBRAMOD = dict(n_layer=2, nhead=4, dim_feedforward=32,
                    channels_kernel_stride_padding_norm=((5, 49, 25, 24, (5, 5)), (5, 3, 1, 1, (5, 5)),
                                                         (5, 3, 1, 1, (5, 5))))
TINY_LABRAM = dict(num_layers=2, num_heads=2, conv_out_channels=4)
TINY_REVE = dict(embed_dim=32, depth=2, heads=2, head_dim=8)


def _adapter(name, **kw):
    from eegfm_bench.models.backbones import BACKBONES

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BACKBONES.get(name)(CHS, 400, **kw)


def test_cbramod_spatial_attention_sums_to_query_count():
    ad = _adapter("cbramod", **TINY_CBRAMOD).eval()
    x = torch.randn(3, len(CHS), 400)
    a = channel_attention(ad, x)
    assert a.shape == (2, 3, len(CHS))
    # each softmax row sums to 1: summed over queries then over key channels = C queries
    np.testing.assert_allclose(a.sum(-1), len(CHS), rtol=1e-5)
    # the model's output is unchanged by the extraction hooks
    with torch.no_grad():
        ref = ad.tokens(x)
    channel_attention(ad, x)
    with torch.no_grad():
        torch.testing.assert_close(ad.tokens(x), ref)


def test_labram_attention_excludes_cls_and_matches_manual():
    ad = _adapter("labram", **TINY_LABRAM).eval()
    x = torch.randn(2, len(CHS), 400)
    a = channel_attention(ad, x)
    assert a.shape == (2, 2, len(CHS))
    # manual: block 0 attention from its normed input, CLS dropped, sum over queries, mean heads and patches
    captured = {}
    h = ad.blocks[0].attn.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
    with torch.no_grad():
        ad.tokens(x)
        A = ad.blocks[0].attn(captured["x"], return_attention=True)
    h.remove()
    want = A[:, :, 1:, 1:].sum(2).mean(1).reshape(2, len(CHS), 2).mean(-1).numpy()
    np.testing.assert_allclose(a[0], want, rtol=1e-5)
    # without the CLS key the per-channel total is below C (the CLS share is excluded)
    assert np.all(a.sum(-1) < len(CHS)) and np.all(a > 0)


def test_reve_attention_is_the_matrix_its_attention_applies():
    """REVE (paper 003 I.4): the recomputed softmax, applied to v, reproduces the module's SDPA output, and the
    per-channel attention (sum over queries, mean over heads and patches) sums to exactly C (no CLS)."""
    ad = _adapter("reve", **TINY_REVE).eval()
    x = torch.randn(2, len(CHS), 400)
    a = channel_attention(ad, x)
    n_p = ad._patches()
    assert a.shape == (2, 2, len(CHS)) and n_p == 2
    np.testing.assert_allclose(a.sum(-1), len(CHS), rtol=1e-5)
    cap = {}
    att = ad.blocks[1][0].attend
    h = att.register_forward_hook(lambda m, args, out: cap.update(qkv=args[0], out=out))
    with torch.no_grad():
        ad.tokens(x)
    h.remove()
    q, k, v = (t.reshape(2, -1, att.heads, 8).transpose(1, 2) for t in cap["qkv"].chunk(3, dim=-1))
    A = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
    torch.testing.assert_close((A @ v).transpose(1, 2).reshape(2, -1, att.heads * 8), cap["out"], rtol=1e-4,
                               atol=1e-5)
    want = A.sum(2).mean(1).reshape(2, len(CHS), n_p).mean(-1).numpy()
    np.testing.assert_allclose(a[1], want, rtol=1e-5)


@pytest.mark.parametrize("name", ["eegnet", "biot"])
def test_backbone_without_softmax_attention_is_refused(name):
    with pytest.raises(UnsupportedMethodError, match=r"attention maps exist for \['cbramod', 'labram', 'reve'\].*supports"):
        check_attention_support(name)


def test_topomap_names_channels_without_positions(tmp_path):
    with pytest.raises(TopomapError, match=r"\['EMG1', 'X9'\]"):
        check_positions(["C3", "EMG1", "Cz", "X9"])
    with pytest.raises(TopomapError, match="3 values per map but 2 channel names"):
        plot_topomap_grid({"r": np.ones(3)}, ["C3", "C4"], tmp_path / "x.png")
    png = plot_topomap_grid({"a": np.random.rand(2, len(CHS)), "b": np.random.rand(2, len(CHS))}, CHS,
                            tmp_path / "g.png", col_titles=["block 0", "block 1"])
    assert png.stat().st_size > 2000
