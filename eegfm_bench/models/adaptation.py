"""Adaptation regimes (DESIGN.md "Adaptation"): ``head_only``, ``full`` and ``lora`` (peft).

* ``head_only`` — linear probing in paper 003's sense: the backbone is frozen *and kept in eval mode*
  (dropout / batch-norm statistics fixed), only the pooling head trains; training reads cached tokens.
* ``full`` — full fine-tuning of every parameter.
* ``lora`` — low-rank adapters from peft on the backbone's ``lora_targets``; the head always trains.
"""
from __future__ import annotations

from torch import nn

REGIMES = ("head_only", "full", "lora")


class RegimeError(ValueError):
    """Unknown or inapplicable adaptation regime."""


def check_regime(regime: str) -> str:
    """Return ``regime`` or raise :class:`RegimeError` listing the valid ones."""
    if regime not in REGIMES:
        raise RegimeError(f"unknown regime {regime!r}; valid regimes: {', '.join(REGIMES)}")
    return regime


def freeze(module: nn.Module) -> nn.Module:
    """Set ``requires_grad=False`` on every parameter and put ``module`` in eval mode."""
    module.requires_grad_(False)
    module.eval()
    return module


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of (trainable) scalar parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
