"""Tiny architecture configurations of every registered backbone, shared by the model-zoo tests.

``TINY[name] = (n_times, kwargs, (n_tokens, d_model), n_blocks)`` for the 19-channel 10-20 montage ``CH19`` at
each adapter's declared sampling rate. Expected token counts are worked out by hand in the comments.
"""
from __future__ import annotations

import torch

from eegfm_bench.models.backbones import BACKBONES

CH19 = ["Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T7", "C3", "Cz", "C4", "T8", "P7", "P3", "Pz", "P4", "P8",
        "O1", "O2"]
B = 2

TINY: dict[str, tuple[int, dict, tuple[int, int], int]] = {
    # 2 s at 128 Hz: two ÷4, ÷8 poolings -> 256 // 32 = 8 tokens of F2 = F1 * D = 4
    "eegnet": (256, dict(F1=4, D=1, kernel_length=16), (8, 4), 2),
    # 2 s at 250 Hz: conv 25 -> 476, pool 75 stride 15 -> (476 - 75) // 15 + 1 = 27 tokens of 8 filters
    "shallow": (500, dict(n_filters_time=8, n_filters_spat=8), (27, 8), 2),
    # 2 s at 200 Hz: 19 channels x 2 patches, d = 4 * 200 / 8 = 100
    "labram": (400, dict(num_layers=2, conv_out_channels=4, num_heads=2), (19 * 2, 100), 2),
    "cbramod": (400, dict(n_layer=2, nhead=2, dim_feedforward=64), (19 * 2, 200), 2),
    # STFT n_fft 200, hop 100: (400 - 200) // 100 + 1 = 3 frames per channel
    "biot": (400, dict(embed_dim=32, num_heads=2, num_layers=2), (19 * 3, 32), 2),
    "biot_bipolar": (400, dict(embed_dim=32, num_heads=2, num_layers=2), (16 * 3, 32), 2),
    # 2 s at 256 Hz: (512 - 64) // 32 + 1 = 15 patches, d = embed_num 4 x 32
    "eegpt": (512, dict(depth=2, embed_dim=32, num_heads=2), (15, 128), 2),
    # 2 s at 200 Hz: patches of 200 with step 180 -> (400 - 200) // 180 + 1 = 2 per channel
    "reve": (400, dict(embed_dim=32, depth=2, heads=2, head_dim=8), (19 * 2, 32), 2),
    # 2 s at 256 Hz: ÷96 encoder -> 6 steps, + start token
    "bendr": (512, dict(encoder_h=32, contextualizer_hidden=64, transformer_layers=2, transformer_heads=2),
              (7, 32), 2),
    # 2 s at 128 Hz: 1 feature per channel (receptive field 1.19 s, stride 1 s)
    "signal_jepa": (256, dict(transformer__num_encoder_layers=2, transformer__num_decoder_layers=1,
                              transformer__nhead=2), (19, 64), 2),
    # 400 // 40 = 10 patches, d = 2 queries x 16
    "luna": (400, dict(embed_dim=16, num_queries=2, depth=2, num_heads=2), (10, 32), 2),
    "eegdino": (400, dict(n_layer=2, nhead=2, dim_feedforward=32), (19 * 2, 200), 2),
    "codebrain": (400, dict(num_res_layers=2, res_channels=16, skip_channels=16, out_channels=16, s4_d_state=8),
                  (19 * 2, 16), 2),
    # 256 // 16 = 16 patches per channel
    "steegformer": (256, dict(embed_dim=32, depth=2, num_heads=2, channel_slots="build_order"), (19 * 16, 32), 2),
}
SUPERVISED = ("eegnet", "shallow")
FOUNDATION = tuple(n for n in TINY if n not in SUPERVISED)


def build(name: str, ch: list[str] | None = None, n_outputs: int = 2, **extra):
    """Tiny adapter ``name`` in eval mode, built on ``ch`` (default ``CH19``)."""
    n_times, kwargs, _, _ = TINY[name]
    return BACKBONES.get(name)(list(ch or CH19), n_times, n_outputs=n_outputs, **{**kwargs, **extra}).eval()


def window(name: str, n_chans: int = len(CH19), seed: int = 0) -> torch.Tensor:
    """Random windows ``(B, n_chans, n_times)`` for ``name`` (unit scale)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, n_chans, TINY[name][0], generator=g)
