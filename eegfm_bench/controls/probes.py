"""Frozen probes fitted inside each fold (paper 001 §3.5).

A probe is a scikit-learn pipeline ``StandardScaler → optional PCA(k) → classifier`` fitted on the training
indices of one fold only, on handcrafted features or on cached embeddings ``X`` of shape
``(n_windows, n_features)``. Registered classifiers (:data:`PROBES`):

* ``logreg`` — L2 logistic regression, balanced class weights, lbfgs, ``max_iter=1000``, ``C`` configurable
  (paper: 1.0 for CHB-MIT and Sleep-EDF, 0.1 for TUAB, ds004504 and CAUEEG);
* ``lda`` — shrinkage LDA (``solver="lsqr"``, ``shrinkage="auto"``);
* ``svm_rbf`` — RBF SVM (``C=10``, ``gamma="scale"``, balanced) with probabilities. ``svm_probability:
  libsvm`` (default) is the paper's ``SVC(probability=True)``: libsvm's Platt scaling on internal 5-fold decision
  values and, for more than two classes, pairwise coupling of the one-vs-one probabilities (Wu, Lin & Weng 2004).
  scikit-learn 1.9 deprecates it (removal in 1.11; then this falls back to ``calibrated`` with a warning).
  ``svm_probability: calibrated`` is the documented replacement,
  ``CalibratedClassifierCV(SVC(...), ensemble=False, method="sigmoid")``: one-vs-rest sigmoids, normalised —
  the same construction for two classes (the sigmoid's CV draws differ), different for three or more: on the
  3-class synthetic problem of ``tests/controls/test_controls_probes.py`` (300 windows, 8 features) the one-vs-rest
  AUROC differs by 2e-5 while single probabilities differ by up to 0.25 (mean 0.05), so probability-based outputs
  (calibration, unit-level mean probabilities) are where the choice shows.

Folds are a list of ``(train_idx, test_idx)`` integer arrays made by the splits module (subject-grouped);
:func:`check_folds` rejects leaking or overlapping folds before anything is fitted. Estimates are reported at
the window level and, when ``aggregate_by`` names a subject or recording per window, at that level from the
mean predicted probability per unit — separately, never pooled (§3.5: distinct estimands).
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd
import sklearn
from sklearn.calibration import CalibratedClassifierCV
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from eegfm_bench import stats as S
from eegfm_bench.registry import Registry

PROBES: Registry = Registry("probe")
METRICS = ("balanced_accuracy", "auroc")
Folds = Sequence[tuple[np.ndarray, np.ndarray]]


@PROBES.register("logreg")
def _logreg(C: float | None = None, seed: int = 42):
    return LogisticRegression(C=1.0 if C is None else C, class_weight="balanced", solver="lbfgs", max_iter=1000,
                              random_state=seed)


@PROBES.register("lda")
def _lda(C: float | None = None, seed: int = 42):
    if C is not None:
        raise ValueError("the lda probe has no C; fix: leave C unset for kind='lda'")
    return LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")


@PROBES.register("svm_rbf")
def _svm_rbf(C: float | None = None, seed: int = 42, probability: str = "libsvm"):
    kw = dict(C=10.0 if C is None else C, kernel="rbf", gamma="scale", class_weight="balanced", random_state=seed)
    if probability == "libsvm":
        if "probability" in inspect.signature(SVC).parameters:
            return _QuietSVC(probability=True, **kw)
        warnings.warn("this scikit-learn has no SVC(probability=True): the svm_rbf probe falls back to "
                      "CalibratedClassifierCV (one-vs-rest sigmoids; see controls.probes)", stacklevel=2)
    elif probability != "calibrated":
        raise ValueError(f"svm_probability {probability!r}; fix: 'libsvm' or 'calibrated'")
    return CalibratedClassifierCV(SVC(**kw), method="sigmoid", ensemble=False, cv=5)


class _QuietSVC(SVC):
    """``SVC(probability=True)`` without scikit-learn 1.9's deprecation warning on every fit (noted in the docs)."""

    def fit(self, X, y, sample_weight=None):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*probability.*", category=FutureWarning)
            warnings.filterwarnings("ignore", message=".*probability.*", category=DeprecationWarning)
            return super().fit(X, y, sample_weight=sample_weight)


@dataclass(frozen=True)
class ProbeSpec:
    """One frozen-probe configuration (paper 001 §3.5).

    Parameters
    ----------
    kind : {"logreg", "lda", "svm_rbf"}
        Classifier, see :data:`PROBES`.
    C : float, optional
        Inverse regularisation (logreg default 1.0, svm_rbf default 10; not for lda).
    pca : int, optional
        Number of in-fold PCA components; None for none.
    pca_position : {"after_scaler", "before_scaler"}
        ``after_scaler``: scaler → PCA → classifier (CAUEEG, REVE); ``before_scaler``: PCA → scaler →
        classifier (the CHB-MIT headline: PCA-200 on the raw embeddings, then scaling).
    cap_pca : bool
        If True, ``k`` is reduced to ``min(pca, n_train, n_features)`` in each fold and the value used is
        reported; if False a too-large ``pca`` raises.
    seed : int
        Seed for PCA's solver and the classifier.
    svm_probability : {"libsvm", "calibrated"}
        ``svm_rbf`` probabilities: the paper's ``SVC(probability=True)`` or ``CalibratedClassifierCV`` (see
        :data:`PROBES`).
    """

    kind: str = "logreg"
    C: float | None = None
    pca: int | None = None
    pca_position: str = "after_scaler"
    cap_pca: bool = False
    seed: int = 42
    svm_probability: str = "libsvm"

    def build(self, n_train: int | None = None, n_features: int | None = None) -> tuple[Pipeline, int | None]:
        """Return an unfitted pipeline for a training fold of ``n_train`` rows and the PCA ``k`` it uses.

        With ``n_train``/``n_features`` None the PCA size is not checked (scikit-learn checks it at fit).

        Raises
        ------
        ValueError
            If ``pca`` exceeds ``min(n_train, n_features)`` and ``cap_pca`` is False, or ``pca_position`` is
            unknown.
        UnknownNameError
            If ``kind`` is not a registered probe.
        """
        clf = (PROBES.get(self.kind)(C=self.C, seed=self.seed, probability=self.svm_probability)
               if self.kind == "svm_rbf" else PROBES.get(self.kind)(C=self.C, seed=self.seed))
        steps: list = [("scaler", StandardScaler())]
        k = None
        if self.pca is not None:
            k = int(self.pca)
            if k < 1:
                raise ValueError(f"pca must be a positive number of components, got {k}")
            limit = min(n_train or k, n_features or k)
            if k > limit:
                if not self.cap_pca:
                    raise ValueError(f"PCA({k}) needs at least {k} training rows and features, the fold has "
                                     f"{n_train} rows × {n_features} features; fix: pca <= {limit} or cap_pca=True")
                k = limit
            pca = ("pca", PCA(n_components=k, random_state=self.seed))
            if self.pca_position == "after_scaler":
                steps.append(pca)
            elif self.pca_position == "before_scaler":
                steps.insert(0, pca)
            else:
                raise ValueError(f"pca_position {self.pca_position!r}; fix: 'after_scaler' or 'before_scaler'")
        steps.append(("clf", clf))
        return Pipeline(steps), k


def make_probe(kind: str = "logreg", *, C: float | None = None, pca: int | None = None,
               pca_position: str = "after_scaler", seed: int = 42, svm_probability: str = "libsvm") -> Pipeline:
    """Unfitted probe pipeline ``StandardScaler → [PCA(pca)] → classifier`` (paper 001 §3.5).

    Parameters
    ----------
    kind : {"logreg", "lda", "svm_rbf"}
    C : float, optional
        See :class:`ProbeSpec`.
    pca : int, optional
        PCA components (not capped: the caller's data must have at least that many rows and features).
    pca_position : {"after_scaler", "before_scaler"}
    seed : int
    svm_probability : {"libsvm", "calibrated"}
        ``svm_rbf`` only; see :data:`PROBES`.

    Returns
    -------
    sklearn.pipeline.Pipeline
    """
    spec = ProbeSpec(kind=kind, C=C, pca=pca, pca_position=pca_position, seed=seed, svm_probability=svm_probability)
    return spec.build()[0]


# ------------------------------------------------------------------------------------------------ folds
def check_folds(folds: Folds, n_samples: int, groups: Sequence | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Validate fold indices before any fitting.

    Parameters
    ----------
    folds : sequence of (train_idx, test_idx)
        Integer index arrays into the rows of the data.
    n_samples : int
        Number of rows.
    groups : sequence, shape (n_samples,), optional
        Subject (or recording) per row; if given, no group may be in both train and test of a fold.

    Returns
    -------
    list of (ndarray, ndarray)
        The folds as int64 arrays.

    Raises
    ------
    ValueError
        On an empty fold list or fold, an index out of range or repeated, train/test overlap, test sets that
        overlap across folds, or a group that leaks across train and test.
    """
    if len(folds) == 0:
        raise ValueError("no folds given; fix: build folds with eegfm_bench.data.splits")
    out = []
    seen = np.zeros(n_samples, dtype=bool)
    g = None if groups is None else np.asarray(groups)
    if g is not None and g.shape[0] != n_samples:
        raise ValueError(f"groups has {g.shape[0]} entries for {n_samples} rows")
    for k, (tr, te) in enumerate(folds):
        tr = np.asarray(tr, dtype=np.int64).ravel()
        te = np.asarray(te, dtype=np.int64).ravel()
        if tr.size == 0 or te.size == 0:
            raise ValueError(f"fold {k} has an empty train or test set; fix: fewer folds or more subjects")
        for name, idx in (("train", tr), ("test", te)):
            if idx.min() < 0 or idx.max() >= n_samples:
                raise ValueError(f"fold {k} {name} indices outside [0, {n_samples}); folds belong to other data")
            if np.unique(idx).size != idx.size:
                raise ValueError(f"fold {k} {name} indices repeat")
        if np.intersect1d(tr, te).size:
            raise ValueError(f"fold {k}: train and test share rows")
        if seen[te].any():
            raise ValueError(f"fold {k}: test rows already tested in an earlier fold; out-of-fold estimates need "
                             "disjoint test sets; fix: pass one repeat of the CV at a time")
        seen[te] = True
        if g is not None:
            leak = np.intersect1d(g[tr], g[te])
            if leak.size:
                raise ValueError(f"fold {k} leaks subjects {leak[:5].tolist()} between train and test; "
                                 "fix: build subject-grouped folds (eegfm_bench.data.splits)")
        out.append((tr, te))
    return out


def grouped_folds(groups: Sequence, y: Sequence | None = None, n_folds: int = 5,
                  seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group-disjoint folds (stratified by ``y`` when given) for the controls' own analyses.

    The benchmark's folds come from the splits module; this helper serves the dataset-identity probe and tests.

    Parameters
    ----------
    groups : sequence, shape (n_samples,)
        Subject / recording per row.
    y : sequence, shape (n_samples,), optional
        Labels for :class:`~sklearn.model_selection.StratifiedGroupKFold`.
    n_folds : int
    seed : int

    Returns
    -------
    list of (train_idx, test_idx)

    Raises
    ------
    ValueError
        If there are fewer groups than folds, or (stratified) fewer groups of some class than folds.
    """
    g = np.asarray(groups)
    uniq = np.unique(g)
    if uniq.size < n_folds:
        raise ValueError(f"{uniq.size} subjects for {n_folds} folds; fix: n_folds <= {uniq.size}")
    idx = np.arange(g.size)
    if y is None:
        return [(tr, te) for tr, te in GroupKFold(n_splits=n_folds).split(idx, groups=g)]
    y = np.asarray(y)
    for c in np.unique(y):
        n_c = np.unique(g[y == c]).size
        if n_c < n_folds:
            raise ValueError(f"class {c!r} has {n_c} subjects for {n_folds} stratified folds; "
                             f"fix: n_folds <= {n_c} or add subjects of that class")
    cv = StratifiedGroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in cv.split(idx, y, groups=g)]


# ---------------------------------------------------------------------------------------------- metrics
def classification_metrics(y_true: np.ndarray, proba: np.ndarray, n_classes: int) -> dict[str, float]:
    """Balanced accuracy and AUROC of class-index labels against predicted probabilities.

    Parameters
    ----------
    y_true : ndarray of int, shape (n,)
        Class indices 0..n_classes-1.
    proba : ndarray, shape (n, n_classes)
        Predicted probabilities; the predicted class is the argmax.
    n_classes : int

    Returns
    -------
    dict
        ``balanced_accuracy`` (over the classes present in ``y_true``) and ``auroc`` (binary: on the
        probability of class 1; multi-class: one-vs-rest macro average). AUROC is NaN when ``y_true`` lacks a
        class (undefined, e.g. a LOSO fold of a subject-level label); callers count such folds.
    """
    pred = proba.argmax(1)
    with warnings.catch_warnings():  # one-class test folds (LOSO, subject labels): recall of that class, by design
        warnings.filterwarnings("ignore", message=".*(single label|not in y_true).*", category=UserWarning)
        ba = float(balanced_accuracy_score(y_true, pred))
    if np.unique(y_true).size < n_classes:
        auc = float("nan")
    elif n_classes == 2:
        auc = float(roc_auc_score(y_true, proba[:, 1]))
    else:
        auc = float(roc_auc_score(y_true, proba, multi_class="ovr", average="macro", labels=np.arange(n_classes)))
    return {"balanced_accuracy": ba, "auroc": auc}


def aggregate_proba(proba: np.ndarray, y: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean predicted probability per unit (subject or recording), paper 001 §3.5.

    Parameters
    ----------
    proba : ndarray, shape (n_windows, n_classes)
    y : ndarray, shape (n_windows,)
        Class indices.
    units : ndarray, shape (n_windows,)
        Unit id per window.

    Returns
    -------
    unit_proba : ndarray, shape (n_units, n_classes)
    unit_y : ndarray, shape (n_units,)
    unit_ids : ndarray, shape (n_units,)

    Raises
    ------
    ValueError
        If a unit carries more than one label (a unit-level outcome is then undefined, as for CHB-MIT and
        Sleep-EDF subjects).
    """
    ids, inv = np.unique(units, return_inverse=True)
    counts = np.bincount(inv)
    up = np.stack([np.bincount(inv, weights=proba[:, c]) / counts for c in range(proba.shape[1])], axis=1)
    lab_min = np.full(ids.size, np.iinfo(np.int64).max)
    lab_max = np.full(ids.size, np.iinfo(np.int64).min)
    np.minimum.at(lab_min, inv, y)
    np.maximum.at(lab_max, inv, y)
    mixed = ids[lab_min != lab_max]
    if mixed.size:
        raise ValueError(f"units {mixed[:5].tolist()} carry more than one label, so a unit-level outcome is "
                         "undefined (paper 001 §3.5); fix: report window-level estimates only (aggregate_by=None)")
    return up, lab_min, ids


# ---------------------------------------------------------------------------------------------- fitting
def encode_labels(y: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Map labels to class indices. Returns ``(y_idx, classes)`` with ``classes`` sorted."""
    classes, y_idx = np.unique(np.asarray(y), return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"only one class ({classes.tolist()}) in the labels; a probe needs at least two")
    return y_idx.astype(np.int64), classes


def fit_predict_folds(X: np.ndarray, y_idx: np.ndarray, folds: Folds, spec: ProbeSpec,
                      n_classes: int | None = None,
                      transformed: list | None = None) -> tuple[np.ndarray, list[int | None]]:
    """Fit the probe on each training fold and predict its test fold (out-of-fold probabilities).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_features)
        Features or embeddings.
    y_idx : ndarray of int, shape (n_windows,)
        Class indices (see :func:`encode_labels`).
    folds : sequence of (train_idx, test_idx)
        Already checked by :func:`check_folds`.
    spec : ProbeSpec
    n_classes : int, optional
        Default ``y_idx.max() + 1``.
    transformed : list, optional
        Output of :func:`fit_unsupervised_steps` for these folds: only the classifier is then fitted.

    Returns
    -------
    proba : ndarray, shape (n_windows, n_classes)
        Out-of-fold probabilities; NaN rows for windows in no test fold.
    pca_k : list
        PCA components used per fold (None without PCA).

    Raises
    ------
    ValueError
        If a training fold lacks a class (the probe cannot output its probability).
    """
    n_classes = int(y_idx.max()) + 1 if n_classes is None else n_classes
    proba = np.full((X.shape[0], n_classes), np.nan)
    ks = []
    # inputs were checked (finite, 2-D) by the callers; skipping sklearn's per-call re-validation makes the
    # 100 × n_folds refits of a permutation test several times faster
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        return _fit_loop(X, y_idx, folds, spec, n_classes, proba, ks, transformed)


def _fit_loop(X, y_idx, folds, spec, n_classes, proba, ks, transformed=None):
    for k, (tr, te) in enumerate(folds):
        present = np.unique(y_idx[tr])
        if present.size < n_classes:
            missing = sorted(set(range(n_classes)) - set(present.tolist()))
            raise ValueError(f"training fold {k} lacks class index {missing}; the probe cannot score it; "
                             "fix: stratify the folds by label (or use more subjects per fold)")
        if transformed is None:
            pipe, kk = spec.build(len(tr), X.shape[1])
            pipe.fit(X[tr], y_idx[tr])
            proba[te] = pipe.predict_proba(X[te])
        else:
            Z_tr, Z_te, kk = transformed[k]
            clf = spec.build()[0].steps[-1][1]
            clf.fit(Z_tr, y_idx[tr])
            proba[te] = clf.predict_proba(Z_te)
        ks.append(kk)
    return proba, ks


def fit_unsupervised_steps(X: np.ndarray, folds: Folds, spec: ProbeSpec) -> list[tuple[np.ndarray, np.ndarray, int | None]]:
    """Fit the label-free steps (scaler, PCA) of the probe on each training fold once.

    StandardScaler and PCA never see the labels, so fitting them once per fold and reusing the transformed
    training/test rows for every permuted labelling gives exactly the same predictions as refitting the whole
    pipeline (tested); a permutation test then refits only the classifier.

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_features)
    folds : sequence of (train_idx, test_idx)
    spec : ProbeSpec

    Returns
    -------
    list of (Z_train, Z_test, pca_k)
        Per fold, the transformed rows, shapes (n_train, k) and (n_test, k).
    """
    out = []
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        for tr, te in folds:
            pipe, kk = spec.build(len(tr), X.shape[1])
            pre = pipe[:-1]
            Z_tr = pre.fit_transform(X[tr])
            out.append((Z_tr, pre.transform(X[te]), kk))
    return out


@dataclass
class ProbeResult:
    """Out-of-fold probe estimates (paper 001 §3.5).

    Attributes
    ----------
    classes : ndarray
        Original labels in class-index order.
    proba : ndarray, shape (n_windows, n_classes)
        Out-of-fold probabilities.
    fold_metrics : DataFrame
        One row per (fold, level, metric): columns ``fold, level, metric, value, n_units, n_classes_test,
        pca_k``. ``value`` is NaN where the metric is undefined (a test fold lacking a class).
    pooled : dict
        ``level -> {metric: value}`` on all out-of-fold predictions pooled.
    spec : ProbeSpec
    levels : list of str
        ``["window"]`` plus the aggregation level's name when one was requested.
    """

    classes: np.ndarray
    proba: np.ndarray
    fold_metrics: pd.DataFrame
    pooled: dict
    spec: ProbeSpec
    levels: list = field(default_factory=lambda: ["window"])

    def fold_values(self, metric: str = "auroc", level: str = "window") -> np.ndarray:
        """Per-fold values, shape (n_folds,), NaN where undefined."""
        d = self.fold_metrics
        return d[(d.metric == metric) & (d.level == level)].sort_values("fold").value.to_numpy()

    def mean_fold(self, metric: str = "auroc", level: str = "window") -> float:
        """Mean over folds of ``metric`` at ``level`` (the paper's mean-fold estimate).

        Raises
        ------
        ValueError
            If the metric is undefined in some fold (e.g. AUROC in a LOSO fold whose subject has one
            class); the message says to use :attr:`pooled` instead.
        """
        if level not in self.levels:
            raise ValueError(f"level {level!r} not computed (have {self.levels}); fix: pass aggregate_by")
        v = self.fold_values(metric, level)
        if np.isnan(v).any():
            raise ValueError(f"{metric} at {level} level is undefined in {int(np.isnan(v).sum())} of {v.size} folds "
                             "(test fold lacks a class); fix: use the pooled out-of-fold estimate (result.pooled)")
        return float(v.mean())

    def summary(self) -> pd.DataFrame:
        """Mean, SD (ddof=1) and count of defined folds per level and metric, plus the pooled value."""
        g = self.fold_metrics.groupby(["level", "metric"]).value
        out = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n_folds_defined": g.count(),
                            "n_folds": g.size()}).reset_index()
        out["pooled"] = [self.pooled[lv][m] for lv, m in zip(out.level, out.metric)]
        return out

    def to_rows(self, **keys) -> list[dict]:
        """Long result rows (one metric value per row) for the result store; ``keys`` are added to each.

        Metric names are ``"<metric>_<level>"`` (e.g. ``auroc_window``, ``balanced_accuracy_subject``); pooled
        values carry ``fold="pooled"``.
        """
        rows = []
        for r in self.fold_metrics.itertuples(index=False):
            rows.append({**keys, "fold": int(r.fold), "metric": f"{r.metric}_{r.level}", "value": float(r.value),
                         "n_units": int(r.n_units)})
        for lv, md in self.pooled.items():
            for m, v in md.items():
                rows.append({**keys, "fold": "pooled", "metric": f"{m}_{lv}", "value": float(v)})
        return rows


def metrics_rows(y_idx, proba, folds, units, level_name, n_classes, ks):
    """Result rows of one probe's out-of-fold probabilities ``proba`` (n_windows, n_classes): per fold and pooled,
    at window level and, where ``units`` is given, aggregated to ``level_name`` units."""
    rows = []
    pooled = {}
    tested = np.concatenate([te for _, te in folds])
    for level, u in (("window", None), (level_name, units)):
        if level != "window" and u is None:
            continue
        for k, (_, te) in enumerate(folds):
            if u is None:
                yt, pt, n_units = y_idx[te], proba[te], te.size
            else:
                pt, yt, ids = aggregate_proba(proba[te], y_idx[te], u[te])
                n_units = ids.size
            m = classification_metrics(yt, pt, n_classes)
            for name, v in m.items():
                rows.append({"fold": k, "level": level, "metric": name, "value": v, "n_units": n_units,
                             "n_classes_test": int(np.unique(yt).size), "pca_k": ks[k]})
        if u is None:
            pooled[level] = classification_metrics(y_idx[tested], proba[tested], n_classes)
        else:
            pt, yt, _ = aggregate_proba(proba[tested], y_idx[tested], u[tested])
            pooled[level] = classification_metrics(yt, pt, n_classes)
    return pd.DataFrame(rows), pooled


def evaluate_probe(X: np.ndarray, y: Sequence, folds: Folds, *, spec: ProbeSpec | None = None,
                   groups: Sequence | None = None, aggregate_by: Sequence | None = None,
                   aggregate_name: str = "subject", **spec_kwargs) -> ProbeResult:
    """Cross-validated frozen probe with window- and unit-level estimates (paper 001 §3.5).

    Parameters
    ----------
    X : ndarray, shape (n_windows, n_features)
        Handcrafted features or cached embeddings (flatten token embeddings first).
    y : sequence, shape (n_windows,)
        Labels.
    folds : sequence of (train_idx, test_idx)
        Fixed subject-grouped folds.
    spec : ProbeSpec, optional
        Probe; alternatively pass its fields as keyword arguments (``kind``, ``C``, ``pca``, ...).
    groups : sequence, shape (n_windows,), optional
        Subject per window, used to reject leaking folds.
    aggregate_by : sequence, shape (n_windows,), optional
        Subject or recording per window; adds estimates from the mean probability per unit.
    aggregate_name : str
        Name of that level in the results (``"subject"`` or ``"recording"``).

    Returns
    -------
    ProbeResult

    Raises
    ------
    ValueError
        On malformed or leaking folds (:func:`check_folds`), a training fold lacking a class, a unit with
        mixed labels, X not 2-D or not finite, or mismatched lengths.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_windows, n_features), got {X.shape}; fix: X.reshape(len(X), -1)")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN/inf; fix: drop or repair those windows before probing")
    y_idx, classes = encode_labels(y)
    if y_idx.size != X.shape[0]:
        raise ValueError(f"{y_idx.size} labels for {X.shape[0]} rows")
    spec = spec if spec is not None else ProbeSpec(**spec_kwargs)
    folds = check_folds(folds, X.shape[0], groups)
    units = None if aggregate_by is None else np.asarray(aggregate_by)
    if units is not None and units.shape[0] != X.shape[0]:
        raise ValueError(f"aggregate_by has {units.shape[0]} entries for {X.shape[0]} rows")
    proba, ks = fit_predict_folds(X, y_idx, folds, spec, classes.size)
    fm, pooled = metrics_rows(y_idx, proba, folds, units, aggregate_name, classes.size, ks)
    levels = ["window"] + ([aggregate_name] if units is not None else [])
    return ProbeResult(classes, proba, fm, pooled, spec, levels)


@dataclass
class PairedComparison:
    """Model-minus-comparator comparison on the same folds (paper 001 §4.2.1, §4.6).

    Attributes
    ----------
    bootstrap : eegfm_bench.stats.PairedBootstrapCI
        Paired cluster-bootstrap interval of the metric difference.
    fold_diffs : ndarray, shape (n_folds,)
        Per-fold differences (NaN where the metric is undefined in a fold).
    wilcoxon, sign_flip : eegfm_bench.stats.PairedTest or None
        Across-fold tests; None when a fold's metric is undefined or every difference is zero, with the
        reason in ``notes``.
    notes : list of str
    """

    bootstrap: object
    fold_diffs: np.ndarray
    wilcoxon: object | None
    sign_flip: object | None
    notes: list

    def to_dict(self) -> dict:
        return {"bootstrap": self.bootstrap.to_dict(), "fold_diffs": self.fold_diffs.tolist(),
                "wilcoxon": None if self.wilcoxon is None else self.wilcoxon.to_dict(),
                "sign_flip": None if self.sign_flip is None else self.sign_flip.to_dict(), "notes": list(self.notes)}


def paired_comparison(model: ProbeResult, comparator: ProbeResult, y: Sequence, folds: Folds, clusters: Sequence, *,
                      metric: str = "auroc", level: str = "window", aggregate_by: Sequence | None = None,
                      target: str = "mean_fold", n_boot: int = 2000, level_ci: float = 0.95,
                      seed: int = 0) -> PairedComparison:
    """Paired uncertainty of a model's probe against a comparator's on identical folds (paper 001 §4.6).

    Parameters
    ----------
    model, comparator : ProbeResult
        Results of :func:`evaluate_probe` on the same rows and folds (e.g. embeddings vs handcrafted features).
    y : sequence, shape (n_windows,)
        Labels.
    folds : sequence of (train_idx, test_idx)
        The folds both results used.
    clusters : sequence, shape (n_windows,)
        Subject per window (the bootstrap's resampling unit).
    metric : {"auroc", "balanced_accuracy"}
    level : str
        ``"window"``, or a unit level: then ``aggregate_by`` gives the unit per window, probabilities are
        averaged per unit within each test fold, and the units themselves are the clusters.
    aggregate_by : sequence, shape (n_windows,), optional
    target : {"mean_fold", "pooled"}
        Bootstrap target, see :func:`eegfm_bench.stats.paired_cluster_bootstrap`.
    n_boot, level_ci, seed
        Bootstrap replicates, interval coverage and seed.

    Returns
    -------
    PairedComparison

    Raises
    ------
    ValueError
        If the two results differ in rows or classes, and everything the bootstrap raises (too few subjects
        per fold, undefined mean-fold metric).
    """
    if model.proba.shape != comparator.proba.shape or not np.array_equal(model.classes, comparator.classes):
        raise ValueError("model and comparator results differ in rows or classes; fix: evaluate both on the same "
                         "windows, labels and folds")
    y = np.asarray(y)
    if not np.isin(y, model.classes).all():
        raise ValueError("y holds labels the probe results never saw; fix: pass the labels the probes were fitted on")
    y_idx = np.searchsorted(model.classes, y)
    folds = check_folds(folds, y_idx.size)
    cl = np.asarray(clusters)
    rows_y, rows_a, rows_b, rows_c, rows_f = [], [], [], [], []
    for k, (_, te) in enumerate(folds):
        if level == "window":
            ya, pa, pb, cc = y_idx[te], model.proba[te], comparator.proba[te], cl[te]
        else:
            if aggregate_by is None:
                raise ValueError(f"level {level!r} needs aggregate_by (unit per window)")
            u = np.asarray(aggregate_by)[te]
            pa, ya, cc = aggregate_proba(model.proba[te], y_idx[te], u)
            pb, _, _ = aggregate_proba(comparator.proba[te], y_idx[te], u)
        rows_y.append(ya); rows_a.append(pa); rows_b.append(pb); rows_c.append(cc)
        rows_f.append(np.full(len(ya), k))
    yy, A, B = np.concatenate(rows_y), np.concatenate(rows_a), np.concatenate(rows_b)
    cc, ff = np.concatenate(rows_c), np.concatenate(rows_f)
    ci = S.paired_cluster_bootstrap(yy, A, B, cc, ff, metric=metric, target=target, n_boot=n_boot, level=level_ci,
                                    seed=seed)
    diffs = np.array([S.weighted_metric(metric, yy[ff == k], A[ff == k], np.ones(int((ff == k).sum())))[0]
                      - S.weighted_metric(metric, yy[ff == k], B[ff == k], np.ones(int((ff == k).sum())))[0]
                      for k in range(len(folds))])
    notes, wil, sf = [], None, None
    if np.isnan(diffs).any():
        notes.append(f"{metric} undefined in {int(np.isnan(diffs).sum())} folds: no across-fold tests")
    elif len(folds) < 2:
        notes.append("one fold: no across-fold tests")
    elif np.all(diffs == 0):
        notes.append("all fold differences are zero: no across-fold tests")
    else:
        wil = S.paired_wilcoxon(diffs, np.zeros_like(diffs))
        sf = S.sign_flip_test(diffs, seed=seed)
    return PairedComparison(ci, diffs, wil, sf, notes)


def clone_spec(spec: ProbeSpec, **changes) -> ProbeSpec:
    """A copy of ``spec`` with fields changed (e.g. another seed)."""
    return replace(spec, **changes)


__all__ = ["PROBES", "METRICS", "ProbeSpec", "ProbeResult", "make_probe", "check_folds", "grouped_folds",
           "classification_metrics", "aggregate_proba", "encode_labels", "fit_predict_folds", "fit_unsupervised_steps", "evaluate_probe",
           "clone_spec", "PairedComparison", "paired_comparison"]
