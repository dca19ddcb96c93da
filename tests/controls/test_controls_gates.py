"""Four-gate attribution report (paper 001 §3.6, §5.5)."""
import json

import pytest

from eegfm_bench.controls import gates as G
from eegfm_bench.reports.controls import write_gate_report


def evidence(**over):
    base = dict(model="REVE", task="chbmit_ictal", evaluation_dataset="CHB-MIT", model_score=0.793,
                comparator_scores={"simple": 0.700, "enhanced": 0.715}, paired_ci=(0.01, 0.11),
                pretraining_corpora=["TUEG", "SEED"], random_init_scores=[0.691, 0.696, 0.687],
                random_init_ci=(0.06, 0.14), permutation_p=0.0099)
    base.update(over)
    return G.ClaimEvidence(**base)


def statuses(rep):
    return [g.status for g in rep.gates]


def test_all_four_pass_gives_an_attributed_claim():
    rep = G.evaluate_gates(evidence())
    assert statuses(rep) == ["pass"] * 4 and rep.attributed and rep.stopped_at is None
    assert rep.gates[0].values["strongest_family"] == "enhanced"
    assert rep.gates[0].values["margin"] == pytest.approx(0.793 - 0.715)


def test_stops_at_the_first_failure_even_if_later_gates_would_fail_or_pass():
    # comparator fails: the paired CI, provenance and controls are never consulted
    rep = G.evaluate_gates(evidence(model_score=0.71, paired_ci=None, pretraining_corpora=["CHB-MIT"]))
    assert statuses(rep) == ["fail", "not_reached", "not_reached", "not_reached"]
    assert rep.stopped_at == "i" and not rep.attributed
    # the stronger family decides: above simple (0.70) but below enhanced (0.715) still fails
    assert G.evaluate_gates(evidence(model_score=0.71)).stopped_at == "i"
    # CHB-MIT paper case: CI [-0.36, 11.22] pp crosses zero: the folds cannot decide; later controls cannot rescue it
    rep = G.evaluate_gates(evidence(paired_ci=(-0.0036, 0.1122)))
    assert statuses(rep) == ["pass", "inconclusive", "not_reached", "not_reached"] and rep.stopped_at == "ii"
    assert "straddles zero" in rep.gates[1].detail and "bootstrap" in rep.gates[1].decided_by
    # an interval below zero refutes
    assert statuses(G.evaluate_gates(evidence(paired_ci=(-0.08, -0.01))))[1] == "fail"
    # provenance fails -> controls not reached even though they would pass
    rep = G.evaluate_gates(evidence(evaluation_dataset="TUAB", pretraining_corpora=["TUH EEG Corpus (TUEG)"]))
    assert statuses(rep) == ["pass", "pass", "fail", "not_reached"]
    assert "same source family tuh" in rep.gates[2].detail


def test_gate_iv_needs_random_init_and_permutation_and_scrambled_for_adaptation():
    # above random init by the means, but the paired interval straddles zero: inconclusive, not a pass
    rep = G.evaluate_gates(evidence(random_init_scores=[0.78, 0.79], random_init_ci=(-0.02, 0.05)))
    assert rep.stopped_at == "iv" and rep.gates[3].status == "inconclusive" and "random init" in rep.gates[3].detail
    rep = G.evaluate_gates(evidence(random_init_scores=[0.80, 0.81], random_init_ci=(-0.04, -0.005)))
    assert rep.gates[3].status == "fail"
    rep = G.evaluate_gates(evidence(random_init_ci=None))  # means only: they decide nothing
    assert rep.gates[3].status == "inconclusive" and "no paired interval" in rep.gates[3].detail
    rep = G.evaluate_gates(evidence(permutation_p=0.099))
    assert rep.stopped_at == "iv" and rep.gates[3].status == "fail" and "permutation p" in rep.gates[3].detail
    assert "α = 0.05" in rep.gates[3].decided_by
    rep = G.evaluate_gates(evidence(adaptation=True))
    assert rep.gates[3].status == "missing" and "scrambled-label" in rep.gates[3].detail
    rep = G.evaluate_gates(evidence(adaptation=True, scrambled_label_score=0.80, scrambled_ci=(-0.03, -0.001)))
    assert rep.gates[3].status == "fail"
    assert G.evaluate_gates(evidence(adaptation=True, scrambled_label_score=0.60, scrambled_ci=(0.1, 0.28))).attributed
    # a fail anywhere in gate (iv) wins over an inconclusive part
    rep = G.evaluate_gates(evidence(permutation_p=0.2, random_init_ci=(-0.01, 0.2)))
    assert rep.gates[3].status == "fail"


def test_a_chance_level_adaptation_is_inconclusive_at_gate_iv():
    """Issue 23: eegmat at chance (correct-label arm 0.501, scrambled 0.473, folds split 2 / 2) passed gate (iv) on
    means; decided by its paired interval (which straddles zero) it is inconclusive, and on means alone too."""
    chance = dict(model_score=0.80, adaptation=True, scrambled_correct_score=0.501, scrambled_label_score=0.473)
    rep = G.evaluate_gates(evidence(**chance, scrambled_ci=(-0.041, 0.094)))
    assert rep.gates[3].status == "inconclusive" and not rep.attributed
    assert rep.gates[3].values["scrambled_margin"] == pytest.approx(0.028)
    assert "paired CI [-0.0410, +0.0940] straddles zero" in rep.gates[3].detail
    assert G.evaluate_gates(evidence(**chance)).gates[3].status == "inconclusive"
    # a real +5.9 pp advantage whose interval lies above zero passes
    real = dict(chance, scrambled_correct_score=0.62, scrambled_label_score=0.561)
    assert G.evaluate_gates(evidence(**real, scrambled_ci=(0.012, 0.101))).gates[3].status == "pass"


def test_interval_decision_rule():
    assert G.interval_decision(0.001, 0.2)[0] == "pass"
    assert G.interval_decision(-0.2, 0.0)[0] == "fail"
    assert G.interval_decision(-0.2, 0.001)[0] == "inconclusive"
    with pytest.raises(ValueError):
        G.interval_decision(0.2, 0.1)


def test_missing_evidence_ends_the_claim():
    rep = G.evaluate_gates(evidence(pretraining_corpora=None))
    assert statuses(rep) == ["pass", "pass", "missing", "not_reached"] and rep.stopped_at == "iii"


@pytest.mark.parametrize("corpora,dataset,overlap", [
    (["TUEG"], "TUAB", True),
    (["CHB-MIT", "SHHS", "PREST"], "chbmit", True),
    (["Temple University Hospital EEG"], "tuab", True),
    (["TUEG", "SEED"], "ds004504", False),
    (["OpenNeuro ds004504 derivatives"], "ds004504", True),
    (["SHHS"], "Sleep-EDF", False),
])
def test_pretraining_overlap(corpora, dataset, overlap):
    assert bool(G.pretraining_overlap(corpora, dataset)) is overlap


def test_json_and_markdown_report(tmp_path):
    reps = [G.evaluate_gates(evidence()),
            G.evaluate_gates(evidence(model="BIOT", paired_ci=(-0.062, 0.063)))]
    write_gate_report(reps, tmp_path / "gates.json", tmp_path / "gates.md")
    data = json.loads((tmp_path / "gates.json").read_text())
    assert [d["stopped_at"] for d in data] == [None, "ii"]
    assert data[1]["gates"][2]["status"] == "not_reached"
    md = (tmp_path / "gates.md").read_text()
    lines = [ln for ln in md.splitlines() if ln.startswith("| BIOT")]
    assert lines and "| ✓ | ≈ | – | – | (ii) |" in lines[0]
    assert "| REVE | chbmit_ictal | ✓ | ✓ | ✓ | ✓ | — |" in md
    assert "≈ inconclusive" in md and "How each gate was decided:" in md
    assert "- (ii) paired uncertainty: paired subject-cluster bootstrap 95% interval" in md


def test_model_layer_hooks():
    c = G.random_init_contrast(0.793, {42: 0.691, 43: 0.696, 44: 0.687})
    assert c["random_grand_mean"] == pytest.approx(0.6913333)
    assert c["delta_pp"] == pytest.approx(10.1667, abs=1e-3)
    s = G.scrambled_label_contrast([0.84, 0.8397, 0.8394], [0.8392] * 5)
    assert s["n_scrambled"] == 5 and s["delta"] == pytest.approx(0.8397 - 0.8392)
    with pytest.raises(ValueError, match="random_by_seed"):
        G.random_init_contrast(0.7, {})


def test_gate_ii_names_the_one_subject_its_decision_rests_on():
    """Issue 33 item 8. Five subjects, one per test fold, 8 windows each (both classes): the model is right on every
    window of S1-S4 and wrong on every window of S5; the comparator always says class 0 (balanced accuracy 0.5).
    Per-subject differences 0.5, 0.5, 0.5, 0.5, −0.5: the replicates are 0.5 − k/5 with k ~ Binomial(5, 1/5) draws of
    S5, P(k ≥ 3) = 5.8 % > 2.5 %, so the interval reaches −0.1: inconclusive. Without S5 every replicate is 0.5:
    pass; without any other subject the bound is 0.5 − 3/4: still inconclusive. Gate (ii)'s line says so."""
    import numpy as np

    y = np.tile(np.arange(8) % 2, 5)
    subj = np.repeat([f"S{i}" for i in range(1, 6)], 8)
    right = subj != "S5"
    pa = np.eye(2)[np.where(right, y, 1 - y)] * 0.8 + 0.1
    pb = np.tile([0.9, 0.1], (y.size, 1))
    st = G.decision_stability(y, [(pa, pb)], subj, np.repeat(np.arange(5), 8), metric="balanced_accuracy", n_boot=2000)
    assert st.verdict == "inconclusive" and st.flips == {"S5": "pass"} and st.undecided == {}
    rep = G.evaluate_gates(evidence(paired_ci=(-0.1, 0.5), paired_ci_flips=st.flips))
    g2 = rep.gates[1]
    assert g2.status == "inconclusive" and g2.detail.endswith("; rests on one subject (S5 → pass)")
    assert g2.values["paired_loso_flips"] == {"S5": "pass"}
    assert "rests on one subject" not in G.evaluate_gates(evidence()).gates[1].detail
    g4 = G.evaluate_gates(evidence(random_init_flips={"S2": "inconclusive"})).gates[3]  # gate (iv)'s random-init arm
    assert g4.status == "pass" and "paired CI [+0.0600, +0.1400] lies above zero; rests on one subject (S2 → " \
        "inconclusive)" in g4.detail and g4.values["random_init_loso_flips"] == {"S2": "inconclusive"}
