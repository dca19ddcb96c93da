"""Bring your own model (issue 15): an encoder defined outside the package (``tests/user_encoder.py``), by import
path, through cv, sweep, probe and attribute on real staged EEG; broken declarations fail before any data is read,
naming the fix; local pretrained weights load strictly with their sha256."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from eegfm_testutils import requires_data

def _lrp_check(ad, name, spec):
    from eegfm_bench.interpret.lrp import adapter_lrp_problem

    return adapter_lrp_problem(ad, name, spec)


LRP = {"attnlrp": _lrp_check}
SPEC = {"class_path": "user_encoder.TinyEEGTransformer", "init_args": {"patch": 128, "d_model": 16, "depth": 2,
                                                                        "n_heads": 2},
        "tokens": "output", "blocks": "encoder.layers.*", "channels": {"kind": "any"}, "sfreq": 128.0,
        "window_s": 4.0, "unit": "µV", "l_freq": 1.0, "h_freq": 40.0, "lora_targets": ["linear1", "linear2"]}


def _cv(out: Path, spec=SPEC, runs=None, **over) -> dict:
    cfg = {"experiment": "byom", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 6, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
           "trainer": {"max_epochs": 2, "patience": 2},
           "user_models": {"tiny_tf": spec},
           "runs": runs or [{"model": "tiny_tf", "regime": "head_only", "heads": ["mean", "flatten"]},
                            {"model": "tiny_tf", "regime": "lora", "heads": ["mean"]}]}
    cfg.update(over)
    return cfg


def test_dry_run_reports_shapes_and_adapter_contract():
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.user import check_user_model, register_user_models

    info = check_user_model("tiny_tf", SPEC, checks=LRP)
    assert {k: v for k, v in info.items() if k != "attnlrp"} == {"n_tokens": 19 * 4, "d_model": 16, "n_blocks": 2,
                                                                "n_params": info["n_params"]}
    # its learned channel embedding is added to the activations: AttnLRP's budget closes only once it is declared
    assert "relevance does not close" in info["attnlrp"] and "undeclared candidates: ['model.channel']" in info["attnlrp"]
    assert check_user_model("tiny_tf", {**SPEC, "lrp": {"additive_params": ["channel"]}}, checks=LRP)["attnlrp"] == "ok"
    register_user_models({"tiny_tf": SPEC})
    ad = BACKBONES.get("tiny_tf")(["C3", "Cz", "C4"], 512)
    x = torch.randn(5, 3, 512)
    assert ad.tokens(x, ["C3", "Cz", "C4"]).shape == (5, 12, 16)
    assert len(ad.blocks) == 2 and ad.preprocessing.sfreq == 128.0 and ad.preprocessing.scale == 1e6
    # the blocks are the encoder layers: hooked outputs are (batch, tokens, d_model)
    seen = []
    h = ad.blocks[1].register_forward_hook(lambda m, i, o: seen.append(ad.block_to_tokens(o).shape))
    ad.tokens(x)
    h.remove()
    assert seen == [(5, 12, 16)]


@pytest.mark.parametrize("over, match", [
    ({"tokens": "method:patches"}, r"gave \(2, 19, 4, 16\).*contract is \(batch, n_tokens, d_model\).*fix"),
    ({"blocks": "transformer.*"}, r"blocks pattern 'transformer.\*' matches no module; fix: one of.*encoder"),
    ({"lora_targets": ["qkv"]}, r"lora_targets: .*qkv.*match no adaptable module; candidates: .*linear1"),
    ({"class_path": "user_encoder.Nope"}, r"'user_encoder' has no 'Nope'"),
    ({"class_path": "no_such_pkg.Enc"}, r"module 'no_such_pkg' not importable.*fix"),
    ({"init_args": {"widht": 3}}, r"init_args must match its constructor"),
    ({"tokenz": "output"}, r"unknown key\(s\) \['tokenz'\]; did you mean 'tokens'"),
    ({"tokens": "module:encoder.nothing"}, r"names no submodule; fix: one of"),
    ({"channels": {"kind": "any", "varible": True}}, r"unknown key\(s\) \['varible'\] in channels; did you mean 'variable'"),
    ({"channels": {"kind": "nams"}}, r"channels.kind 'nams'; fix: any, names or positions"),
    ({"pretrained": {"path": "w.pt", "sha": "1"}}, r"unknown key\(s\) \['sha'\] in pretrained"),
    ({"pretrained": {"path": "/nonexistent/w.pt"}}, r"pretrained weights /nonexistent/w.pt not found"),
    ({"sfreq": "128Hz"}, r"sfreq = '128Hz'; fix: a number > 0 \(Hz\)"),
    ({"class_path": "user_encoder.TinyEEGTransfomer"}, r"did you mean user_encoder.TinyEEGTransformer"),
    ({"lrp": {"atention": ["x"]}}, r"unknown key\(s\) \['atention'\] in lrp; did you mean 'attention'"),
    ({"lrp": {"attention": ["nope.*"]}}, r"lrp.attention pattern 'nope.\*' matches no module"),
    ({"token_layout": "rows"}, r"token_layout 'rows'; fix: channel_major, patch_major or null"),
])
def test_a_broken_declaration_fails_before_any_data_is_read(tmp_path, monkeypatch, over, match):
    import eegfm_bench.data.datamodule  # noqa: F401  (binds the real load_windows before the patch)
    import eegfm_bench.data.windows as W
    from eegfm_bench.runs.cv.command import run_cv

    monkeypatch.setattr(W, "load_windows", lambda *a, **k: pytest.fail("data read before the declaration was checked"))
    with pytest.raises(Exception, match=match):
        run_cv(_cv(tmp_path / "o", {**SPEC, **over}), progress=False)


def test_lora_without_targets_and_a_builtin_name_are_refused(tmp_path):
    from eegfm_bench.models.user import UserModelError, register_user_models
    from eegfm_bench.runs.cv.command import run_cv

    spec = {k: v for k, v in SPEC.items() if k != "lora_targets"}
    with pytest.raises(UserModelError, match="regime lora but no lora_targets"):
        run_cv(_cv(tmp_path / "o", spec), progress=False)
    with pytest.raises(UserModelError, match="name of a built-in backbone"):
        register_user_models({"labram": SPEC})


@requires_data
def test_a_channel_the_data_lacks_is_named_before_any_cell_trains(tmp_path, monkeypatch):
    import lightning as L

    from eegfm_bench.config import ConfigError
    from eegfm_bench.runs.cv.command import run_cv

    monkeypatch.setattr(L.Trainer, "fit", lambda *a, **k: pytest.fail("a cell trained"))
    spec = {**SPEC, "channels": {"kind": "names", "names": ["C3", "Cz", "C4", "X9"]}}
    with pytest.raises(ConfigError, match=r"tiny_tf needs electrodes \['X9'\] that the dataset lacks"):
        run_cv(_cv(tmp_path / "o", spec), progress=False)
    # declared weights of another architecture stop the run once, on the data's montage, before any cell trains
    from safetensors.torch import save_file

    import user_encoder

    wide = user_encoder.TinyEEGTransformer(64, 512, **{**SPEC["init_args"], "d_model": 8})
    save_file({k: v.contiguous() for k, v in wide.state_dict().items()}, str(tmp_path / "wide.safetensors"))
    bad = {**SPEC, "pretrained": {"path": str(tmp_path / "wide.safetensors")}}
    with pytest.raises(ConfigError, match=r"tiny_tf on the data's 64 channels: pretrained weights .* do not match"):
        run_cv(_cv(tmp_path / "o2", bad), progress=False)


@requires_data
def test_channels_a_names_model_leaves_out_are_said(tmp_path, capsys):
    from eegfm_bench.runs.cv.cells import enumerate_cells, load_config

    spec = {**SPEC, "channels": {"kind": "names", "names": ["C3", "Cz", "C4"]}}
    cfg = load_config(_cv(tmp_path / "o", spec, runs=[{"model": "tiny_tf", "regime": "head_only", "heads": ["mean"]}]))
    enumerate_cells(cfg, {}, write=True)
    out = capsys.readouterr().out
    assert "user model tiny_tf reads its 3 declared channels (channels.kind: names), in their order; the data's " \
           "other 61 channels are not given to it" in out and "'Fp1'" in out


def test_declared_channel_names_are_selected_and_ordered_by_name():
    """``channels: {kind: names}``: the encoder is built for the declared channels and receives exactly those, in
    the declared order, whatever the data's order and extra channels; a removed channel is refused (fixed
    channels)."""
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.base import ChannelContractError
    from eegfm_bench.models.user import register_user_models

    register_user_models({"tiny_names": {**SPEC, "channels": {"kind": "names", "names": ["C4", "Cz", "C3"]}}})
    data = ["C3", "Fz", "Cz", "C4"]
    x = torch.arange(4.0)[None, :, None].expand(1, 4, 512).clone() * 100  # channel i holds the value 100·i
    ad = BACKBONES.get("tiny_names")(data, 512, 2)
    assert ad.model.channel.shape[0] == 3  # built for the 3 declared channels, not the data's 4
    seen = []
    ad.model.embed.register_forward_pre_hook(lambda m, a: seen.append(a[0][0, :, 0, 0].tolist()))
    ad.data_reference = "none"
    ad.tokens(x, data)
    assert seen[-1] == [3.0, 2.0, 0.0]  # C4, Cz, C3 (after the /100 input scaling)
    ad.data_reference = "average"  # the 3 channels it reads are re-referenced over themselves (issue 22)
    ad.tokens(x, data)
    assert seen[-1] == pytest.approx([3 - 5 / 3, 2 - 5 / 3, 0 - 5 / 3])
    with pytest.raises(ChannelContractError, match="declared with fixed channels"):  # a removed channel
        ad.tokens(x[:, [0, 1, 3]], ["C3", "Fz", "C4"])


def test_local_pretrained_weights_load_strictly_with_their_sha256(tmp_path):
    from safetensors.torch import save_file

    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.models.user import UserModelError, _sha256

    import user_encoder

    ref = user_encoder.TinyEEGTransformer(3, 512, **SPEC["init_args"])
    path = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    sha = _sha256(path)
    spec = {**SPEC, "pretrained": {"path": str(path), "sha256": sha}}
    m = FMClassifier(backbone="tiny_tf_pre", user_model=spec, head="mean", regime="head_only",
                     ch_names=["C3", "Cz", "C4"], n_times=512)
    assert m.init == f"pretrained:tiny@{sha[:12]}"
    assert torch.equal(m.backbone.model.embed.weight, ref.embed.weight)
    with pytest.raises(UserModelError, match="sha256 .* differs from the declared"):
        FMClassifier(backbone="tiny_tf_bad", user_model={**spec, "pretrained": {"path": str(path), "sha256": "0" * 64}},
                     head="mean", regime="head_only", ch_names=["C3", "Cz", "C4"], n_times=512)
    with pytest.raises(UserModelError, match="do not match the module"):  # strict: another architecture
        FMClassifier(backbone="tiny_tf_wide", user_model={**spec, "init_args": {**SPEC["init_args"], "d_model": 8}},
                     head="mean", regime="head_only", ch_names=["C3", "Cz", "C4"], n_times=512)


@requires_data
def test_a_user_encoder_runs_through_cv_sweep_probe_and_attribute(tmp_path):
    from eegfm_bench.cli import main

    cv = tmp_path / "cv.yaml"
    cv.write_text(yaml.safe_dump(_cv(tmp_path / "qs", spec={**SPEC, "lrp": {"additive_params": ["channel"]},
                                                            "token_layout": "channel_major"})))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"cv_out_dir": str(tmp_path / "qs"), "out_dir": str(tmp_path / "qs" / "sweep"),
                                     "reference": None,
                                     "conditions": ["clean", "white_snr=0dB", "dropout_p=0.3_zero",
                                                    "dropout_p=0.3_removed"]}))
    interp = tmp_path / "interp.yaml"
    interp.write_text(yaml.safe_dump({"cv_dir": str(tmp_path / "qs"), "out_dir": str(tmp_path / "qs" / "interpret"),
                                      "probe": {"poolings": ["mean"], "max_epochs": 2},
                                      "attention": {"enabled": True, "models": ["tiny_tf"], "max_windows_per_fold": 4},
                                      "attribution": {"methods": ["gxi", "attnlrp"], "percentile": 0,
                                                      "max_windows_per_fold": 2,
                                                      "conservation_windows": 1, "randomisation_windows": 2,
                                                      "batch_size": 2}}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in (["cv", "--config", str(cv)], ["sweep", "--config", str(sweep)],
                     ["probe", "--config", str(interp)], ["attribute", "--config", str(interp)]):
            assert main([*args, "--no-progress"]) == 0, args
    rows = pd.read_csv(tmp_path / "qs" / "results.csv")
    ba = rows[rows.metric == "balanced_accuracy"]
    assert set(zip(ba.regime, ba["head"])) == {("head_only", "mean"), ("head_only", "flatten"), ("lora", "mean")}
    assert set(ba.init) == {"random"} and ba.value.between(0, 1).all() and len(ba) == 6
    lora = rows[(rows.regime == "lora") & (rows.metric == "trainable_fraction")].value
    assert (lora > 0).all() and (lora < 0.5).all()  # adapters + head only
    sw = pd.read_csv(tmp_path / "qs" / "sweep" / "results.csv")
    assert {"clean", "white_snr=0dB", "dropout_p=0.3_zero"} <= set(sw.condition)
    removed = sw[sw.condition == "dropout_p=0.3_removed"]  # declared channels.variable: false
    assert len(removed) == 6 and set(removed.metric) == {"not_applicable"}
    assert removed.note.str.contains("tiny_tf has a fixed channel set").all()
    # the clean sweep condition is the test of the saved checkpoint: the cv's own numbers
    c = sw[(sw.condition == "clean") & (sw.metric == "balanced_accuracy")].merge(
        ba, on=["model", "regime", "head", "fold"])
    assert len(c) == 6 and (c.value_x - c.value_y).abs().max() < 1e-6
    pr = pd.read_csv(tmp_path / "qs" / "interpret" / "probes" / "results.csv")
    blocks = sorted(pr[pr.metric.str.startswith("probe_bacc_block")].block.astype(int).unique())
    assert blocks == [0, 1]  # the two declared encoder layers
    frozen = pr[(pr.stage == "frozen") & pr.metric.str.startswith("probe_bacc_block")]
    assert len(frozen) == 2 * 2  # folds x blocks: the LoRA cell's initial backbone is the head-only cells' one
    att = np.load(tmp_path / "qs" / "interpret" / "attention" / "tiny_tf.npz")
    assert att["fine_tuned"].shape == (2, 2, 64)  # LoRA folds x declared blocks x channels (token_layout)
    np.testing.assert_allclose(att["fine_tuned"].sum(-1), 64.0, rtol=1e-4)  # softmax rows sum to 1
    at = pd.read_csv(tmp_path / "qs" / "interpret" / "attribution" / "results.csv")
    assert (at.metric == "gxi:n_selected").any() and (at.metric == "attnlrp:n_selected").any()
    closure = at[at.metric == "attnlrp:conservation_closure"].value  # nn.MultiheadAttention: the standard rules
    assert len(closure) == 6 and (closure - 1).abs().max() < 0.01
    assert "tiny_tf" in (tmp_path / "qs" / "report.md").read_text()


def test_lora_adapters_that_would_be_bypassed_are_caught_by_the_dry_run(monkeypatch):
    """Without the fast-path guard, torch's fused TransformerEncoder (eval mode) skips the wrapped Linear layers:
    the dry run's LoRA check names the adapters that receive no gradient."""
    import contextlib

    import eegfm_bench.models.backbones.common as C
    from eegfm_bench.models.user import UserModelError, check_user_model

    assert check_user_model("tiny_tf", SPEC, lora=True)["n_blocks"] == 2
    monkeypatch.setattr(C, "no_mha_fastpath", contextlib.nullcontext)
    with pytest.raises(UserModelError, match="receive no gradient"):
        check_user_model("tiny_tf", SPEC, lora=True)


# ------------------------------------------------------------------------------ AttnLRP on user models
SDPA_SPEC = {**SPEC, "class_path": "user_encoder.TinySDPATransformer", "blocks": "blocks.*", "lora_targets": ["qkv", "proj"],
             "lrp": {"attention": ["blocks.*.attn"], "additive_params": ["channel"]}}


def _logit_model(name: str, spec: dict):
    from eegfm_bench.interpret.attribution import LogitModel
    from eegfm_bench.models.module import FMClassifier

    ch = ["C3", "Cz", "C4"]
    m = FMClassifier(backbone=name, user_model=spec, head="mean", regime="full", ch_names=ch, n_times=512)
    return LogitModel(m.backbone, m.head, ch).eval()


@pytest.mark.parametrize("name,spec", [
    ("lrp_mha", {**SPEC, "lrp": {"additive_params": ["channel"]}}),  # nn.MultiheadAttention, functional relu
    ("lrp_mha_gelu", {**SPEC, "init_args": {**SPEC["init_args"], "activation": "gelu"},
                      "lrp": {"additive_params": ["channel"]}}),  # torch's functional gelu: identity rule
    ("lrp_sdpa", SDPA_SPEC),  # its own attention module, declared: F.scaled_dot_product_attention
])
def test_attnlrp_on_a_user_model_closes_the_relevance_budget(name, spec):
    """With every bias (and the declared channel embedding) zeroed, input relevance plus what the attention
    products absorb equals the explained logit (App. I.1); CP-LRP puts it all on the input. The plain gradient
    through the same model does not close (the patch map is doing the work), and AttnLRP's map is not G×I's."""
    from eegfm_bench.interpret.attribution import attribute, conservation_per_window

    torch.manual_seed(0)
    lm = _logit_model(name, spec)
    x = torch.randn(6, 3, 512) * 20
    per = conservation_per_window(lm, x, 1, name)
    with torch.no_grad():
        z = lm(x)[:, 1].abs()
    ok = z > 0.05 * z.max()  # ratios of near-zero logits are noise
    assert ok.sum() >= 3
    np.testing.assert_allclose(per["closure"][ok.numpy()], 1.0, atol=1e-4)
    np.testing.assert_allclose(per["ratio_cp"][ok.numpy()], 1.0, atol=1e-4)
    a, g = attribute(lm, x, 1, "attnlrp", name), attribute(lm, x, 1, "gxi", name)
    assert float((a - g).abs().max()) > 0.05 * float(g.abs().max())


def test_attnlrp_refuses_what_a_user_model_does_not_declare(caplog):
    """An unreviewed leaf module, or a declared attention module that makes no scaled_dot_product_attention call,
    is refused before any data is read, naming the module and the fix; declaring the rule (or lrp_fallback: gxi)
    resolves it. A model whose rules are covered is listed with AttnLRP by the dry run."""
    from eegfm_bench.interpret.attribution import resolve_method
    from eegfm_bench.errors import UnsupportedMethodError
    from eegfm_bench.models.user import check_user_model, register_user_models

    tanh = {**SDPA_SPEC, "init_args": {**SDPA_SPEC["init_args"], "act": "tanh"}}
    no_sdpa = {**SDPA_SPEC, "lrp": {"attention": ["blocks.*.attn", "blocks.*.mlp"], "additive_params": ["channel"]}}
    undeclared = {**SDPA_SPEC, "lrp": {"additive_params": ["channel"]}}  # its SDPA attention not declared
    manual = {**SDPA_SPEC, "init_args": {**SDPA_SPEC["init_args"], "manual": True}, "lrp": {"additive_params": ["channel"]}}
    typo = {**SDPA_SPEC, "lrp": {**SDPA_SPEC["lrp"], "additive_params": ["chann"]}}
    declared = {**tanh, "lrp": {**tanh["lrp"], "identity": ["torch.nn.Tanh"]}}
    register_user_models({"lrp_tanh": tanh, "lrp_nosdpa": no_sdpa, "lrp_tanh_ok": declared, "lrp_ok": SDPA_SPEC,
                          "lrp_undeclared": undeclared, "lrp_manual": manual, "lrp_typo": typo})
    with pytest.raises(UnsupportedMethodError, match=r"blocks\.0\.mlp\.1 \(Tanh\).*user_models\.lrp_tanh\.lrp"):
        resolve_method("attnlrp", "lrp_tanh", None)
    with pytest.raises(UnsupportedMethodError, match=r"blocks.0.mlp \(Sequential\) is declared in lrp.attention but made no call"):
        resolve_method("attnlrp", "lrp_nosdpa", None)
    with pytest.raises(UnsupportedMethodError, match="scaled_dot_product_attention call outside the modules declared"):
        resolve_method("attnlrp", "lrp_undeclared", None)
    with pytest.raises(UnsupportedMethodError, match="relevance does not close"):  # hand-written softmax attention
        resolve_method("attnlrp", "lrp_manual", None)
    with pytest.raises(UnsupportedMethodError, match="additive_params 'chann' matches no parameter.*model.channel"):
        resolve_method("attnlrp", "lrp_typo", None)
    register_user_models({"lrp_suffix": {**SDPA_SPEC, "lrp": {**SDPA_SPEC["lrp"], "additive_params": ["hannel"]}}})
    with pytest.raises(UnsupportedMethodError, match="additive_params 'hannel' matches no parameter"):
        resolve_method("attnlrp", "lrp_suffix", None)  # a dotted suffix, not any string suffix
    assert resolve_method("attnlrp", "lrp_tanh", "gxi") == "gxi"
    assert resolve_method("attnlrp", "lrp_tanh_ok", None) == "attnlrp"
    assert resolve_method("attnlrp", "lrp_ok", None) == "attnlrp"
    assert check_user_model("lrp_ok", SDPA_SPEC, checks=LRP)["attnlrp"] == "ok"
    assert "Tanh" in check_user_model("lrp_tanh", tanh, checks=LRP)["attnlrp"]
    with pytest.raises(Exception, match="lrp.attention pattern 'nope.\\*' matches no module"):
        check_user_model("lrp_bad", {**SDPA_SPEC, "lrp": {"attention": ["nope.*"]}})


# ------------------------------------------------------------------------------ negative controls (paper 001)
@requires_data
def test_controls_take_a_user_model_with_declared_weights(tmp_path):
    """`controls` on a user model: the declared weights are the frozen probe's pretrained arm and the
    ``init_seeds`` arms are built without them; the scrambled-label LoRA adaptation starts from the declared
    weights; gate (iii) reads the declared pretraining corpora."""
    from safetensors.torch import save_file

    from eegfm_bench.cli import main
    from eegfm_bench.controls.embeddings import build_encoder
    from eegfm_bench.models.user import _sha256

    import user_encoder

    torch.manual_seed(7)
    ref = user_encoder.TinyEEGTransformer(19, 512, **SPEC["init_args"])  # eegmat: 19 channels of 4 s at 128 Hz
    path = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    sha = _sha256(path)
    spec = {**SPEC, "pretrained": {"path": str(path), "sha256": sha}, "pretraining_corpora": ["TUEG"]}
    out = tmp_path / "out"
    cfg = {"experiment": "controls_byom", "task": "eegmat", "out_dir": str(out), "seed": 0,
           "data": {"subjects": [0, 1, 2, 3, 4, 5], "max_windows_per_subject": 4, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
           "features": {"families": ["simple"]}, "user_models": {"tiny_ctl": spec},
           "models": [{"model": "tiny_ctl", "init_seeds": [0], "pooling": "mean"}],
           "permutation": {"n": 5, "families": "strongest"}, "bootstrap": {"n_boot": 200},
           "scrambled": [{"model": "tiny_ctl", "regime": "lora", "head": "mean", "seeds": [0],
                          "trainer": {"max_epochs": 1, "patience": 1}}]}
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["controls", "--config", str(p), "--no-progress"]) == 0
    label = f"pretrained:tiny@{sha[:12]}"
    df = pd.read_csv(out / "results.csv")
    frozen = df[(df.model == "tiny_ctl") & (df.regime == "frozen_probe") & (df.metric == "auroc_window")
                & (df.fold.astype(str) != "pooled")]
    assert set(frozen.init) == {label, "random#seed0"} and len(frozen) == 6
    assert set(df[(df.model == "tiny_ctl") & (df.metric == "n_dims")].value) == {16.0}
    adapt = df[df.condition.isin(["correct_labels", "scrambled_labels"]) & (df.metric == "auroc_window")]
    assert set(adapt.init) == {f"{label}#seed0"} and len(adapt) == 6
    # the arms: the declared weights exactly, and a random init without them
    pre, init = build_encoder("tiny_ctl", [f"c{i}" for i in range(19)], 512, 2, pretrained="declared")
    rnd, init_r = build_encoder("tiny_ctl", [f"c{i}" for i in range(19)], 512, 2, init_seed=0)
    assert init == label and init_r == "random"
    assert torch.equal(pre.model.embed.weight, ref.embed.weight)
    assert not torch.equal(rnd.model.embed.weight, ref.embed.weight)
    gates = {g["model"] for g in json.loads((out / "gates.json").read_text())}
    assert gates == {f"tiny_ctl-{label.replace(':', '_').replace('@', '_')}-mean", "tiny_ctl-lora-mean (correct labels)"}
    assert "declared: no tiny_ctl pretraining corpus (['TUEG']) overlaps" in (out / "controls_report.md").read_text()
    # gate (iii)'s evidence: the declared corpora, an overlap with the task's dataset, or none declared (missing)
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.models.user import register_user_models
    from eegfm_bench.runs.controls.gates import _provenance

    task = get_task("eegmat")
    assert _provenance("tiny_ctl", label, task)[0] == ["TUEG"]
    assert _provenance("tiny_ctl", "random#seed0", task)[0] == []
    register_user_models({"tiny_seen": {**spec, "pretraining_corpora": ["TUEG", task.dataset.upper()]},
                          "tiny_unknown": {**spec, "pretraining_corpora": None}})
    assert _provenance("tiny_seen", label, task)[0] == [task.dataset.upper()]
    corpora, note = _provenance("tiny_unknown", label, task)
    assert corpora is None and "pretraining_corpora" in note


def test_controls_user_model_declarations_are_checked_before_any_data_is_read(tmp_path):
    """Inherited from the cv run (a name declared differently in both is refused); a hub checkpoint for a user
    model is refused; a broken declaration fails its dry run."""
    from eegfm_bench.config import ConfigError
    from eegfm_bench.models.user import UserModelError
    from eegfm_bench.runs.controls.config import load_config

    cv = tmp_path / "cv"
    cv.mkdir()
    (cv / "config.yaml").write_text(yaml.safe_dump({"user_models": {"tiny_cv": SPEC}}))
    (cv / "splits.json").write_text("{}")
    base = {"task": "eegmat", "out_dir": str(tmp_path / "o"), "cv_out_dir": str(cv), "cv_claims": [],
            "models": [{"model": "tiny_cv", "init_seeds": [0]}]}
    cfg = load_config(base)
    assert cfg.user_models == {"tiny_cv": SPEC} and cfg.models[0].pretrained is None
    with pytest.raises(ConfigError, match="declared here and, differently, in the cv run"):
        load_config({**base, "user_models": {"tiny_cv": {**SPEC, "sfreq": 256.0}}})
    with pytest.raises(ConfigError, match="whose weights come from its declaration"):
        load_config({**base, "models": [{"model": "tiny_cv", "pretrained": "braindecode/labram-pretrained"}]})
    with pytest.raises(UserModelError, match="blocks pattern 'nope.\\*' matches no module"):
        load_config({**base, "cv_out_dir": None, "user_models": {"tiny_bad": {**SPEC, "blocks": "nope.*"}},
                     "models": [{"model": "tiny_bad"}]})


def test_a_checkpoint_keeps_the_current_configs_lrp_declaration():
    """A fold checkpoint carries the declaration it was trained with; loading it (same hashed declaration) keeps
    the current config's lrp / pretraining_corpora, which change no trained number; another architecture
    replaces the registration."""
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.models.user import register_user_models, user_spec

    register_user_models({"tiny_keep": {**SPEC, "lrp": {"additive_params": ["channel"]}}})
    FMClassifier(backbone="tiny_keep", user_model=SPEC, head="mean", regime="head_only", ch_names=["C3", "Cz", "C4"],
                 n_times=512)
    assert user_spec("tiny_keep").lrp.additive_params == ["channel"]
    FMClassifier(backbone="tiny_keep", user_model={**SPEC, "init_args": {**SPEC["init_args"], "depth": 1}},
                 head="mean", regime="head_only", ch_names=["C3", "Cz", "C4"], n_times=512)
    assert user_spec("tiny_keep").lrp.additive_params == [] and user_spec("tiny_keep").init_args["depth"] == 1


def test_a_declaration_is_typed_and_the_checkpoint_keeps_a_plain_mapping():
    """A declaration is typed on the way in (a frozen UserModelConfig, defaults filled) and saved in the fold
    checkpoint as its plain mapping; an older checkpoint's mapping as written loads the same. The hashed form is
    unchanged: as written for cell hashes, every key for feature-cache keys (values recorded before typing)."""
    import dataclasses

    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.models.user import hashable_user_spec, user_model_config, user_spec
    from eegfm_bench.config.user_model import UserModelConfig
    from eegfm_bench.results import config_hash

    um = user_model_config(SPEC, "tiny_tf")
    assert isinstance(um, UserModelConfig) and um.channels.kind == "any" and um.channels.variable is False
    assert um.lrp.attention == [] and um.pretrained is None and um.reference == "average"
    with pytest.raises(dataclasses.FrozenInstanceError):
        um.sfreq = 256.0
    assert user_model_config(um.to_dict()) == um and user_model_config(um) == um
    m = FMClassifier(backbone="tiny_hp", user_model=SPEC, head="mean", regime="head_only", ch_names=["C3", "Cz", "C4"],
                     n_times=512)
    assert type(m.hparams.user_model) is dict and m.hparams.user_model == um.to_dict()
    assert user_spec("tiny_hp") == um
    old = FMClassifier(**{**m.hparams, "user_model": dict(SPEC)})  # a checkpoint saved before typing
    assert old.hparams.user_model == um.to_dict()
    FMClassifier(**{**m.hparams, "user_model": um})  # typed by the caller: saved as its plain mapping too
    no_code = lambda d: {k: v for k, v in d.items() if k != "code_sha256"}  # noqa: E731 (the file's sha changes)
    assert config_hash(no_code(hashable_user_spec(SPEC))) == "fd5dca8c4eb8"  # as written (cell hashes)
    assert config_hash(no_code(hashable_user_spec(um))) == "b9d3541b8ad1"  # every key (feature-cache keys)


def test_attention_maps_of_a_user_model_follow_its_declared_token_layout():
    """Per-channel attention (App. I.4) of a user model: each block's nn.MultiheadAttention (or its declared SDPA
    module) recomputed from the block input; keys grouped by the declared channel-major layout; every softmax row
    sums to 1, so the per-channel values sum to C. Without a token_layout it is refused, naming the fix."""
    from eegfm_bench.interpret.attention import channel_attention
    from eegfm_bench.errors import UnsupportedMethodError
    from eegfm_bench.models.module import FMClassifier

    ch = ["C3", "Cz", "C4"]
    torch.manual_seed(0)
    x = torch.randn(4, 3, 512) * 20
    for name, spec in (("att_mha", SPEC), ("att_sdpa", SDPA_SPEC)):
        m = FMClassifier(backbone=name, user_model={**spec, "token_layout": "channel_major"}, head="mean",
                         regime="head_only", ch_names=ch, n_times=512)
        ad = m.backbone.eval()
        att = channel_attention(ad, x, ch)  # (n_blocks, batch, C)
        assert att.shape == (2, 4, 3)
        np.testing.assert_allclose(att.sum(-1), 3.0, rtol=1e-5)
        # block 0 by hand: its attention input is the patch embeddings (post-norm layer / pre-norm block)
        with torch.no_grad():
            t = ad.model.patches(x).flatten(1, 2)  # (B, C·P, d), channel-major
            if name == "att_mha":
                _, w = ad.model.encoder.layers[0].self_attn(t, t, t, need_weights=True, average_attn_weights=False)
            else:
                blk = ad.model.blocks[0]
                b, n, d = t.shape
                q, k, _ = blk.attn.qkv(blk.norm1(t)).reshape(b, n, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
                w = torch.softmax(q @ k.transpose(-2, -1) / (d // 2) ** 0.5, dim=-1)
        ref = w.sum(2).mean(1).reshape(4, 3, 4).mean(-1).numpy()  # keys: channel k // P, P = 4 patches
        np.testing.assert_allclose(att[0], ref, rtol=1e-5, atol=1e-6)
    m = FMClassifier(backbone="att_none", user_model=SPEC, head="mean", regime="head_only", ch_names=ch, n_times=512)
    with pytest.raises(UnsupportedMethodError, match="no token_layout; fix: declare blocks"):
        channel_attention(m.backbone, x, ch)
    # attention within each time patch (over channels) has no per-window key → channel map: refused up front
    from eegfm_bench.interpret.attention import check_attention_support
    from eegfm_bench.models.user import register_user_models

    register_user_models({"att_spatial": {**SDPA_SPEC, "class_path": "user_encoder.TinySpatialTransformer",
                                          "token_layout": "channel_major"},
                          "att_noattn": {**SDPA_SPEC, "lrp": {"additive_params": ["channel"]},
                                         "token_layout": "channel_major"}})
    with pytest.raises(UnsupportedMethodError, match="block 0's attention runs on 8 sequences for a batch of 2"):
        check_attention_support("att_spatial")
    with pytest.raises(UnsupportedMethodError, match=r"blocks \[0, 1\] hold no nn.MultiheadAttention"):
        check_attention_support("att_noattn")


def test_editing_the_encoder_file_or_its_weights_changes_the_cell_hash_and_the_feature_key(tmp_path, monkeypatch):
    """A cell of a user model is keyed by the sha256 of the encoder's source file and of its weights (computed when
    the declaration gives none): editing either retrains the cell and recomputes the cached tokens instead of
    serving the old ones. The lrp declaration changes neither."""
    import shutil
    import sys

    from safetensors.torch import save_file

    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.features import feature_key
    from eegfm_bench.models.user import register_user_models
    from eegfm_bench.runs.cv.cells import cell_hash, load_config

    import user_encoder

    shutil.copy(user_encoder.__file__, tmp_path / "edited_encoder.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in user_encoder.TinyEEGTransformer(3, 512, **SPEC["init_args"])
               .state_dict().items()}, str(weights))
    spec = {**SPEC, "class_path": "edited_encoder.TinyEEGTransformer", "channels": {"kind": "names",
            "names": ["C3", "Cz", "C4"]}, "pretrained": {"path": str(weights)}}

    def keys(sp):
        cfg = load_config({"task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "user_models": {"ed": sp},
                           "runs": [{"model": "ed", "regime": "head_only", "heads": ["mean"]}]})
        register_user_models({"ed": sp})
        ad = BACKBONES.get("ed")(["C3", "Cz", "C4"], 512, 2)

        from eegfm_bench.data.windows import WindowSet

        n = 4
        ws = WindowSet(np.zeros((n, 3, 512), np.float32), np.zeros(n, np.int64), np.array(["1"] * n),
                       np.array(["r"] * n), np.arange(n), np.array(["d"] * n), ["C3", "Cz", "C4"], 128.0, ["a", "b"],
                       {"cache_key": "k"})
        return cell_hash(cfg, cfg.runs[0], "mean", "k"), feature_key(ad, ws, np.arange(n), ("tokens",),
                                                                          weights="w")

    base = keys(spec)
    assert keys({**spec, "lrp": {"additive_params": ["channel"]}}) == base
    src = tmp_path / "edited_encoder.py"
    src.write_text(src.read_text().replace("/ 100.0", "/ 50.0"))
    edited = keys(spec)
    assert edited[0] != base[0] and edited[1] != base[1]
    save_file({k: v.contiguous() + 1 for k, v in user_encoder.TinyEEGTransformer(3, 512, **SPEC["init_args"])
               .state_dict().items()}, str(weights))
    assert keys(spec)[0] != edited[0]  # new weights, no sha256 declared: retrained
    sys.modules.pop("edited_encoder", None)


@pytest.mark.parametrize("cls, over, match", [
    ("SkipsABlock", {"blocks": "extra"}, r"blocks \['extra'\] are not called by the forward that gives the tokens; "
                                         r"fix: a blocks pattern of modules on that path"),
    ("DetachedTokens", {}, r"no gradient reaches its parameters from the tokens; fix: tokens must be computed by the "
                           r"module's own parameters \(not detached / under no_grad\)"),
    ("ParameterFreeTokens", {"blocks": None}, r"no gradient reaches its parameters from the tokens; fix: tokens must be computed by "
                                r"the module's own parameters"),
])
def test_each_dry_run_refusal_gives_its_documented_message(cls, over, match):
    """Issue 23: a declared block the forward never calls, detached tokens (raised torch's own RuntimeError
    before) and tokens no parameter contributes to are refused by the dry run, each with its message."""
    from eegfm_bench.models.user import UserModelError, check_user_model

    spec = {**SPEC, "class_path": f"user_encoder.{cls}", "lora_targets": [], **over}
    with pytest.raises(UserModelError, match=match):
        check_user_model("broken", spec)
