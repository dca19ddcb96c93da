"""Scrambled-label adaptation (paper 001 §3.6 "Adaptation-label dependence", §4.2.4, Control 4).

Adaptation (LoRA, or full fine-tuning) is run twice per fold and seed with *one* change: the source labels. The
correct-label run trains on the true labels; the scrambled-label run trains on labels permuted among the
windows of the training and validation subjects (the whole source side), with the permutation scheme of the
label-permutation control (``within_subject`` when every subject holds both classes, ``subject_label`` when the
label is per subject). Both runs use one fixed schedule: the same number of epochs with no early stopping (early
stopping on scrambled validation labels would give the two arms different schedules), the same seeds
(``seed_everything(seed + fold)``, ``init_seed``), data order, head and adaptation settings.

Then, as §4.2.4, the adapted encoder is *frozen* and the frozen probe (the controls' probe: scaler, optional PCA,
classifier) is refitted on the **true** training labels of the same fold and scored on the test fold. This is what
makes the control able to fail: an adaptation that learned nothing label-specific leaves the two encoders equally
good for the probe, so scrambled ≈ correct. (Scoring the scrambled arm's own head on the true test labels — the
earlier implementation — sits at chance by construction, so "correct > scrambled" always held.) The adapted
heads' own test predictions are kept too, as a descriptive extra. The contrast stays descriptive and unpaired
across seeds (:func:`eegfm_bench.controls.gates.scrambled_label_contrast`); it is not an equivalence test.
"""
from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import ModelCheckpoint

from eegfm_bench.controls.embeddings import align_rows, pool_cached_tokens, row_keys
from eegfm_bench.controls.permutation import check_scheme, infer_scheme, permute_labels
from eegfm_bench.data.datamodule import EEGDataModule
from eegfm_bench.models.features import extract_features
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.trainer import build_trainer, fit_callbacks

LABELINGS = ("correct", "scrambled")


def scrambled_source_labels(y: np.ndarray, groups: np.ndarray, source_idx: np.ndarray, scheme: str,
                            seed: int) -> tuple[np.ndarray, str]:
    """Labels with the source rows permuted and every other row unchanged.

    Parameters
    ----------
    y : ndarray of int, shape (n_windows,)
        True labels.
    groups : ndarray, shape (n_windows,)
        Subject per window.
    source_idx : ndarray of int
        Rows of the training and validation subjects of one fold.
    scheme : {"auto", "within_subject", "subject_label", "window"}
        Permutation scheme (:mod:`eegfm_bench.controls.permutation`), applied to the source rows only.
    seed : int
        Seed of the permutation.

    Returns
    -------
    y_scrambled : ndarray, shape (n_windows,)
    scheme : str
        The scheme used (``auto`` resolved).

    Raises
    ------
    ValueError
        If the scheme does not fit the source labels (naming the one that does).
    """
    y = np.asarray(y)
    groups = np.asarray(groups)
    src = np.asarray(source_idx, dtype=np.int64)
    if scheme == "auto":
        scheme = infer_scheme(y[src], groups[src])
    check_scheme(y[src], groups[src], scheme)
    out = y.copy()
    out[src] = permute_labels(y[src], groups[src], scheme, np.random.default_rng(seed))
    return out, scheme


def train_fold(*, task: str, model: str, regime: str, head: str, fold: int, split, ws, seed: int, init_seed: int,
               trainer_cfg: dict, optim: dict, batch_size: int, out_dir: str | Path, tag: str,
               backbone_kwargs: dict | None = None, head_kwargs: dict | None = None, lora: dict | None = None,
               pretrained: str | None = None, y_train: np.ndarray | None = None, progress: bool = False,
               fixed_epochs: bool = False, return_model: bool = False, user_model: dict | None = None):
    """Train and test one cv cell (run_cv's recipe), optionally on replaced training labels.

    Parameters
    ----------
    task, model, regime, head : str
        As in a cv run (``regime`` in ``head_only``, ``full``, ``lora``).
    fold : int
        Fold of ``split``.
    split : eegfm_bench.data.splits.Split
        Subject-grouped split with validation subjects.
    ws : WindowSet
        Windows under the backbone's preprocessing, ``X`` of shape ``(n_windows, n_chans, n_times)``.
    seed : int
        ``lightning.seed_everything(seed + fold)``, as run_cv.
    init_seed : int
        Seed of the backbone and head initialisation.
    trainer_cfg, optim : dict
        cv ``trainer`` and ``optim`` sections (max_epochs, patience, precision, accelerator, ...; lr,
        weight_decay, warmup_epochs).
    batch_size : int
    out_dir : path
        Where the best checkpoint and CSV logs of this cell go.
    tag : str
        Name of the cell's folder (e.g. ``eegnet-full-flatten-scrambled-seed0``).
    backbone_kwargs, head_kwargs, lora : dict, optional
    pretrained : str, optional
    y_train : ndarray of int, shape (n_windows,), optional
        Labels to train on; only the rows of the fold's training and validation subjects are read from it
        (the test rows keep ``ws.y``). None trains on the true labels.
    progress : bool
    fixed_epochs : bool
        Train exactly ``trainer_cfg["max_epochs"]`` epochs with no early stopping and test the last weights (Control
        4's matched schedule) instead of early stopping on validation balanced accuracy and testing the best.
    return_model : bool
        Also return the trained :class:`~eegfm_bench.models.module.FMClassifier` (its final weights).
    user_model : dict, optional
        A user model's declaration (:mod:`eegfm_bench.models.user`): its weights and its adapter travel in the
        checkpoint.

    Returns
    -------
    predictions : DataFrame
        One row per test window: ``index`` (row of ``ws``), ``y`` (true label), ``pred``, ``p0``…, ``subject``,
        ``recording``, ``window_index``.
    info : dict
        ``epochs``, ``fit_seconds``, ``init``, parameter counts and the checkpoint path.
    model : FMClassifier
        Only with ``return_model``.

    Raises
    ------
    ValueError
        If ``y_train`` changes test labels or has the wrong length.
    """
    groups = ws.subject if split.spec.group_by == "subject" else ws.recording
    _, _, test_idx = split.indices(groups, fold)
    train_ws = _with_training_labels(ws, y_train, test_idx)
    L.seed_everything(int(seed) + int(fold), workers=True, verbose=False)
    dm = EEGDataModule(task=task, backbone=model, fold=fold, batch_size=batch_size, num_workers=0, ws=train_ws,
                       split=split)
    net = FMClassifier(backbone=model, head=head, regime=regime, ch_names=dm.ch_names, n_times=dm.n_times,
                       n_classes=dm.n_classes, pretrained=pretrained, init_seed=int(init_seed),
                       class_weights=dm.class_weights, backbone_kwargs=backbone_kwargs, head_kwargs=head_kwargs,
                       lora=lora, user_model=user_model, **optim)
    cell = Path(out_dir) / "adaptation" / tag / f"fold{fold}"
    tr = {**trainer_cfg, "enable_progress_bar": bool(progress and trainer_cfg.get("enable_progress_bar", False)),
          "loggers": ["csv"]}
    callbacks, ckpt = _schedule_callbacks(cell, fixed_epochs, tr)
    trainer = build_trainer(tr, out_dir=Path(out_dir) / "adaptation", name=tag, version=f"fold{fold}",
                            enable_checkpointing=not fixed_epochs, callbacks=callbacks)
    t0 = time.time()
    trainer.fit(net, dm)
    # test on the TRUE labels: the datamodule of the true window set serves the same test rows
    dm_test = EEGDataModule(task=task, backbone=model, fold=fold, batch_size=batch_size, num_workers=0, ws=ws,
                            split=split)
    best = None if fixed_epochs else (ckpt.best_model_path or None)
    trainer.test(net, dm_test, ckpt_path=best, verbose=False)
    pred = _test_predictions(net, ws)
    info = {"epochs": float(trainer.current_epoch), "fit_seconds": float(time.time() - t0), "init": net.init,
            "checkpoint": "" if fixed_epochs else ckpt.best_model_path, **net.parameter_counts}
    return (pred, info, net) if return_model else (pred, info)


def _with_training_labels(ws, y_train, test_idx: np.ndarray):
    """``ws`` with its labels replaced by ``y_train`` (None: ``ws`` itself); the test rows' labels must not change.

    Raises
    ------
    ValueError
        If ``y_train`` has the wrong length or changes a test label.
    """
    if y_train is None:
        return ws
    y_train = np.asarray(y_train, dtype=np.int64)
    if y_train.shape != ws.y.shape:
        raise ValueError(f"y_train has shape {y_train.shape}, the windows {ws.y.shape}")
    if not np.array_equal(y_train[test_idx], ws.y[test_idx]):
        raise ValueError("y_train changes labels of the test fold; only source (train/val) labels may change")
    return type(ws)(ws.X, y_train, ws.subject, ws.recording, ws.window_index, ws.provenance,
                    list(ws.ch_names), ws.sfreq, list(ws.class_names), dict(ws.meta))


def _schedule_callbacks(cell: Path, fixed_epochs: bool, tr: dict):
    """``(callbacks, checkpoint)``: a fixed schedule keeps the last weights (no early stopping, nothing saved),
    otherwise the cv's early-stopping + best-checkpoint pair (:func:`~eegfm_bench.trainer.fit_callbacks`)."""
    if fixed_epochs:
        ckpt = ModelCheckpoint(dirpath=cell, filename="last", save_top_k=0, save_last=False,
                               enable_version_counter=False)
        return [], ckpt
    return fit_callbacks(cell, patience=tr["patience"])


def _test_predictions(net, ws):
    """The tested model's per-window predictions with each window's subject, recording and window index."""
    pred = net.test_predictions.copy()
    pred["subject"] = ws.subject[pred["index"]]
    pred["recording"] = ws.recording[pred["index"]]
    pred["window_index"] = ws.window_index[pred["index"]]
    return pred


def adapted_embedding(net, ws, ref_keys: np.ndarray, *, pooling: str = "mean", trainer: dict | None = None,
                      batch_size: int = 32, cache_dir=None) -> np.ndarray:
    """Pooled frozen embedding of every window from an adapted encoder, aligned with the feature windows.

    Parameters
    ----------
    net : FMClassifier
        The adapted model (its backbone, LoRA merged into the forward as trained).
    ws : WindowSet
        The windows it was adapted on (the backbone's preprocessing).
    ref_keys : ndarray of str
        Row identities of the feature windows (:func:`~eegfm_bench.controls.embeddings.row_keys`).
    pooling : str
        A name of :func:`eegfm_bench.models.heads.token_poolings`.

    Returns
    -------
    ndarray, shape (n_windows, d)
    """
    net.eval()
    idx = align_rows(ref_keys, row_keys(ws.recording, ws.window_index), "adapted-encoder windows")
    tokens = extract_features(net.backbone, ws, parts=("tokens",), trainer=trainer, batch_size=batch_size,
                              cache_dir=cache_dir, progress=False).array("tokens")
    X = pool_cached_tokens(tokens, pooling)[idx]
    if not np.all(np.isfinite(X)):
        raise ValueError("the adapted encoder produced NaN/inf embeddings; fix: lower the learning rate or check the "
                         "input unit")
    return X


__all__ = ["LABELINGS", "scrambled_source_labels", "train_fold", "adapted_embedding"]
