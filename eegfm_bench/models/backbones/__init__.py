"""Backbone adapters over braindecode models (docs/guide/architecture.md, "Backbone adapter").

Each adapter wraps one braindecode model, built for the dataset's montage, and exposes the representation
before any pooling as ``tokens(x, ch_names) -> (batch, n_tokens, d_model)``. The braindecode model's own
classifier (``final_layer``) is replaced by :class:`torch.nn.Identity`: classification is the job of the
pooling heads (:mod:`eegfm_bench.models.heads`). A pretrained checkpoint's ``final_layer.*`` weights are
therefore dropped explicitly at load time (each adapter's ``checkpoint_drop``; braindecode's hub
checkpoints ship that head randomly initialised).

Beyond the base contract, adapters define ``block_to_tokens(block_output)`` (reshape a hooked block output
to ``(batch, n_tokens_b, d_b)``), ``checkpoint_drop`` / ``adapt_state_dict`` (used by
:mod:`eegfm_bench.models.checkpoints`). Adapter options that are not braindecode arguments (``include_cls``,
``percentile_norm``, ``channels``, ``interpolate``, ``zscore_clip``, ``max_scale``, ``channel_slots``, ...) are
recorded in ``arch_kwargs`` too, so configs, checkpoints and token-cache keys capture them.

Registered adapters (``BACKBONES.get(name)``; one file per model in this package, registered here); tokens are channel-major (token ``k`` is channel ``k // P``, patch
``k % P``) unless noted; ``catalogue.yaml`` holds parameter counts, hub ids and pretraining corpora:

============ ===== ================================== =========================== ======================== ===========
name         sfreq input unit                         tokens                      blocks                   channels
============ ===== ================================== =========================== ======================== ===========
eegnet       128   µV                                 (B, T', 16), T'=n_times//32 ``drop_1``, ``drop_2``    fixed
shallow      250   µV                                 (B, T', 40)                 conv, dropout (2)        fixed
labram       200   100 µV                             (B, C·P [+1 CLS], 200)      ``blocks`` (12)          by name
cbramod      200   100 µV                             (B, C·P, 200)               ``encoder.layers`` (12)  fixed
biot         200   µV ÷ q95(|x|) per channel           (B, C·F, 256), F frames     transformer layers (4)   subset
biot_bipolar 200   as biot, on 16 bipolar derivations (B, 16·F, 256)              transformer layers (4)   bipolar
eegpt        256   mV                                 (B, P, 4·512), P = 31       encoder blocks (8)       by name
reve         200   z-score per channel, clip ±15      (B, C·P, 512), P = 4        transformer layers (22)  positions
bendr        256   min-max [-1, 1] + SCALE channel     (B, T'+1, 512), start first contextualiser (8)      19 by name
signal_jepa  128   µV                                 (B, C·P, 64), P = 3         encoder layers (8)       positions
luna         256   µV                                 (B, P, 256), P = n/40       rotary blocks (8)        positions
eegdino      200   100 µV                             (B, C·P [+1], 200)          ``encoder_layers`` (12)  19 by name
codebrain    200   100 µV                             (B, C·P, 200)               residual blocks (8)      fixed
steegformer  128   ±500 µV clip, z-score per channel  (B, C·P, 512), P = n/16     encoder blocks (8)       fixed
============ ===== ================================== =========================== ======================== ===========

(B = batch, C = channels, P = patches; sampling rates in Hz; windows 4 s except LUNA's 5 s.) "positions":
any channel with an MNE standard 10-05 position; "by name": selection and reordering by name within the model's
channel vocabulary (``channels`` option where it exists); "subset"/"bipolar"/"positions" (REVE, LUNA): channels
can be removed truly at inference (variable-channel models); the others refuse a montage without a build channel.
``interpolate=True`` selects braindecode's ``Interpolated*`` variant for labram, biot, eegpt, bendr, signal_jepa.

Every PEFT target in ``lora_targets`` is proven to receive gradients (:func:`eegfm_bench.models.adaptation.
apply_lora` runs one check forward/backward): LaBraM's and EEG-DINO's attention modules are re-classed to call
their ``qkv`` module (braindecode calls ``F.linear`` on its weight), and torch's fused transformer fast path,
which would bypass adapters in eval mode, is disabled inside BENDR's and S-JEPA's ``tokens``.

Every adapter forwards architecture overrides (``**kwargs``) to the braindecode constructor, so tests can
build tiny configurations (e.g. ``BACKBONES.get("labram")(ch_names, 400, num_layers=2, conv_out_channels=4,
num_heads=2)``). The signal arguments (``n_chans``, ``n_times``, ``n_outputs``, ``sfreq``, ``chs_info``,
``input_window_seconds``) are owned by the adapter and may not be overridden.

References
----------
.. [Lawhern2018] Lawhern et al. (2018). EEGNet: a compact convolutional neural network for EEG-based
   brain-computer interfaces. J. Neural Eng. 15(5):056013.
.. [Jiang2024] Jiang, Zhao, Lu (2024). Large brain model for learning generic representations with
   tremendous EEG data in BCI (LaBraM). ICLR.
.. [Wang2025] Wang et al. (2025). CBraMod: a criss-cross brain foundation model for EEG decoding. ICLR.
.. [Yang2023] Yang, Westover, Sun (2023). BIOT: biosignal transformer for cross-data learning in the wild.
   NeurIPS. Code: github.com/ycq091044/BIOT.

The other adapters cite their papers in their own docstrings.
"""

from __future__ import annotations

from eegfm_bench.quiet import quiet_third_party_warnings

with quiet_third_party_warnings():  # braindecode warns at its import about its own code (its montage names): not
    import braindecode.models  # noqa: F401 - the user's to act on; imported here first, quietly (eegfm_bench.quiet)

from eegfm_bench.models.base import BackboneAdapter
from eegfm_bench.registry import Registry
from eegfm_bench.models.backbones.eegnet import EEGNetAdapter
from eegfm_bench.models.backbones.labram import LabramAdapter
from eegfm_bench.models.backbones.cbramod import CBraModAdapter
from eegfm_bench.models.backbones.biot import BIOTAdapter, BIOTBipolarAdapter
from eegfm_bench.models.backbones.shallow import ShallowFBCSPNetAdapter
from eegfm_bench.models.backbones.eegpt import EEGPTAdapter
from eegfm_bench.models.backbones.reve import REVEAdapter
from eegfm_bench.models.backbones.bendr import BENDRAdapter
from eegfm_bench.models.backbones.signal_jepa import SignalJEPAAdapter
from eegfm_bench.models.backbones.luna import LUNAAdapter
from eegfm_bench.models.backbones.eegdino import EEGDINOAdapter
from eegfm_bench.models.backbones.codebrain import CodeBrainAdapter
from eegfm_bench.models.backbones.steegformer import STEEGFormerAdapter
from eegfm_bench.models.backbones.truncated import TRUNCATABLE, make_truncated

BACKBONES: Registry[type[BackboneAdapter]] = Registry("backbone", entry_points="eegfm_bench.backbones")
"""Every backbone adapter by name (``eegfm-bench models`` lists them)."""

BACKBONES.register("eegnet")(EEGNetAdapter)
BACKBONES.register("labram")(LabramAdapter)
BACKBONES.register("cbramod")(CBraModAdapter)
BACKBONES.register("biot")(BIOTAdapter)
BACKBONES.register("biot_bipolar")(BIOTBipolarAdapter)
BACKBONES.register("shallow")(ShallowFBCSPNetAdapter)
BACKBONES.register("eegpt")(EEGPTAdapter)
BACKBONES.register("reve")(REVEAdapter)
BACKBONES.register("bendr")(BENDRAdapter)
BACKBONES.register("signal_jepa")(SignalJEPAAdapter)
BACKBONES.register("luna")(LUNAAdapter)
BACKBONES.register("eegdino")(EEGDINOAdapter)
BACKBONES.register("codebrain")(CodeBrainAdapter)
BACKBONES.register("steegformer")(STEEGFormerAdapter)
for _base in TRUNCATABLE:  # depth-truncated variants (paper 003 App. I.6): <name>_truncated
    BACKBONES.register(f"{_base}_truncated")(make_truncated(BACKBONES.get(_base)))


def primary_backbones() -> list[str]:
    """Registered backbones that are models of their own (excludes derived variants such as ``*_truncated``,
    which set ``derived_from`` to the backbone they modify)."""
    return [n for n in BACKBONES.names() if getattr(BACKBONES.get(n), "derived_from", None) is None]


__all__ = ["BACKBONES", "primary_backbones", "EEGNetAdapter", "LabramAdapter", "CBraModAdapter", "BIOTAdapter", "BIOTBipolarAdapter", "ShallowFBCSPNetAdapter", "EEGPTAdapter", "REVEAdapter", "BENDRAdapter", "SignalJEPAAdapter", "LUNAAdapter", "EEGDINOAdapter", "CodeBrainAdapter", "STEEGFormerAdapter"]
