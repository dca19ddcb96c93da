"""End-to-end audit on synthetic embeddings with a known answer for each verdict (paper 000 §3, App. B)."""
import json

from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import ortho_group

from eegfm_bench.provenance import AuditReport, InfeasibleRegimeError, audit_embeddings
from eegfm_bench.runs.audit import run_audit
from eegfm_bench.locks import OUT_DIR_LOCK

FAST = {"n_boot": 200, "n_random": 10}
REPO = Path(__file__).resolve().parents[2]


def paired_data(seed=0, n_subj=60, win=4, d=16, K=3, shift=2.0, mu_u=1.5, mu_v=0.0):
    """K reference views per window. Views shift the embedding in a plane (directions 1, 2 before a random
    rotation); the target moves it along direction 0 (``mu_u``) and, optionally, along direction 1 of the view
    plane too (``mu_v``). Directions 3–5 carry large target-free variance."""
    rng = np.random.default_rng(seed)
    n = n_subj * win
    subject = np.repeat(np.arange(n_subj), win)
    record = subject * 10 + (np.arange(n) % 2)  # two records per subject
    y = rng.integers(0, 2, n_subj * 10 + 2)[record]
    scales = np.ones(d)
    scales[3:6] = 2.5
    base = rng.standard_normal((n, d)) * scales
    base[:, 0] += mu_u * (y - 0.5)
    base[:, 1] += mu_v * (y - 0.5)
    ang = 2 * np.pi * np.arange(K) / K
    delta = np.zeros((K, d))
    delta[:, 1], delta[:, 2] = shift * np.cos(ang), shift * np.sin(ang)
    emb = base[:, None, :] + delta[None] + 0.3 * rng.standard_normal((n, K, d))
    emb = (emb @ ortho_group.rvs(d, random_state=seed)).astype(np.float32)
    split = np.where(subject < 30, "train", np.where(subject < 42, "val", "test"))
    return emb, y, np.array(["original", "average", "Cz"][:K]), subject, record, split


def observational_data(seed=0, n_subj=120, win=4, d=12, shift=2.0, agree=0.75, mu_u=1.5):
    """One device per subject; in every split and class a fraction ``agree`` of subjects has device == class.
    The device shifts the embedding along one direction, the target along another."""
    rng = np.random.default_rng(seed)
    y_s = np.tile([0, 1], n_subj // 2)
    split_s = np.repeat(["train", "val", "test"], [n_subj // 2, n_subj // 4, n_subj // 4])
    dev_s = np.empty(n_subj, int)
    for sp in ("train", "val", "test"):
        for c in (0, 1):
            idx = np.flatnonzero((split_s == sp) & (y_s == c))
            match = np.zeros(idx.size, bool)
            match[rng.permutation(idx.size)[: int(round(agree * idx.size))]] = True
            dev_s[idx] = np.where(match, c, 1 - c)
    subject = np.repeat(np.arange(n_subj), win)
    y, dev, split = y_s[subject], dev_s[subject], split_s[subject]
    scales = np.ones(d)
    scales[3:6] = 2.5
    z = rng.standard_normal((subject.size, d)) * scales
    z[:, 0] += mu_u * (y - 0.5)
    z[:, 1] += shift * (dev - 0.5)
    z = z @ ortho_group.rvs(d, random_state=seed)
    return z, y, np.array(["devA", "devB"])[dev], subject, subject.copy(), split


@pytest.fixture(scope="module")
def certified():
    return audit_embeddings(*paired_data(), FAST)


@pytest.fixture(scope="module")
def refused():
    # the view plane also carries most of the target signal
    return audit_embeddings(*paired_data(mu_u=0.6, mu_v=2.0), FAST)


def test_shortcut_reader_is_detected_and_removal_certified(certified):
    r = certified
    assert r.verdict == "certified"
    st, vf = r.stress, r.verify
    # Stress: the exposed head degrades aligned → reversed, the control does not
    assert st["degradation"]["exposed"] > 0.1 and abs(st["degradation"]["control"]) < 0.01
    assert st["G"]["estimate"] > 0.1 and st["G"]["low"] > 0.05
    for rot in st["rotations"]:
        a = rot["auroc"]
        assert a["aligned"]["exposed"] > a["aligned^0.5"]["exposed"] > a["independent"]["exposed"]
        assert a["independent"]["exposed"] > a["aligned^-0.5"]["exposed"] > a["reversed"]["exposed"]
    assert st["paired"]["flip_rate"]["exposed"] > st["paired"]["flip_rate"]["control"] + 0.1
    lc = st["paired"]["logit_contrast"]
    assert lc["exposed_mean_abs"] > 0.5 and lc["control_mean_abs"] < 0.25 * lc["exposed_mean_abs"]
    assert all(c > 0.5 for c in lc["exposed"])  # every exposed head pushes its shortcut view towards class 1
    # Recover: reference is accessible
    assert r.recover["lpi_bits"] > 0.8 and r.recover["low"] > 0.5 and r.recover["unit"] == "view"
    # Intervene: rank K-1 = 2, train-localized
    assert r.intervene["rank"] == 2 and r.intervene["method"] == "paired" and r.intervene["n_units"] == 60
    # Verify: G vanishes after targeted removal, not after matched random removal
    assert abs(vf["G_after"]["estimate"]) < 0.01 and vf["G_after"]["low"] <= 0 <= vf["G_after"]["high"]
    assert vf["fraction_removed"] > 0.9
    assert min(vf["random"]["G_after"]) > 0.1
    np.testing.assert_allclose(vf["random"]["energies"], vf["random"]["target_energy"], atol=1e-6)
    assert vf["utility"]["passes"] and vf["utility"]["change"]["low"] >= -0.02
    assert vf["specificity"]["passes"]
    assert vf["recover_after"]["probe_accuracy"] < 0.4  # decodability gone (reported, not decisive)
    assert vf["paired_after"]["logit_contrast"]["exposed_mean_abs"] < 0.1 * lc["exposed_mean_abs"]


def test_localized_direction_carrying_the_target_is_refused(refused):
    r = refused
    assert r.verdict == "refused"
    assert r.stress["G"]["low"] > 0.05
    assert r.verify["specificity"]["passes"]  # it beats every random subspace...
    u = r.verify["utility"]
    assert not u["passes"] and u["change"]["high"] < -0.1  # ...but costs utility far beyond the margin
    assert any("utility fails" in s for s in r.reasons)


def test_an_encoder_at_chance_is_not_assessable(certified):
    """Issue 23: an encoder whose task score is not above chance by its interval cannot be certified (removal
    brings G to 0 on an encoder that relies on nothing): the verdict says ``not assessable``, with the reason and
    the stress finding, and the audit stops before Intervene (issue 33: nothing to remove)."""
    cu = certified.stress["control_utility"]
    assert cu["above_chance"] and cu["low"] > 0.6 and certified.verdict == "certified"
    r = audit_embeddings(*paired_data(seed=2, mu_u=0.0), FAST)  # the target leaves no trace in the embedding
    cu = r.stress["control_utility"]
    assert cu["low"] <= 0.5 <= cu["high"] and not cu["above_chance"]
    assert r.verdict == "not assessable" and r.intervene is None and r.verify is None
    assert r.reasons[0].startswith("not assessable: the encoder's task score")
    assert f"{cu['estimate']:.3f} [{cu['low']:.3f}, {cu['high']:.3f}]" in r.reasons[0]
    assert r.reasons[1].startswith("stress: G = ") and r.reasons[2] == "stopped before Intervene"
    assert "**Verdict: not assessable.**" in r.to_markdown()
    assert r.stability["verdict"] == "not assessable"  # its leave-one-subject-out check reads the same first test


SHIPPED_AUDIT = yaml.safe_load((REPO / "configs" / "experiment" / "provenance_eegmat.yaml").read_text())["audit"]


def test_the_shipped_demo_settings_audit_an_encoder_at_chance_and_one_above(tmp_path):
    """Issue 33 item 5: the provenance demo's audit settings (configs/experiment/provenance_eegmat.yaml, run by the
    audit command's hook as scripts/provenance_demo.py does; ``random_match: energy``). An encoder at chance whose
    provenance views carry more variance than any rank-2 subspace of their complement (no energy-matched random
    control exists, which made Verify raise) gets ``not assessable`` with its reason; an encoder above chance gets
    a verdict of the three."""
    assert SHIPPED_AUDIT["random_match"] == "energy"
    out = {}
    for name, shift, mu_u in (("chance", 6.0, 0.0), ("above", 2.0, 1.5)):
        path = _npz(tmp_path, paired_data(seed=2, shift=shift, mu_u=mu_u), f"{name}.npz")
        out[name] = run_audit({**SHIPPED_AUDIT, "embeddings": str(path), "out_dir": str(tmp_path / name)})
    r = out["chance"]
    cu = r.stress["control_utility"]
    assert not cu["above_chance"] and cu["low"] <= 0.5 <= cu["high"]
    assert r.verdict == "not assessable" and r.verify is None
    assert r.reasons[0].startswith("not assessable: the encoder's task score") and "fix: audit an encoder" in r.reasons[0]
    md = (tmp_path / "chance" / f"audit_{r.config_hash[:16]}.md").read_text()
    assert "**Verdict: not assessable.**" in md and "not above chance (0.5)" in md
    assert r.stress["reliance"]  # the stress step finds reliance: Verify would have run (and raised, before)
    a = out["above"]
    assert a.stress["control_utility"]["above_chance"] and a.verdict in ("certified", "refused", "no reliance")
    assert a.config["random_match"] == "energy" and a.config["n_boot"] == SHIPPED_AUDIT["n_boot"]


def test_provenance_absent_from_embedding_gives_zero_lpi_and_no_reliance():
    r = audit_embeddings(*paired_data(seed=1, shift=0.0), FAST)
    assert r.verdict == "no reliance"
    assert r.intervene is None and r.verify is None
    assert abs(r.recover["lpi_bits"]) < 0.02 and r.recover["low"] <= 0 <= r.recover["high"]
    assert abs(r.stress["G"]["estimate"]) < 0.01


def test_observational_accessible_but_barely_associated_is_no_reliance():
    r = audit_embeddings(*observational_data(agree=0.55), FAST)
    assert r.recover["low"] > 0.2  # the device is decodable...
    assert r.verdict == "no reliance"  # ...but the exposed head has little association to exploit
    assert r.stress["G"]["estimate"] < 0.01
    k = round(0.55 * 30)  # matching subjects per class among the 30 training subjects of each class
    assert r.stress["rotations"][0]["aligned_odds"] == pytest.approx((k / (30 - k)) ** 2, rel=1e-12)


def test_observational_device_shortcut_is_certified():
    r = audit_embeddings(*observational_data(n_subj=200, agree=0.75), FAST)
    assert r.verdict == "certified"
    assert r.intervene["method"] == "observational" and r.intervene["rank"] == 1
    assert r.stress["rotations"][0]["shortcut"] == "devB"
    assert r.verify["G_after"]["estimate"] < 0.5 * r.stress["G"]["estimate"]


def test_split_masks_equal_split_labels():
    z, y, prov, subject, record, split = observational_data(agree=0.55)
    masks = {s: split == s for s in ("train", "val", "test")}
    a = audit_embeddings(z, y, prov, subject, record, split, FAST)
    b = audit_embeddings(z, y, prov, subject, record, masks, FAST)
    assert a.to_dict() == b.to_dict()


def _npz(tmp_path, data, name="emb.npz"):
    emb, y, prov, subject, record, split = data
    path = tmp_path / name
    np.savez(path, emb=emb, y=y, provenance=prov, subject=subject, record=record, split=split)
    return path


def test_run_audit_writes_json_and_markdown_and_resumes(tmp_path, monkeypatch):
    path = _npz(tmp_path, paired_data(seed=2))
    cfg = {"embeddings": str(path), "out_dir": str(tmp_path / "out"), "name": "synthetic-nmt", **FAST}
    rep = run_audit(cfg)
    files = sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != OUT_DIR_LOCK)  # the out_dir lock: hidden
    stem = f"audit_{rep.config_hash[:16]}"
    assert files == [f"{stem}.json", f"{stem}.md", f"{stem}_remedy.npz"]
    d = json.loads((tmp_path / "out" / f"{stem}.json").read_text())
    assert d["schema"] == "physiotrace-audit/1" and d["verdict"] == rep.verdict == "certified"
    assert d == rep.to_dict()
    md = (tmp_path / "out" / f"{stem}.md").read_text()
    for section in ("## Recover", "## Stress", "## Intervene", "## Verify", "**Verdict: certified.**", "bits per view"):
        assert section in md
    remedy = np.load(tmp_path / "out" / f"{stem}_remedy.npz")
    assert remedy["basis"].shape == (16, 2) and remedy["scaler_mean"].shape == (16,)
    np.testing.assert_allclose(remedy["basis"], rep.remedy["basis"])
    np.testing.assert_allclose(remedy["basis"].T @ remedy["basis"], np.eye(2), atol=1e-12)
    # resume: the same config and data are read back, nothing is recomputed
    import eegfm_bench.provenance.audit as audit_mod
    monkeypatch.setattr(audit_mod, "_paired", lambda *a, **k: pytest.fail("recomputed"))
    again = run_audit(cfg)
    assert again.resumed and again.to_dict() == rep.to_dict()
    assert AuditReport.from_json(tmp_path / "out" / f"{stem}.json").to_dict() == rep.to_dict()


def test_run_audit_pairs_long_format_views(tmp_path):
    emb, y, views, subject, record, split = paired_data(seed=3)
    n, K, d = emb.shape
    long = dict(emb=emb.reshape(n * K, d), provenance=np.tile(views, n), y=np.repeat(y, K),
                subject=np.repeat(subject, K), record=np.repeat(record, K), split=np.repeat(split, K))
    path = tmp_path / "long.npz"
    np.savez(path, **long)
    rep = run_audit({"embeddings": str(path), "out_dir": str(tmp_path / "o"), "paired": True,
                      "views": list(views), **FAST})
    direct = audit_embeddings(emb, y, views, subject, record, split, FAST)
    assert rep.stress["G"]["estimate"] == pytest.approx(direct.stress["G"]["estimate"], abs=1e-9)
    # drop one view of one record: the views no longer cover the same records
    keep = ~((long["record"] == record[0]) & (long["provenance"] == "Cz"))
    np.savez(path, **{k: v[keep] for k, v in long.items()})
    with pytest.raises(ValueError, match="views are not paired"):
        run_audit({"embeddings": str(path), "out_dir": str(tmp_path / "o2"), "paired": True, **FAST})


def test_bad_inputs_name_the_fix():
    emb, y, views, subject, record, split = paired_data(seed=4)
    z, yo, prov, so, ro, spo = observational_data()
    with pytest.raises(ValueError, match="single group.*fix"):
        audit_embeddings(z, yo, np.full_like(prov, "devA"), so, ro, spo, FAST)
    with pytest.raises(ValueError, match="single group.*fix"):
        audit_embeddings(emb[:, :1], y, views[:1], subject, record, split, FAST)
    shuffled = np.tile(views, (len(y), 1))
    shuffled[5] = shuffled[5][::-1]
    with pytest.raises(ValueError, match="views are not paired.*fix"):
        audit_embeddings(emb, y, shuffled, subject, record, split, FAST)
    with pytest.raises(InfeasibleRegimeError, match=r"feasible agreement lies strictly between .* odds 0 < OR < inf"):
        audit_embeddings(emb, y, views, subject, record, split, {**FAST, "extra_regimes": {"strong": {"agreement": 0.99}}})
    with pytest.raises(ValueError, match=r"held-out split has 18 subjects, fewer than the 30 .*fix"):
        audit_embeddings(emb, y, views, subject, record, split, {**FAST, "min_clusters": 30})
    leaky = split.copy()
    leaky[np.flatnonzero(subject == 0)[0]] = "test"
    with pytest.raises(ValueError, match="more than one split.*fix"):
        audit_embeddings(emb, y, views, subject, record, leaky, FAST)
    with pytest.raises(ValueError, match="binary 0/1"):
        audit_embeddings(emb, y + 1, views, subject, record, split, FAST)
    with pytest.raises(ValueError, match="unknown audit config keys"):
        audit_embeddings(emb, y, views, subject, record, split, {"n_bootstrap": 10})


def test_every_verdict_says_whether_one_held_out_subject_decides_it(certified, refused):
    """Issue 33 item 8: the verdict recomputed from the same heads and logits without each of the 18 held-out
    subjects. On all subjects it must equal the audit's own verdict (the same decisions in the same order); these
    synthetic effects are strong, so no single subject decides them. A flip is written beside the verdict."""
    from eegfm_bench.reports.audit import stability_mark

    for r in (certified, refused):
        st = r.stability
        assert st["verdict"] == r.verdict and st["n_subjects"] == r.data["n_subjects"]["test"] == 18
        assert st["flips"] == {} and st["undecided"] == []
        assert "rests on one subject" not in r.to_markdown()
    assert stability_mark({"flips": {"S07": "no reliance"}}) == " — rests on one subject (S07 → no reliance)"
    flipped = AuditReport(**{**certified.to_dict(), "stability": {**certified.stability, "flips": {"7": "refused"}}})
    assert "**Verdict: certified — rests on one subject (7 → refused).**" in flipped.to_markdown()


def test_shipped_settings_above_chance_with_views_carrying_the_top_variance(tmp_path):
    """Issue 33 item 5, above chance: an encoder that has learned the task (control utility above chance) and whose
    three views differ by more than any target-free direction (``shift=6``: the view plane is the embedding's top
    variance), audited with the shipped ``random_match: energy``. No rank-2 subspace of the view plane's complement
    can carry its energy; Verify used to raise. Now it draws the controls in the whole space, energy-matched, and
    the report says so."""
    path = _npz(tmp_path, paired_data(seed=2, shift=6.0, mu_u=1.5), "above_high.npz")
    r = run_audit({**SHIPPED_AUDIT, "embeddings": str(path), "out_dir": str(tmp_path / "a")})
    assert r.stress["control_utility"]["above_chance"] and r.stress["reliance"]
    assert r.verdict in ("certified", "refused") and r.verify is not None
    rd = r.verify["random"]
    assert rd["requested_match"] == "energy" and rd["match"] == "energy_any"
    np.testing.assert_allclose(rd["energies"], rd["target_energy"], atol=1e-8)  # still energy-matched
    assert rd["target_energy"] > 0.3  # the view plane holds far more than the 2/16 a random plane would
    assert rd["match_fallback"].startswith("random_match 'energy': no rank-2 subspace outside the targeted one")
    assert rd["match_fallback"] in r.notes
    md = (tmp_path / "a" / f"audit_{r.config_hash[:16]}.md").read_text()
    assert "drawn in the whole embedding ('energy_any'" in md
