"""Stress (paper 000 §3.2, App. A.2): fixed-marginal regimes, weights, weighted AUROC, paired statistics."""
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from eegfm_bench.provenance.stress import (Design, InfeasibleRegimeError, Rotation, StressSet, decision_flip_rate,
                                           feasible_agreement, odds_for_agreement, paired_logit_contrast,
                                           regime_joint, resolve_odds, stress_weights, weighted_auroc)


def _odds(t):
    return t[1, 1] * t[0, 0] / (t[1, 0] * t[0, 1])


@pytest.mark.parametrize("p_y,p_s,odds", [(0.3, 0.5, 9.0), (0.5, 1 / 3, 1 / 9), (0.7, 0.2, 1.0), (0.1, 0.9, 40.0)])
def test_regime_joint_exact(p_y, p_s, odds):
    q = regime_joint(p_y, p_s, odds)
    assert np.all(q > 0)
    np.testing.assert_allclose(q.sum(axis=1), [1 - p_y, p_y], atol=1e-14)
    np.testing.assert_allclose(q.sum(axis=0), [1 - p_s, p_s], atol=1e-14)
    assert _odds(q) == pytest.approx(odds, rel=1e-10)


@pytest.mark.parametrize("groups,p_prov", [(["A", "B"], [0.35, 0.65]), (["orig", "avg", "Cz"], [0.2, 0.3, 0.5])])
@pytest.mark.parametrize("odds", [9.0, 1.0, 1 / 9, 2.5])
def test_stress_weights_reproduce_odds_and_keep_marginals(groups, p_prov, odds):
    rng = np.random.default_rng(0)
    n = 3000
    y = rng.integers(0, 2, n)
    prov = np.array(groups)[rng.integers(0, len(groups), n)]  # empirical joint unlike the design
    design = Design(p_y=0.4, p_prov=dict(zip(groups, p_prov)))
    shortcut = groups[-1]
    w = stress_weights(y, prov, design, shortcut, odds)
    assert w.mean() == pytest.approx(1.0, abs=1e-12) and np.all(w > 0)
    W = w.sum()
    # both marginals at the design, exactly
    assert np.sum(w * y) / W == pytest.approx(0.4, abs=1e-12)
    for g, pg in zip(groups, p_prov):
        assert np.sum(w * (prov == g)) / W == pytest.approx(pg, abs=1e-12)
    # the requested odds ratio between y and s = [prov == shortcut]
    s = prov == shortcut
    t = np.array([[np.sum(w * ((y == a) & (s == b))) for b in (0, 1)] for a in (0, 1)])
    assert _odds(t) == pytest.approx(odds, rel=1e-10)
    # other groups are independent of y within s = 0
    if len(groups) == 3:
        t2 = np.array([[np.sum(w * ((y == a) & (prov == g))) for g in groups[:2]] for a in (0, 1)])
        assert _odds(t2) == pytest.approx(1.0, rel=1e-10)


def test_impossible_regimes_say_what_is_feasible():
    lo, hi = feasible_agreement(0.2, 0.5)
    assert (lo, hi) == pytest.approx((0.3, 0.7))
    with pytest.raises(InfeasibleRegimeError, match=r"feasible agreement lies strictly between 0.3 .* and 0.7"):
        odds_for_agreement(0.2, 0.5, 0.9)
    with pytest.raises(InfeasibleRegimeError, match=r"feasible odds are 0 < OR < inf"):
        regime_joint(0.2, 0.5, np.inf)
    with pytest.raises(InfeasibleRegimeError, match=r"feasible odds are 0 < OR < inf"):
        resolve_odds({"odds": 0.0}, 0.2, 0.5)
    with pytest.raises(InfeasibleRegimeError, match=r"0 < P\(s=1\) < 1"):
        regime_joint(0.2, 1.0, 2.0)
    # a feasible agreement round-trips
    odds = odds_for_agreement(0.2, 0.5, 0.65)
    q = regime_joint(0.2, 0.5, odds)
    assert q[0, 0] + q[1, 1] == pytest.approx(0.65, abs=1e-12)
    assert resolve_odds({"agreement": 0.65}, 0.2, 0.5) == pytest.approx(odds)


def test_empty_heldout_cell_is_infeasible():
    y = np.array([0, 0, 1, 1])
    prov = np.array(["A", "B", "A", "A"])  # no (y=1, B)
    design = Design(0.5, {"A": 0.5, "B": 0.5})
    with pytest.raises(InfeasibleRegimeError, match=r"no held-out rows with y=1 and provenance='B'"):
        stress_weights(y, prov, design, "B", 3.0)


def test_weighted_auroc_equals_sklearn():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        y = rng.integers(0, 2, n)
        y[:2] = [0, 1]
        score = np.round(rng.standard_normal(n) + y, 1)  # many ties
        w = rng.random(n) * (rng.random(n) > 0.2)
        assert weighted_auroc(y, score, w) == pytest.approx(roc_auc_score(y, score, sample_weight=w), abs=1e-12)
    assert np.isnan(weighted_auroc(np.ones(4, int), np.arange(4.0), np.ones(4)))


def test_g_is_zero_for_identical_heads_and_positive_for_a_shortcut_reader():
    rng = np.random.default_rng(4)
    n = 2000
    y = rng.integers(0, 2, n)
    prov = np.array(["A", "B"])[rng.integers(0, 2, n)]
    s = (prov == "B").astype(float)
    physio = y + rng.standard_normal(n)
    design = Design(0.5, {"A": 0.5, "B": 0.5})
    rot = Rotation("B", {"aligned": 4.0, "independent": 1.0, "reversed": 0.25})
    ss = StressSet(y, prov, np.arange(n) // 10, design, [rot])
    assert ss.g([physio], physio) == pytest.approx(0.0, abs=1e-12)
    shortcut_reader = physio + 1.5 * s
    t = ss.table([shortcut_reader], physio)[0]
    assert t["aligned"]["exposed"] > t["independent"]["exposed"] > t["reversed"]["exposed"]
    # the control ignores provenance: its AUROC moves only by sampling noise
    assert abs(t["aligned"]["control"] - t["reversed"]["control"]) < 0.02
    assert ss.g([shortcut_reader], physio) > 0.15


def test_flip_rate_and_logit_contrast_known_values():
    logits = np.array([[1.0, 1.0, 1.0], [-1.0, 0.5, -2.0], [0.2, -0.1, 0.3], [-1.0, -1.0, -1.0]])
    assert decision_flip_rate(logits) == pytest.approx(0.5)
    y = np.array([1, 1, 0, 0])
    # window contrasts for shortcut index 1: [0, 2.0, -0.35, 0]; class means: y=0 → -0.175, y=1 → 1.0
    assert paired_logit_contrast(logits, y, 1) == pytest.approx((1.0 - 0.175) / 2)
