"""The thresholds of the attribution sanity checks and their verdict (paper 003 App. I.2), numpy only.

Kept apart from :mod:`eegfm_bench.interpret.attribution` (torch, Lightning, captum) so that the pages that show the
checks (:mod:`eegfm_bench.reports.attribution_checks`, ``eegfm-bench report``) load no deep-learning stack.
"""
from __future__ import annotations

import numpy as np

CONSERVATION_TOLERANCE = 0.05
"""Relative deviation of ``sum(R) / logit`` from 1 above which
:func:`~eegfm_bench.interpret.attribution.conservation_check` warns."""

RANDOMISATION_THRESHOLD = 0.7
"""A map whose Spearman rank correlation with the map of a weight-randomised (or label-randomised) model is at or
above this **fails the sanity check** (Adebayo et al. 2018, "Sanity checks for saliency maps", §3-4: a method whose
maps survive randomisation of the model or of the training labels is insensitive to what the model learned; the
paper shows such methods keep rank correlations near 1 while gradient-based maps fall towards 0). The paper gives no
cut-off; 0.7 is the conventional lower bound of a *strong* correlation (Schober, Boer and Schwarte 2018, Anesth.
Analg. 126(5):1763-1768: 0.70-0.89 strong, >= 0.90 very strong). It is applied, for every method (G×I, AttnLRP,
GradCAM), to the |R| maps (channels x times, ``randomisation_spearman``, as in Adebayo et al.'s Fig. 2) and to the
topomaps (channel values, ``randomisation_spearman_channel``: what the product's figures show); either one at or
above the threshold fails. Measured on the quickstart's EEGNet at cc42c99 (5 folds, 6 windows each): GradCAM's map
0.003 but its topomap 0.942 under model randomisation and 0.972 under data randomisation (flagged: the topography
comes from the input, not the model); Gradient×Input 0.493 / 0.472 (model) and 0.552 / 0.641 (data), passes."""


def sanity_verdict(spearman: float, threshold: float = RANDOMISATION_THRESHOLD) -> str:
    """``"fails sanity check"`` when ``spearman >= threshold`` (:data:`RANDOMISATION_THRESHOLD`), ``"passes"``
    below it, ``"not computed"`` for NaN.

    Parameters
    ----------
    spearman : float
        Mean Spearman rank correlation of the |R| maps of the trained model and of its randomised copy (model
        randomisation) or of a model trained on permuted labels (data randomisation).
    """
    if spearman is None or not np.isfinite(spearman):
        return "not computed"
    return "fails sanity check" if spearman >= threshold else "passes"


__all__ = ["CONSERVATION_TOLERANCE", "RANDOMISATION_THRESHOLD", "sanity_verdict"]
