"""``eegfm-bench probe`` / ``attribute`` on the fold checkpoints of a tiny real-data ``eegfm-bench cv`` run."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("EEGFM_DATA", REPO.parent / "shared" / "data"))
pytestmark = pytest.mark.skipif(not (DATA / "eegmmidb").is_dir(), reason=f"staged EEG not found at {DATA}")


@pytest.fixture(scope="module")
def cv_run(tmp_path_factory):
    from eegfm_bench.cli import main

    out = tmp_path_factory.mktemp("icli")
    cfg = {"experiment": "icli", "task": "eegmmidb_eyes", "out_dir": str(out / "cv"), "seed": 0,
           "data": {"max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}},
                    {"model": "labram", "regime": "head_only", "heads": ["flatten", "mean"],
                     "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]}
    (out / "cv.yaml").write_text(yaml.safe_dump(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["cv", "--config", str(out / "cv.yaml"), "--no-progress"]) == 0
    icfg = {"cv_dir": str(out / "cv"), "out_dir": str(out / "interp"),
            "probe": {"poolings": ["mean", "flatten"], "max_epochs": 3, "cache_dir": str(out / "cache")},
            "attribution": {"methods": ["gxi", "attnlrp", "gradcam"], "percentile": 0, "max_windows_per_fold": 2,
                            "conservation_windows": 1, "randomisation_windows": 1, "batch_size": 2}}
    (out / "interp.yaml").write_text(yaml.safe_dump(icfg))
    return out


def test_probe_cli_on_cv_checkpoints(cv_run, capsys):
    from eegfm_bench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["probe", "--config", str(cv_run / "interp.yaml"), "--no-progress"]) == 0
    df = pd.read_csv(cv_run / "interp" / "probes" / "results.csv")
    lab = df[df["model"] == "labram"]
    # head-only LaBraM: frozen stage only, 2 blocks × 2 poolings × 2 folds — its two heads share one frozen
    # backbone per fold, probed once; EEGNet: frozen + fine-tuned
    assert len(lab) == 8 and set(lab["stage"]) == {"frozen"}
    assert lab.groupby(["fold", "pooling", "block"]).size().eq(1).all()
    assert set(df[df["model"] == "eegnet"]["stage"]) == {"frozen", "fine-tuned"}
    z = np.load(cv_run / "interp" / "attention" / "labram.npz")
    assert z["frozen"].shape == (2, 2, 64) and "fine_tuned" not in z
    assert (cv_run / "interp" / "attention" / "labram_per_block.png").is_file()
    assert "probe_curves.png" in capsys.readouterr().out
    # the probe table reached the tracker (trainer.loggers: csv by default)
    logged = pd.read_csv(cv_run / "interp" / "probes" / "logs" / "probes" / "summary" / "metrics.csv")
    assert any(c.startswith("probe/labram/frozen/flatten/block01") for c in logged.columns)
    # the second run reads the block cache (no recomputation: same folders, untouched files)
    caches = sorted(p for p in (cv_run / "cache" / "features").iterdir() if not p.name.startswith("."))  # .locks
    stamps = {p: p.joinpath("meta.json").stat().st_mtime_ns for p in caches}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main(["probe", "--config", str(cv_run / "interp.yaml"), "--no-progress"])
    assert sorted(p for p in (cv_run / "cache" / "features").iterdir() if not p.name.startswith(".")) == caches
    assert {p: p.joinpath("meta.json").stat().st_mtime_ns for p in caches} == stamps


def test_attribute_cli_on_cv_checkpoints(cv_run):
    from eegfm_bench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["attribute", "--config", str(cv_run / "interp.yaml"), "--no-progress"]) == 0
    root = cv_run / "interp" / "attribution"
    df = pd.read_csv(root / "results.csv")
    assert set(df["model"]) == {"eegnet", "labram"}
    for cell in ("eegnet-full-flatten", "labram-head_only-flatten"):
        for method in ("gxi", "attnlrp", "gradcam"):
            z = np.load(root / cell / "clean" / method / "maps.npz")
            assert z["class_averaged"].shape == (64,) and np.all(z["class_averaged"] >= 0)
            assert z["class_averaged"].max() > 0  # a map, not the zeros of a skipped method
    cp = df[df["metric"] == "attnlrp:conservation_ratio_cp"]["value"]
    assert np.allclose(cp, 1.0, atol=0.01)
    closure = df[df["metric"] == "attnlrp:conservation_closure"]["value"]
    assert len(closure) == len(cp) and np.allclose(closure, 1.0, atol=0.01)
    assert (root / "overview_clean.png").is_file() and "conservation_ratio" in (root / "checks.md").read_text()
    skipped = root / "skipped.json"
    assert not skipped.exists() or isinstance(json.loads(skipped.read_text()), list)
