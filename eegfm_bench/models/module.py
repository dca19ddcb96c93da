"""``FMClassifier``: backbone adapter → pooling head, trained under an adaptation regime
(docs/guide/architecture.md, "Contracts").

Metrics per split with torchmetrics: balanced accuracy (macro-averaged recall), AUROC (one-vs-rest, macro)
and Cohen's kappa. A validation set that lacks a class is handled by :func:`undefined_val_metrics`: balanced
accuracy over the classes present, and NaN with a note (never half the accuracy) when only one class is present.
Test metrics come from the gathered predictions through :func:`eegfm_bench.metrics.classification_metrics`
(scikit-learn: on a one-class test fold balanced accuracy is the recall of its class, AUROC and kappa NaN).
Optimiser AdamW with linear warm-up then cosine decay, stepped per batch. The loss is cross-entropy, class-weighted
when ``class_weights`` are given (imbalanced tasks such as eegmat).
"""
from __future__ import annotations

import math
import warnings

import lightning as L
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC, MulticlassCohenKappa, MulticlassRecall

from eegfm_bench.distributed import gather_by_index
from eegfm_bench.models.adaptation import apply_lora, check_regime, count_parameters, freeze
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.metrics import classification_metrics
from eegfm_bench.models.checkpoints import load_pretrained
from eegfm_bench.models.heads import HEADS
from eegfm_bench.models.user import hashable_user_spec, register_user_models, user_model_config, user_spec
from eegfm_bench.config.user_model import UserModelConfig


def _metrics(n_classes: int, prefix: str) -> MetricCollection:
    return MetricCollection({"bacc": MulticlassAccuracy(n_classes, average="macro"),
                             "acc": MulticlassAccuracy(n_classes, average="micro"),
                             "auroc": MulticlassAUROC(n_classes, average="macro"),
                             "kappa": MulticlassCohenKappa(n_classes)}, prefix=prefix)


class ClassCounts(Metric):
    """Windows seen per class (summed across DDP ranks): tells whether AUROC / kappa are defined this epoch."""

    full_state_update = False

    def __init__(self, n_classes: int):
        super().__init__()
        self.n_classes = int(n_classes)
        self.add_state("counts", default=torch.zeros(self.n_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, y: torch.Tensor) -> None:
        self.counts += torch.bincount(y.long(), minlength=self.n_classes)[: self.n_classes]

    def compute(self) -> torch.Tensor:
        return self.counts


def undefined_val_metrics(vals: dict, counts: torch.Tensor, recall: torch.Tensor) -> tuple[dict, str]:
    """The validation metrics of an epoch whose validation set lacks some class, and the note that says so.

    torchmetrics' macro accuracy averages a class that is absent from the targets as recall 0 whenever the model
    predicted it once (and leaves it out otherwise), so on a one-class set ``val/bacc`` would read half of
    ``val/acc`` — or all of it — depending on the predictions. Instead:

    - two or more classes present: ``val/bacc`` is the mean recall over the classes present (scikit-learn's
      ``balanced_accuracy_score``, as ``test/bacc``); AUROC and kappa as computed;
    - one class present: ``val/bacc``, ``val/auroc`` and ``val/kappa`` are undefined: NaN, never a number. (A
      one-class *test* fold keeps scikit-learn's balanced accuracy, the recall of its class, because its result row is
      a per-fold estimate averaged with the others; a validation value only compares epochs, which one class cannot.)

    Parameters
    ----------
    vals : dict of str to Tensor
        The computed ``val/*`` metrics.
    counts : Tensor of int64, shape (n_classes,)
        Validation windows per class (:class:`ClassCounts`).
    recall : Tensor, shape (n_classes,)
        Recall per class (``MulticlassRecall(average="none")``).

    Returns
    -------
    (dict, str)
        The metrics with the undefined ones NaN, and the note ('' when every value is defined).
    """
    present = counts > 0
    nan = torch.tensor(float("nan"))
    out = dict(vals)
    key = next(k for k in out if k.endswith("bacc"))
    if int(present.sum()) >= 2:
        out[key] = recall[present.to(recall.device)].float().mean()
        return out, ""
    for k in out:
        if k.endswith(("bacc", "auroc", "kappa")):
            out[k] = nan
    only = torch.nonzero(present).flatten().tolist()
    note = (f"the validation set holds only class {only} of {len(counts)}: val/bacc, val/auroc and val/kappa are "
            "undefined and logged as NaN (val/acc is the share of its windows right). Early stopping on val/bacc "
            "stops at a NaN and the best checkpoint stays the first epoch's. fix: split.n_val_groups >= "
            f"{len(counts)} (the split then draws a validation group of each class), or a validation set holding "
            "every class")
    return out, note


class FMClassifier(L.LightningModule):
    """Backbone + pooling head as a LightningModule.

    Parameters
    ----------
    backbone : str
        Registered backbone (``eegfm-bench models`` lists them).
    head : str
        A registered head (:data:`~eegfm_bench.models.heads.HEADS`; ``eegfm-bench models`` lists them). The cv's
        ``ridge`` head is a ``flatten`` head holding a closed-form solution.
    regime : str
        ``head_only``, ``full`` or ``lora``.
    ch_names : list of str
        Montage of the input (linked from the DataModule).
    n_times : int
        Window length in samples (linked from the DataModule).
    n_classes : int
    pretrained : str, optional
        Hub id or local folder under ``checkpoints/`` (see :mod:`eegfm_bench.models.checkpoints`);
        ``None`` → random init (recorded as ``init=random``).
    init_seed : int
        Seed of the random initialisation (architecture built under ``torch.manual_seed(init_seed)``).
    lr, weight_decay : float
        AdamW settings.
    warmup_epochs : float
        Linear warm-up length in epochs, then cosine decay to 0 over the remaining steps.
    class_weights : list of float, optional
        Cross-entropy class weights.
    backbone_kwargs, head_kwargs : dict
        Architecture overrides.
    lora : dict, optional
        peft settings for ``regime="lora"`` (rank ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``,
        ``method``).
    user_model : dict or UserModelConfig, optional
        The declaration of a user model named ``backbone`` (:mod:`eegfm_bench.models.user`): typed
        (:func:`~eegfm_bench.models.user.user_model_config`), registered before the backbone is built, and saved
        with the checkpoint's hyper-parameters as a plain mapping (every key; an older checkpoint's mapping as
        written loads the same).
    data_reference : {"average", "none"}, optional
        The reference of the input windows (the window set's ``meta["reference"]``; default: the backbone's
        declared preprocessing). With ``average``, a backbone that reads a subset of the channels re-references
        them (:meth:`~eegfm_bench.models.base.BackboneAdapter.reference_selection`).

    Raises
    ------
    UnknownNameError
        For an unknown backbone or head (lists valid names).
    ChannelContractError
        If the montage / sampling rate / window length does not meet the backbone's contract.
    """

    def __init__(self, backbone: str = "eegnet", head: str = "flatten", regime: str = "full",
                 ch_names: list[str] | None = None, n_times: int = 512, n_classes: int = 2,
                 pretrained: str | None = None, init_seed: int = 0, lr: float = 1e-3, weight_decay: float = 1e-2,
                 warmup_epochs: float = 1.0, class_weights: list[float] | None = None,
                 backbone_kwargs: dict | None = None, head_kwargs: dict | None = None, lora: dict | None = None,
                 user_model: dict | UserModelConfig | None = None, data_reference: str | None = None):
        super().__init__()
        um = user_model_config(user_model) if user_model else None  # typed on the way in
        user_model = um.to_dict() if um is not None else None  # a plain mapping in the checkpoint's hparams
        self.save_hyperparameters()
        check_regime(regime)
        if not ch_names:
            raise ValueError("ch_names is required (link it from the DataModule: data.ch_names)")
        if um is not None:  # a user model's declaration travels with the checkpoint (eegfm_bench.models.user)
            cur = user_spec(backbone)  # the current config's lrp / pretraining_corpora win over the checkpoint's
            if cur is None or hashable_user_spec(cur) != hashable_user_spec(um):
                register_user_models({backbone: um})
        adapter_cls = BACKBONES.get(backbone)
        head_cls = HEADS.get(head)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            self.backbone = adapter_cls(list(ch_names), int(n_times), n_outputs=n_classes, **(backbone_kwargs or {}))
        self.backbone.data_reference = data_reference
        self.init = getattr(self.backbone, "init_label", None) or "random"
        if pretrained:
            self.init = load_pretrained(self.backbone, pretrained)
        self.head = head_cls(self.backbone.n_tokens(len(ch_names)), self.backbone.d_model, n_classes,
                             **(head_kwargs or {}))
        if regime == "head_only":
            freeze(self.backbone)
        elif regime == "lora":
            self.backbone = apply_lora(self.backbone, lora or {})
        self.regime = regime
        self.ch_names = list(ch_names)
        self.register_buffer("class_weights", torch.tensor(class_weights, dtype=torch.float32)
                             if class_weights else torch.ones(n_classes), persistent=False)
        self.val_metrics = _metrics(n_classes, "val/")
        self.val_classes = ClassCounts(n_classes)
        self.val_recall = MulticlassRecall(n_classes, average="none")  # per class: val/bacc when a class is absent
        self.train_bacc = MulticlassAccuracy(n_classes, average="macro")
        self._test_rows: list[dict] = []
        self.test_predictions: pd.DataFrame | None = None

    # ---------------------------------------------------------------------------------------------
    def train(self, mode: bool = True):
        """Keep a frozen backbone in eval mode under ``head_only`` (paper 003: frozen = no dropout/BN updates)."""
        super().train(mode)
        if getattr(self, "regime", None) == "head_only":
            self.backbone.eval()
        return self

    @property
    def parameter_counts(self) -> dict[str, int]:
        """Head, trainable and total parameter counts."""
        total = count_parameters(self)
        trainable = count_parameters(self, trainable_only=True)
        return {"head_params": count_parameters(self.head), "trainable_params": trainable, "total_params": total}

    def forward(self, x: torch.Tensor, ch_names: list[str] | None = None) -> torch.Tensor:
        """Logits ``(batch, n_classes)`` from windows ``x`` ``(batch, n_chans, n_times)``."""
        return self.head(self.backbone.tokens(x, ch_names or self.ch_names))

    def _logits(self, batch: dict) -> torch.Tensor:
        if "tokens" in batch:
            return self.head(batch["tokens"])
        return self(batch["x"])

    def training_step(self, batch, batch_idx):
        logits = self._logits(batch)
        loss = F.cross_entropy(logits, batch["y"], weight=self.class_weights)
        self.train_bacc(logits, batch["y"])
        self.log("train/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(batch["y"]))
        self.log("train/bacc", self.train_bacc, on_step=False, on_epoch=True, batch_size=len(batch["y"]))
        return loss

    def validation_step(self, batch, batch_idx):
        logits = self._logits(batch)
        loss = F.cross_entropy(logits, batch["y"], weight=self.class_weights)
        self.val_metrics.update(logits.softmax(-1), batch["y"])
        self.val_classes.update(batch["y"])
        self.val_recall.update(logits.argmax(-1), batch["y"])
        self.log("val/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(batch["y"]))

    def on_validation_epoch_end(self):
        """Log ``val/*``; those the validation set cannot define are NaN with a note (:func:`undefined_val_metrics`)."""
        vals = self.val_metrics.compute()
        counts = self.val_classes.compute()
        if bool((counts == 0).any()):
            vals, note = undefined_val_metrics(vals, counts, self.val_recall.compute())
            if note and not (self._trainer is not None and self._trainer.sanity_checking):
                warnings.warn(note, stacklevel=2)
        self.log_dict(vals, prog_bar=True)
        self.val_metrics.reset()
        self.val_classes.reset()
        self.val_recall.reset()

    def on_test_epoch_start(self):
        self._test_rows = []
        self.test_predictions = None

    def test_step(self, batch, batch_idx):
        probs = self._logits(batch).float().softmax(-1)
        self._test_rows.append({"index": batch["index"].cpu().numpy(), "y": batch["y"].cpu().numpy(),
                                "probs": probs.detach().cpu().numpy()})

    def on_test_epoch_end(self):
        """Gather every rank's windows, keep each once (sampler padding removed by window index), log the metrics.

        Under DDP each rank tests a share of the windows and the ``DistributedSampler`` repeats a few to give
        every rank as many; the per-window probabilities of all ranks are gathered and de-duplicated by window
        index, so :attr:`test_predictions` (on every rank) and the logged ``test/*`` metrics are those of every
        test window exactly once, as on one device.
        """
        local = {"index": np.concatenate([r["index"] for r in self._test_rows]) if self._test_rows else
                 np.zeros(0, dtype=np.int64),
                 "y": np.concatenate([r["y"] for r in self._test_rows]) if self._test_rows else np.zeros(0, np.int64),
                 "probs": np.concatenate([r["probs"] for r in self._test_rows]) if self._test_rows else
                 np.zeros((0, self.hparams.n_classes), np.float32)}
        merged = gather_by_index(local)
        self._test_rows = []
        if not merged:
            return
        probs = merged["probs"]
        df = pd.DataFrame({"index": merged["index"], "y": merged["y"], "pred": probs.argmax(1)})
        for c in range(probs.shape[1]):
            df[f"p{c}"] = probs[:, c]
        self.test_predictions = df
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = classification_metrics(merged["y"], probs)
        self.log_dict({"test/bacc": m["balanced_accuracy"], "test/acc": m["accuracy"], "test/auroc": m["auroc"],
                       "test/kappa": m["cohen_kappa"]},
                      sync_dist=True)

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        n_epochs = max(1, self.trainer.max_epochs or 1)
        warm = int(min(total - 1, max(0, round(self.hparams.warmup_epochs * total / n_epochs))))

        def lr_lambda(step: int) -> float:
            if step < warm:
                return (step + 1) / (warm + 1)
            progress = (step - warm) / max(1, total - warm)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
