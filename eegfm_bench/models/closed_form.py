"""Heads solved in closed form on a frozen backbone's cached tokens, without a training loop (``ridge``).

One registry (:data:`CLOSED_FORM`; the package's own, not an extension point of docs/guide/extending.md: a new
closed-form head is an entry here with its carrier and its solver): a cv cell asks once whether its head is one
(:func:`closed_form_head`), and such a head then takes one path everywhere — checked
against its regime and its settings, hashed without the optimiser and the training-only trainer settings, built as
its *carrier* (a registered trainable head, :data:`~eegfm_bench.models.heads.HEADS`, whose weights receive the
solution), solved instead of fitted, and tested and checkpointed as every head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from eegfm_bench.models.ridge import DEFAULT_ALPHAS, ridge_probe
from eegfm_bench.registry import Registry


@dataclass(frozen=True)
class ClosedFormHead:
    """A head solved in closed form on cached tokens.

    Attributes
    ----------
    name : str
        The name a config's ``heads`` lists.
    carrier : str
        The registered head the cell builds; :attr:`solve` writes the solution into its weights, so the test loop,
        the checkpoint and every later command read it as that head.
    settings : tuple of str
        The ``head_kwargs`` it takes.
    regime : str
        The one regime whose cells cache frozen tokens for it (``head_only``).
    solve : callable
        ``solve(head, tokens, y, train_idx, val_idx, test_idx, n_classes, **settings) -> dict``: the carrier
        ``head`` receives the solution; returns the extra columns of the cell's rows. ``tokens`` is
        ``(n_windows, n_tokens, d_model)``, ``y`` ``(n_windows,)`` class indices, the indices int arrays.
    """

    name: str
    carrier: str
    settings: tuple[str, ...]
    regime: str
    solve: Callable[..., dict[str, Any]]


CLOSED_FORM: Registry[ClosedFormHead] = Registry("closed-form head")
"""Heads solved in closed form (``ridge``), by name."""


def closed_form_head(name: str) -> ClosedFormHead | None:
    """The closed-form head registered as ``name``, or None for a head trained by a loop."""
    return CLOSED_FORM.get(name) if name in CLOSED_FORM else None


def load_ridge(head, r: dict, n_classes: int) -> None:
    """Put a ridge solution (:func:`~eegfm_bench.models.ridge.ridge_probe` with ``coef=True``) into a flatten
    head's classifier, so that its logits are the ridge decision values: two classes as ``[-d, d]``.

    Raises
    ------
    ValueError
        If a class has no training or validation window (the ridge targets would miss it).
    """
    W, b = np.asarray(r["coef"]), np.asarray(r["intercept"])
    if len(r["classes"]) != n_classes:
        raise ValueError(f"ridge head: the training and validation windows hold classes {list(r['classes'])} of "
                         f"{n_classes}; fix: folds whose training subjects cover every class")
    if W.shape[0] == 1:
        W, b = np.vstack([-W, W]), np.concatenate([-b, b])
    with torch.no_grad():
        head.classifier.weight.copy_(torch.as_tensor(W, dtype=head.classifier.weight.dtype))
        head.classifier.bias.copy_(torch.as_tensor(b, dtype=head.classifier.bias.dtype))


def solve_ridge(head, tokens, y, train_idx, val_idx, test_idx, n_classes: int, alphas=None) -> dict[str, Any]:
    """The ridge probe (:func:`~eegfm_bench.models.ridge.ridge_probe`: ``alpha`` chosen on the validation windows
    among ``alphas``, default :data:`~eegfm_bench.models.ridge.DEFAULT_ALPHAS`) loaded into a flatten ``head``
    (:func:`load_ridge`); the row columns ``ridge_alpha`` and ``ridge_val_bacc``."""
    r = ridge_probe(tokens, y, train_idx, val_idx, test_idx, alphas=alphas or DEFAULT_ALPHAS, coef=True)
    load_ridge(head, r, n_classes)
    return {"ridge_alpha": r["alpha"], "ridge_val_bacc": max(r["val_scores"].values())}


CLOSED_FORM.register("ridge")(ClosedFormHead("ridge", carrier="flatten", settings=("alphas",), regime="head_only",
                                             solve=solve_ridge))


__all__ = ["CLOSED_FORM", "ClosedFormHead", "closed_form_head", "load_ridge", "solve_ridge"]
