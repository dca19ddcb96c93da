"""Classification metrics of saved predictions (scikit-learn): the one definition of balanced accuracy, AUROC and
Cohen's kappa that cv, the sweeps, the confound check and the training module score with.

Kept out of :mod:`eegfm_bench.results` so that reading a store (``eegfm-bench status``, ``report``) does not load
scikit-learn.
"""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score, roc_auc_score


def classification_metrics(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """Balanced accuracy, AUROC and Cohen's kappa from saved predictions (scikit-learn).

    Parameters
    ----------
    y : ndarray of int, shape (n_windows,)
    probs : ndarray, shape (n_windows, n_classes)
        Class probabilities.

    Returns
    -------
    dict
        ``balanced_accuracy`` (mean recall over the classes present in ``y``), ``accuracy`` (plain, the share of
        windows right: beside balanced accuracy, which the class weights do not inflate), ``auroc`` (binary: of class
        1; multiclass: one-vs-rest macro) and ``cohen_kappa``; AUROC and kappa are NaN (with a warning) when ``y``
        holds a single class.
    """
    y = np.asarray(y)
    pred = probs.argmax(1)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out["balanced_accuracy"] = float(balanced_accuracy_score(y, pred))
    out["accuracy"] = float(np.mean(pred == y)) if len(y) else float("nan")
    if np.unique(y).size < 2:
        warnings.warn("test set holds one class: AUROC and Cohen's kappa are undefined (NaN)", stacklevel=2)
        out["auroc"] = float("nan")
        out["cohen_kappa"] = float("nan")
        return out
    if probs.shape[1] == 2:
        out["auroc"] = float(roc_auc_score(y, probs[:, 1]))
    else:
        out["auroc"] = float(roc_auc_score(y, probs, multi_class="ovr", average="macro", labels=np.arange(probs.shape[1])))
    out["cohen_kappa"] = float(cohen_kappa_score(y, pred))
    return out


__all__ = ["classification_metrics"]
