"""The demo's split with ``split.n_encoder``: heads on subjects the encoder never fitted (paper 000 §4.2 demo)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _demo():
    spec = importlib.util.spec_from_file_location("provenance_demo", ROOT / "scripts" / "provenance_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_encoder_subjects_are_disjoint_from_the_audit_splits():
    demo = _demo()
    pw = SimpleNamespace(subject=np.repeat([f"S{i:02d}" for i in range(16)], 3))
    sp = {"n_train": 9, "n_val": 2, "n_test": 5, "seed": 0}
    split0, enc0, subs0 = demo._subject_split(pw, sp)
    assert np.array_equal(enc0, split0 == "train") and "encoder" not in subs0  # shared: the paper's single split
    split, enc, subs = demo._subject_split(pw, {**sp, "n_encoder": 5})
    assert len(subs["encoder"]) == 5 and len(subs["train"]) == 4
    assert not set(subs["encoder"]) & (set(subs["train"]) | set(subs["val"]) | set(subs["test"]))
    assert set(subs["encoder"]) | set(subs["train"]) == set(subs0["train"])  # carved out of the training subjects
    assert set(split[enc]) == {"unused"} and not enc[split != "unused"].any()
    assert subs["val"] == subs0["val"] and subs["test"] == subs0["test"]
    with pytest.raises(ValueError, match="leave at least one training subject"):
        demo._subject_split(pw, {**sp, "n_encoder": 9})
