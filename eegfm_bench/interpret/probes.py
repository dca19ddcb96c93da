"""Block-wise linear probes on cached block outputs (paper 003 §4.4, App. I.5).

**Block outputs** come from the feature cache (:func:`eegfm_bench.models.features.extract_features` with
``parts=("blocks",)``): forward hooks on the adapter's ``blocks`` capture every block's output (reshaped by the
adapter's ``block_to_tokens`` to ``(batch, n_tokens_b, d_b)``) for every window during a ``Trainer.predict`` pass,
once per (backbone weights, data, preprocessing, precision); per block a float16 memmap of the tokens (flatten
probes) and a float32 array of their mean over tokens (mean probes). A second request opens the files and runs no
backbone forward.

**Probes.** One probe per block, fitted per fold from the cache by a ``lightning.Trainer`` on the CPU
(:class:`ProbeModule`): a single linear layer from the pooled block output to the classes, Adam, at most 20
epochs, cosine annealing of the learning rate over those epochs, early stopping with patience 5 on the fold's
validation subjects (the best validation epoch is restored), then balanced accuracy on the fold's test subjects.
Two poolings (App. I.5):

* ``mean`` — the mean over tokens, ``(batch, d)`` (z-scored with the training windows' statistics by default:
  ``standardize_mean``, a conditioning step not in App. I.5; see :func:`fit_probe`);
* ``flatten`` — all tokens concatenated, ``(batch, n_tokens·d)``, then RMSNorm (no learnable gain, so the
  probe stays one linear layer), then the linear layer.

Blocks are indexed ``0 … L−1`` (0 = first block output); relative depth is ``i / (L−1)``. Results are reported as
balanced accuracy mean ± std over folds per block, for the backbone before fine-tuning (``stage = frozen``:
pretrained or random-init weights) and after (``stage = fine-tuned``: the fold's checkpoint of a ``full`` /
``lora`` run): :mod:`eegfm_bench.reports.probes`.

Entry points: :class:`~eegfm_bench.callbacks.probes.BlockProbe` (Lightning callback, after fit) and
:func:`eegfm_bench.runs.interpret.probe.run_probes` (``eegfm-bench probe --config ...`` over a cv run's fold checkpoints).
"""
from __future__ import annotations

import copy
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from eegfm_bench.data.windows import WindowSet
from eegfm_bench.models.features import FeatureStore, extract_features, state_hash
from eegfm_bench.models.heads import HEADS, token_poolings
from eegfm_bench.results import ResultStore, code_version, config_hash
from eegfm_bench.trainer import build_trainer

log = logging.getLogger(__name__)

DEFAULT_POOLINGS = ("mean", "flatten")
"""The probes' default poolings (paper 003 App. I.5); any name of :func:`eegfm_bench.models.heads.token_poolings`
is accepted (a head registered with a ``token_pooling`` reaches the probes by its name)."""
STAGES = ("frozen", "fine-tuned")


class ProbeConfigError(ValueError):
    """Invalid probe settings (unknown pooling, sizes)."""


def check_pooling(pooling: str) -> str:
    """``pooling`` if a registered head pools tokens that way without learned parameters.

    Raises
    ------
    ProbeConfigError
        Otherwise, listing the valid names (:func:`eegfm_bench.models.heads.token_poolings`).
    """
    valid = token_poolings()
    if pooling not in valid:
        raise ProbeConfigError(f"unknown probe pooling {pooling!r}; valid: {valid} (heads whose pooling has no "
                               "learned parameters; paper 003 App. I.5 uses mean and flatten)")
    return pooling


def _tied_to_tokens(pooling: str) -> bool:
    return HEADS.get(pooling).tied_to_tokens


# ============================================================================================ probes
class LinearProbe(nn.Module):
    """One linear layer on a pooled block output (App. I.5).

    Parameters
    ----------
    in_features : int
        ``d`` (mean pooling) or ``n_tokens · d`` (flatten pooling).
    n_classes : int
    pooling : str
        A name of :func:`eegfm_bench.models.heads.token_poolings`; a pooling tied to the token count (``flatten``)
        applies RMSNorm without a learnable gain before the linear layer.
    """

    def __init__(self, in_features: int, n_classes: int, pooling: str):
        super().__init__()
        self.pooling = check_pooling(pooling)
        self.norm = nn.RMSNorm(in_features, elementwise_affine=False) if _tied_to_tokens(pooling) else nn.Identity()
        self.linear = nn.Linear(in_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in_features)`` → logits ``(batch, n_classes)``."""
        return self.linear(self.norm(x))


def balanced_accuracy(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """Mean recall over the classes present in ``y`` (scikit-learn's ``balanced_accuracy_score``)."""
    rec = [float(np.mean(pred[y == c] == c)) for c in range(n_classes) if np.any(y == c)]
    return float(np.mean(rec))


@dataclass
class ProbeFit:
    """Outcome of one probe fit: test balanced accuracy, best validation balanced accuracy, epochs run."""

    test_bacc: float
    val_bacc: float
    epochs: int
    best_epoch: int


class ProbeModule(L.LightningModule):
    """A :class:`LinearProbe` trained by a ``lightning.Trainer``: Adam, cosine annealing over ``max_epochs`` (per
    epoch), class-weighted cross-entropy, validation balanced accuracy logged as ``val_bacc`` each epoch; the best
    epoch's weights are kept (``best_state``, ``best_epoch``)."""

    def __init__(self, in_features: int, n_classes: int, pooling: str, lr: float, max_epochs: int,
                 weight: torch.Tensor | None):
        super().__init__()
        self.probe = LinearProbe(in_features, n_classes, pooling)
        self.n_classes, self.lr, self.max_epochs = n_classes, lr, max_epochs
        self.loss_fn = nn.CrossEntropyLoss(weight=weight)
        self.best, self.best_state, self.best_epoch = -1.0, None, 0
        self._val: list = []

    def forward(self, x):
        return self.probe(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss_fn(self.probe(x), y)

    def on_validation_epoch_start(self):
        self._val = []

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self._val.append((y.cpu().numpy(), self.probe(x).argmax(1).cpu().numpy()))

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking or not self._val:
            return
        y = np.concatenate([v[0] for v in self._val])
        pred = np.concatenate([v[1] for v in self._val])
        bacc = balanced_accuracy(y, pred, self.n_classes)
        self.log("val_bacc", bacc)
        if bacc > self.best:
            self.best, self.best_epoch = bacc, self.current_epoch + 1
            self.best_state = copy.deepcopy(self.probe.state_dict())

    def predict_step(self, batch, batch_idx):
        return self.probe(batch[0]).argmax(1)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.probe.parameters(), lr=self.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.max_epochs)}


def fit_probe(X_train: np.ndarray, y_train: np.ndarray, X_val: np.ndarray, y_val: np.ndarray, X_test: np.ndarray,
              y_test: np.ndarray, pooling: str, n_classes: int, *, max_epochs: int = 20, patience: int = 5,
              lr: float = 1e-3, batch_size: int = 64, seed: int = 0, class_weighted: bool = True,
              standardize_mean: bool = True) -> ProbeFit:
    """Fit one linear probe (App. I.5) with a CPU ``lightning.Trainer`` and score it on the test windows.

    Parameters
    ----------
    X_train, X_val, X_test : ndarray, shape (n, in_features), float32
        Pooled block outputs (:meth:`~eegfm_bench.models.features.FeatureStore.features`).
    y_train, y_val, y_test : ndarray of int, shape (n,)
    pooling : str
        A name of :func:`eegfm_bench.models.heads.token_poolings` (``mean``, ``flatten``, ``max``, ...).
    n_classes : int
    max_epochs : int
        At most this many epochs (paper: 20); the learning rate follows a cosine from ``lr`` to 0 over them.
    patience : int
        Early stopping on validation balanced accuracy (paper: 5 epochs); the best epoch's weights are kept.
    lr : float
        Adam learning rate.
    seed : int
        Seed of the initialisation and the shuffling.
    class_weighted : bool
        Inverse-frequency class weights in the cross-entropy (as the cv training of imbalanced tasks).
    standardize_mean : bool
        For mean pooling, z-score each feature with the training windows' mean and std before the linear
        layer (an affine map, so the probe stays linear). Not in App. I.5, which normalises only the flattened
        input (RMSNorm); without it, block means with a small spread (EEGNet: std ≈ 0.05) cannot be separated
        within 20 epochs of Adam at lr 1e-3 on small folds and the probe predicts one class (balanced accuracy
        exactly 0.5). ``False`` gives the literal protocol.

    Returns
    -------
    ProbeFit

    Raises
    ------
    ProbeConfigError
        ``max_epochs`` or ``patience`` below 1.
    """
    if max_epochs < 1 or patience < 1:
        raise ProbeConfigError(f"max_epochs and patience must be ≥ 1, got {max_epochs}, {patience}")
    if not _tied_to_tokens(check_pooling(pooling)) and standardize_mean:
        mu, sd = X_train.mean(0), X_train.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        X_train, X_val, X_test = ((X - mu) / sd for X in (X_train, X_val, X_test))
    weight = None
    if class_weighted:
        counts = np.bincount(y_train, minlength=n_classes).astype(float)
        w = np.where(counts > 0, counts.sum() / (n_classes * np.maximum(counts, 1)), 0.0)
        weight = torch.tensor(w, dtype=torch.float32)

    def ds(X, y):
        return TensorDataset(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)),
                             torch.from_numpy(np.asarray(y, dtype=np.int64)))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = ProbeModule(X_train.shape[1], n_classes, pooling, lr, max_epochs, weight)
    gen = torch.Generator().manual_seed(seed)
    train = DataLoader(ds(X_train, y_train), batch_size=batch_size, shuffle=True, generator=gen)
    val = DataLoader(ds(X_val, y_val), batch_size=4096)
    trainer = build_trainer({"accelerator": "cpu", "devices": 1, "max_epochs": max_epochs,
                             "num_sanity_val_steps": 0}, loggers=False,
                            callbacks=[EarlyStopping("val_bacc", mode="max", patience=patience)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train, val)
        module.probe.load_state_dict(module.best_state)
        pred = torch.cat(trainer.predict(module, DataLoader(ds(X_test, y_test), batch_size=4096))).numpy()
    return ProbeFit(balanced_accuracy(y_test, pred, n_classes), module.best, int(trainer.current_epoch),
                    module.best_epoch)


def probe_blocks(outputs: FeatureStore, y: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray,
                 test_idx: np.ndarray, n_classes: int, poolings: Sequence[str] = DEFAULT_POOLINGS, **fit_kwargs) -> list[dict]:
    """Fit a probe per block and pooling on one fold, reading only the cache.

    Returns
    -------
    list of dict
        One per (block, pooling): ``block``, ``relative_depth`` (``i / (L−1)``; 0 for a single block),
        ``pooling``, ``bacc`` (test), ``val_bacc``, ``epochs``, ``best_epoch``, ``n_test``.
    """
    L = outputs.n_blocks
    rows = []
    for pooling in poolings:
        check_pooling(pooling)
        for i in range(L):
            X = {k: outputs.features(i, pooling, ix) for k, ix in (("tr", train_idx), ("va", val_idx), ("te", test_idx))}
            fit = fit_probe(X["tr"], y[train_idx], X["va"], y[val_idx], X["te"], y[test_idx], pooling, n_classes,
                            **fit_kwargs)
            rows.append({"block": i, "relative_depth": i / (L - 1) if L > 1 else 0.0, "pooling": pooling,
                         "bacc": fit.test_bacc, "val_bacc": fit.val_bacc, "epochs": fit.epochs,
                         "best_epoch": fit.best_epoch, "n_test": int(len(test_idx))})
    return rows



# ============================================================================================ result rows
def _rows(base: dict, fits: list[dict], stage: str, source_head: str, checkpoint: str, extra: dict) -> list[dict]:
    out = []
    for f in fits:
        head = f"probe_{f['pooling']}" + ("" if stage == "frozen" else f"@{source_head}")
        out.append({**base, "regime": "frozen" if stage == "frozen" else base["regime"], "head": head,
                    "metric": f"probe_bacc_block{f['block']:02d}", "value": f["bacc"], "n_windows": f["n_test"],
                    "stage": stage, "pooling": f["pooling"], "block": f["block"],
                    "relative_depth": f["relative_depth"], "val_bacc": f["val_bacc"], "probe_epochs": f["epochs"],
                    "source_head": source_head, "checkpoint": checkpoint, **extra})
    return out


def run_fold_probes(model, ws: WindowSet, train_idx, val_idx, test_idx, *, fold: int, out_dir: str | Path,
                    experiment: str, task: str, model_name: str, source_head: str,
                    frozen_backbone: nn.Module | None, poolings: Sequence[str] = DEFAULT_POOLINGS,
                    cache_dir: str | Path | None = None, batch_size: int = 16, probe_kwargs: dict | None = None,
                    checkpoint: str = "", seed: int = 0, trainer: dict | None = None, done: set | None = None,
                    write: bool = True, merge: bool = True) -> list[dict]:
    """Probe one fold: the trained backbone (unless head-only) and the frozen one; append rows to ``out_dir``.

    ``done`` (a set shared across calls) holds ``(model_name, fold, stage, weights hash)`` of the probes already
    fitted: a backbone seen before on the same fold is not probed again (e.g. one frozen random-init LaBraM
    under both the ``mean`` and ``flatten`` heads of a head-only cv run), so every (fold, backbone) counts once.
    Block outputs come from the feature cache, filled by ``Trainer.predict`` with the ``trainer`` section
    (devices, precision) when missing; the probe fits run on the CPU.

    Returns
    -------
    list of dict
        The result rows written (DESIGN.md "Result row" plus ``stage``, ``pooling``, ``block``,
        ``relative_depth``, ``val_bacc``, ``source_head``, ``checkpoint``, ``weights``, ``block_cache``).
    """
    probe_kwargs = dict(probe_kwargs or {})
    n_classes = len(ws.class_names)
    regime = str(model.hparams.regime)
    stages = []
    if frozen_backbone is not None:
        stages.append(("frozen", frozen_backbone))
    if regime != "head_only":
        stages.append(("fine-tuned", model.backbone))
    elif frozen_backbone is None:
        stages.append(("frozen", model.backbone))  # head-only: the fitted model's backbone is the frozen one
    subjects = np.asarray(ws.subject)[test_idx]
    base = {"experiment": experiment, "task": task, "model": model_name, "init": str(model.init), "regime": regime,
            "fold": int(fold), "seed": int(seed), "condition": "clean", "n_subjects": int(np.unique(subjects).size),
            "fold_unit": "subject", "code_version": code_version()}
    rows: list[dict] = []
    seen: dict[str, FeatureStore] = {}
    for stage, backbone in stages:
        w = state_hash(backbone)
        if done is not None:
            if (model_name, int(fold), stage, w) in done:
                continue
            done.add((model_name, int(fold), stage, w))
        outs = seen.get(w) or extract_features(backbone, ws, parts=("blocks",), trainer=trainer, batch_size=batch_size,
                                               store_block_tokens=any(p != "mean" for p in poolings), cache_dir=cache_dir, weights=w)
        seen[w] = outs
        fits = probe_blocks(outs, np.asarray(ws.y), train_idx, val_idx, test_idx, n_classes, poolings,
                            seed=seed + fold, **probe_kwargs)
        chash = config_hash({"probe": probe_kwargs, "poolings": list(poolings), "weights": w})
        rows += _rows({**base, "config_hash": chash}, fits, stage, source_head, checkpoint,
                      {"weights": w, "block_cache": str(outs.folder)})
    ResultStore(out_dir, write=write, merge=merge).append(rows)
    return rows
