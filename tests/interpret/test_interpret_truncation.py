"""Depth truncation (paper 003 App. I.6): keep blocks 0..k, registered ``*_truncated`` backbones, sweep configs."""
from __future__ import annotations

import warnings

import pytest
import torch

from eegfm_bench.runs.cv.truncation import depth_configs, truncated_names
from eegfm_bench.models.backbones.truncated import TruncationError, blocks_container, truncate_blocks
from eegfm_bench.models.backbones import BACKBONES

CHS = ["C3", "Cz", "C4", "Pz"]
TINY = dict(num_layers=3, num_heads=2, conv_out_channels=4)


def _labram(**kw):

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BACKBONES.get("labram")(CHS, 400, **kw)


def test_truncate_keeps_first_blocks_and_output_path():
    full = _labram(**TINY)
    x = torch.randn(2, len(CHS), 400)
    # reference: hook block 0's output, then LaBraM's final norm, patch tokens
    cap = {}
    h = full.blocks[0].register_forward_hook(lambda m, i, o: cap.setdefault("o", o))
    with torch.no_grad():
        full.tokens(x)
    h.remove()
    want = full.model.norm(cap["o"])[:, 1:]
    truncate_blocks(full, 0)
    assert len(full.blocks) == 1 and len(full.model.blocks) == 1
    with torch.no_grad():
        torch.testing.assert_close(full.tokens(x), want)


def test_registered_variant_depth_and_checkpoint_keys():
    assert set(truncated_names()) == {"labram_truncated", "cbramod_truncated", "biot_truncated", "reve_truncated"}
    full = _labram(**TINY)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = BACKBONES.get("labram_truncated")(CHS, 400, depth=1, **TINY)
    assert tr.name == "labram" and tr.arch_kwargs["depth"] == 1 and len(tr.blocks) == 2 and tr.full_depth == 3
    state, notes = tr.adapt_state_dict(full.model.state_dict())
    assert not any(k.startswith("blocks.2.") for k in state) and "dropped blocks 2..2" in notes[0]
    tr.model.load_state_dict(state, strict=True)
    assert tr.tokens(torch.randn(1, len(CHS), 400)).shape == (1, len(CHS) * 2, tr.d_model)


def test_reve_truncated_keeps_first_layers_and_drops_checkpoint_tensors():
    """REVE (paper 003 I.6): ``depth`` is the truncation, the architecture's layer count is ``n_layers``; the
    truncated tokens equal the full model's output after layer k (REVE has no final norm after its layers)."""
    chs = ["C3", "Cz", "C4", "Pz"]
    arch = dict(embed_dim=32, heads=2, head_dim=8)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = BACKBONES.get("reve")(chs, 400, n_layers=3, **arch).eval()
        torch.manual_seed(0)
        tr = BACKBONES.get("reve_truncated")(chs, 400, depth=0, n_layers=3, **arch).eval()
    assert len(full.blocks) == 3 and len(tr.blocks) == 1 and tr.full_depth == 3 and tr.arch_kwargs["depth"] == 0
    assert tr.arch_kwargs["n_layers"] == 3
    x = torch.randn(2, len(chs), 400)
    cap = {}
    h = full.blocks[0].register_forward_hook(lambda m, i, o: cap.setdefault("o", o))
    with torch.no_grad():
        full.tokens(x)
    h.remove()
    state, notes = tr.adapt_state_dict(full.model.state_dict())
    assert "dropped blocks 1..2" in notes[0] and not any(k.startswith("transformer.layers.1.") for k in state)
    tr.model.load_state_dict(state, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(tr.tokens(x), cap["o"])
    with pytest.raises(ValueError, match="n_layers or depth"):
        BACKBONES.get("reve")(chs, 400, n_layers=3, depth=3, **arch)


def test_fmclassifier_with_truncated_backbone():
    from eegfm_bench.models.module import FMClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = FMClassifier(backbone="cbramod_truncated", head="flatten", regime="full", ch_names=CHS, n_times=400,
                         n_classes=2, backbone_kwargs={"depth": 0, "n_layer": 2, "nhead": 4, "dim_feedforward": 16,
                                                       "channels_kernel_stride_padding_norm": (
                                                           (5, 49, 25, 24, (5, 5)), (5, 3, 1, 1, (5, 5)),
                                                           (5, 3, 1, 1, (5, 5)))})
    assert len(m.backbone.model.encoder.layers) == 1
    assert m(torch.randn(2, len(CHS), 400)).shape == (2, 2)


def test_bad_depth_and_untruncatable_backbone():
    with pytest.raises(TruncationError, match=r"int in 0\.\.2"):
        truncate_blocks(_labram(**TINY), 3)

    eeg = BACKBONES.get("eegnet")(CHS, 256, F1=4, D=1)
    with pytest.raises(TruncationError, match="eegnet's blocks are not held in one nn.ModuleList"):
        blocks_container(eeg)


def test_depth_configs_one_experiment_per_depth():
    cfg = {"experiment": "d", "out_dir": "r/d", "depths": [0, 2], "task": "eegmmidb_mi",
           "runs": [{"model": "labram_truncated", "regime": "full", "heads": ["flatten"], "backbone_kwargs": {"x": 1}}]}
    out = depth_configs(cfg)
    assert [k for k, _ in out] == [0, 2]
    assert out[1][1].experiment == "d_depth2" and out[1][1].out_dir.endswith("d/depth2")
    assert out[1][1].runs[0].backbone_kwargs == {"x": 1, "depth": 2}
    bad = {**cfg, "runs": [{"model": "labram"}]}
    with pytest.raises(TruncationError, match="labram_truncated"):
        depth_configs(bad)
    with pytest.raises(TruncationError, match="depths"):
        depth_configs({k: v for k, v in cfg.items() if k != "depths"})
