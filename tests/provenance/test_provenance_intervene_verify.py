"""Intervene (paper 000 §3.3, App. A.3) and Verify (§3.4, App. A.4): localization, projection, random controls."""
import numpy as np
import pytest
from scipy.stats import ortho_group

from eegfm_bench.provenance.intervene import (observational_localization, paired_localization, project_out,
                                              subspace_energy)
from eegfm_bench.provenance.verify import decide_verdict, has_reliance, random_subspaces


def _overlap(U, V):
    """Mean squared cosine of principal angles (1 = same subspace)."""
    return float(np.sum((U.T @ V) ** 2) / U.shape[1])


def test_paired_localization_recovers_the_view_plane():
    rng = np.random.default_rng(0)
    d, K, n = 12, 3, 200
    R = ortho_group.rvs(d, random_state=0)
    plane = R[:, :2]
    shifts = np.stack([2 * np.cos(a) * plane[:, 0] + 2 * np.sin(a) * plane[:, 1]
                       for a in 2 * np.pi * np.arange(K) / K])
    z = rng.standard_normal((n, 1, d)) * 3 + shifts[None] + 0.3 * rng.standard_normal((n, K, d))
    loc = paired_localization(z, np.arange(n) // 4)
    assert loc.rank == 2 and loc.n_units == 50
    assert _overlap(loc.basis, plane) > 0.99
    assert loc.captured > 0.9
    np.testing.assert_allclose(loc.basis.T @ loc.basis, np.eye(2), atol=1e-12)


def test_observational_localization_is_target_residualized():
    rng = np.random.default_rng(1)
    d, n = 10, 4000
    R = ortho_group.rvs(d, random_state=1)
    u, v = R[:, 0], R[:, 1]
    y = rng.integers(0, 2, n)
    dev = (rng.random(n) < np.where(y == 1, 0.8, 0.2)).astype(int)  # groups differ in target composition
    z = rng.standard_normal((n, d)) + 4.0 * y[:, None] * u + 1.0 * dev[:, None] * v
    loc = observational_localization(z, y, np.array(["A", "B"])[dev])
    assert loc.rank == 1
    assert abs(loc.basis[:, 0] @ v) > 0.98
    assert abs(loc.basis[:, 0] @ u) < 0.1  # the target direction does not leak in through group composition
    with pytest.raises(ValueError, match="exceeds 1"):
        observational_localization(z, y, np.array(["A", "B"])[dev], rank=2)


def test_projection_removes_the_subspace_and_keeps_its_complement():
    rng = np.random.default_rng(2)
    Q = ortho_group.rvs(8, random_state=2)
    U, V = Q[:, :2], Q[:, 2:]
    z = rng.standard_normal((50, 8))
    zp = project_out(z, U)
    np.testing.assert_allclose(zp @ U, 0, atol=1e-12)
    np.testing.assert_allclose(zp @ V, z @ V, atol=1e-12)
    with pytest.raises(ValueError, match="orthonormal"):
        project_out(z, 2 * U)


def _cov(d=16, seed=3):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((400, d)) * np.r_[np.full(4, 3.0), np.ones(d - 4)]
    return np.cov(A @ ortho_group.rvs(d, random_state=seed), rowvar=False)


def test_random_subspaces_are_energy_matched_and_outside_the_target():
    cov = _cov()
    evals, evecs = np.linalg.eigh(cov)
    target = np.linalg.qr(evecs[:, -1:] + evecs[:, :1])[0]  # energy between the extremes
    target = np.c_[target, np.linalg.qr(evecs[:, 5:6] - target @ (target.T @ evecs[:, 5:6]))[0]]
    rs = random_subspaces(cov, target, n=10, match="energy", seed=0)
    assert len(rs.bases) == 10
    np.testing.assert_allclose(rs.energies, subspace_energy(target, cov), atol=1e-8)
    assert rs.overlaps.max() < 1e-20
    for B in rs.bases:
        np.testing.assert_allclose(B.T @ B, np.eye(2), atol=1e-10)
    assert len({round(float(B[0, 0]), 8) for B in rs.bases}) == 10  # distinct draws
    plain = random_subspaces(cov, target, n=5, match="rank", seed=0)
    assert np.ptp(plain.energies) > 1e-3  # rank-only draws are not matched


def test_unreachable_energy_names_the_fix():
    cov = np.diag(np.r_[50.0, np.ones(9)])
    target = np.eye(10)[:, :1]  # the dominant direction: no complement direction carries as much
    with pytest.raises(ValueError, match=r"reachable.*random_match='energy_any'"):
        random_subspaces(cov, target, n=3)
    rs = random_subspaces(cov, target, n=3, match="energy_any", seed=1)
    np.testing.assert_allclose(rs.energies, rs.target_energy, atol=1e-8)


def test_verdict_rules():
    assert has_reliance(0.005, 0.001, 0.01, 0.01)[0] is False  # below epsilon
    assert has_reliance(0.05, -0.01, 0.1, 0.01)[0] is False  # interval includes 0
    assert has_reliance(0.05, 0.02, 0.08, 0.01)[0] is True
    assert decide_verdict(0.2, np.array([0.01, 0.03]), -0.005, -0.02)[0] == "certified"
    v, why = decide_verdict(0.2, np.array([0.01, 0.25]), -0.005, -0.02)
    assert v == "refused" and "1/2" in why[0]
    v, why = decide_verdict(0.2, np.array([0.01, 0.03]), -0.04, -0.02)
    assert v == "refused" and "utility fails" in why[1]
