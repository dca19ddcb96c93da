"""PhysioTRACE provenance audit over cached embeddings (paper 000): Recover, Stress, Intervene, Verify.

* :mod:`.views` — paired reference views (:func:`make_reference_views`, :func:`pair_views`).
* :mod:`.recover` — linear provenance information (LPI, bits per native unit), §3.1.
* :mod:`.stress` — fixed-marginal association regimes, weighted AUROC, excess vulnerability G, §3.2.
* :mod:`.intervene` — train-localized subspace removal, §3.3.
* :mod:`.verify` — matched random subspaces, utility margin, the three verdicts, §3.4.
* :mod:`.audit` — :func:`audit_embeddings` and the JSON + Markdown :class:`AuditReport` (``eegfm-bench audit``:
  :func:`eegfm_bench.runs.audit.run_audit`).
"""
from .audit import AuditReport, audit_embeddings
from eegfm_bench.config.audit import AuditConfig
from .intervene import Localization, observational_localization, paired_localization, project_out, subspace_energy
from .recover import LPIResult, fit_provenance_probe, linear_provenance_information
from .stress import (Design, InfeasibleRegimeError, Rotation, StressSet, decision_flip_rate, fit_head,
                     odds_for_agreement, paired_logit_contrast, regime_joint, stress_weights, weighted_auroc)
from .verify import decide_verdict, has_reliance, random_subspaces
from .views import PairedViews, make_reference_views, pair_views

__all__ = [
    "AuditConfig", "AuditReport", "audit_embeddings",
    "Localization", "observational_localization", "paired_localization", "project_out", "subspace_energy",
    "LPIResult", "fit_provenance_probe", "linear_provenance_information",
    "Design", "InfeasibleRegimeError", "Rotation", "StressSet", "decision_flip_rate", "fit_head",
    "odds_for_agreement", "paired_logit_contrast", "regime_joint", "stress_weights", "weighted_auroc",
    "decide_verdict", "has_reliance", "random_subspaces",
    "PairedViews", "make_reference_views", "pair_views",
]
