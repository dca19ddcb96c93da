"""The extension guide's examples (docs/extending/*.py, included in docs/guide/extending.md) run through the real
paths: the backbone and the head in a cv on staged EEG, the condition in a sweep of that cv's checkpoint, the source
in an ingest of the staged EEGMAT files whose windows must equal those of ``source: files``."""
from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from eegfm_testutils import REPO, requires_data

EXAMPLES = REPO / "docs" / "extending"


@pytest.fixture(scope="module")
def examples():
    """The four example modules, imported as a user's own modules are (their registrations run on import); the
    registrations and the modules are removed afterwards, so other tests see the built-in names only."""
    from eegfm_bench.data.sources import SOURCES
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.heads import HEADS
    from eegfm_bench.perturb.conditions import CONDITION_KINDS

    names = ("my_head", "my_condition", "my_backbone", "my_source")
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(str(EXAMPLES))
        for registry, name in ((HEADS, "rms"), (CONDITION_KINDS, "flat"), (BACKBONES, "patch_conv"),
                               (SOURCES, "named_edf")):
            registry._items.pop(name, None)
        for n in names:
            sys.modules.pop(n, None)


def test_every_example_is_included_in_the_guide():
    guide = (REPO / "docs" / "guide" / "extending.md").read_text()
    for name in ("my_head", "my_condition", "my_source", "my_backbone"):
        assert f"```{{literalinclude}} ../extending/{name}.py" in guide, name


def test_the_head_and_the_backbone_have_the_shapes_and_poolings_they_declare(examples):
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.heads import HEADS, pool_tokens, token_poolings

    backbone = BACKBONES.get("patch_conv")(["C3", "Cz", "C4"], 512)
    tokens = backbone.tokens(torch.randn(2, 3, 512))
    assert tuple(tokens.shape) == (2, 8, 8) and backbone.n_tokens() == 8
    head = HEADS.get("rms")(n_tokens=8, d_model=8, n_classes=2)
    assert tuple(head(tokens).shape) == (2, 2) and head.n_parameters == 8 * 2 + 2
    t = np.array([[[3.0, -1.0], [4.0, 1.0]]])  # rms over tokens: [5/sqrt(2), 1]
    np.testing.assert_allclose(pool_tokens(t, "rms"), [[5 / np.sqrt(2), 1.0]])
    assert "rms" in token_poolings()


def test_the_condition_flattens_k_channels_drawn_per_window(examples):
    from eegfm_bench.perturb.conditions import parse_condition
    from eegfm_bench.perturb.rng import WindowRNG

    cond = parse_condition("flat=3")
    assert type(cond).__name__ == "FlatChannels" and cond.name == "flat=3" and cond.plot[1] == 3.0
    x = np.random.default_rng(0).normal(size=(6, 8, 100)).astype(np.float32)
    names, uids = [f"c{i}" for i in range(8)], [10, 11, 12, 13, 14, 15]
    out, kept = cond.apply(x, names, WindowRNG.for_windows(0, cond.name, uids), None)
    flat = np.ptp(out, axis=-1) == 0  # (window, channel): a constant line
    assert kept == names and flat.sum(axis=1).tolist() == [3] * 6
    np.testing.assert_allclose(out[flat][:, 0], x.mean(axis=-1)[flat], rtol=1e-5)  # each at its own mean
    np.testing.assert_array_equal(out[~flat], x[~flat])  # the other channels untouched
    assert len({tuple(np.flatnonzero(r)) for r in flat}) > 1  # each window draws its own channels
    alone, _ = cond.apply(x[2:3], names, WindowRNG.for_windows(0, cond.name, uids[2:3]), None)
    np.testing.assert_array_equal(alone[0], out[2])  # a window's perturbation ignores its batch


@requires_data
def test_the_backbone_and_head_run_in_a_cv_and_the_condition_in_its_sweep(examples, tmp_path):
    from eegfm_bench import run_cv
    from eegfm_bench.cli import main

    cv_dir = tmp_path / "cv"
    cfg = {"experiment": "ext", "task": "eegmmidb_eyes", "out_dir": str(cv_dir), "seed": 0, "confound": False,
           "data": {"max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu"},
           "runs": [{"model": "patch_conv", "regime": "full", "heads": ["rms"], "backbone_kwargs": {"d_model": 4}}]}
    run_cv(cfg, progress=False)
    rows = pd.read_parquet(cv_dir / "results.parquet")
    assert set(rows["model"]) == {"patch_conv"} and set(rows["head"]) == {"rms"}
    acc = rows[rows.metric == "balanced_accuracy"].value
    assert len(acc) == 1 and 0.0 <= acc.iloc[0] <= 1.0
    assert rows[rows.metric == "head_params"].value.iloc[0] == 4 * 2 + 2  # rms head on d_model 4, 2 classes

    import yaml

    out = tmp_path / "sweep"
    conds = ["clean", "flat=0", "flat=64"]  # flat=64: every channel of every window (eegmmidb has 64)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"cv_out_dir": str(cv_dir), "out_dir": str(out), "batch_size": 16, "trainer": {"accelerator": "cpu"},
         "conditions": conds, "reference": None}))
    assert main(["sweep", "--config", str(tmp_path / "sweep.yaml"), "--no-progress"]) == 0
    assert json.loads((out / "failures.json").read_text()) == []
    df = pd.read_csv(out / "results.csv")
    bacc = df[df.metric == "balanced_accuracy"].set_index("condition").value
    assert list(bacc.index) == conds
    assert bacc["flat=0"] == bacc["clean"]  # no channel flat: the clean windows, the same score
    # every channel flat at its mean (~0 after the 1-40 Hz band-pass): one class predicted for all windows
    assert bacc["flat=64"] == 0.5


@requires_data
def test_the_source_ingests_the_staged_files_as_the_files_source_does(examples, tmp_path):
    from eegfm_bench.data.preprocessing import Preprocessing
    from eegfm_bench.data.windows import load_windows

    prep = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)
    common = {"root": "eegmat", "classes": ["rest", "task"], "windows": {"mode": "fixed"}}
    mine = {"name": "mat_named", "source": "named_edf", "named_edf": {"conditions": {"1": "rest", "2": "task"}},
            **common}
    files = {"name": "mat_files", "source": "files", "labels": {"map": {"1": "rest", "2": "task"}},
             "files": {"glob": "*.edf", "pattern": r"^(?P<subject>Subject\d+)_(?P<label>\d)\.edf$"}, **common}
    ws = load_windows(mine, prep, subjects=[0, 1], cache_dir=tmp_path / "c", progress=False)
    ref = load_windows(files, prep, subjects=[0, 1], cache_dir=tmp_path / "c", progress=False)
    assert set(ws.subject) == {"Subject00", "Subject01"} and len(ws.y) == len(ref.y) > 0
    assert np.bincount(ws.y).tolist() == np.bincount(ref.y).tolist() and len(set(ws.y.tolist())) == 2
    np.testing.assert_array_equal(np.asarray(ws.X), np.asarray(ref.X))
