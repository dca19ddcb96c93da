"""Stress: fixed-marginal provenance–target association shift on the same held-out records (paper 000 §3.2, App. A.2).

Records, labels, embeddings and fitted heads stay identical across regimes; only importance weights change,
so that the weighted held-out sample has

* the target marginal P(y=1) and the provenance marginal P(p) of the *training design*, and
* a declared odds ratio between the target and the shortcut indicator ``s = 1[p == shortcut group]``
  (aligned: the association the exposed head was fitted under; independent: odds 1; reversed: its inverse;
  intermediate odds for observational data). Groups other than the shortcut group share the ``s = 0`` mass in
  proportion to their design marginals and independently of the target, so every group's marginal is kept.

Excess vulnerability ``G`` is the exposed head's AUROC degradation from aligned to reversed minus the control
head's (fitted under independence weights); because nothing but the weights differ between regimes, ``G``
measures reliance on the association rather than ordinary distribution shift. AUROC is in [0, 1]; ``G`` is in
AUROC units.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

__all__ = [
    "InfeasibleRegimeError", "Design", "Rotation", "StressSet", "regime_joint", "feasible_agreement",
    "odds_for_agreement", "resolve_odds", "observed_odds", "group_joint", "stress_weights", "weighted_auroc",
    "fit_head", "decision_flip_rate", "paired_logit_contrast",
]


class InfeasibleRegimeError(ValueError):
    """A requested association regime cannot be realised under the fixed marginals or on these records."""


def _check_marginal(name: str, v: float) -> None:
    if not 0.0 < v < 1.0:
        raise InfeasibleRegimeError(
            f"{name} = {v:g}; a fixed-marginal association needs 0 < {name} < 1 (both values present); "
            "fix: the training design must contain both target classes and the shortcut group and its complement")


def regime_joint(p_y: float, p_s: float, odds: float) -> np.ndarray:
    """2×2 joint of target and shortcut indicator with fixed marginals and a given odds ratio.

    Solves ``q11 q00 / (q10 q01) = odds`` with ``q1· = p_y`` and ``q·1 = p_s`` (Plackett's closed form,
    rationalised so that ``odds = 1`` gives ``q11 = p_y p_s`` without cancellation).

    Parameters
    ----------
    p_y : float
        Design P(y = 1), in (0, 1).
    p_s : float
        Design P(s = 1), in (0, 1).
    odds : float
        Target–shortcut odds ratio, in (0, inf).

    Returns
    -------
    ndarray, shape (2, 2)
        ``q[y, s]``, summing to 1, all cells > 0.

    Raises
    ------
    InfeasibleRegimeError
        If a marginal is not in (0, 1) or ``odds`` is not a finite positive number (the message gives the
        feasible odds and the agreement P(y = s) range they span for these marginals).

    References
    ----------
    Paper 000 App. A.2 (fixed-marginal regimes).
    """
    _check_marginal("P(y=1)", p_y)
    _check_marginal("P(s=1)", p_s)
    if not (np.isfinite(odds) and odds > 0):
        lo, hi = feasible_agreement(p_y, p_s)
        raise InfeasibleRegimeError(
            f"odds ratio {odds!r} is impossible with fixed marginals P(y=1)={p_y:.4g}, P(s=1)={p_s:.4g}: the "
            f"feasible odds are 0 < OR < inf (agreement P(y=s) strictly between {lo:.4g} and {hi:.4g}); "
            "OR = 0 or inf would need an empty cell; fix: request a finite positive odds ratio")
    a, b, t = float(p_y), float(p_s), float(odds)
    B = 1.0 + (t - 1.0) * (a + b)
    q11 = 2.0 * t * a * b / (B + np.sqrt(B * B - 4.0 * t * (t - 1.0) * a * b))
    q = np.array([[1.0 - a - b + q11, b - q11], [a - q11, q11]])
    return q


def feasible_agreement(p_y: float, p_s: float) -> tuple[float, float]:
    """Open interval of agreement P(y = s) reachable with these marginals (its ends are odds 0 and inf).

    Parameters
    ----------
    p_y, p_s : float
        Design P(y = 1) and P(s = 1), in (0, 1).

    Returns
    -------
    (low, high) : tuple of float
    """
    a, b = float(p_y), float(p_s)
    return 1.0 - a - b + 2.0 * max(0.0, a + b - 1.0), 1.0 - a - b + 2.0 * min(a, b)


def odds_for_agreement(p_y: float, p_s: float, agreement: float) -> float:
    """Odds ratio that gives agreement P(y = s) = ``agreement`` at fixed marginals.

    Parameters
    ----------
    p_y, p_s : float
        Design P(y = 1) and P(s = 1), in (0, 1).
    agreement : float
        Requested P(y = s), e.g. 0.9 for "90 % of windows aligned".

    Returns
    -------
    float
        The odds ratio in (0, inf).

    Raises
    ------
    InfeasibleRegimeError
        If the agreement is outside the open interval the marginals allow (the message gives the interval).

    References
    ----------
    Paper 000 App. A.2.
    """
    _check_marginal("P(y=1)", p_y)
    _check_marginal("P(s=1)", p_s)
    lo, hi = feasible_agreement(p_y, p_s)
    if not lo < agreement < hi:
        raise InfeasibleRegimeError(
            f"agreement P(y=s) = {agreement:g} is impossible with fixed marginals P(y=1)={p_y:.4g}, "
            f"P(s=1)={p_s:.4g}: feasible agreement lies strictly between {lo:.4g} (OR → 0) and {hi:.4g} "
            "(OR → inf), i.e. any odds 0 < OR < inf; fix: request an agreement inside that range or an odds ratio")
    q11 = (agreement - 1.0 + p_y + p_s) / 2.0
    q10, q01 = p_y - q11, p_s - q11
    q00 = 1.0 - p_y - p_s + q11
    return float(q11 * q00 / (q10 * q01))


def resolve_odds(spec, p_y: float, p_s: float) -> float:
    """Turn a regime specification into an odds ratio.

    Parameters
    ----------
    spec : float or mapping
        An odds ratio, ``{"odds": x}`` or ``{"agreement": a}``.
    p_y, p_s : float
        Design marginals used to check feasibility.

    Returns
    -------
    float

    Raises
    ------
    InfeasibleRegimeError
        If the regime is impossible (see :func:`regime_joint`, :func:`odds_for_agreement`).
    ValueError
        If ``spec`` has another form.
    """
    if isinstance(spec, Mapping):
        if set(spec) == {"odds"}:
            spec = spec["odds"]
        elif set(spec) == {"agreement"}:
            return odds_for_agreement(p_y, p_s, float(spec["agreement"]))
        else:
            raise ValueError(f"regime {dict(spec)} must be an odds ratio, {{'odds': x}} or {{'agreement': a}}")
    odds = float(spec)
    regime_joint(p_y, p_s, odds)  # raises with the feasible range
    return odds


@dataclass
class Design:
    """Training-design marginals that every stress regime keeps.

    Attributes
    ----------
    p_y : float
        P(y = 1) on the training rows.
    p_prov : dict
        Provenance group → P(p = group) on the training rows (insertion order = group order).
    """

    p_y: float
    p_prov: dict

    @classmethod
    def from_rows(cls, y: np.ndarray, prov: np.ndarray) -> "Design":
        """Empirical marginals of training rows ``y`` (n,) in {0, 1} and ``prov`` (n,)."""
        groups, counts = np.unique(np.asarray(prov), return_counts=True)
        return cls(float(np.mean(y)), dict(zip(groups.tolist(), (counts / counts.sum()).tolist())))

    @property
    def groups(self) -> list:
        return list(self.p_prov)


def observed_odds(y: np.ndarray, prov: np.ndarray, shortcut) -> float:
    """Empirical odds ratio between ``y`` (n,) in {0, 1} and ``s = 1[prov == shortcut]``.

    Raises
    ------
    InfeasibleRegimeError
        If a cell of the 2×2 table is empty (the odds ratio is 0 or inf).
    """
    y = np.asarray(y).astype(int)
    s = (np.asarray(prov) == shortcut).astype(int)
    n = np.bincount(2 * y + s, minlength=4).reshape(2, 2).astype(float)
    if (n == 0).any():
        raise InfeasibleRegimeError(
            f"the training target × shortcut table for group {shortcut!r} has an empty cell {n.tolist()}; "
            "the observed association is degenerate; fix: make sure both classes occur in and outside the group")
    return float(n[1, 1] * n[0, 0] / (n[1, 0] * n[0, 1]))


def group_joint(design: Design, shortcut, odds: float) -> np.ndarray:
    """Target × provenance-group joint of one regime.

    Parameters
    ----------
    design : Design
    shortcut : hashable
        The shortcut provenance group.
    odds : float
        Target–shortcut odds ratio.

    Returns
    -------
    ndarray, shape (2, n_groups)
        ``q[y, g]`` in ``design.groups`` order; row sums are (1 − p_y, p_y), column sums the design marginals.

    Raises
    ------
    ValueError
        If ``shortcut`` is not a design group.
    InfeasibleRegimeError
        See :func:`regime_joint`.
    """
    if shortcut not in design.p_prov:
        raise ValueError(f"shortcut group {shortcut!r} is not among the provenance groups {design.groups}")
    p_s = design.p_prov[shortcut]
    q2 = regime_joint(design.p_y, p_s, odds)
    q = np.empty((2, len(design.p_prov)))
    for j, (g, pg) in enumerate(design.p_prov.items()):
        q[:, j] = q2[:, 1] if g == shortcut else q2[:, 0] * pg / (1.0 - p_s)
    return q


def _weights_from_codes(y: np.ndarray, code: np.ndarray, q: np.ndarray, groups: list,
                        where: str = "held-out") -> np.ndarray:
    n_groups = q.shape[1]
    cell = y * n_groups + code
    counts = np.bincount(cell, minlength=2 * n_groups).astype(float)
    target = q.ravel()
    empty = (counts == 0) & (target > 0)
    if empty.any():
        k = int(np.flatnonzero(empty)[0])
        raise InfeasibleRegimeError(
            f"no {where} rows with y={k // n_groups} and provenance={groups[k % n_groups]!r}; no finite odds ratio "
            "can be realised by reweighting these records; fix: use splits with every target × provenance cell "
            "present (stratify the subject split by target and provenance, or drop that provenance group)")
    ratio = np.divide(target * cell.size, counts, out=np.zeros_like(target), where=counts > 0)
    return ratio[cell]


def stress_weights(y: np.ndarray, prov: np.ndarray, design: Design, shortcut, odds: float,
                   where: str = "held-out") -> np.ndarray:
    """Importance weights that give held-out rows the regime's joint at the design marginals.

    Parameters
    ----------
    y : ndarray, shape (n,)
        Target in {0, 1}.
    prov : array-like, shape (n,)
        Provenance group per row (each among ``design.groups``).
    design : Design
        Training-design marginals to keep.
    shortcut : hashable
        Shortcut provenance group.
    odds : float
        Target–shortcut odds ratio of the regime.
    where : str
        Name of the rows for error messages ("training", "validation", "held-out").

    Returns
    -------
    ndarray, shape (n,)
        Non-negative weights with mean 1; the weighted target × group table equals :func:`group_joint`
        exactly (up to float error), so both marginals and the odds ratio are as requested.

    Raises
    ------
    InfeasibleRegimeError
        If a target × group cell that the regime needs is empty in these rows, or the odds are infeasible.
    ValueError
        If a row's group is not a design group.

    References
    ----------
    Paper 000 §3.2, App. A.2.
    """
    y = np.asarray(y).astype(int)
    prov = np.asarray(prov)
    groups = design.groups
    lookup = {g: j for j, g in enumerate(groups)}
    try:
        code = np.array([lookup[v] for v in prov.tolist()], dtype=int)
    except KeyError as e:
        raise ValueError(f"provenance group {e.args[0]!r} is not in the training design {groups}; "
                         "fix: every held-out group must occur in training") from None
    return _weights_from_codes(y, code, group_joint(design, shortcut, odds), groups, where)


def weighted_auroc(y: np.ndarray, score: np.ndarray, w: np.ndarray) -> float:
    """Weighted AUROC (ties count one half), identical to ``sklearn.metrics.roc_auc_score(y, score, sample_weight=w)``.

    A vectorised weighted Mann–Whitney statistic: sklearn's input validation costs ~3 ms per call and the
    cluster bootstraps of Stress/Verify need ~10^5 calls; tests check the two agree to 1e-12.

    Parameters
    ----------
    y : ndarray, shape (n,)
        Labels in {0, 1}.
    score : ndarray, shape (n,)
        Higher means class 1 (e.g. logits).
    w : ndarray, shape (n,)
        Non-negative sample weights.

    Returns
    -------
    float
        AUROC in [0, 1]; NaN when either class has zero total weight (a bootstrap replicate with one class).
    """
    order = np.argsort(score, kind="mergesort")
    s, yy, ww = score[order], y[order], w[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    wp = np.add.reduceat(ww * (yy == 1), starts)
    wn = np.add.reduceat(ww * (yy == 0), starts)
    P, N = wp.sum(), wn.sum()
    if P <= 0 or N <= 0:
        return float("nan")
    below = np.cumsum(wn) - wn
    return float(np.sum(wp * (below + 0.5 * wn)) / (P * N))


def fit_head(z_train: np.ndarray, y_train: np.ndarray, w_train: np.ndarray, z_val: np.ndarray,
             y_val: np.ndarray, w_val: np.ndarray, Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0),
             seed: int = 0) -> tuple[LogisticRegression, float]:
    """Fit a linear task head under importance weights, ``C`` chosen on weighted validation log-loss.

    Parameters
    ----------
    z_train : ndarray, shape (n_train, d)
        Standardized training embeddings.
    y_train : ndarray, shape (n_train,)
        Target in {0, 1}.
    w_train : ndarray, shape (n_train,)
        Training weights of the head's regime (aligned for the exposed head, odds 1 for the control head).
    z_val, y_val, w_val :
        The same for validation (weights of the same regime).
    Cs : sequence of float
        Candidate inverse L2 strengths.
    seed : int

    Returns
    -------
    head : LogisticRegression
        Fitted on training rows only; its ``decision_function`` gives logits.
    C : float

    Raises
    ------
    ValueError
        If ``Cs`` is empty or a split lacks a class.

    References
    ----------
    Paper 000 §3 (exposed and control heads fitted once, then fixed).
    """
    if not Cs:
        raise ValueError("Cs is empty; fix: pass candidate C values, e.g. (0.01, 0.1, 1, 10)")
    for name, yy in (("training", y_train), ("validation", y_val)):
        if np.unique(yy).size < 2:
            raise ValueError(f"the {name} split has a single target class; fix: stratify the split by target")
    best, best_loss, best_C = None, np.inf, None
    for C in Cs:
        head = LogisticRegression(C=float(C), max_iter=2000, random_state=seed)
        head.fit(z_train, y_train, sample_weight=w_train)
        loss = log_loss(y_val, head.predict_proba(z_val), sample_weight=w_val, labels=head.classes_)
        if loss < best_loss - 1e-12:
            best, best_loss, best_C = head, loss, float(C)
    return best, best_C


def decision_flip_rate(logits: np.ndarray, threshold: float = 0.0) -> float:
    """Fraction of windows whose decision differs between their paired provenance views.

    Parameters
    ----------
    logits : ndarray, shape (n_windows, K)
        A fixed head's logits for the K views of each window.
    threshold : float
        Decision threshold on the logit (0 = probability 0.5).

    Returns
    -------
    float
        In [0, 1].

    References
    ----------
    Paper 000 §4.2 (exposed decisions flip for 44.5 % of records vs 13.8 % for controls), App. F.
    """
    dec = np.asarray(logits) > threshold
    return float(np.mean(dec.any(axis=1) & ~dec.all(axis=1)))


def paired_logit_contrast(logits: np.ndarray, y: np.ndarray, shortcut_index: int) -> float:
    """Class-balanced same-record logit contrast under a provenance change.

    For each window, the logit of its shortcut-group view minus the mean logit of its other views; averaged
    within each target class, then across classes. Physiology and label are fixed within the window, so a
    non-zero contrast is the head's response to provenance alone.

    Parameters
    ----------
    logits : ndarray, shape (n_windows, K)
        A fixed head's logits per view.
    y : ndarray, shape (n_windows,)
        Target in {0, 1}.
    shortcut_index : int
        Position of the shortcut group on axis 1.

    Returns
    -------
    float
        In logit units (nats of log-odds); positive means the shortcut view pushes towards class 1.

    References
    ----------
    Paper 000 App. A.2 (paired reliance statistic).
    """
    logits = np.asarray(logits, dtype=float)
    others = np.delete(logits, shortcut_index, axis=1).mean(axis=1)
    c = logits[:, shortcut_index] - others
    y = np.asarray(y).astype(int)
    means = [c[y == k].mean() for k in (0, 1) if np.any(y == k)]
    return float(np.mean(means))


@dataclass
class Rotation:
    """One shortcut assignment: which group is the shortcut and the odds of every regime.

    Attributes
    ----------
    shortcut : hashable
        Shortcut provenance group.
    regimes : dict
        Regime name → target–shortcut odds ratio; must contain "aligned", "independent" (1) and "reversed".
    """

    shortcut: object
    regimes: dict = field(default_factory=dict)

    @property
    def aligned_odds(self) -> float:
        return self.regimes["aligned"]


class StressSet:
    """The held-out rows of one audit, with everything needed to reweight them per regime.

    Parameters
    ----------
    y : ndarray, shape (n_rows,)
        Target in {0, 1} per held-out row (view or window).
    prov : array-like, shape (n_rows,)
        Provenance group per row.
    clusters : array-like, shape (n_rows,)
        Identity (subject) per row, for the cluster bootstrap.
    design : Design
        Training-design marginals.
    rotations : list of Rotation
        Shortcut assignments (one for observational data, usually one per view in a paired design).

    Raises
    ------
    ValueError
        If a row's group is not a design group.
    InfeasibleRegimeError
        If some regime cannot be realised on these rows (checked up front).

    References
    ----------
    Paper 000 §3.2, App. A.2, App. F.
    """

    def __init__(self, y, prov, clusters, design: Design, rotations: Sequence[Rotation]):
        self.y = np.asarray(y).astype(int)
        self.prov = np.asarray(prov)
        self.clusters = np.asarray(clusters)
        self.design = design
        self.rotations = list(rotations)
        groups = design.groups
        lookup = {g: j for j, g in enumerate(groups)}
        missing = sorted(set(self.prov.tolist()) - set(groups), key=str)
        if missing:
            raise ValueError(f"held-out provenance groups {missing} are not in the training design {groups}; "
                             "fix: every held-out group must occur in training")
        self.code = np.array([lookup[v] for v in self.prov.tolist()], dtype=int)
        self._q = {(i, name): group_joint(design, rot.shortcut, odds)
                   for i, rot in enumerate(self.rotations) for name, odds in rot.regimes.items()}
        all_idx = np.arange(self.y.size)
        for i, rot in enumerate(self.rotations):
            for name in rot.regimes:
                self.weights(i, name, all_idx)  # raise now, naming the empty cell

    def cell_clusters(self, rotation: int) -> np.ndarray:
        """Distinct clusters (subjects) per target × shortcut-indicator cell, shape (2, 2) as ``[y, s]``."""
        s = self.prov == self.rotations[rotation].shortcut
        return np.array([[np.unique(self.clusters[(self.y == yy) & (s == ss)]).size for ss in (False, True)]
                         for yy in (0, 1)])

    def weights(self, rotation: int, regime: str, idx: np.ndarray) -> np.ndarray:
        """Weights of rows ``idx`` (possibly repeated) for one rotation and regime; shape ``(len(idx),)``."""
        return _weights_from_codes(self.y[idx], self.code[idx], self._q[(rotation, regime)], self.design.groups)

    def auroc(self, logits: np.ndarray, rotation: int, regime: str, idx: np.ndarray | None = None) -> float:
        """Weighted AUROC of a head's ``logits`` (n_rows,) in one regime; NaN if a replicate lacks a cell/class."""
        idx = np.arange(self.y.size) if idx is None else idx
        try:
            w = self.weights(rotation, regime, idx)
        except InfeasibleRegimeError:
            return float("nan")
        return weighted_auroc(self.y[idx], logits[idx], w)

    def table(self, exposed: Sequence[np.ndarray], control: np.ndarray) -> list[dict]:
        """Per rotation: regime → {"odds", "exposed", "control"} AUROCs on all rows."""
        out = []
        for i, rot in enumerate(self.rotations):
            out.append({name: {"odds": float(odds), "exposed": self.auroc(exposed[i], i, name),
                               "control": self.auroc(control, i, name)} for name, odds in rot.regimes.items()})
        return out

    def g_rotation(self, exposed: np.ndarray, control: np.ndarray, rotation: int,
                   idx: np.ndarray | None = None) -> float:
        """Excess vulnerability of one rotation: exposed (aligned − reversed) minus control (aligned − reversed)."""
        idx = np.arange(self.y.size) if idx is None else idx
        y = self.y[idx]
        auc = {}
        for regime in ("aligned", "reversed"):
            try:
                w = self.weights(rotation, regime, idx)
            except InfeasibleRegimeError:
                return float("nan")
            auc[regime] = (weighted_auroc(y, exposed[idx], w), weighted_auroc(y, control[idx], w))
        return (auc["aligned"][0] - auc["reversed"][0]) - (auc["aligned"][1] - auc["reversed"][1])

    def g(self, exposed: Sequence[np.ndarray], control: np.ndarray, idx: np.ndarray | None = None) -> float:
        """Excess vulnerability ``G`` averaged over rotations (AUROC units)."""
        return float(np.mean([self.g_rotation(exposed[i], control, i, idx) for i in range(len(self.rotations))]))

    def utility(self, control: np.ndarray, idx: np.ndarray | None = None) -> float:
        """Control-head AUROC in the independent regime (odds 1; the same for every rotation)."""
        return self.auroc(control, 0, "independent", idx)
