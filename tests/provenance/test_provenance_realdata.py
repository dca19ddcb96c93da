"""Paired reference views of real eegmat windows, metadata provenance, and the ``eegfm-bench audit`` command.

Real-data tests read ``$EEGFM_DATA/eegmat`` (skipped when absent); the CLI test runs on a small synthetic npz
whose answer is known by construction (paper 000 §4.2: a view shortcut the exposed head reads).
"""
import dataclasses
import json

import numpy as np
import pytest
import yaml

from eegfm_testutils import DATA

HAVE_EEGMAT = (DATA / "eegmat" / "Subject00_1.edf").is_file()
requires_eegmat = pytest.mark.skipif(not HAVE_EEGMAT, reason=f"staged eegmat not found under {DATA}")


@pytest.fixture(scope="module")
def eegmat_windows():
    from eegfm_bench.data.preprocessing import Preprocessing
    from eegfm_bench.data.windows import load_windows

    # the demo's preprocessing (EEGNet's: 128 Hz, 1-40 Hz, µV, 4 s) without re-referencing; built here rather than
    # read from the adapter so the test does not import braindecode
    prep = Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0, reference="none")
    # Subject02 (recorded 2012): its two records (rest, arithmetic), 6 windows of each; one subject keeps the
    # cache build (MNE read, filter, resample) short
    return load_windows("eegmat", prep, subjects=[2], max_windows_per_subject=6, progress=False)


@pytest.mark.realdata
@requires_eegmat
def test_paired_views_share_windows_and_differ_in_reference(eegmat_windows):
    from eegfm_bench.provenance.data import make_paired_views

    ws = eegmat_windows
    pw = make_paired_views(ws)
    n = len(ws)
    assert n == 12 and pw.X.shape == (12, 3, 19, 512) and pw.X.dtype == np.float32
    assert pw.views == ("original", "average", "Cz") and pw.meta["recorded_reference"] == "linked ears (A1+A2)"
    assert pw.provenance.shape == (12, 3) and (pw.provenance == np.array(pw.views)).all()
    # paired: the long format repeats the same subject / record / label / window for every view
    lw = pw.long_format()
    assert lw.X.shape == (36, 19, 512)
    for attr in ("y", "subject", "recording", "window_index"):
        per_view = getattr(lw, attr).reshape(n, 3)
        assert (per_view == getattr(ws, attr)[:, None]).all(), attr
    assert lw.provenance.reshape(n, 3).tolist() == [list(pw.views)] * n
    np.testing.assert_array_equal(lw.X.reshape(pw.X.shape), pw.X)
    assert ws.y.tolist() == [0] * 6 + [1] * 6
    assert sorted(set(ws.recording.tolist())) == ["Subject02_1", "Subject02_2"]
    # original = as recorded (linked ears): a large common mode across channels
    X0, Xa, Xc = pw.X[:, 0], pw.X[:, 1], pw.X[:, 2]
    np.testing.assert_array_equal(X0, np.asarray(ws.X))
    assert np.abs(X0.mean(axis=1)).mean() > 1.0  # µV
    # average view: zero channel mean at every sample
    assert np.abs(Xa.mean(axis=1)).max() < 1e-4
    np.testing.assert_allclose(Xa, X0 - X0.mean(axis=1, keepdims=True), atol=1e-4)
    # Cz view: Cz is exactly zero, every channel minus Cz
    cz = ws.ch_names.index("Cz")
    assert np.all(Xc[:, cz] == 0)
    np.testing.assert_allclose(Xc, X0 - X0[:, cz:cz + 1], atol=1e-4)
    assert np.abs(Xc - Xa).max() > 10.0 and np.abs(X0 - Xa).max() > 10.0


@pytest.mark.realdata
@requires_eegmat
def test_original_view_of_average_referenced_windows_is_refused(eegmat_windows):
    from eegfm_bench.provenance.data import make_paired_views

    ws = eegmat_windows
    car = dataclasses.replace(ws, meta={**ws.meta, "preprocessing": {**ws.meta["preprocessing"],
                                                                      "reference": "average"}})
    with pytest.raises(ValueError, match="reference='none'"):
        make_paired_views(car)
    # views that do not depend on the recorded reference are allowed
    pw = make_paired_views(car, ("average", "Cz"))
    assert pw.X.shape == (12, 2, 19, 512)
    with pytest.raises(ValueError, match="has no 'reference'"):
        make_paired_views(dataclasses.replace(ws, meta={}))
    with pytest.raises(ValueError, match="lacks"):
        make_paired_views(ws, ("original", "CZ"))


@pytest.mark.realdata
@requires_eegmat
def test_recording_year_is_observational_provenance(eegmat_windows):
    from eegfm_bench.provenance.data import metadata_provenance, subject_metadata

    ws = eegmat_windows
    years = metadata_provenance(ws, "Recording year")
    assert years.tolist() == ["2012"] * 12
    table = subject_metadata("eegmat", "Recording year")
    assert len(table) == 36 and table["Subject00"] == "2011" and table["Subject03"] == "2010"
    assert sorted(set(table.values())) == ["2010", "2011", "2012"]
    with pytest.raises(ValueError, match="Recording year"):
        subject_metadata("eegmat", "Device")
    with pytest.raises(ValueError, match="no per-subject metadata table"):
        subject_metadata("eegmmidb_mi", "Recording year")


def test_subject_split_is_identity_disjoint():
    from eegfm_bench.provenance.data import subject_split

    subject = np.repeat([f"S{i:02d}" for i in range(16)], 5)
    split, parts = subject_split(subject, n_val=3, n_test=5, seed=0, n_train=8)
    assert [len(parts[k]) for k in ("train", "val", "test")] == [8, 3, 5]
    assert not (set(parts["train"]) & set(parts["val"]) | set(parts["train"]) & set(parts["test"])
                | set(parts["val"]) & set(parts["test"]))
    for name, subs in parts.items():
        assert set(subject[split == name]) == set(subs)
        assert (split == name).sum() == 5 * len(subs)
    again, _ = subject_split(subject, n_val=3, n_test=5, seed=0, n_train=8)
    np.testing.assert_array_equal(split, again)
    short, p2 = subject_split(subject, n_val=2, n_test=2, seed=1, n_train=4)
    assert (short == "unused").sum() == 8 * 5 and len(p2["train"]) == 4
    with pytest.raises(ValueError, match="cannot split 16 subjects"):
        subject_split(subject, n_val=3, n_test=5, n_train=9)


# ------------------------------------------------------------------------------------------------ the CLI


def _paired_npz(path, seed=0, n_subj=48, win=4, d=12, K=3):
    """K views shift the embedding in a plane (dirs 1, 2); the target moves it along dir 0: the exposed head,
    fitted with the view–label association, reads the view plane and loses AUROC when it is reversed."""
    rng = np.random.default_rng(seed)
    n = n_subj * win
    subject = np.repeat(np.arange(n_subj), win)
    record = subject * 10 + (np.arange(n) % 2)
    y = rng.integers(0, 2, n_subj * 10 + 2)[record]
    base = rng.standard_normal((n, d))
    base[:, 0] += 1.5 * (y - 0.5)
    ang = 2 * np.pi * np.arange(K) / K
    delta = np.zeros((K, d))
    delta[:, 1], delta[:, 2] = 2.0 * np.cos(ang), 2.0 * np.sin(ang)
    emb = (base[:, None, :] + delta[None] + 0.3 * rng.standard_normal((n, K, d))).astype(np.float32)
    split = np.where(subject < 24, "train", np.where(subject < 34, "val", "test"))
    np.savez(path, emb=emb, y=y, provenance=np.array(["original", "average", "Cz"]), subject=subject.astype(str),
             record=record.astype(str), split=split)
    return path


def test_audit_cli_writes_json_and_markdown_and_resumes(tmp_path, capsys, monkeypatch):
    from eegfm_bench.cli import main

    npz = _paired_npz(tmp_path / "emb.npz")
    out = tmp_path / "audit"
    cfg = tmp_path / "audit.yaml"
    cfg.write_text(yaml.safe_dump({"embeddings": str(npz), "out_dir": str(out), "name": "cli synthetic",
                                   "n_boot": 200, "n_random": 10}))
    assert main(["audit", "--config", str(cfg)]) == 0
    printed = capsys.readouterr().out
    jsons = sorted(out.glob("audit_*.json"))
    assert len(jsons) == 1
    stem = jsons[0].with_suffix("")
    files = sorted(p.name for p in out.iterdir() if p.name != ".eegfm-bench.lock")  # the out_dir's lock: hidden
    assert files == [f"{stem.name}.json", f"{stem.name}.md", f"{stem.name}_remedy.npz", "report.html", "report.md",
                     "report_assets"]  # the audit and the experiment's page
    page = (out / "report.md").read_text()
    assert "Provenance audit" in page and "certified" in page
    d = json.loads(jsons[0].read_text())
    assert d["schema"] == "physiotrace-audit/1" and d["design"] == "paired"
    assert d["data"]["views"] == ["original", "average", "Cz"] and d["data"]["n_subjects"]["test"] == 14
    assert d["stress"]["G"]["estimate"] > 0.05 and d["stress"]["G"]["low"] > 0
    assert d["verdict"] == "certified"
    assert abs(d["verify"]["G_after"]["estimate"]) < 0.02
    md = stem.with_suffix(".md").read_text()
    assert "# PhysioTRACE audit: cli synthetic" in md and "**Verdict: certified.**" in md
    assert md in printed and f"wrote: {stem}.json" in printed
    # rerun: read back, nothing recomputed
    import eegfm_bench.provenance.audit as audit_mod

    monkeypatch.setattr(audit_mod, "_paired", lambda *a, **k: pytest.fail("the audit was recomputed"))
    mtime = jsons[0].stat().st_mtime_ns
    assert main(["audit", "--config", str(cfg)]) == 0
    printed = capsys.readouterr().out
    assert f"resumed (not recomputed): {stem}.json" in printed and "**Verdict: certified.**" in printed
    assert jsons[0].stat().st_mtime_ns == mtime


def test_audit_cli_config_without_embeddings_names_the_fix(tmp_path):
    from eegfm_bench.cli import main

    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump({"out_dir": str(tmp_path / "o")}))
    with pytest.raises(ValueError, match="needs 'embeddings'"):
        main(["audit", "--config", str(cfg)])
