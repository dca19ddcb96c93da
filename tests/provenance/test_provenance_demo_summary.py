"""The demo's summary.md marks a verdict that one held-out subject decides, as the audit's own Markdown does
(issue 33 item 8; seen on the shipped eegmat demo: seed 1's audit said "rests on one subject", its summary did not)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from eegfm_bench.provenance.audit import AuditReport, audit_embeddings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_summary_marks_a_verdict_that_rests_on_one_subject():
    demo = _load("provenance_demo", ROOT / "scripts" / "provenance_demo.py")
    synth = _load("provenance_audit_synth", HERE / "test_provenance_audit.py")
    rep = audit_embeddings(*synth.paired_data(seed=2), synth.FAST)  # a view shortcut removed: certified, all steps run
    assert rep.verdict == "certified"
    views = ["original", "average", "Cz"]
    enc = {**{v: 0.7 for v in views}, "heads_train": 0.9}
    cfg = {"task": "synthetic", "audit": {"level": 0.95, "n_boot": synth.FAST["n_boot"]}}
    info = {"views": views, "subjects": {"train": ["a"], "val": ["b"], "test": ["c"]}, "recorded_reference": "x",
            "n_test_windows": 48, "wall_s": 1.0}
    rows = {}
    for seed, flips in ((0, {}), (1, {"S07": "refused"})):
        r = AuditReport(**{**rep.to_dict(), "stability": {**rep.stability, "flips": flips}})
        rows[seed] = {**demo.seed_summary(r, enc), "train_s": 1.0, "audit_s": 1.0}
    md = demo.summary_markdown(cfg, rows, info)
    assert "| verdict | **certified** | **certified — rests on one subject (S07 → refused)** | **certified** |" in md
    assert rows[1]["stability"]["flips"] == {"S07": "refused"}  # and summary.json carries the stability
