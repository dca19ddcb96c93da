"""``BlockProbe`` and ``Attribution`` as Lightning callbacks after fit, on the synthetic C3/C4 task."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from interpret_synth import CHS, synthetic


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.data.splits import SplitSpec, make_split
    from eegfm_bench.data.windows import WindowSet
    from eegfm_bench.callbacks.attribution import Attribution
    from eegfm_bench.callbacks.probes import BlockProbe
    from eegfm_bench.models.module import FMClassifier

    out = tmp_path_factory.mktemp("cb")
    X, y = synthetic(60, seed=4)
    subj = np.array([f"S{i % 6}" for i in range(len(y))])
    ws = WindowSet(X, y, subj, np.array([f"{s}R" for s in subj]), np.arange(len(y)), np.full(len(y), "synthetic"),
                   CHS, 200.0, ["minus", "plus"], {"cache_key": "synthetic-cb", "dataset": "synthetic",
                                                   "task": "synthetic"})
    split = make_split(y, subj, SplitSpec("kfold", 3, 0, 1), "synthetic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm = EEGDataModule(task="synthetic", backbone="eegnet", fold=0, batch_size=16, ws=ws, split=split)
        model = FMClassifier(backbone="eegnet", head="flatten", regime="full", ch_names=CHS, n_times=400,
                             n_classes=2, lr=1e-2, backbone_kwargs={"F1": 4, "D": 2, "kernel_length": 32,
                                                                    "drop_prob": 0.0})
        trainer = L.Trainer(max_epochs=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[ModelCheckpoint(dirpath=out / "ckpt", monitor="val/bacc", mode="max"),
                                       BlockProbe(out / "probes", experiment="cb", cache_dir=out / "cache",
                                                  probe_kwargs={"max_epochs": 5}),
                                       Attribution(out / "attr", methods=["gxi", "attnlrp"],
                                                   conditions=["clean", "dropout_p=0.5_zero"], experiment="cb",
                                                   randomisation_windows=2, conservation_windows=2)])
        trainer.fit(model, dm)
    return out


def test_block_probe_callback_writes_rows_table_and_plot(fitted):
    df = pd.read_csv(fitted / "probes" / "results.csv")
    # eegnet: 2 blocks × 2 poolings × {frozen, fine-tuned}
    assert len(df) == 8 and set(df["stage"]) == {"frozen", "fine-tuned"}
    assert set(df["metric"]) == {"probe_bacc_block00", "probe_bacc_block01"}
    assert df["value"].between(0, 1).all() and set(df["regime"]) == {"frozen", "full"}
    assert (fitted / "probes" / "probes.md").read_text().count("| 1 | 1.00 |") == 1
    assert (fitted / "probes" / "probe_curves.png").stat().st_size > 1000


def test_attribution_callback_maps_checks_and_perturbation(fitted):
    root = fitted / "attr" / "eegnet-full-flatten"
    df = pd.read_csv(fitted / "attr" / "results.csv")
    assert set(df["condition"]) == {"clean", "dropout_p=0.5_zero"}
    cons = df[df["metric"] == "attnlrp:conservation_ratio_cp"]["value"]
    assert np.allclose(cons, 1.0, atol=1e-3)
    for cond in ("clean", "dropout_p-0.5_zero"):
        z = np.load(root / cond / "attnlrp" / "maps.npz")
        assert z["class_averaged"].shape == (len(CHS),) and z["per_class"].shape == (2, len(CHS))
        assert (root / cond / "attnlrp" / "topomap.png").is_file()
    # one fold: the class-averaged map is the mean |R| map of that fold's selected windows
    fold = np.load(root / "clean" / "gxi" / "fold0.npz")
    agg = np.load(root / "clean" / "gxi" / "maps.npz")
    np.testing.assert_allclose(agg["class_averaged"], fold["channel"].mean(0), rtol=1e-6)
    np.testing.assert_allclose(fold["channel"], np.abs(fold["maps"].astype(np.float32)).mean(-1), atol=1e-3)
    assert np.all(fold["confidence"][:-1] >= fold["confidence"][1:])  # sorted by confidence
    # the perturbation reached the maps: zero-padded channels carry exactly no relevance (x = 0 there), clean ones do
    from eegfm_bench.perturb.channels import dropout_mask

    dropped = [CHS.index(c) for c in dropout_mask(CHS, 0.5, 0, "synthetic", rule="paper").dropped]
    assert dropped
    for method in ("gxi", "attnlrp"):
        pert = np.load(root / "dropout_p-0.5_zero" / method / "fold0.npz")
        clean = np.load(root / "clean" / method / "fold0.npz")
        assert np.all(pert["channel"][:, dropped] == 0), method
        assert np.all(clean["channel"][:, dropped].sum(1) > 0), method
