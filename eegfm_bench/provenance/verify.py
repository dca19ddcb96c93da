"""Verify: specificity against matched random subspaces, a utility margin, and the verdict (paper 000 §3.4, App. A.4).

Three verdicts:

* ``"no reliance"`` — excess vulnerability ``G`` is below ``epsilon`` or its interval includes 0; the audit
  stops before Intervene.
* ``"certified"`` — the targeted removal lowers ``G`` more than every rank- and energy-matched random subspace
  does, *and* the lower confidence bound of the utility change (control head, independent regime) is at or
  above the declared margin.
* ``"refused"`` — reliance, but one of those two criteria fails.

Reduced decodability (a refitted provenance probe) is reported but never enters the decision.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .intervene import subspace_energy
from eegfm_bench.config.audit import RANDOM_MATCH_MODES

__all__ = ["RandomSubspaces", "haar_basis", "random_subspaces", "has_reliance", "decide_verdict",
           "RANDOM_MATCH_MODES", "VERDICTS", "EnergyUnreachable"]

VERDICTS = ("no reliance", "certified", "refused", "not assessable")


def haar_basis(d: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-distributed orthonormal basis (uniform on the Stiefel manifold).

    QR of a standard Gaussian ``(d, r)`` matrix with the signs of diag(R) made positive (Mezzadri 2007), the
    column-truncated equivalent of ``scipy.stats.ortho_group``.

    Parameters
    ----------
    d : int
        Ambient dimension.
    r : int
        Number of columns (subspace rank), ``r <= d``.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray, shape (d, r)
        Orthonormal columns.
    """
    q, rr = np.linalg.qr(rng.standard_normal((d, r)))
    return q * np.sign(np.diag(rr))


@dataclass
class RandomSubspaces:
    """Matched random controls.

    Attributes
    ----------
    bases : list of ndarray, each (d, r)
    energies : ndarray, shape (n,)
        Fraction of standardized training variance each carries (see :func:`subspace_energy`).
    overlaps : ndarray, shape (n,)
        Mean squared cosine of the principal angles with the targeted subspace, ``‖Uᵀ T‖²_F / r`` in [0, 1].
    target_energy : float
    match : str
    """

    bases: list
    energies: np.ndarray
    overlaps: np.ndarray
    target_energy: float
    match: str


class EnergyUnreachable(ValueError):
    """No rank-r subspace of the targeted subspace's orthogonal complement carries the targeted energy.

    Attributes
    ----------
    target_energy : float
        The targeted subspace's share of the standardized training variance.
    reachable : tuple of float
        (lowest, highest) share a rank-r subspace of the complement can carry.
    """

    def __init__(self, message: str, target_energy: float, reachable: tuple[float, float]):
        super().__init__(message)
        self.target_energy = target_energy
        self.reachable = reachable


def _energy_range(cov_c: np.ndarray, r: int) -> tuple[float, float, np.ndarray]:
    evals, evecs = np.linalg.eigh(cov_c)
    return float(evals[:r].sum()), float(evals[-r:].sum()), evecs


def random_subspaces(cov: np.ndarray, target: np.ndarray, n: int = 10, *, match: str = "energy",
                     seed: int = 0, tol: float = 1e-9) -> RandomSubspaces:
    """Draw ``n`` random subspaces of the target's rank, matched in energy.

    Modes
    -----
    ``"energy"`` (default)
        A Haar draw in the orthogonal complement of the targeted subspace, moved along the path
        ``qr((1 − t) Q0 + t Q1)`` towards the complement's top (or bottom) r-dim principal subspace ``Q1``, with
        ``t`` found by bisection so its energy equals the target's (to ``tol`` of tr Σ); disjoint from the target.
    ``"energy_any"``
        The same in the full space: always reachable, but a control may overlap the target (overlap reported).
    ``"rank"``
        Plain Haar subspaces of the same rank (energies reported, not matched).

    Parameters
    ----------
    cov : ndarray, shape (d, d)
        Covariance of the standardized training embeddings.
    target : ndarray, shape (d, r)
        Orthonormal targeted basis.
    n : int
        Number of controls (paper: 10 for NMT, 100 for ECG).
    match : str
        One of ``RANDOM_MATCH_MODES``.
    seed : int
    tol : float
        Energy tolerance, as a fraction of tr Σ.

    Returns
    -------
    RandomSubspaces

    Raises
    ------
    ValueError
        For an unknown mode or ``n < 1``; :class:`EnergyUnreachable` when no rank-r subspace (of the complement in
        mode ``"energy"``) carries the target's energy (the audit then draws them in the whole space and says so).

    References
    ----------
    Paper 000 §3.4, App. A.4 (rank- and energy-matched random controls), App. F (ten Haar subspaces).
    """
    if match not in RANDOM_MATCH_MODES:
        raise ValueError(f"random_match {match!r} unknown; fix: use one of {RANDOM_MATCH_MODES}")
    if n < 1:
        raise ValueError(f"n_random must be >= 1, got {n}")
    cov = np.asarray(cov, dtype=float)
    T = np.asarray(target, dtype=float)
    d, r = T.shape
    total = float(np.trace(cov))
    e_t = subspace_energy(T, cov)
    rng = np.random.default_rng(seed)
    if match == "energy":
        # orthonormal basis of the complement of span(T)
        u, _, _ = np.linalg.svd(T, full_matrices=True)
        B = u[:, r:]
    else:
        B = np.eye(d)
    bases = []
    if match == "rank":
        bases = [haar_basis(d, r, rng) for _ in range(n)]
    else:
        cov_c = B.T @ cov @ B
        lo, hi, evecs = _energy_range(cov_c, r)
        lo, hi = lo / total, hi / total
        if not lo - tol <= e_t <= hi + tol:
            where = "the target's orthogonal complement" if match == "energy" else "the embedding"
            raise EnergyUnreachable(
                f"no rank-{r} subspace of {where} carries the targeted energy {e_t:.4f} (reachable: "
                f"[{lo:.4f}, {hi:.4f}] of the standardized variance); fix: set random_match='energy_any' (controls "
                "may then overlap the target; overlap is reported) or random_match='rank' (rank-matched Haar only)",
                e_t, (lo, hi))
        top, bottom = evecs[:, -r:], evecs[:, :r]
        energy_c = lambda Q: float(np.trace(Q.T @ cov_c @ Q)) / total  # noqa: E731
        for _ in range(n):
            Q0 = haar_basis(B.shape[1], r, rng)
            e0 = energy_c(Q0)
            Q1 = top if e0 < e_t else bottom
            path = lambda t: np.linalg.qr((1.0 - t) * Q0 + t * Q1)[0]  # noqa: E731
            f0 = e0 - e_t
            a, b = 0.0, 1.0
            Q = Q0
            if abs(f0) > tol:
                for _ in range(200):
                    m = 0.5 * (a + b)
                    Q = path(m)
                    fm = energy_c(Q) - e_t
                    if abs(fm) <= tol:
                        break
                    if np.sign(fm) == np.sign(f0):
                        a = m
                    else:
                        b = m
                else:  # pragma: no cover - bisection halves 200 times
                    raise RuntimeError("energy matching did not converge")
            bases.append(B @ Q)
    energies = np.array([subspace_energy(U, cov) for U in bases])
    overlaps = np.array([float(np.sum((U.T @ T) ** 2) / r) for U in bases])
    return RandomSubspaces(bases=bases, energies=energies, overlaps=overlaps, target_energy=e_t, match=match)


def has_reliance(g: float, g_low: float, g_high: float, epsilon: float) -> tuple[bool, str]:
    """Stress decision: reliance iff ``G >= epsilon`` and the interval excludes 0.

    Parameters
    ----------
    g, g_low, g_high : float
        Excess vulnerability and its interval (AUROC units).
    epsilon : float
        Smallest ``G`` that counts as reliance (AUROC units).

    Returns
    -------
    (bool, str)
        The decision and a one-line reason.

    References
    ----------
    Paper 000 §3.4, §4.3 (G = 0.00007, below ε and not bounded away from zero: stop before Intervene).
    """
    if not np.isfinite(g):
        raise ValueError("G is not finite; fix: check that every regime has both classes on the held-out rows")
    if g < epsilon:
        return False, f"G = {g:.4f} is below epsilon = {epsilon:g}"
    if g_low <= 0 <= g_high:
        return False, f"G = {g:.4f} but its interval [{g_low:.4f}, {g_high:.4f}] includes 0"
    if g_high < 0:
        return False, f"G = {g:.4f} is negative"
    return True, f"G = {g:.4f} [{g_low:.4f}, {g_high:.4f}] >= epsilon = {epsilon:g}"


def decide_verdict(reduction_target: float, reduction_random: np.ndarray, utility_low: float,
                   margin: float) -> tuple[str, list[str]]:
    """Verify decision after a reliance finding.

    Parameters
    ----------
    reduction_target : float
        ``G_before − G_after`` for the targeted removal (AUROC units).
    reduction_random : ndarray, shape (n_random,)
        The same for each matched random subspace.
    utility_low : float
        Lower confidence bound of the utility change (control head, independent regime; AUROC units).
    margin : float
        Declared utility margin (≤ 0), e.g. −0.02.

    Returns
    -------
    verdict : str
        ``"certified"`` or ``"refused"``.
    reasons : list of str

    References
    ----------
    Paper 000 §3.4, App. A.4.
    """
    rr = np.asarray(reduction_random, dtype=float)
    beats = int(np.sum(reduction_target > rr))
    specific = beats == rr.size
    within = utility_low >= margin
    reasons = [
        f"targeted removal reduces G by {reduction_target:.4f}; it beats {beats}/{rr.size} matched random "
        f"subspaces (max random reduction {rr.max():.4f})" + ("" if specific else " — specificity fails"),
        f"utility change lower bound {utility_low:+.4f} " + (">= " if within else "< ") + f"margin {margin:+.4f}"
        + ("" if within else " — utility fails"),
    ]
    return ("certified" if specific and within else "refused"), reasons
