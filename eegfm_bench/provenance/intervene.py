"""Intervene: train-localized suppression of a provenance subspace (paper 000 §3.3, App. A.3).

Localization sees training records only — never task labels in the paired design, never validation or test
embeddings, never head weights — and returns an orthonormal basis ``U`` (d, r) of the standardized embedding.
Suppression is the orthogonal projection ``z ↦ z − z U Uᵀ``: it zeroes the component in span(U) (the training
mean, since the space is standardized) and leaves the orthogonal complement unchanged, so the already-fitted
heads are applied unchanged to the projected embeddings.

* Paired localization: within-record view contrasts (each view minus the window's mean over views), averaged
  over a record's windows so every training record weighs the same, then the top-r right singular vectors of
  the stacked contrasts. Default rank K − 1.
* Observational localization: target-residualized training embeddings (class means removed) and the top-r left
  singular vectors of their cross-covariance with the one-hot provenance, i.e. the within-target
  provenance-mean differences. Default rank n_groups − 1 (1 for a device pair).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Localization", "paired_localization", "observational_localization", "project_out", "subspace_energy"]


@dataclass
class Localization:
    """A train-localized provenance subspace.

    Attributes
    ----------
    basis : ndarray, shape (d, r)
        Orthonormal columns spanning the subspace, in standardized-embedding coordinates.
    singular_values : ndarray, shape (min(n, d),)
        All singular values of the localization matrix (descending).
    captured : float
        Fraction of the localization matrix's energy (sum of squared singular values) in the kept rank.
    method : str
        "paired" or "observational".
    n_units : int
        Training records (paired) or rows (observational) that entered.
    """

    basis: np.ndarray
    singular_values: np.ndarray
    captured: float
    method: str
    n_units: int

    @property
    def rank(self) -> int:
        return int(self.basis.shape[1])


def _check_rank(rank: int, d: int, limit: int | None, what: str) -> None:
    if not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    if rank >= d:
        raise ValueError(f"rank {rank} would remove the whole {d}-dim embedding; fix: use rank < d")
    if limit is not None and rank > limit:
        raise ValueError(f"rank {rank} exceeds {limit}, the rank of the {what}; fix: use rank <= {limit}")


def paired_localization(z_views: np.ndarray, record: np.ndarray, rank: int | None = None) -> Localization:
    """Localize provenance from equally weighted within-record view contrasts (no labels, no heads).

    Parameters
    ----------
    z_views : ndarray, shape (n_windows, K, d)
        Standardized *training* embeddings of each window's K provenance views.
    record : array-like, shape (n_windows,)
        Record id per window; each record's contrasts are averaged over its windows so records weigh equally.
    rank : int, optional
        Subspace rank (default K − 1, the span of K view shifts).

    Returns
    -------
    Localization

    Raises
    ------
    ValueError
        If shapes disagree, K < 2, or the rank is not in [1, d).

    References
    ----------
    Paper 000 §3.3, App. A.3 (paired localization, predeclared rank K − 1), App. E.
    """
    z = np.asarray(z_views, dtype=float)
    rec = np.asarray(record)
    if z.ndim != 3 or rec.shape != (z.shape[0],):
        raise ValueError(f"paired localization needs z_views (n_windows, K, d) and record (n_windows,), got "
                         f"{z.shape} and {rec.shape}")
    n, K, d = z.shape
    if K < 2:
        raise ValueError("paired localization needs K >= 2 views; fix: use observational_localization")
    rank = K - 1 if rank is None else rank
    _check_rank(rank, d, None, "view contrasts")
    contrast = z - z.mean(axis=1, keepdims=True)  # (n, K, d)
    _, inv = np.unique(rec, return_inverse=True)
    n_rec = int(inv.max()) + 1
    sums = np.zeros((n_rec, K, d))
    np.add.at(sums, inv, contrast)
    per_rec = sums / np.bincount(inv, minlength=n_rec)[:, None, None]
    M = per_rec.reshape(n_rec * K, d)
    _, sv, vt = np.linalg.svd(M, full_matrices=False)
    energy = sv ** 2
    return Localization(basis=vt[:rank].T.copy(), singular_values=sv,
                        captured=float(energy[:rank].sum() / energy.sum()), method="paired", n_units=n_rec)


def observational_localization(z: np.ndarray, y: np.ndarray, prov: np.ndarray,
                               rank: int | None = None) -> Localization:
    """Localize provenance in target-residualized training embeddings.

    Parameters
    ----------
    z : ndarray, shape (n_train, d)
        Standardized *training* embeddings.
    y : array-like, shape (n_train,)
        Target per row; its class means are removed first (provenance groups may differ in target mix).
    prov : array-like, shape (n_train,)
        Provenance group per row.
    rank : int, optional
        Subspace rank (default n_groups − 1; at most n_groups − 1, the cross-covariance's rank).

    Returns
    -------
    Localization

    Raises
    ------
    ValueError
        If shapes disagree, there is a single provenance group, or the rank is not in [1, n_groups − 1].

    References
    ----------
    Paper 000 §3.3, App. A.3 (observational ECG: target-residualized localization, rank one).
    """
    z = np.asarray(z, dtype=float)
    y = np.asarray(y)
    prov = np.asarray(prov)
    if z.ndim != 2 or y.shape != (z.shape[0],) or prov.shape != (z.shape[0],):
        raise ValueError(f"observational localization needs z (n, d), y (n,), prov (n,); got {z.shape}, "
                         f"{y.shape}, {prov.shape}")
    groups, pcode = np.unique(prov, return_inverse=True)
    if groups.size < 2:
        raise ValueError(f"provenance has a single group {groups.tolist()} in training; nothing to localize; "
                         "fix: include at least two provenance groups")
    rank = groups.size - 1 if rank is None else rank
    _check_rank(rank, z.shape[1], groups.size - 1, "provenance cross-covariance")
    resid = z.copy()
    for c in np.unique(y):
        m = y == c
        resid[m] -= resid[m].mean(axis=0)
    onehot = np.eye(groups.size)[pcode]
    onehot -= onehot.mean(axis=0)
    cross = resid.T @ onehot / z.shape[0]  # (d, n_groups)
    u, sv, _ = np.linalg.svd(cross, full_matrices=False)
    energy = sv ** 2
    return Localization(basis=u[:, :rank].copy(), singular_values=sv,
                        captured=float(energy[:rank].sum() / energy.sum()), method="observational",
                        n_units=int(z.shape[0]))


def project_out(z: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Remove span(``basis``) from standardized embeddings, leaving the orthogonal complement unchanged.

    Parameters
    ----------
    z : ndarray, shape (..., d)
        Standardized embeddings.
    basis : ndarray, shape (d, r)
        Orthonormal columns.

    Returns
    -------
    ndarray, shape (..., d)
        ``z − (z U) Uᵀ``.

    Raises
    ------
    ValueError
        If the basis does not match ``d`` or its columns are not orthonormal.

    References
    ----------
    Paper 000 App. A.3, A.5 (a linear-erasure projection applied with the heads held fixed).
    """
    U = np.asarray(basis, dtype=float)
    if U.ndim != 2 or U.shape[0] != z.shape[-1]:
        raise ValueError(f"basis of shape {U.shape} does not match embedding dim {z.shape[-1]}")
    if not np.allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-8):
        raise ValueError("basis columns are not orthonormal; fix: orthonormalize (np.linalg.qr) first")
    return z - (z @ U) @ U.T


def subspace_energy(basis: np.ndarray, cov: np.ndarray) -> float:
    """Fraction of total variance a subspace carries: ``tr(Uᵀ Σ U) / tr(Σ)``.

    Parameters
    ----------
    basis : ndarray, shape (d, r)
        Orthonormal columns.
    cov : ndarray, shape (d, d)
        Covariance of the standardized training embeddings.

    Returns
    -------
    float
        In [0, 1] (r/d for every subspace when Σ ∝ I).

    References
    ----------
    Paper 000 App. A.4, App. B ("energy" of the removed subspace; random controls match it).
    """
    U = np.asarray(basis, dtype=float)
    return float(np.trace(U.T @ cov @ U) / np.trace(cov))
