"""Bad inputs of the spine that are not covered by the data tests: one-class test folds, the LightningCLI path."""

import numpy as np
import pytest

from eegfm_bench.data.datamodule import EEGDataModule
from eegfm_bench.data.windows import WindowSet
from eegfm_bench.metrics import classification_metrics

from eegfm_testutils import requires_data


def _ws(n_subjects=4, per=6):
    rng = np.random.default_rng(0)
    subj = np.repeat([f"S{i}" for i in range(n_subjects)], per)
    y = np.tile([0, 1], n_subjects * per // 2)
    y[subj == "S0"] = 0  # subject S0 holds only class 0
    X = rng.standard_normal((len(y), 3, 512)).astype(np.float32)
    return WindowSet(X, y, subj, np.char.add(subj, "R1"), np.arange(len(y)), np.full(len(y), "toy"),
                     ["C3", "Cz", "C4"], 128.0, ["a", "b"], {"cache_key": "toy"})


def test_one_class_test_fold_warns_and_reports_defined_metrics():
    ws = _ws()
    with pytest.warns(UserWarning, match="only classes \\[0\\]"):
        dm = EEGDataModule(task="eegmmidb_mi", backbone="eegnet", fold=0, scheme="loso", n_val_groups=1, ws=ws)
    assert set(ws.subject[dm.test_idx]) == {"S0"}
    y = ws.y[dm.test_idx]
    probs = np.tile([[0.7, 0.3]], (len(y), 1))
    probs[:2] = [0.2, 0.8]
    with pytest.warns(UserWarning, match="one class"):
        m = classification_metrics(y, probs)
    assert m["balanced_accuracy"] == pytest.approx(4 / 6)  # recall of the only class present
    assert np.isnan(m["auroc"]) and np.isnan(m["cohen_kappa"])


def test_metrics_known_values():
    y = np.array([0, 0, 1, 1, 1, 1])
    probs = np.array([[.9, .1], [.4, .6], [.2, .8], [.3, .7], [.6, .4], [.1, .9]])
    m = classification_metrics(y, probs)
    assert m["balanced_accuracy"] == pytest.approx((1 / 2 + 3 / 4) / 2)
    assert m["accuracy"] == pytest.approx(4 / 6)  # plain accuracy beside the balanced one
    assert m["auroc"] == pytest.approx(7 / 8)  # 7 of 8 (pos, neg) pairs ranked correctly


def test_one_class_validation_logs_auroc_nan_not_zero():
    import torch

    from eegfm_bench.models.module import FMClassifier

    m = FMClassifier(backbone="eegnet", head="flatten", regime="full", ch_names=["C3", "Cz", "C4"], n_times=256,
                     n_classes=2, backbone_kwargs={"F1": 4, "D": 1, "kernel_length": 16})
    logged = {}
    m.log_dict = lambda d, **k: logged.update({a: float(b) for a, b in d.items()})
    m.log = lambda *a, **k: None
    x = torch.randn(6, 3, 256)
    m.validation_step({"x": x, "y": torch.zeros(6, dtype=torch.long)}, 0)
    with pytest.warns(UserWarning):
        m.on_validation_epoch_end()
    assert np.isnan(logged["val/auroc"]) and np.isnan(logged["val/kappa"]) and logged["val/acc"] >= 0.0
    m.validation_step({"x": x, "y": torch.tensor([0, 1, 0, 1, 0, 1])}, 0)
    m.on_validation_epoch_end()
    assert np.isfinite(logged["val/auroc"])  # both classes again: defined (the counts were reset)


def test_summary_counts_the_folds_behind_each_metric():
    import pandas as pd

    from eegfm_bench.reports.cv import summary_table

    rows = []
    for fold, auroc in enumerate([0.8, 0.7, float("nan")]):
        for metric, v in (("balanced_accuracy", 0.6 + 0.1 * fold), ("accuracy", 0.7), ("auroc", auroc)):
            rows.append({"model": "m", "init": "random", "regime": "full", "head": "mean", "condition": "clean",
                         "metric": metric, "value": v, "fold": fold})
    t = summary_table(pd.DataFrame(rows))
    r = t.iloc[0]
    assert r["folds"] == 3 and r["balanced_accuracy"] == "0.700 ± 0.100" and r["accuracy"] == "0.700 ± 0.000"
    assert r["auroc"] == "0.750 ± 0.071 (2 folds)"  # the one-class fold's NaN is not averaged in, and it says so


@requires_data
def test_lightning_cli_fit_one_epoch(tmp_path):
    from eegfm_bench.cli import main

    args = ["fit", "--model.backbone=eegnet", "--model.head=flatten", "--model.regime=full",
            "--model.backbone_kwargs={F1: 4, D: 1, kernel_length: 16}",
            "--data.task=eegmmidb_eyes", "--data.subjects=[1, 2, 3]", "--data.k=3", "--data.max_windows_per_subject=2",
            f"--data.split_file={tmp_path}/splits.json", f"--data.cache_dir={tmp_path}/cache", "--data.batch_size=4",
            "--trainer.max_epochs=1", "--trainer.accelerator=cpu", "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}"]
    assert main(args) == 0
    assert (tmp_path / "splits.json").is_file()
    ckpts = list(tmp_path.rglob("*.ckpt"))
    assert ckpts, "LightningCLI fit wrote no checkpoint"
    assert list(tmp_path.rglob("config.yaml"))


def _validate_with_predictions(y: list[int], pred: list[int], n_classes: int) -> tuple[dict, list[str]]:
    """``Trainer.validate`` of an FMClassifier whose logits are fixed (argmax ``pred``) on targets ``y``: the
    logged ``val/*`` and the warnings raised."""
    import warnings

    import lightning as L
    import torch

    from eegfm_bench.models.module import FMClassifier

    m = FMClassifier(backbone="eegnet", head="flatten", regime="full", ch_names=["C3", "Cz", "C4"], n_times=256,
                     n_classes=n_classes, backbone_kwargs={"F1": 4, "D": 1, "kernel_length": 16})
    m._logits = lambda batch: batch["logits"]
    logits = torch.nn.functional.one_hot(torch.tensor(pred), n_classes).float() * 4.0
    batch = {"x": torch.zeros(len(y), 3, 256), "y": torch.tensor(y), "logits": logits}
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                        accelerator="cpu", devices=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = trainer.validate(m, torch.utils.data.DataLoader([batch], batch_size=None), verbose=False)[0]
    return out, [str(w.message) for w in caught]


def test_one_class_validation_bacc_is_nan_with_a_note_not_half_the_accuracy():
    """Issue 34.6: 10 windows of class 0, 6 predicted right and 4 as class 1. torchmetrics' macro accuracy logged
    (0.6 + 0) / 2 = 0.300 beside val/acc 0.600; balanced accuracy over one class is undefined: NaN, and a note."""
    out, notes = _validate_with_predictions([0] * 10, [0] * 6 + [1] * 4, 2)
    assert out["val/acc"] == pytest.approx(0.6)
    assert np.isnan(out["val/bacc"]) and np.isnan(out["val/auroc"]) and np.isnan(out["val/kappa"])
    note = [n for n in notes if n.startswith("the validation set holds only class [0] of 2: val/bacc")]
    assert len(note) == 1 and "fix: split.n_val_groups >= 2" in note[0]
    # every class present: balanced accuracy as before (mean recall), no note
    out, notes = _validate_with_predictions([0] * 5 + [1] * 5, [0] * 3 + [1] * 2 + [1] * 5, 2)
    assert out["val/bacc"] == pytest.approx((3 / 5 + 1) / 2) and not [n for n in notes if "validation set" in n]


def test_validation_missing_one_of_three_classes_averages_the_classes_present():
    """Two of three classes present, the third predicted once: the mean recall over the classes present (as
    scikit-learn's balanced accuracy, which test/bacc uses), not (0.5 + 1 + 0) / 3."""
    from sklearn.metrics import balanced_accuracy_score

    y, pred = [0, 0, 1, 1], [0, 2, 1, 1]
    out, notes = _validate_with_predictions(y, pred, 3)
    with pytest.warns(UserWarning, match="y_pred contains classes not in y_true"):
        want = balanced_accuracy_score(y, pred)
    assert out["val/bacc"] == pytest.approx(0.75) == want
    assert not [n for n in notes if "validation set holds only" in n]


def test_a_one_class_validation_set_selects_the_epoch_on_val_loss_not_on_an_undefined_balanced_accuracy():
    """Early stopping on a NaN val/bacc would stop after epoch one with its weights; on one validation class the
    cv selects on val/loss instead and says so (``selection_metric``); on two classes it keeps val/bacc."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from eegfm_bench.trainer import fit_callbacks, selection_metric

    assert selection_metric(np.array([0, 1, 1, 0])) == ("val/bacc", "max", "")
    monitor, mode, note = selection_metric(np.array([1, 1, 1]))
    assert (monitor, mode) == ("val/loss", "min")
    assert "only class 1" in note and "split.n_val_groups" in note
    cbs, ckpt = fit_callbacks("/tmp/unused", patience=3, monitor=monitor, mode=mode)
    early = next(c for c in cbs if isinstance(c, EarlyStopping))
    assert (early.monitor, early.mode, ckpt.monitor, ckpt.mode) == ("val/loss", "min", "val/loss", "min")
    assert isinstance(ckpt, ModelCheckpoint)
