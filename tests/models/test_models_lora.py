"""PEFT adaptation: every backbone's LoRA targets receive gradients and change the output (also in eval mode),
other peft methods, target errors, the no-op guard, and the trainable fraction seen by FMClassifier."""
from __future__ import annotations

import socket

import pytest
import torch
from zoo_configs import CH19, FOUNDATION, SUPERVISED, TINY, B, build, window

from eegfm_bench.models.adaptation import (AdapterNoOpError, LoraTargetError, adapter_parameters, apply_lora,
                                           resolve_targets)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError("tests must not touch the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    torch.manual_seed(0)


@pytest.mark.parametrize("name", FOUNDATION)
def test_lora_adapters_receive_gradients_and_change_the_output(name):
    a = build(name)
    x = window(name)
    with torch.no_grad():
        before = a.tokens(x, CH19)
    n_base = sum(p.numel() for p in a.parameters())
    apply_lora(a, {"r": 2, "lora_alpha": 4, "init_lora_weights": False})
    lora = adapter_parameters(a)
    assert lora and all("lora_" in n for n in lora)  # only adapter weights train
    with torch.no_grad():  # eval mode without gradients: torch's fused fast paths must not bypass adapters
        after_eval = a.tokens(x, CH19)
    assert (after_eval - before).abs().max() > 1e-4
    out = a.tokens(x, CH19)
    torch.testing.assert_close(out, after_eval)
    out.pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora.values())
    assert all(p.grad is None for n, p in a.named_parameters() if n not in lora)
    # the wrapped backbone keeps its contract
    assert a.n_tokens() == TINY[name][2][0] and a.d_model == TINY[name][2][1]
    assert len(a.blocks) == TINY[name][3] and a.channel_contract.sfreq == a.preprocessing.sfreq
    n_lora = sum(p.numel() for p in lora.values())
    assert sum(p.numel() for p in a.parameters()) == n_base + n_lora


@pytest.mark.parametrize("name", SUPERVISED)
def test_supervised_baselines_have_no_lora_targets(name):
    with pytest.raises(LoraTargetError, match="declares no lora_targets"):
        apply_lora(build(name))


def test_unmatched_target_lists_candidates():
    a = build("eegdino")
    with pytest.raises(LoraTargetError, match=r"\['attn.qkvz'\].*encoder_layers\.\*\.attn\.qkv") as err:
        apply_lora(a, {"target_modules": ["attn.proj", "attn.qkvz"]})
    assert err.value.unmatched == ["attn.qkvz"]
    assert "model.encoder_layers.*.mlp.fc1" in err.value.candidates
    assert not any("lora_" in n for n, _ in a.named_parameters())  # nothing injected
    with pytest.raises(LoraTargetError, match="regex"):
        apply_lora(build("eegpt"), {"target_modules": r".*nothing\d"})


def test_target_regex_and_config_override():
    a = build("eegpt")
    names = resolve_targets(a, r".*blocks\.\d+\.attn\.(qkv|proj)")
    assert names == ["model.target_encoder.blocks.0.attn.qkv", "model.target_encoder.blocks.0.attn.proj",
                     "model.target_encoder.blocks.1.attn.qkv", "model.target_encoder.blocks.1.attn.proj"]
    apply_lora(a, {"target_modules": r".*blocks\.\d+\.attn\.(qkv|proj)", "r": 4})
    wrapped = {n.rsplit(".lora_", 1)[0] for n in adapter_parameters(a)}
    assert wrapped == set(names)
    assert a.peft_config.r == 4


def test_no_op_adapter_is_caught():
    """An adapter on a module the forward bypasses (braindecode's F.linear on qkv) is an error, not a silent no-op."""
    from braindecode.models.labram import _Attention

    a = build("labram")
    for mod in a.modules():
        if isinstance(mod, _Attention):
            mod.__class__ = _Attention  # undo the adapter's patch: braindecode's F.linear(x, qkv.weight)
    with pytest.raises(AdapterNoOpError, match="qkv"):
        apply_lora(a, {"target_modules": ["attn.qkv"]})


@pytest.mark.parametrize("cfg,prefix", [
    ({"method": "lora", "use_dora": True, "r": 2}, "lora_magnitude_vector"),
    ({"method": "ia3", "target_modules": ["attn.proj", "mlp.fc2"], "feedforward_modules": ["mlp.fc2"]}, "ia3_l"),
    ({"method": "loha", "r": 2, "alpha": 4, "init_weights": False}, "hada_"),
    ({"method": "lokr", "r": 2, "alpha": 4, "init_weights": False}, "lokr_"),
])
def test_other_peft_methods(cfg, prefix):
    a = build("eegdino")
    x = window("eegdino")
    with torch.no_grad():
        before = a.tokens(x, CH19)
    apply_lora(a, cfg)
    params = adapter_parameters(a)
    assert params and any(prefix in n for n in params)
    out = a.tokens(x, CH19)
    out.pow(2).mean().backward()
    assert all(p.grad is not None for p in params.values())
    if cfg["method"] in ("loha", "lokr"):  # non-identity init: the output moves
        assert (out.detach() - before).abs().max() > 1e-5


def test_unknown_method_and_field():
    with pytest.raises(ValueError, match="unknown PEFT method 'lorax'"):
        apply_lora(build("eegdino"), {"method": "lorax"})
    with pytest.raises(ValueError, match=r"has no fields \['alpha'\]"):
        apply_lora(build("eegdino"), {"alpha": 3})


def test_fmclassifier_lora_trains_adapters_and_head_only_and_reports_the_fraction():
    from eegfm_bench.models.module import FMClassifier

    m = FMClassifier(backbone="labram", head="mean", regime="lora", ch_names=CH19, n_times=400, n_classes=3,
                     backbone_kwargs=TINY["labram"][1], lora={"r": 2})
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("head.") or ".lora_" in n for n in trainable)
    assert {n for n in trainable if n.startswith("head.")} == {"head.classifier.weight", "head.classifier.bias"}
    counts = m.parameter_counts
    n_lora = sum(p.numel() for n, p in m.named_parameters() if ".lora_" in n)
    assert counts["trainable_params"] == n_lora + counts["head_params"]
    assert counts["total_params"] == sum(p.numel() for p in m.parameters())
    # 4 targets x 2 layers, each r * (in + out): qkv 100->300, proj 100->100, mlp 100->400->100
    assert n_lora == 2 * 2 * ((100 + 300) + (100 + 100) + (100 + 400) + (400 + 100))
    logits = m(window("labram"))
    assert logits.shape == (B, 3)
