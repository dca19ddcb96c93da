"""AttnLRP patch maps: conservation with biases zeroed, per-instance patching that is undone, refusals."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from interpret_synth import CHS, TINY_EEGNET, TINY_LABRAM, build
from eegfm_bench.interpret.attribution import ConservationWarning, LogitModel, attnlrp, conservation_check
from eegfm_bench.interpret.lrp import UnsupportedModuleError, get_patch_map, lrp_copy, lrp_patched, supported_methods
from eegfm_bench.errors import UnsupportedMethodError


def _x(n=3, seed=0):
    return torch.randn(n, len(CHS), 400, generator=torch.Generator().manual_seed(seed))


def test_conservation_tiny_cbramod_biases_zeroed(trained_cbramod):
    lm = LogitModel.from_classifier(trained_cbramod)
    x = _x(8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = conservation_check(lm, x, 1, "cbramod")
    # the budget closes within 5 %: input relevance + what the attention products absorbed = the logit
    assert res["closure"] == pytest.approx(1.0, abs=0.05) and res["closure_max_error"] < 0.05 and res["ok_closure"]
    # every rule but AttnLRP's softmax Taylor rule conserves: CP attention → sum R = logit, nothing absorbed
    assert res["ratio_cp"] == pytest.approx(1.0, abs=0.05) and res["ok_cp"]
    # AttnLRP's input map alone does not carry the logit: the softmax rule's bias term absorbs a share (near-uniform
    # attention of a tiny model: tens of %, of either sign per window), reported with a warning
    assert res["softmax_share"] == pytest.approx(res["closure"] - res["ratio"], abs=1e-9)
    assert abs(res["softmax_share"]) > 0.05 and not res["ok"]
    assert any(issubclass(i.category, ConservationWarning) and "softmax Taylor rule" in str(i.message) for i in w)


def test_attention_sink_is_zero_under_cp_and_matches_a_hand_computed_budget(trained_cbramod):
    from eegfm_bench.interpret.attribution import attnlrp

    lm = LogitModel.from_classifier(trained_cbramod)
    x = _x(2, 3)
    rel, logits, sink = attnlrp(lm, x, 0, "cbramod", attention_rule="cp", biases_zeroed=True, return_sink=True)
    assert sink.shape == (2,) and torch.allclose(sink, torch.zeros(2, dtype=torch.float64), atol=1e-4 * float(logits.abs().max()))
    rel, logits, sink = attnlrp(lm, x, 0, "cbramod", biases_zeroed=True, return_sink=True)
    budget = rel.double().sum((1, 2)) + sink
    torch.testing.assert_close(budget, logits[:, 0].double(), rtol=0.05, atol=1e-6)


@pytest.mark.parametrize("backbone,kw", [("labram", TINY_LABRAM), ("eegnet", TINY_EEGNET)])
def test_conservation_labram_eegnet(backbone, kw):
    m = build(backbone, kw, seed=1)
    for mod in m.modules():  # make eval-mode BatchNorm a non-trivial affine map
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.normal_()
            mod.running_var.uniform_(0.5, 2.0)
    res = conservation_check(LogitModel.from_classifier(m), _x(2, 1), 0, backbone, warn=False)
    assert res["ratio_cp"] == pytest.approx(1.0, abs=1e-3)
    assert res["ratio"] == pytest.approx(1.0, abs=0.05)  # LaBraM: layer scale 0.1 keeps the softmax share small


def test_patches_are_per_instance_and_undone(trained_cbramod):
    lm = LogitModel.from_classifier(trained_cbramod)
    x = _x(2)
    with torch.no_grad():
        before = lm(x).clone()
    ln_forward, mha_forward = nn.LayerNorm.forward, nn.MultiheadAttention.forward
    from zennit.core import BasicHook

    hook_fwd = BasicHook.__dict__["forward"]
    rel, logits = attnlrp(lm, x, 0, "cbramod", epsilon=1e-6)
    torch.testing.assert_close(logits, before)  # the patched copy computes the same function
    assert rel.shape == x.shape and torch.isfinite(rel).all()
    assert nn.LayerNorm.forward is ln_forward and nn.MultiheadAttention.forward is mha_forward
    assert BasicHook.__dict__["forward"] is hook_fwd  # lxt's zennit patch reverted
    assert not any("forward" in m.__dict__ for m in lm.modules())
    # inside the context the copy is patched per instance; outside, it is restored
    c = lrp_copy(lm)
    pm = get_patch_map("cbramod")
    with lrp_patched(c, pm) as mm:
        assert "forward" in mm.backbone.model.encoder.layers[0].self_attn_s.__dict__
        assert "forward" not in lm.backbone.model.encoder.layers[0].self_attn_s.__dict__
    assert not any("forward" in m.__dict__ for m in c.modules())
    with torch.no_grad():
        torch.testing.assert_close(lm(x), before)
    # epsilon rule ≈ plain gradient for a small epsilon
    rel0, _ = attnlrp(lm, x, 0, "cbramod", epsilon=0.0)
    np.testing.assert_allclose(rel.sum((1, 2)), rel0.sum((1, 2)), rtol=1e-2)


def test_unreviewed_module_is_refused():
    lm = LogitModel.from_classifier(build("eegnet", TINY_EEGNET))
    lm.backbone.model.elu_1 = nn.Softplus()
    with pytest.raises(UnsupportedModuleError, match=r"backbone.model.elu_1 \(Softplus\)"):
        attnlrp(lm, _x(1), 0, "eegnet")


def test_no_patch_map():
    assert supported_methods("biot") == ["gxi"]
    assert supported_methods("labram") == ["gxi", "attnlrp", "gradcam"]
    assert supported_methods("reve") == ["gxi", "gradcam"]
    with pytest.raises(UnsupportedMethodError, match=r"no AttnLRP patch map for backbone 'biot'.*\['cbramod', 'eegnet', 'labram'\]"):
        get_patch_map("biot")


@pytest.mark.parametrize("method,trained", [("lora", "lora_B"), ("ia3", "ia3_l")])
def test_attnlrp_on_a_peft_adapted_labram_merges_the_adapters(method, trained):
    from eegfm_bench.models.module import FMClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = FMClassifier(backbone="labram", head="flatten", regime="lora", ch_names=CHS, n_times=400, n_classes=2,
                         init_seed=0, backbone_kwargs=TINY_LABRAM, lora={"r": 4, "method": method} if method == "lora" else
                         {"method": method, "feedforward_modules": ["mlp.0", "mlp.2"]})
    with torch.no_grad():  # non-zero adapters, so that merging matters
        for name, p in m.named_parameters():
            if trained in name:
                p.add_(torch.randn_like(p) * 0.2)
    lm = LogitModel.from_classifier(m)
    x = _x(2, 4)
    with torch.no_grad():
        before = lm(x).clone()
    copy_ = lrp_copy(lm)
    from peft.tuners.tuners_utils import BaseTunerLayer

    assert not any(isinstance(mod, BaseTunerLayer) for mod in copy_.modules())
    assert any(isinstance(mod, BaseTunerLayer) for mod in lm.modules())  # the original keeps its adapters
    with torch.no_grad():
        torch.testing.assert_close(copy_(x), before, rtol=1e-4, atol=1e-5)
    res = conservation_check(lm, x, 0, "labram", warn=False)
    assert res["closure"] == pytest.approx(1.0, abs=0.05) and res["ratio_cp"] == pytest.approx(1.0, abs=0.05)
    rel, logits = attnlrp(lm, x, 0, "labram")
    torch.testing.assert_close(logits, before, rtol=1e-4, atol=1e-5)
    assert rel.shape == x.shape and torch.isfinite(rel).all()
