"""`eegfm-bench probe` / `attribute` config: every bad value fails before any data or model is touched."""
from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
import torch
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.runs.interpret.config import load_interpret_config, worker_config
from eegfm_bench.interpret.config import InterpretConfigError

REPO = Path(__file__).resolve().parents[2]

BASE = {"cv_dir": "results/x", "out_dir": "results/x/interpret"}


def test_defaults_are_filled_and_the_trainer_section_is_typed():
    cfg = load_interpret_config({**BASE, "trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}},
                                ["--trainer.precision", "bf16-mixed", "--attribution.percentile", "50"])
    assert cfg.trainer["devices"] == 2 and cfg.trainer["precision"] == "bf16-mixed"
    assert cfg.attribution.percentile == 50.0
    cfg = load_interpret_config(BASE)
    assert cfg.probe.poolings == ["mean", "flatten"] and cfg.attribution.percentile == 75.0
    assert cfg.attribution.methods == ["gxi", "attnlrp"]


@pytest.mark.parametrize("over,match", [
    ({"probes": {}}, r"unknown key probes\. Did you mean 'probe'.*Valid keys"),
    ({"probe": {"pooling": ["mean"]}}, r"unknown key probe\.pooling\. Did you mean 'poolings'"),
    ({"cv_dir": None}, r"`cv_dir` is required"),
    ({"probe": {"poolings": ["attention"]}}, r"unknown pooling 'attention'; fix: one of \['flatten', 'max', 'mean'\]"),
    ({"attribution": {"methods": ["lime"]}}, r"unknown method 'lime'"),
    ({"attribution": {"lrp_fallback": "zero"}}, r"lrp_fallback must be null or 'gxi'"),
    ({"attribution": {"attention_rule": "softmax"}}, r"attention_rule must be one of"),
    ({"attribution": {"percentile": 100}}, r"percentile must be in \[0, 100\)"),
    ({"device": "cpu"}, r"unknown key device\. `device` is now `trainer\.accelerator"),
    ({"trainer": {"accelerator": "gpu"}}, r"cannot run accelerator='gpu'.*fix: accelerator: cpu"),
    ({"trainer": {"max_epoch": 1}}, r"unknown key trainer\.max_epoch\. Did you mean 'max_epochs'"),
])
def test_bad_values_name_the_fix(over, match):
    with pytest.raises(InterpretConfigError, match=match) as e:
        load_interpret_config({**BASE, **over})
    assert isinstance(e.value, ConfigError)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(InterpretConfigError, match="cannot run accelerator='cuda'.*fix: accelerator: cpu"):
        load_interpret_config({**BASE, "trainer": {"accelerator": "cuda"}})


def test_unknown_condition_is_refused():
    from eegfm_bench.registry import UnknownNameError

    with pytest.raises((UnknownNameError, ValueError), match="valid|grammar|unknown"):
        load_interpret_config({**BASE, "attribution": {"conditions": ["clean", "thunder_snr=3dB"]}})


def test_the_config_is_frozen_and_a_workers_copy_loads_again(tmp_path):
    """The typed config cannot be changed in place, and a launcher's worker re-reads the parent's config: ``cv_dir``
    resolved from ``cv_config`` (no data read), its own launcher off."""
    cv = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())
    path = tmp_path / "cv.yaml"
    path.write_text(yaml.safe_dump({**cv, "out_dir": str(tmp_path / "cv")}))
    cfg = load_interpret_config({"cv_config": str(path), "out_dir": str(tmp_path / "i"), "launcher": {"kind": "local"},
                                 "probe": {"max_epochs": 3}})
    assert cfg.cv_dir == str(tmp_path / "cv") and cfg.probe.max_epochs == 3
    with pytest.raises(FrozenInstanceError):
        cfg.probe.max_epochs = 4
    again = load_interpret_config(worker_config(cfg))
    assert again.cv_dir == cfg.cv_dir and again.launcher.kind == "none" and again.probe == cfg.probe
