"""Backbone adapters: token shapes, blocks, gradients, channel contracts, LoRA targets (tiny configs, no network)."""
from __future__ import annotations


import pytest
import torch

from eegfm_bench.models.backbones import BIOTAdapter, CBraModAdapter, EEGNetAdapter, LabramAdapter
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.base import ChannelContractError

CH = ["Fp1", "Fz", "C3", "Cz", "C4", "Pz", "O1"]
B = 2
# name -> (n_times, tiny architecture kwargs, expected (n_tokens, d_model), expected blocks)
TINY = {
    "eegnet": (256, {}, (256 // 32, 16), 2),                                      # 2 s at 128 Hz
    "labram": (400, dict(num_layers=2, conv_out_channels=4, num_heads=2), (7 * 2, 100), 2),
    "cbramod": (400, dict(n_layer=2, nhead=2, dim_feedforward=64), (7 * 2, 200), 2),
    "biot": (400, dict(embed_dim=32, num_heads=2, num_layers=2), (7 * 3, 32), 2),  # (400-200)//100+1 = 3 frames
}




def build(name, ch=CH, **extra):
    n_times, kwargs, _, _ = TINY[name]
    return BACKBONES.get(name)(ch, n_times, n_outputs=3, **{**kwargs, **extra}).eval()


def window(name, n_chans=len(CH)):
    return torch.randn(B, n_chans, TINY[name][0])


def test_registry_holds_the_spine_adapters():
    assert {"eegnet", "labram", "cbramod", "biot"} <= set(BACKBONES.names())
    assert BACKBONES.get("labram") is LabramAdapter
    assert not EEGNetAdapter.is_foundation_model and LabramAdapter.is_foundation_model


@pytest.mark.parametrize("name", list(TINY))
def test_tokens_shape_and_blocks(name):
    a = build(name)
    n_tokens, d_model = TINY[name][2]
    tok = a.tokens(window(name), CH)
    assert tuple(tok.shape) == (B, n_tokens, d_model)
    assert a.n_tokens() == n_tokens and a.n_tokens(len(CH)) == n_tokens and a.d_model == d_model
    assert len(a.blocks) == TINY[name][3]
    assert torch.isfinite(tok).all()


def test_default_architectures_have_the_published_depths():
    assert len(LabramAdapter(CH, 800).blocks) == 12
    assert LabramAdapter(CH, 800).d_model == 200
    assert len(CBraModAdapter(CH, 800).blocks) == 12
    biot = BIOTAdapter(CH, 800)
    assert len(biot.blocks) == 4 and biot.d_model == 256 and biot.n_tokens() == 7 * 7
    eegnet = EEGNetAdapter(CH, 512)
    assert (eegnet.n_tokens(), eegnet.d_model) == (16, 16)


@pytest.mark.parametrize("name", list(TINY))
def test_forward_backward_reaches_every_parameter(name):
    a = build(name).train()
    tok = a.tokens(window(name), CH)
    tok.pow(2).mean().backward()
    no_grad = [n for n, p in a.named_parameters() if p.requires_grad and p.grad is None]
    assert no_grad == []
    first_block = next(p for p in a.blocks[0].parameters()) if list(a.blocks[0].parameters()) else None
    if first_block is not None:
        assert first_block.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["eegnet", "cbramod", "biot"])
def test_last_block_output_is_the_tokens(name):
    a = build(name)
    seen = []
    hooks = [b.register_forward_hook(lambda m, i, o: seen.append(o)) for b in a.blocks]
    tok = a.tokens(window(name), CH)
    for h in hooks:
        h.remove()
    assert len(seen) == len(a.blocks)
    torch.testing.assert_close(a.block_to_tokens(seen[-1]), tok)


def test_labram_tokens_are_final_norm_of_last_block():
    a = build("labram")
    seen = []
    h = a.blocks[-1].register_forward_hook(lambda m, i, o: seen.append(o))
    tok = a.tokens(window("labram"), CH)
    h.remove()
    torch.testing.assert_close(a.model.norm(seen[0])[:, 1:], tok)
    assert a.block_to_tokens(seen[0]).shape == tok.shape


def test_labram_include_cls_prepends_one_token():
    a = build("labram", include_cls=True)
    tok = a.tokens(window("labram"), CH)
    assert tok.shape == (B, 7 * 2 + 1, 100) and a.n_tokens() == 15


@pytest.mark.parametrize("name", ["labram", "biot"])
def test_variable_channel_models_are_invariant_to_channel_order_and_take_subsets(name):
    a = build(name)
    x = window(name)
    per = a.n_tokens() // len(CH)
    perm = [3, 0, 6, 1, 5, 2, 4]
    tok = a.tokens(x, CH)
    tok_perm = a.tokens(x[:, perm], [CH[i] for i in perm])
    torch.testing.assert_close(tok_perm, tok, rtol=0, atol=0)  # inputs are put in the build montage's order
    sub = [CH[i] for i in (2, 3, 4)]
    tok_sub = a.tokens(x[:, [2, 3, 4]], sub)
    assert tok_sub.shape == (B, a.n_tokens(3), a.d_model) and a.n_tokens(3) == 3 * per
    assert not torch.allclose(tok_sub, tok[:, 2 * per:5 * per])  # attention context changed


def test_biot_restructured_layers_match_braindecode():
    from braindecode.models import BIOT

    a = build("biot")
    ref = BIOT(n_chans=len(CH), n_times=400, n_outputs=3, sfreq=200, **TINY["biot"][1]).eval()
    ref.final_layer = torch.nn.Identity()
    ref.load_state_dict(a.model.state_dict(), strict=True)
    x = window("biot")
    torch.testing.assert_close(a.tokens(x, CH).mean(dim=1), ref(a.normalise(x)))


def test_biot_percentile_normalisation_makes_tokens_scale_free():
    a = build("biot")
    x = window("biot")
    q = torch.quantile(a.normalise(x).abs(), 0.95, dim=-1)
    torch.testing.assert_close(q, torch.ones_like(q), rtol=1e-4, atol=1e-4)
    ramp = torch.arange(101.0).repeat(1, 2, 1)  # |x| = 0..100: numpy's linear q95 is exactly 95
    torch.testing.assert_close(a.normalise(ramp)[0, 0, 95], torch.tensor(95 / (95 + 1e-8)))
    torch.testing.assert_close(a.tokens(1e3 * x, CH), a.tokens(x, CH), rtol=1e-4, atol=1e-4)


def test_labram_unknown_channel_raises_naming_it():
    with pytest.raises(ChannelContractError, match="AFF1h"):
        build("labram", ch=CH + ["AFF1h"])
    a = build("labram")
    with pytest.raises(ChannelContractError, match="AFF1h"):
        a.tokens(torch.randn(B, 2, 400), ["Cz", "AFF1h"])


def test_labram_channel_names_match_case_insensitively():
    a = build("labram")
    x = window("labram")
    torch.testing.assert_close(a.tokens(x, [c.upper() for c in CH]), a.tokens(x, CH))


@pytest.mark.parametrize("name", ["eegnet", "cbramod"])
def test_fixed_montage_missing_channel_raises_naming_it(name):
    a = build(name)
    sub = [c for c in CH if c != "Cz"]
    with pytest.raises(ChannelContractError, match=r"missing \['Cz'\]"):
        a.tokens(window(name, len(sub)), sub)


def test_biot_channel_outside_build_montage_raises():
    a = build("biot")
    with pytest.raises(ChannelContractError, match="Oz"):
        a.tokens(torch.randn(B, 2, 400), ["Cz", "Oz"])


@pytest.mark.parametrize("name", list(TINY))
def test_contract_rejects_wrong_sampling_rate(name):
    a = build(name)
    want = a.preprocessing.sfreq
    with pytest.raises(ChannelContractError, match=f"{want:g} Hz"):
        a.channel_contract.check(CH, 160.0, TINY[name][0], name)
    a.channel_contract.check(CH, want, TINY[name][0], name)  # the build itself passes


@pytest.mark.parametrize("name", ["labram", "cbramod"])
def test_window_not_multiple_of_patch_is_rejected(name):
    with pytest.raises(ChannelContractError, match="multiple of 200"):
        BACKBONES.get(name)(CH, 450, **TINY[name][1])


def test_declared_preprocessing():
    lab, cb, bi, eeg = (LabramAdapter.preprocessing, CBraModAdapter.preprocessing, BIOTAdapter.preprocessing,
                        EEGNetAdapter.preprocessing)
    assert (lab.sfreq, lab.l_freq, lab.h_freq, lab.scale) == (200.0, 0.1, 75.0, 1e4)
    assert (cb.sfreq, cb.l_freq, cb.h_freq, cb.scale) == (200.0, 0.3, 75.0, 1e4)
    assert bi.sfreq == 200.0 and eeg.sfreq == 128.0 and eeg.scale == 1e6
    assert all(p.source for p in (lab, cb, bi, eeg))
    assert LabramAdapter(CH, 800, num_layers=1).channel_contract.variable
    assert not CBraModAdapter(CH, 800, n_layer=1).channel_contract.variable


def test_signal_arguments_cannot_be_overridden():
    with pytest.raises(TypeError, match="n_chans"):
        build("labram", n_chans=3)


@pytest.mark.parametrize("name", ["labram", "cbramod", "biot"])
def test_lora_targets_change_output_and_receive_gradients(name):
    from peft import LoraConfig, inject_adapter_in_model

    a = build(name)
    x = window(name)
    before = a.tokens(x, CH).detach()
    inject_adapter_in_model(LoraConfig(target_modules=a.lora_targets, r=2, init_lora_weights=False), a)
    lora = {n: p for n, p in a.named_parameters() if "lora_" in n}
    assert lora, "no module matched lora_targets"
    after = a.tokens(x, CH)
    assert (after - before).abs().max() > 1e-4
    after.pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora.values())


def test_lora_on_braindecode_labram_qkv_is_a_no_op_but_the_adapter_patches_it():
    """The trap ENVIRONMENT.md documents (braindecode's attention bypasses the qkv module), and its fix."""
    from braindecode.models import Labram
    from peft import LoraConfig, inject_adapter_in_model

    raw = Labram(n_chans=len(CH), n_times=400, n_outputs=3, **TINY["labram"][1]).eval()
    x = window("labram")
    before = raw(x, ch_names=CH, return_features=True)["features"].detach()
    inject_adapter_in_model(LoraConfig(target_modules=["qkv"], r=2, init_lora_weights=False), raw)
    torch.testing.assert_close(raw(x, ch_names=CH, return_features=True)["features"], before)

    a = build("labram")
    before = a.tokens(x, CH).detach()
    inject_adapter_in_model(LoraConfig(target_modules=["attn.qkv"], r=2, init_lora_weights=False), a)
    after = a.tokens(x, CH)
    assert (after - before).abs().max() > 1e-4
    after.pow(2).mean().backward()
    lora = [p for n, p in a.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
