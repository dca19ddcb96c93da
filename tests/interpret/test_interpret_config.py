"""`eegfm-bench probe` / `attribute` config: every bad value fails before any data or model is touched."""
from __future__ import annotations

import pytest
import torch

from eegfm_bench.config import ConfigError
from eegfm_bench.interpret.config import InterpretConfigError, load_interpret_config

BASE = {"cv_dir": "results/x", "out_dir": "results/x/interpret"}


def test_defaults_are_filled_and_auto_device_resolves():
    cfg = load_interpret_config({**BASE, "device": "auto"})
    assert cfg["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert cfg["probe"]["poolings"] == ["mean", "flatten"] and cfg["attribution"]["percentile"] == 75.0
    assert cfg["attribution"]["methods"] == ["gxi", "attnlrp"]


@pytest.mark.parametrize("over,match", [
    ({"probes": {}}, r"unknown key 'probes'.*Did you mean 'probe'.*Valid keys"),
    ({"probe": {"pooling": ["mean"]}}, r"unknown key probe\.'pooling'"),
    ({"cv_dir": None}, r"`cv_dir` is required"),
    ({"probe": {"poolings": ["max"]}}, r"unknown pooling 'max'"),
    ({"attribution": {"methods": ["lime"]}}, r"unknown method 'lime'"),
    ({"attribution": {"lrp_fallback": "zero"}}, r"lrp_fallback must be null or 'gxi'"),
    ({"attribution": {"attention_rule": "softmax"}}, r"attention_rule must be one of"),
    ({"attribution": {"percentile": 100}}, r"percentile must be in \[0, 100\)"),
    ({"device": "gpu"}, r"device: 'gpu' is not a torch device.*fix: use auto"),
])
def test_bad_values_name_the_fix(over, match):
    with pytest.raises(InterpretConfigError, match=match) as e:
        load_interpret_config({**BASE, **over})
    assert isinstance(e.value, ConfigError)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(InterpretConfigError, match="no CUDA device is visible; fix: device: auto or cpu"):
        load_interpret_config({**BASE, "device": "cuda"})


def test_unknown_condition_is_refused():
    from eegfm_bench.registry import UnknownNameError

    with pytest.raises((UnknownNameError, ValueError), match="valid|grammar|unknown"):
        load_interpret_config({**BASE, "attribution": {"conditions": ["clean", "thunder_snr=3dB"]}})
