"""GradCAM maps on the electrode × time grid (paper 003 App. I.3) through pytorch-grad-cam (``grad-cam``).

GradCAM (Selvaraju et al., 2017) weights a layer's activation maps ``A_k`` by the spatially averaged gradient of the
explained logit, ``α_k = mean(∂y_c/∂A_k)``, and keeps ``ReLU(Σ_k α_k A_k)``. pytorch-grad-cam computes it on a
4-D activation ``(batch, k, height, width)`` and resizes the map to the input's last two axes, here
``(n_chans, n_times)``. Each backbone declares which layer is hooked and how its output becomes that 4-D grid with
the **electrode axis as height** (:data:`GRADCAM_LAYERS`):

* ``labram`` — the last transformer block (App. I.3: "the last transformer block"), output ``(batch, 1 + C·P, d)``:
  the CLS token is dropped and the channel-major patches reshaped to ``(batch, d, C, P)``;
* ``cbramod`` — the last criss-cross block, output ``(batch, C, P, d)`` → ``(batch, d, C, P)``;
* ``reve`` — the last transformer layer (attention + feed-forward residual pair), ``(batch, C·P, d)`` channel-major
  → ``(batch, d, C, P)``;
* ``eegnet`` — App. I.3 names "the final convolutional layer". In EEGNet the depthwise spatial convolution merges
  the electrodes, so every later convolution (``conv_separable_point``, the final one) has a single spatial row
  and its CAM is the same for all electrodes (measured in ``tests/interpret/test_interpret_gradcam.py``:
  channels differ by < 1e-6, float32 resizing). We hook the **last convolution that still has the electrode axis**, the temporal convolution
  (after its batch norm, ``bnorm_temporal``: ``(batch, F1, C, T)``), the same layer as the authors' code (which
  attributes to the input of the first layer after it). Documented choice; ``layer: final`` selects the final
  convolution for comparison.

The map is then put through the same selection (correct windows ≥ 75th percentile of their confidence), per-window
99th-percentile normalisation and time / window / fold averaging as AttnLRP (App. I.1,
:mod:`eegfm_bench.interpret.attribution`). GradCAM maps are non-negative by construction. pytorch-grad-cam
min-max scales each window's map to [0, 1] before resizing; the 99th-percentile normalisation that follows makes
that scaling immaterial.

References
----------
Selvaraju et al. (2017), Grad-CAM, ICCV. Gildenblat and contributors (2021), pytorch-grad-cam.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn


from eegfm_bench.errors import UnsupportedMethodError


class GradCAMUnsupportedError(UnsupportedMethodError):
    """The backbone has no GradCAM layer (its tokens do not map one-to-one onto electrodes); names the others."""


def _labram(adapter, layer: str):
    C, P = len(adapter.ch_names), adapter.n_tokens() // len(adapter.ch_names)

    def reshape(t):  # (B, 1 + C·P, d) → (B, d, C, P)
        t = t[:, 1:] if t.shape[1] == 1 + C * P else t
        return t.reshape(t.shape[0], C, P, t.shape[-1]).permute(0, 3, 1, 2).contiguous()

    return adapter.blocks[-1], reshape


def _cbramod(adapter, layer: str):
    def reshape(t):  # (B, C, P, d) → (B, d, C, P)
        return t.permute(0, 3, 1, 2).contiguous()

    return adapter.blocks[-1], reshape


def _reve(adapter, layer: str):
    P = adapter._patches()

    def reshape(t):  # (B, C·P, d), channel-major, no CLS → (B, d, C, P)
        return t.reshape(t.shape[0], -1, P, t.shape[-1]).permute(0, 3, 1, 2).contiguous()

    return adapter.blocks[-1], reshape


def _eegnet(adapter, layer: str):
    m = adapter.model
    if layer == "final":
        return m.conv_separable_point, None  # (B, F2, 1, T'): one spatial row
    return m.bnorm_temporal, None  # (B, F1, C, T)


GRADCAM_LAYERS: dict[str, Callable] = {"labram": _labram, "cbramod": _cbramod, "reve": _reve, "eegnet": _eegnet}
"""Backbone name → ``f(adapter, layer) -> (module, reshape_transform or None)``."""


def check_gradcam(backbone: str) -> None:
    """Raise :class:`GradCAMUnsupportedError` if ``backbone`` has no GradCAM layer."""
    if backbone not in GRADCAM_LAYERS:
        raise GradCAMUnsupportedError(f"gradcam is not defined for {backbone}: it needs tokens that map one-to-one "
                                      f"onto electrodes (App. I.3); fix: use gxi or attnlrp, or one of "
                                      f"{sorted(GRADCAM_LAYERS)}")


def gradcam(model: nn.Module, x: torch.Tensor, target, backbone: str, *, layer: str = "default") -> torch.Tensor:
    """GradCAM map of the ``target`` logit on the electrode × time grid.

    Parameters
    ----------
    model : nn.Module
        :class:`~eegfm_bench.interpret.attribution.LogitModel` (``.backbone`` is the adapter); put in eval mode.
    x : Tensor, shape (batch, n_chans, n_times)
        Windows in the backbone's unit (µV).
    target : int or Tensor of int, shape (batch,)
        Class whose logit is explained.
    backbone : str
        Registered backbone name (selects the layer, :data:`GRADCAM_LAYERS`).
    layer : {"default", "final"}
        ``final`` hooks EEGNet's final convolution instead of the last one with an electrode axis.

    Returns
    -------
    Tensor, shape (batch, n_chans, n_times)
        Non-negative map in [0, 1] (per-window min-max scaled by pytorch-grad-cam), float32, detached.

    Raises
    ------
    GradCAMUnsupportedError
        If ``backbone`` has no GradCAM layer.
    """
    # reason: pytorch-grad-cam imports OpenCV, which starts a thread when imported; only method gradcam needs it
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    check_gradcam(backbone)
    module, reshape = GRADCAM_LAYERS[backbone](model.backbone, layer)
    n_chans, n_times = x.shape[1], x.shape[2]

    class _EEGCam(GradCAM):
        def get_target_width_height(self, input_tensor):  # cv2 (width, height) → maps of (n_chans, n_times)
            return n_times, n_chans

    tgt = torch.as_tensor(target, dtype=torch.long)
    tgt = tgt.expand(len(x)).clone() if tgt.ndim == 0 else tgt
    was_training = model.training
    model.eval()
    try:
        with _EEGCam(model=model, target_layers=[module], reshape_transform=reshape) as cam:
            out = cam(input_tensor=x.detach().clone().requires_grad_(True),
                      targets=[ClassifierOutputTarget(int(c)) for c in tgt.cpu()])
    finally:
        model.train(was_training)
    return torch.as_tensor(np.ascontiguousarray(out), dtype=torch.float32, device=x.device)


__all__ = ["GRADCAM_LAYERS", "GradCAMUnsupportedError", "check_gradcam", "gradcam"]
