"""Model zoo: every adapter's tokens, blocks, gradients, channel contracts, bipolar montage, REVE offline build,
Interpolated variants, catalogue, checkpoint round trips and the matched-random-initialisation check.

Tiny architectures (``zoo_configs.TINY``), CPU, no network.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from zoo_configs import CH19, TINY, B, build, window

from eegfm_bench.data import montage
from eegfm_bench.models import checkpoints as ckpt
from eegfm_bench.models.backbones import BACKBONES, primary_backbones
from eegfm_bench.models.base import ChannelContractError

BIOT_16 = ["Fp1-F7", "F7-T7", "T7-P7", "P7-O1", "Fp2-F8", "F8-T8", "T8-P8", "P8-O2", "Fp1-F3", "F3-C3", "C3-P3",
           "P3-O1", "Fp2-F4", "F4-C4", "C4-P4", "P4-O2"]




# ------------------------------------------------------------------------------------------- shapes and blocks
def test_registry_holds_the_whole_zoo():
    assert set(primary_backbones()) == set(TINY)


@pytest.mark.parametrize("name", list(TINY))
def test_tokens_shape_blocks_and_finiteness(name):
    a = build(name)
    n_tokens, d_model = TINY[name][2]
    tok = a.tokens(window(name), CH19)
    assert tuple(tok.shape) == (B, n_tokens, d_model)
    assert a.n_tokens() == n_tokens and a.n_tokens(len(CH19)) == n_tokens and a.d_model == d_model
    assert len(a.blocks) == TINY[name][3]
    assert torch.isfinite(tok).all()
    seen = []
    hooks = [b.register_forward_hook(lambda m, i, o: seen.append(o)) for b in a.blocks]
    tok = a.tokens(window(name), CH19)
    for h in hooks:
        h.remove()
    assert len(seen) == len(a.blocks)
    last = a.block_to_tokens(seen[-1])
    assert last.ndim == 3 and last.shape[0] == B
    if name in ("biot_bipolar", "reve", "eegdino", "shallow", "biot"):  # tokens are the last block's output
        torch.testing.assert_close(last, tok)


# modules braindecode's forward never reaches (no gradient by construction)
UNUSED = {"codebrain": ("model.residual_layer.residual_blocks.1.rms_norm.",
                        "model.residual_layer.residual_blocks.1.res_conv.")}


@pytest.mark.parametrize("name", list(TINY))
def test_forward_backward_reaches_every_parameter(name):
    a = build(name).train()
    a.tokens(window(name), CH19).pow(2).mean().backward()
    no_grad = [n for n, p in a.named_parameters() if p.requires_grad and p.grad is None
               and not n.startswith(UNUSED.get(name, ("\0",)))]
    assert no_grad == []
    assert all(p.grad is None for n, p in a.named_parameters() if n.startswith(UNUSED.get(name, ("\0",))))


def test_default_architectures_depths_and_token_counts():
    """Published depths at the declared 4-s windows (19 channels); the cheap ones only (REVE/BENDR in the bench)."""
    expect = {"eegdino": (12, 19 * 4, 200), "signal_jepa": (8, 19 * 3, 64), "luna": (8, 32, 256),
              "codebrain": (8, 19 * 4, 200), "biot_bipolar": (4, 16 * 7, 256), "shallow": (2, 61, 40)}
    for name, (depth, n_tok, d) in expect.items():
        cls = BACKBONES.get(name)
        a = cls(CH19, cls.preprocessing.n_times)
        assert (len(a.blocks), a.n_tokens(), a.d_model) == (depth, n_tok, d), name


# ------------------------------------------------------------------------------------------- contracts
FIXED_REMOVAL = ["eegnet", "shallow", "cbramod", "eegpt", "bendr", "signal_jepa", "eegdino", "codebrain",
                 "steegformer"]


@pytest.mark.parametrize("name", FIXED_REMOVAL)
def test_fixed_channel_models_refuse_a_missing_channel_naming_it(name):
    a = build(name)
    sub = [c for c in CH19 if c != "Cz"]
    with pytest.raises(ChannelContractError, match=r"Cz") as err:
        a.tokens(window(name, len(sub)), sub)
    assert "fixed" in str(err.value)
    assert not a.channel_contract.variable


@pytest.mark.parametrize("name,missing", [("eegdino", "O2"), ("bendr", "O2"), ("biot_bipolar", "O2"),
                                          ("eegpt", "O2")])
def test_build_on_a_montage_without_a_required_electrode_names_it(name, missing):
    ch = [c for c in CH19 if c != missing]
    extra = {"channels": CH19} if name == "eegpt" else {}
    with pytest.raises(ChannelContractError, match=rf"\['{missing}'\]"):
        build(name, ch, **extra)


def test_selection_reorders_by_name_and_ignores_extra_channels():
    a = build("eegdino")
    x = window("eegdino")
    perm = list(reversed(range(19)))
    extra = torch.randn(B, 2, x.shape[-1])
    x2 = torch.cat([x[:, perm], extra], dim=1)
    names2 = [CH19[i] for i in perm] + ["AF3", "AF4"]
    # average-referenced data: the 19 channels it reads are re-referenced over themselves (issue 22)
    torch.testing.assert_close(a.tokens(x2, names2), a.tokens(x - x.mean(dim=1, keepdim=True), CH19))
    a.data_reference = "none"  # unreferenced data: the extra channels are only ignored
    torch.testing.assert_close(a.tokens(x2, names2), a.tokens(x, CH19))


def test_eegpt_unknown_channel_and_known_selection():
    with pytest.raises(ChannelContractError, match=r"\['AFF1h'\].*channels: known"):
        build("eegpt", CH19 + ["AFF1h"])
    a = build("eegpt", CH19 + ["AFF1h"], channels="known")
    assert a.model_ch_names == CH19
    x = torch.randn(B, 20, TINY["eegpt"][0])
    assert a.tokens(x, CH19 + ["AFF1h"]).shape == (B, 15, 128)


@pytest.mark.parametrize("name", ["reve", "luna"])
def test_variable_position_models_remove_channels_truly(name):
    a = build(name)
    x = window(name)
    full = a.tokens(x, CH19)
    keep = [i for i, c in enumerate(CH19) if c not in ("Cz", "O1", "O2")]
    sub = a.tokens(x[:, keep], [CH19[i] for i in keep])
    per = TINY[name][2][0] // 19 if name == "reve" else 0
    assert sub.shape[1] == (len(keep) * per if name == "reve" else full.shape[1])
    assert a.channel_contract.variable
    if name == "reve":  # token k of channel c is in both; attention context changed
        assert not torch.allclose(sub, full[:, [i * per + p for i in keep for p in range(per)]])
    else:
        assert not torch.allclose(sub, full)
    with pytest.raises(ChannelContractError, match=r"\['XYZ'\].*10-05 position"):
        a.tokens(torch.randn(B, 2, x.shape[-1]), ["Cz", "XYZ"])


@pytest.mark.parametrize("name", list(TINY))
def test_contract_rejects_wrong_sampling_rate_naming_the_rate(name):
    a = build(name)
    want = a.preprocessing.sfreq
    with pytest.raises(ChannelContractError, match=f"{want:g} Hz"):
        a.channel_contract.check(CH19, 100.0, TINY[name][0], name)


@pytest.mark.parametrize("name", ["eegpt", "reve", "bendr", "luna", "steegformer", "biot_bipolar"])
def test_window_length_mismatch_says_what_the_model_needs(name):
    a = build(name)
    n = TINY[name][0]
    with pytest.raises(ChannelContractError, match=f"{n} samples"):
        a.tokens(torch.randn(B, 19, n - 40), CH19)


def test_patch_multiples_are_enforced_at_build():
    with pytest.raises(ChannelContractError, match="multiple of 40"):
        BACKBONES.get("luna")(CH19, 410, **TINY["luna"][1])
    with pytest.raises(ChannelContractError, match="multiple of 200"):
        BACKBONES.get("eegdino")(CH19, 450, **TINY["eegdino"][1])


def test_declared_preprocessing_matches_the_catalogue():
    from eegfm_bench.models.catalogue import load_catalogue

    cat = load_catalogue()
    for name in TINY:
        p = BACKBONES.get(name).preprocessing
        assert p.source and p.unit
        assert (p.sfreq, p.window_s) == (cat[name]["sfreq"], cat[name]["window_s"]), name
    assert BACKBONES.get("luna").preprocessing.n_times % 40 == 0
    assert BACKBONES.get("eegpt").preprocessing.n_times == 1024


def test_signal_arguments_cannot_be_overridden():
    for name in ("reve", "eegdino", "steegformer"):
        with pytest.raises(TypeError, match="n_chans"):
            build(name, n_chans=3)


# ------------------------------------------------------------------------------------------- bipolar montage
def test_biot_bipolar_order_is_biots_published_order():
    assert montage.bipolar_names(montage.BIOT_BIPOLAR_16) == BIOT_16
    from braindecode.models.biot import BIOT_CHANNEL_ORDER

    assert [n.upper() for n in montage.bipolar_names(montage.BIOT_BIPOLAR_18)] == BIOT_CHANNEL_ORDER
    assert build("biot_bipolar").derivation_names == BIOT_16


def test_biot_bipolar_channels_equal_the_named_subtractions_exactly():
    a = build("biot_bipolar")
    x = window("biot_bipolar") * 50.0
    perm = np.random.default_rng(0).permutation(19)
    names = [CH19[i] for i in perm]
    xb, got = a.bipolar(x[:, perm], names)
    assert got == BIOT_16
    for k, pair in enumerate(BIOT_16):
        an, ca = pair.split("-")
        torch.testing.assert_close(xb[:, k], x[:, CH19.index(an)] - x[:, CH19.index(ca)], rtol=0, atol=0)
    D = montage.bipolar_matrix(CH19, montage.BIOT_BIPOLAR_16)
    assert D.shape == (16, 19) and (D.sum(axis=1) == 0).all() and (np.abs(D).sum(axis=1) == 2).all()
    # the tokens are BIOT's encoder on those derivations
    torch.testing.assert_close(a.tokens(x[:, perm], names), a._encode(xb, got))


def test_bipolar_builder_names_missing_electrodes():
    ch = [c for c in CH19 if c not in ("T7", "P8")]
    with pytest.raises(montage.MissingElectrodesError, match=r"\['T7', 'P8'\]") as err:
        montage.bipolar_matrix(ch, montage.BIOT_BIPOLAR_16)
    assert err.value.missing == ["T7", "P8"] and "F7-T7" in str(err.value)
    with pytest.raises(montage.MissingElectrodesError, match=r"\['A2', 'A1'\]"):
        montage.bipolar_derivations(np.zeros((19, 10)), CH19, montage.BIOT_BIPOLAR_18)


def test_biot_bipolar_removal_drops_only_the_affected_derivations():
    a = build("biot_bipolar")
    x = window("biot_bipolar")
    keep = [i for i, c in enumerate(CH19) if c != "T7"]
    names = [CH19[i] for i in keep]
    assert a.n_tokens_for(names) == 14 * 3
    tok = a.tokens(x[:, keep], names)
    assert tok.shape == (B, 14 * 3, 32)
    _, got = a.bipolar(x[:, keep], names)
    assert "F7-T7" not in got and "T7-P7" not in got and len(got) == 14


def test_biot_bipolar_18_needs_a1_a2():
    with pytest.raises(ChannelContractError, match=r"\['A2', 'A1'\]"):
        build("biot_bipolar", derivations="bipolar18")
    a = build("biot_bipolar", CH19 + ["A1", "A2"], derivations="bipolar18")
    assert a.n_tokens() == 18 * 3 and a.model.encoder.channel_tokens.weight.shape[0] == 18


# ------------------------------------------------------------------------------------------- REVE offline
def test_reve_builds_offline_from_a_local_position_bank(monkeypatch, tmp_path):
    import os

    from eegfm_bench.models.backbones.reve import reve_positions_dir

    monkeypatch.delenv("REVE_POSITIONS_PATH", raising=False)
    monkeypatch.setenv("EEGFM_CACHE", str(tmp_path / "cache"))
    a = build("reve")  # socket.create_connection refuses: any download attempt would fail the test
    assert "REVE_POSITIONS_PATH" not in os.environ
    bank = json.loads((reve_positions_dir() / "reve_positions.json").read_text())
    assert len(bank) == len(montage.standard_1005().ch_names)
    np.testing.assert_allclose(bank["Cz"], montage.positions(["Cz"])[0])
    assert a.tokens(window("reve"), CH19).shape == (B, 38, 32)


def test_reve_restructured_layers_and_zscore_match_braindecode(monkeypatch):
    from braindecode.models import REVE

    from eegfm_bench.models.backbones.reve import reve_positions_dir

    a = build("reve")
    monkeypatch.setenv("REVE_POSITIONS_PATH", str(reve_positions_dir()))
    ref = REVE(n_chans=19, n_times=400, n_outputs=2, **TINY["reve"][1]).eval()
    ref.load_state_dict(a.model.state_dict(), strict=False)  # the adapter's final_layer is Identity
    x = window("reve") * 20
    pos = torch.as_tensor(montage.positions(CH19), dtype=torch.float32).expand(B, -1, -1)
    expected = ref(a.normalise(x), pos=pos, return_features=True)["features"].flatten(1, 2)
    torch.testing.assert_close(a.tokens(x, CH19), expected)
    z = a.normalise(x)
    torch.testing.assert_close(z.mean(-1), torch.zeros(B, 19), atol=1e-5, rtol=0)
    assert float(a.normalise(torch.cat([torch.zeros(1, 1, 399), torch.full((1, 1, 1), 1e3)], -1)).max()) <= 15.0


@pytest.mark.parametrize("name", ["labram", "eegdino"])
def test_patched_qkv_attention_equals_braindecode(name):
    import braindecode.models as bm

    a = build(name)
    cls = {"labram": bm.Labram, "eegdino": bm.EEGDINO}[name]
    ref = cls(n_chans=19, n_times=400, n_outputs=2, **TINY[name][1]).eval()
    state = {k: v for k, v in a.model.state_dict().items()}
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert unexpected == [] and all(k.startswith("final_layer.") for k in missing)
    x = window(name)
    kw = {"ch_names": CH19} if name == "labram" else {}
    torch.testing.assert_close(a.tokens(x, CH19), ref(x, return_features=True, **kw)["features"])
    assert type(a.model.blocks[0].attn if name == "labram" else a.model.encoder_layers[0].attn).__name__ in (
        "_LabramAttention", "_EEGDINOAttention")


def test_bendr_minmax_and_scale_channel():
    a = build("bendr", max_scale=100.0)
    x = window("bendr") * 30
    inp = a.model_input(x, CH19)
    assert inp.shape == (B, 20, TINY["bendr"][0])
    torch.testing.assert_close(inp[:, :19].amin(dim=(1, 2)), -torch.ones(B))
    torch.testing.assert_close(inp[:, :19].amax(dim=(1, 2)), torch.ones(B))
    rng = x.amax(dim=(1, 2)) - x.amin(dim=(1, 2))
    torch.testing.assert_close(inp[:, 19, 0], 2 * (torch.clamp(rng / 100.0, max=1.0) - 0.5))
    assert float(build("bendr").model_input(x, CH19)[:, 19].abs().max()) == 0.0  # max_scale=None: DN3's 0


def test_steegformer_standardisation_and_channel_major_tokens():
    a = build("steegformer")
    x = window("steegformer") * 1e3
    z = a.normalise(x)
    assert float(z.std(-1, unbiased=False).mean()) == pytest.approx(1.0, abs=1e-4)
    feats = a.model(z, return_features=True)["features"]  # (B, P*C, d) time-major
    tok = a.tokens(x, CH19)
    P = TINY["steegformer"][0] // 16
    torch.testing.assert_close(tok[:, 1 * P + 3], feats[:, 3 * 19 + 1])  # channel 1, patch 3


def test_steegformer_vocabulary_is_read_locally_or_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="steegformer_channels.json"):
        build("steegformer", channel_slots="vocabulary")
    vocab = ["AFz", *CH19[::-1]]
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(vocab))
    a = build("steegformer", channel_slots="vocabulary", vocabulary_path=str(path))
    assert a.model.channel_indices.tolist() == [vocab.index(c) for c in CH19]


# ------------------------------------------------------------------------------------------- Interpolated*
@pytest.mark.parametrize("name,kw,n_targets", [
    ("eegpt", {}, None), ("bendr", {}, None), ("signal_jepa", {}, 62), ("biot", {}, 18), ("labram", {}, 128)])
def test_interpolated_variants_are_selectable(name, kw, n_targets):
    ch = [c for c in CH19 if c != "Cz"] + ["AF3", "CP1"]  # any 10-05 montage
    a = build(name, ch, interpolate=True, **kw)
    tok = a.tokens(window(name, len(ch)), ch)
    assert tok.shape == (B, a.n_tokens(), a.d_model) and torch.isfinite(tok).all()
    assert a.channel_contract.kind == "positions" and not a.channel_contract.variable
    assert a.model.interpolation_layer is not None
    if n_targets:
        per = {"signal_jepa": 1, "biot": 3, "labram": 2}[name]
        assert a.n_tokens() == n_targets * per + 0


# ------------------------------------------------------------------------------------------- catalogue
def test_catalogue_covers_the_registry_and_prints():
    from eegfm_bench.models.catalogue import catalogue_table, load_catalogue

    cat = load_catalogue()
    assert set(cat) == set(primary_backbones())
    table = catalogue_table()
    assert table.count("\n") == len(cat) + 1
    manifest = ckpt.read_manifest(ckpt.Path(__file__).resolve().parents[2] / "checkpoints" / "manifest.json")
    for cid, e in manifest.items():
        assert cid in cat[e.backbone]["hub_ids"], cid


def test_models_cli_prints_the_catalogue(capsys):
    from eegfm_bench import cli

    cli.main(["models"])
    out = capsys.readouterr().out
    assert "| reve (REVE-Base) |" in out and "pretraining corpora" in out


@pytest.mark.parametrize("name", ["eegnet", "shallow", "labram", "cbramod", "biot", "biot_bipolar", "eegdino",
                                  "signal_jepa", "luna"])
def test_catalogue_parameter_counts_are_measured(name):
    from eegfm_bench.models.catalogue import load_catalogue

    cls = BACKBONES.get(name)
    a = cls(CH19, cls.preprocessing.n_times)
    assert sum(p.numel() for p in a.model.parameters()) == load_catalogue()[name]["params"]["backbone"]


def test_pretraining_overlap():
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.models.catalogue import IncompleteInventoryError, pretraining_corpora, pretraining_overlap

    mi = get_task("eegmmidb_mi").pretraining_aliases
    assert pretraining_overlap("labram", mi) == ["EEG Motor Movement/Imagery (PhysioNet EEGMMIDB)"]
    assert pretraining_overlap("eegpt", mi) == ["PhysioMI (PhysioNet EEGMMIDB)"]
    assert pretraining_overlap("cbramod", mi) == [] and pretraining_overlap("eegnet", mi) == []
    assert pretraining_overlap("cbramod", "TUAB") == ["TUEG (Temple University Hospital EEG corpus)"]
    six, prest = "braindecode/biot-pretrained-six-datasets-18chs", "braindecode/biot-pretrained-prest-16chs"
    assert pretraining_overlap("biot_bipolar", "CHB-MIT", checkpoint=six) == ["CHB-MIT (training set)"]
    assert pretraining_overlap("biot_bipolar", "CHB-MIT", checkpoint=prest) == []
    with pytest.raises(IncompleteInventoryError, match="reve"):
        pretraining_overlap("reve", get_task("eegmat").pretraining_aliases)
    assert pretraining_overlap("reve", "eegmat", assume_complete=True) == []
    assert pretraining_overlap("reve", "TUAB") == ["TUEG (Temple University Hospital EEG corpus)"]
    assert pretraining_corpora("reve") is None and pretraining_corpora("eegnet") == []
    # the presets' aliases find the papers' overlaps (paper 001 §3.2: TUAB is in-domain for the TUEG-pretrained)
    assert pretraining_overlap("cbramod", get_task("tuab").pretraining_aliases) == [
        "TUEG (Temple University Hospital EEG corpus)"]
    assert pretraining_overlap("biot_bipolar", get_task("chbmit").pretraining_aliases, checkpoint=six) == [
        "CHB-MIT (training set)"]
    with pytest.raises(KeyError, match="known"):
        pretraining_overlap("nope", "x")


# ------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("name", list(TINY))
def test_save_pretrained_round_trip_gives_identical_outputs(name, tmp_path):
    a = build(name)
    x = window(name, seed=3)
    ref = a.tokens(x, CH19)
    entry = ckpt.save_pretrained(a, tmp_path / name)
    b, report = ckpt.load_adapter(tmp_path / name)
    assert type(b) is type(a) and b.arch_kwargs == a.arch_kwargs
    torch.testing.assert_close(b.eval().tokens(x, CH19), ref, rtol=0, atol=0)
    assert report.init_tag == f"pretrained:{name}@{entry.sha256[:12]}"


def _write_hub(tmp_path, cid: str, backbone: str, state: dict, weights: str = "model.safetensors"):
    from safetensors.torch import save_file

    path = tmp_path / "checkpoints" / cid / weights
    path.parent.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    ckpt.add_manifest_entry(ckpt.CheckpointEntry(cid, backbone, weights=weights, sha256=ckpt.sha256_file(path),
                                                 montage=BACKBONES.get(backbone).input_montage),
                            tmp_path / "checkpoints" / "manifest.json")
    return path


def test_hub_style_eegdino_checkpoint_loads_strictly_and_matches_braindecode(tmp_path):
    from braindecode.models import EEGDINO

    ref = EEGDINO(n_chans=19, n_times=400, n_outputs=2, **TINY["eegdino"][1]).eval()
    _write_hub(tmp_path, "org/eegdino-tiny", "eegdino", ref.state_dict())
    a = build("eegdino")
    report = ckpt.load_checkpoint(a, "org/eegdino-tiny")
    assert report.dropped and all(k.startswith("final_layer.") for k in report.dropped)
    x = window("eegdino")
    torch.testing.assert_close(a.tokens(x, CH19), ref(x, return_features=True)["features"])


def test_luna_and_codebrain_upstream_keys_are_renamed_and_reported(tmp_path):
    a = build("luna")
    state = {("channel_location_embedder.0.fc1.weight" if k == "channel_location_embedder.fc1.weight" else k): v
             for k, v in a.model.state_dict().items()}
    _write_hub(tmp_path, "org/luna", "luna", state)
    b = build("luna")
    report = ckpt.load_checkpoint(b, "org/luna")
    assert any("channel_location_embedder.0.fc1.weight" in n for n in report.adapted)
    torch.testing.assert_close(b.tokens(window("luna"), CH19), a.tokens(window("luna"), CH19))
    c = build("codebrain")
    _write_hub(tmp_path, "org/codebrain", "codebrain", {"module." + k: v for k, v in c.model.state_dict().items()})
    d = build("codebrain")
    report = ckpt.load_checkpoint(d, "org/codebrain")
    assert report.adapted and "renamed" in report.adapted[0]
    torch.testing.assert_close(d.tokens(window("codebrain"), CH19), c.tokens(window("codebrain"), CH19))


def test_biot_bipolar_loads_an_18_token_checkpoint_with_16_derivations(tmp_path):
    from braindecode.models import BIOT

    ref = BIOT(n_chans=18, n_times=400, n_outputs=2, sfreq=200, **TINY["biot_bipolar"][1])
    _write_hub(tmp_path, "org/biot-18", "biot_bipolar", ref.state_dict())
    a = build("biot_bipolar")
    ckpt.load_checkpoint(a, "org/biot-18")
    torch.testing.assert_close(a.model.encoder.channel_tokens.weight, ref.encoder.channel_tokens.weight)
    with pytest.raises(ckpt.StateDictMismatchError, match=r"channel_tokens.*\(18, 32\).*\(16, 32\)"):
        ckpt.load_checkpoint(build("biot_bipolar", n_channel_tokens=16), "org/biot-18")


def test_steegformer_build_order_refuses_foreign_checkpoints(tmp_path):
    a = build("steegformer")
    _write_hub(tmp_path, "org/steeg", "steegformer", a.model.state_dict())
    with pytest.raises(ckpt.CheckpointError, match="build_order"):
        ckpt.load_checkpoint(build("steegformer"), "org/steeg")


# ------------------------------------------------------------------------------------------- random init
def test_check_random_init(tmp_path):
    from eegfm_bench.models.module import FMClassifier

    def fm(seed):
        return FMClassifier(backbone="labram", head="mean", regime="full", ch_names=CH19, n_times=400,
                            init_seed=seed, backbone_kwargs=TINY["labram"][1]).backbone

    pre = fm(0)
    with torch.no_grad():  # stand-in for pretraining: every parameter moves
        for p in pre.model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    ckpt.save_pretrained(pre, tmp_path / "pre")
    state = ckpt.read_state_dict(tmp_path / "pre" / "model.safetensors")
    ckpt.check_random_init(fm(1), state)  # seed 1: every tensor re-initialised
    leaked = fm(1)
    ckpt.load_pretrained(leaked, str(tmp_path / "pre"))
    with pytest.raises(ckpt.RandomInitError, match="parameters of the random initialisation equal") as err:
        ckpt.check_random_init(leaked, state)
    assert len(err.value.equal) == sum(1 for _ in leaked.model.parameters())
    # the random init is a function of init_seed alone
    assert all(torch.equal(p, q) for p, q in zip(fm(1).model.parameters(), fm(1).model.parameters()))
    with pytest.raises(ValueError, match="shares no parameter"):
        ckpt.check_random_init(fm(1), {"foo": torch.zeros(1)})


@pytest.mark.parametrize("name", sorted(n for n in TINY if n != "biot_bipolar"))
def test_tokens_do_not_depend_on_the_input_channel_order(name):
    """The same channels in another order give the same tokens (issue 12 item 15): inputs are put in the build
    montage's order first, so a flatten head's position-tied weights see the same channel at the same place."""
    a = build(name)
    x = window(name)
    perm = list(np.random.default_rng(0).permutation(len(CH19)))
    with torch.no_grad():
        ref = a.tokens(x, CH19)
        got = a.tokens(x[:, perm], [CH19[i] for i in perm])
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
