"""What every report figure and caption shares: the score axis rule, counted nouns, and the order of folds.

* :func:`score_limits` / :func:`anchor_score_axis` — the y range of every score figure (balanced accuracy, AUROC,
  kappa): anchored at chance, never autoscaled to the data;
* :func:`plural` — ``"1 fold"``, ``"3 folds"``: every caption that prints a count with a noun goes through it;
* :func:`fold_key` / :func:`sorted_folds` — folds in natural order (``"2"`` before ``"10"``, then text folds such
  as ``"pooled"``): the typed result store holds folds as text.

No matplotlib import here: the functions take the Axes the caller drew.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

SCORE_MARGIN = 0.1
"""How far below chance a score axis starts (score units): room for the chance line and a fold just under it."""

SCORE_TOP = 1.0
"""The top of every score axis: balanced accuracy, accuracy, AUROC and kappa are at most 1."""


def score_limits(values: Iterable[float] = (), chance: float | None = None, *,
                 margin: float = SCORE_MARGIN) -> tuple[float, float]:
    """The y range of a score axis: from ``chance − margin`` (``0`` without a chance level) to 1.

    The rule, and why: an autoscaled axis stretches whatever spread the folds have over the whole panel (a 0.018
    spread drawn as 0.4825–0.5000 reads as an effect). Anchoring every score axis at chance and topping it at 1 puts
    the distance from chance and the spread between folds on one scale, the same in every figure of the page. The
    bottom only moves down when a value falls below it (to ``min(values) − margin / 2``, so no point is cut off).

    Parameters
    ----------
    values : iterable of float
        The scores drawn (NaN ignored); they only lower the bottom when one is under ``chance − margin``.
    chance : float, optional
        The chance level (e.g. 1 / n_classes for balanced accuracy); None: the axis starts at 0.
    margin : float
        Score units below chance (default :data:`SCORE_MARGIN`).

    Returns
    -------
    (float, float)
        ``(bottom, top)`` with ``top = 1``.
    """
    bottom = (float(chance) - margin) if chance is not None else 0.0
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    if v.size and v.min() < bottom:
        bottom = float(v.min()) - margin / 2
    return bottom, SCORE_TOP


def anchor_score_axis(ax, values: Iterable[float] = (), chance: float | None = None) -> tuple[float, float]:
    """Set ``ax``'s y range by :func:`score_limits` (the same arguments) and return it."""
    lim = score_limits(values, chance)
    ax.set_ylim(*lim)
    return lim


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``n`` and the noun in the number ``n`` asks for: ``plural(1, "fold") == "1 fold"``, ``plural(3, "fold") ==
    "3 folds"``, ``plural(2, "class", "classes") == "2 classes"``.

    Parameters
    ----------
    n : int
        The count (a float with an integer value is printed without decimals).
    noun : str
        The singular.
    plural_form : str, optional
        The plural when it is not ``noun + "s"``.
    """
    k = int(n) if float(n).is_integer() else n
    return f"{k} {noun if k == 1 else (plural_form or noun + 's')}"


def fold_key(fold: Any) -> tuple[int, float, str]:
    """Sort key of a fold: numeric folds (``3``, ``"10"``) by their number first, then any other (``"pooled"``) by
    its text."""
    s = str(fold).strip()
    try:
        return 0, float(s), s
    except ValueError:
        return 1, 0.0, s


def sorted_folds(folds: Iterable[Any]) -> list:
    """The distinct ``folds`` in natural order (:func:`fold_key`)."""
    return sorted(dict.fromkeys(folds), key=fold_key)


__all__ = ["SCORE_MARGIN", "SCORE_TOP", "score_limits", "anchor_score_axis", "plural", "fold_key", "sorted_folds"]
