"""GradCAM (paper 003 App. I.3) through pytorch-grad-cam, with the App. I.1 selection and normalisation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpret_synth import CHS, SIGNAL, TINY_LABRAM, build, synthetic, train
from eegfm_bench.interpret.attribution import LogitModel, attribute, attribute_fold, predict_proba, resolve_method
from eegfm_bench.interpret.gradcam import GradCAMUnsupportedError, gradcam

NOISE = [i for i in range(len(CHS)) if i not in SIGNAL]


def test_eegnet_gradcam_localises_on_the_label_channels(trained_eegnet):
    X, y = synthetic(40, seed=1)
    lm = LogitModel.from_classifier(trained_eegnet)
    assert (predict_proba(lm, X).argmax(1) == y).mean() == 1.0
    res = attribute_fold(lm, X, y, np.arange(len(y)), ["gradcam"], conservation_windows=0, randomisation_windows=4)
    fm = res["gradcam"]
    assert fm.method == "gradcam" and fm.maps.shape == (20, len(CHS), 400)
    assert fm.maps.min() >= 0.0 and fm.maps.max() <= 1.0  # ReLU'd, normalised and clipped
    cm = fm.channel.mean(0)
    assert set(np.argsort(-cm)[:2]) == set(SIGNAL), np.round(cm, 4)
    assert cm[SIGNAL].mean() >= 1.5 * cm[NOISE].mean(), np.round(cm, 4)
    assert "randomisation" in fm.checks


def test_eegnet_final_convolution_has_no_electrode_axis(trained_eegnet):
    """Why the default hooks the temporal convolution: the final convolution's CAM is identical on every
    electrode (the depthwise spatial convolution has merged them), so it carries no topography."""
    X, y = synthetic(4, seed=2)
    lm = LogitModel.from_classifier(trained_eegnet)
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    final = gradcam(lm, x, t, "eegnet", layer="final").numpy()
    assert final.shape == (8, len(CHS), 400)
    assert np.abs(final - final[:, :1]).max() < 1e-6  # same map on every channel (up to float32 resizing)
    default = attribute(lm, x, t, "gradcam", "eegnet").numpy()
    assert np.abs(default - default[:, :1]).max() > 0.1


def test_labram_gradcam_on_the_last_block_maps_tokens_to_electrodes():
    """Tiny LaBraM: the last block's channel-major patch tokens become the (C, P) grid, resized to (C, T)."""
    X, y = synthetic(60, seed=0)
    m = train(build("labram", TINY_LABRAM), X, y, epochs=8, lr=3e-3)
    lm = LogitModel.from_classifier(m)
    x, t = torch.from_numpy(X[:16]), torch.from_numpy(y[:16])
    R = attribute(lm, x, t, "gradcam", "labram").numpy()
    assert R.shape == (16, len(CHS), 400) and R.min() >= 0.0 and R.max() <= 1.0 + 1e-6
    # the grid: the 2 patches of 200 samples per channel are resized (bilinear) onto the 400 samples; a channel's
    # map varies along time, and channels differ
    assert np.abs(R - R[:, :1]).max() > 0.01 and np.abs(R - R[:, :, :1]).max() > 0.01


def test_reve_gradcam_shape_and_range():
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.heads import HEADS

    torch.manual_seed(0)
    ad = BACKBONES.get("reve")(CHS, 400, embed_dim=32, depth=2, heads=2, head_dim=8)
    head = HEADS.get("flatten")(ad.n_tokens(), 32, 2)
    lm = LogitModel(ad, head, CHS)
    X, y = synthetic(4, seed=3)
    R = attribute(lm, torch.from_numpy(X), torch.from_numpy(y), "gradcam", "reve").numpy()
    assert R.shape == (8, len(CHS), 400) and R.min() >= 0.0 and R.max() <= 1.0 + 1e-6


def test_unsupported_backbone_names_the_fix():
    with pytest.raises(GradCAMUnsupportedError, match="fix: use gxi or attnlrp"):
        resolve_method("gradcam", "bendr", None)
    assert resolve_method("gradcam", "cbramod", None) == "gradcam"
