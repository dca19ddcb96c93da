"""Checkpoints: save/load round trip, sha256 manifest, strict-load errors, offline fail-fast, init tags."""
from __future__ import annotations

import json
import shutil
import socket

import pytest
import torch

from eegfm_bench.models import checkpoints as ckpt
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.checkpoints import (CheckpointEntry, CheckpointError, CheckpointNotFoundError, ChecksumError,
                                            StateDictMismatchError, init_tag, load_adapter, load_checkpoint,
                                            load_pretrained, save_pretrained)

CH = ["Fp1", "Fz", "C3", "Cz", "C4", "Pz", "O1"]
LABRAM = dict(num_layers=2, conv_out_channels=4, num_heads=2)
CBRAMOD = dict(n_layer=2, nhead=2, dim_feedforward=64)




def labram(n_times=400, **kw):
    return BACKBONES.get("labram")(CH, n_times, n_outputs=2, **{**LABRAM, **kw}).eval()


def x_for(a):
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, len(a.ch_names), a.n_times, generator=g)


def test_round_trip_gives_identical_outputs(tmp_path):
    a = labram()
    entry = save_pretrained(a, tmp_path / "run1")
    assert {p.name for p in (tmp_path / "run1").iterdir()} == {"model.safetensors", "config.json", "manifest.json"}
    assert entry.sha256 == ckpt.sha256_file(tmp_path / "run1" / "model.safetensors")
    b, report = load_adapter(tmp_path / "run1")
    assert isinstance(b, type(a)) and b.arch_kwargs == a.arch_kwargs
    torch.testing.assert_close(b.eval().tokens(x_for(a)), a.tokens(x_for(a)), rtol=0, atol=0)
    assert report.init_tag == f"pretrained:run1@{entry.sha256[:12]}"
    # loading into an adapter built by hand (fresh random weights) gives the same outputs too
    c = labram()
    assert not torch.equal(c.tokens(x_for(a)), a.tokens(x_for(a)))
    tag = load_pretrained(c, str(tmp_path / "run1"))
    assert tag == f"pretrained:run1@{entry.sha256[:12]}" and c.load_report.checkpoint.origin == "local"
    torch.testing.assert_close(c.tokens(x_for(a)), a.tokens(x_for(a)), rtol=0, atol=0)


def test_round_trip_cbramod_and_central_manifest(tmp_path):
    a = BACKBONES.get("cbramod")(CH, 400, **CBRAMOD).eval()
    central = tmp_path / "central.json"
    entry = save_pretrained(a, tmp_path / "cb", checkpoint_id="cb-tiny", manifest=central)
    assert ckpt.read_manifest(central)["cb-tiny"] == entry
    b, report = load_adapter(tmp_path / "cb", manifest=central)
    torch.testing.assert_close(b.eval().tokens(x_for(a)), a.tokens(x_for(a)), rtol=0, atol=0)
    assert report.init_tag.startswith("pretrained:cb-tiny@") and len(report.init_tag.split("@")[1]) == 12


def test_tampered_weights_are_refused(tmp_path):
    save_pretrained(labram(), tmp_path / "run")
    f = tmp_path / "run" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="corrupted, modified"):
        load_pretrained(labram(), str(tmp_path / "run"))


def test_missing_folder_error_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "run"
    with pytest.raises(CheckpointNotFoundError, match=str(missing)):
        load_pretrained(labram(), str(missing))


def test_folder_without_weights_names_the_file(tmp_path):
    save_pretrained(labram(), tmp_path / "run")
    (tmp_path / "run" / "model.safetensors").unlink()
    with pytest.raises(CheckpointNotFoundError, match="model.safetensors"):
        load_pretrained(labram(), str(tmp_path / "run"))


def test_shape_mismatch_names_the_layers(tmp_path):
    save_pretrained(labram(), tmp_path / "small")
    with pytest.raises(StateDictMismatchError) as err:
        load_pretrained(labram(conv_out_channels=8, num_heads=2), str(tmp_path / "small"))
    msg = str(err.value)
    assert "cls_token: checkpoint (1, 1, 100) vs model (1, 1, 200)" in msg
    assert "blocks.0.attn.qkv.weight: checkpoint (300, 100) vs model (600, 200)" in msg
    assert "checkpoint config" in msg and "'conv_out_channels': 4" in msg
    assert ("blocks.1.attn.proj.weight", (100, 100), (200, 200)) in err.value.shape_mismatch
    assert err.value.missing == [] and err.value.unexpected == []


def test_depth_mismatch_lists_missing_layers(tmp_path):
    save_pretrained(labram(), tmp_path / "two")
    with pytest.raises(StateDictMismatchError, match=r"missing in checkpoint \(\d+\):\n    blocks\.2\."):
        load_pretrained(labram(num_layers=3), str(tmp_path / "two"))


def test_wrong_backbone_is_refused(tmp_path):
    save_pretrained(labram(), tmp_path / "lab")
    cb = BACKBONES.get("cbramod")(CH, 400, **CBRAMOD)
    with pytest.raises(CheckpointError, match="holds 'labram' weights"):
        load_pretrained(cb, str(tmp_path / "lab"))


def test_save_refuses_to_overwrite(tmp_path):
    save_pretrained(labram(), tmp_path / "run")
    with pytest.raises(FileExistsError):
        save_pretrained(labram(), tmp_path / "run")
    save_pretrained(labram(), tmp_path / "run", overwrite=True)


def _hub_style_labram(tmp_path, n_times=400):
    """A braindecode Labram state dict as a hub checkpoint ships it (with its own final_layer)."""
    from braindecode.models import Labram

    ref = Labram(n_chans=len(CH), n_times=n_times, n_outputs=4, **LABRAM).eval()
    root = tmp_path / "checkpoints"
    weights = root / "org" / "labram-tiny" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(weights))
    return ref, weights


def _manifest(tmp_path, sha):
    path = tmp_path / "checkpoints" / "manifest.json"
    ckpt.write_manifest({"org/labram-tiny": CheckpointEntry("org/labram-tiny", "labram", sha256=sha)}, path)
    return path


def test_hub_id_from_local_mirror_drops_the_classifier_and_matches_braindecode(tmp_path):
    ref, weights = _hub_style_labram(tmp_path)
    _manifest(tmp_path, ckpt.sha256_file(weights))
    a = labram()
    report = load_checkpoint(a, "org/labram-tiny")
    assert report.checkpoint.origin == "local"
    assert sorted(report.dropped) == ["final_layer.bias", "final_layer.weight"]
    assert report.init_tag == f"pretrained:org/labram-tiny@{ckpt.sha256_file(weights)[:12]}"
    x = x_for(a)
    torch.testing.assert_close(a.tokens(x, CH), ref(x, ch_names=CH, return_features=True)["features"])


def test_labram_longer_temporal_embedding_is_truncated_and_reported(tmp_path):
    ref, weights = _hub_style_labram(tmp_path, n_times=800)  # 4 patches -> 5 temporal rows
    _manifest(tmp_path, ckpt.sha256_file(weights))
    a = labram(n_times=400)  # 2 patches -> 3 rows
    report = load_checkpoint(a, "org/labram-tiny")
    assert len(report.adapted) == 1 and "truncated (1, 5, 100) -> (1, 3, 100)" in report.adapted[0]
    torch.testing.assert_close(a.model.temporal_embedding, ref.temporal_embedding[:, :3])


def test_unpinned_hub_id_is_refused_with_the_actual_sha(tmp_path):
    _, weights = _hub_style_labram(tmp_path)
    _manifest(tmp_path, None)
    with pytest.raises(ChecksumError, match=ckpt.sha256_file(weights)):
        load_pretrained(labram(), "org/labram-tiny")


def test_offline_missing_hub_id_fails_fast_naming_where_to_put_the_file(tmp_path, monkeypatch):
    _manifest(tmp_path, "0" * 64)

    def no_network(*args, **kwargs):  # fails fast: offline, no connection is even tried
        raise AssertionError("the network was touched with HF_HUB_OFFLINE set")

    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(CheckpointNotFoundError) as err:
        load_pretrained(labram(), "org/labram-tiny", cache_dir=tmp_path / "hf-cache")
    expected = tmp_path / "checkpoints" / "org" / "labram-tiny" / "model.safetensors"
    assert str(expected) in str(err.value)
    assert "https://huggingface.co/org/labram-tiny/resolve/main/model.safetensors" in str(err.value)
    assert "HF_HUB_OFFLINE" in str(err.value)


def test_unreachable_hub_fails_fast_without_downloading(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    probes = []

    def unreachable(*args, **kwargs):
        probes.append(kwargs.get("timeout"))
        raise OSError("Name or service not known")

    def no_download(*args, **kwargs):
        raise AssertionError("hf_hub_download must not be called when the probe fails")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_download)
    _manifest(tmp_path, "0" * 64)
    with pytest.raises(CheckpointNotFoundError, match="unreachable"):
        load_pretrained(labram(), "org/labram-tiny", cache_dir=tmp_path / "hf-cache")
    assert probes == [2.0]  # fast by construction: one connection probe with a 2 s timeout, no retry, no download


def test_unknown_id_lists_the_known_ones(tmp_path):
    _manifest(tmp_path, "0" * 64)
    with pytest.raises(CheckpointNotFoundError, match="known: org/labram-tiny"):
        load_pretrained(labram(), "braindecode/unknown-model")


def test_shipped_manifest_lists_the_hub_checkpoints(monkeypatch):
    monkeypatch.delenv("EEGFM_CHECKPOINTS")
    entries = ckpt.read_manifest()
    assert entries["braindecode/labram-pretrained"].backbone == "labram"
    assert entries["braindecode/cbramod-pretrained"].backbone == "cbramod"
    biot = [e for k, e in entries.items() if k.startswith("braindecode/biot-")]
    # bipolar weights are for biot_bipolar only (issue 12 item 14): never listed as compatible with monopolar biot
    assert len(biot) == 3 and all(e.backbone == "biot_bipolar" and e.montage == "bipolar" and not e.compatible
                                  for e in biot)


BIOT = dict(embed_dim=32, num_heads=2, num_layers=1)
BIPOLAR_CH = ["Fp1", "F7", "T7", "P7", "O1", "Fp2", "F8", "T8", "P8", "O2", "F3", "C3", "P3", "F4", "C4", "P4"]


def test_bipolar_checkpoint_never_loads_into_the_monopolar_adapter(tmp_path):
    bip = BACKBONES.get("biot_bipolar")(BIPOLAR_CH, 400, **BIOT)
    with torch.no_grad():
        for p in bip.model.parameters():
            p.add_(0.01)  # "trained"
    save_pretrained(bip, tmp_path / "bip")
    man = json.loads((tmp_path / "bip" / "manifest.json").read_text())
    entry = next(iter(man["checkpoints"].values()))
    assert entry["montage"] == "bipolar"
    entry["compatible"] = ["biot"]  # even a manifest that claims compatibility
    (tmp_path / "bip" / "manifest.json").write_text(json.dumps(man))
    mono = BACKBONES.get("biot")(BIPOLAR_CH[:16], 400, **BIOT)  # 16 monopolar channels: tensor shapes match
    with pytest.raises(CheckpointError, match="trained on bipolar channels but biot feeds monopolar"):
        load_checkpoint(mono, str(tmp_path / "bip"))
    load_checkpoint(BACKBONES.get("biot_bipolar")(BIPOLAR_CH, 400, **BIOT), str(tmp_path / "bip"))  # its own: fine


def test_a_saved_random_init_is_refused_as_pretrained(tmp_path):
    from eegfm_bench.models.module import FMClassifier

    kw = dict(backbone="labram", head="mean", regime="head_only", ch_names=CH, n_times=400, n_classes=2,
              backbone_kwargs=LABRAM)
    untrained = FMClassifier(init_seed=3, **kw)
    save_pretrained(untrained.backbone, tmp_path / "untrained")
    with pytest.raises(CheckpointError, match="equal a fresh random initialisation"):
        FMClassifier(init_seed=3, pretrained=str(tmp_path / "untrained"), **kw)
    with torch.no_grad():
        next(untrained.backbone.model.parameters()).add_(1.0)  # one tensor trained: real weights
    save_pretrained(untrained.backbone, tmp_path / "trained", overwrite=True)
    assert FMClassifier(init_seed=3, pretrained=str(tmp_path / "trained"), **kw).init.startswith("pretrained:")


def test_read_state_dict_bin_and_nested(tmp_path):
    sd = {"w": torch.ones(2, 3)}
    torch.save(sd, tmp_path / "flat.bin")
    torch.testing.assert_close(ckpt.read_state_dict(tmp_path / "flat.bin")["w"], sd["w"])
    torch.save({"model": sd, "epoch": 3}, tmp_path / "nested.bin")
    with pytest.raises(CheckpointError, match="not a flat state dict"):
        ckpt.read_state_dict(tmp_path / "nested.bin")


def test_init_tag():
    sha = "ab" * 32
    assert init_tag() == "random"
    assert init_tag("braindecode/labram-pretrained", sha) == "pretrained:braindecode/labram-pretrained@abababababab"
    with pytest.raises(ValueError, match="64-hex"):
        init_tag("x", "abc")
    with pytest.raises(ValueError):
        CheckpointEntry("x", "labram", sha256="XYZ")


def test_folder_manifest_disagreeing_with_central_is_refused(tmp_path):
    save_pretrained(labram(), tmp_path / "run", checkpoint_id="run")
    central = tmp_path / "central.json"
    ckpt.write_manifest({"run": CheckpointEntry("run", "labram", sha256="1" * 64)}, central)
    with pytest.raises(ChecksumError, match="keep one version"):
        load_pretrained(labram(), str(tmp_path / "run"), manifest=central)


def test_pin_cli_records_the_sha(tmp_path, capsys):
    _, weights = _hub_style_labram(tmp_path)
    manifest = _manifest(tmp_path, None)
    assert ckpt.main(["--manifest", str(manifest), "pin", "org/labram-tiny"]) == 0
    assert ckpt.read_manifest(manifest)["org/labram-tiny"].sha256 == ckpt.sha256_file(weights)
    folder = tmp_path / "copied"
    shutil.copytree(weights.parent, folder)
    ckpt.main(["--manifest", str(manifest), "pin", str(folder), "--backbone", "labram"])
    assert json.loads((folder / "manifest.json").read_text())["checkpoints"]["copied"]["backbone"] == "labram"
    load_pretrained(labram(), str(folder), manifest=manifest)


def test_biot_bipolar_checkpoint_into_monopolar_build_names_channel_tokens(tmp_path):
    from braindecode.models import BIOT
    from safetensors.torch import save_file

    tiny = dict(embed_dim=32, num_heads=2, num_layers=2)
    ref = BIOT(n_chans=16, n_times=400, n_outputs=2, sfreq=200, **tiny)
    weights = tmp_path / "checkpoints" / "org" / "biot-16" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(weights))
    ckpt.write_manifest({"org/biot-16": CheckpointEntry("org/biot-16", "biot", sha256=ckpt.sha256_file(weights))},
                        tmp_path / "checkpoints" / "manifest.json")
    a = BACKBONES.get("biot")(CH, 400, **tiny)
    with pytest.raises(StateDictMismatchError, match="bipolar") as err:
        load_pretrained(a, "org/biot-16")
    assert err.value.shape_mismatch == [("encoder.channel_tokens.weight", (16, 32), (7, 32))]
    # the same weights load into a 16-channel build (the restructured layers keep braindecode's key names)
    chans16 = CH + ["Fp2", "F3", "F4", "P3", "P4", "O2", "T7", "T8", "Oz"][:9]
    b = BACKBONES.get("biot")(chans16, 400, **tiny)
    report = load_checkpoint(b, "org/biot-16")
    assert sorted(report.dropped) == ["final_layer.classification_head.bias", "final_layer.classification_head.weight"]
    torch.testing.assert_close(b.model.encoder.channel_tokens.weight, ref.encoder.channel_tokens.weight)


def test_adapter_options_survive_the_round_trip(tmp_path):
    a = labram(include_cls=True)
    assert a.arch_kwargs["include_cls"] is True  # part of configs and token-cache keys
    save_pretrained(a, tmp_path / "cls")
    b, _ = load_adapter(tmp_path / "cls")
    assert b.include_cls and b.n_tokens() == 15
    torch.testing.assert_close(b.eval().tokens(x_for(a)), a.tokens(x_for(a)), rtol=0, atol=0)
