"""``EEGDataModule``: one task, one preprocessing, one fold of a subject-grouped split.

Batches are dicts (the "Window batch" contract, docs/guide/architecture.md):
``x`` float32 ``(batch, n_chans, n_times)`` in the backbone's unit (``preprocessing["unit"]``, e.g. µV),
``y`` int64 ``(batch,)``, ``index`` int64 ``(batch,)`` (row in the WindowSet, mapping back to
``subject`` / ``recording`` / ``window_index``); the montage is ``datamodule.ch_names``. In token mode
(head-only training on a frozen backbone) ``x`` is replaced by ``tokens`` ``(batch, n_tokens, d_model)``
read from the token cache.

Import direction: this module reaches up to :mod:`eegfm_bench.models.backbones` (one of the package's two
documented back-edges): a DataModule named by a backbone (``EEGDataModule(backbone="labram")``, the LightningCLI
path) reads that backbone's declared preprocessing from the registry, so a user never types the sampling rate,
band and unit a model was built for.
"""
from __future__ import annotations

import warnings
from typing import Union

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.splits import Split, SplitSpec, make_split, save_or_verify
from eegfm_bench.data.tasks import task_name
from eegfm_bench.data.windows import WindowSet, load_windows
from eegfm_bench.models.backbones import BACKBONES  # the documented back-edge (module docstring)


class WindowDataset(Dataset):
    """Rows ``idx`` of a WindowSet (or of a token array aligned with it) as batch dicts."""

    def __init__(self, ws: WindowSet, idx: np.ndarray, tokens: np.ndarray | None = None):
        self.ws, self.idx, self.tokens = ws, np.asarray(idx, dtype=np.int64), tokens

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int) -> dict:
        j = int(self.idx[i])
        item = {"y": torch.tensor(int(self.ws.y[j])), "index": torch.tensor(j)}
        if self.tokens is not None:
            item["tokens"] = torch.from_numpy(np.array(self.tokens[j], dtype=np.float32))
        else:
            item["x"] = torch.from_numpy(np.array(self.ws.X[j], dtype=np.float32))
        return item


def _backbone_preprocessing(backbone: str) -> Preprocessing:
    return BACKBONES.get(backbone).preprocessing


class EEGDataModule(L.LightningDataModule):
    """DataModule for fold ``fold`` of a subject-grouped split of ``task``.

    Parameters
    ----------
    task : str or dict
        A registered task (``eegfm-bench tasks``), a YAML file, or a task mapping
        (:func:`~eegfm_bench.data.tasks.get_task`).
    backbone : str
        Backbone whose declared preprocessing is applied (sfreq, band, scaling, window length).
    fold : int
        Fold to serve.
    scheme, k, split_seed, n_val_groups, group_by :
        See :class:`~eegfm_bench.data.splits.SplitSpec`.
    split_file : path, optional
        Where the fold assignment is saved / verified (default: none for ad-hoc runs; ``cv`` always sets it).
    batch_size, num_workers : int
    data_root, cache_dir : path, optional
    subjects : list, optional
    max_windows_per_subject : int, optional
        Per subject and class, for tiny runs.
    window_s : float, optional
        Override of the backbone's declared window length in seconds (the task's ``window_s``, where it declares
        one, still replaces it: :func:`~eegfm_bench.data.windows.resolve_preprocessing`).

    Raises
    ------
    SplitMismatchError
        If ``split_file`` exists and differs from the recomputed folds.
    """

    def __init__(self, task: Union[str, dict] = "eegmmidb_mi", backbone: str = "eegnet", fold: int = 0, scheme: str = "kfold",
                 k: int = 5, split_seed: int = 0, n_val_groups: int = 1, group_by: str = "subject",
                 split_file: str | None = None, batch_size: int = 64, num_workers: int = 0,
                 data_root: str | None = None, cache_dir: str | None = None, subjects: list | None = None,
                 max_windows_per_subject: int | None = None, window_s: float | None = None,
                 ws: WindowSet | None = None, split: Split | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["ws", "split"])
        prep = _backbone_preprocessing(backbone)
        if window_s is not None:
            prep = Preprocessing(**{**prep.to_dict(), "window_s": float(window_s)})
        self.preprocessing = prep
        self.ws = ws if ws is not None else load_windows(task, prep, data_root=data_root, subjects=subjects,
                                                         cache_dir=cache_dir,
                                                         max_windows_per_subject=max_windows_per_subject)
        if split is not None:
            group_by = split.spec.group_by  # the split decides the fold unit (recording-level folds included)
        groups = self.ws.subject if group_by == "subject" else self.ws.recording
        self.groups = groups
        if split is None:
            split = make_split(self.ws.y, groups, SplitSpec(scheme, k, split_seed, n_val_groups, group_by),
                               self.ws.meta.get("task") or task_name(task))
            if split_file:
                split = save_or_verify(split, split_file)
        self.split = split
        self.fold = fold
        self.tokens: np.ndarray | None = None
        self.train_idx, self.val_idx, self.test_idx = split.indices(groups, fold)
        for name, ix in (("train", self.train_idx), ("val", self.val_idx), ("test", self.test_idx)):
            if ix.size == 0:
                raise ValueError(f"fold {fold}: the {name} set is empty; fix: check subjects / split settings")
        have = np.bincount(self.ws.y[self.train_idx], minlength=len(self.ws.class_names))
        absent = [self.ws.class_names[c] for c in np.flatnonzero(have == 0)]
        if absent:
            raise ValueError(
                f"fold {fold}: no training window of class(es) {absent} (training windows per class: "
                f"{dict(zip(self.ws.class_names, have.tolist()))}); the model cannot learn a class it never sees and "
                "its loss would be undefined. fix: more subjects or fewer folds (split.k), or check the labels (the "
                "ingest report lists the windows per class and the annotations mapped to none)")
        if np.unique(self.ws.y[self.test_idx]).size < len(self.ws.class_names):
            warnings.warn(f"fold {fold}: the test set holds only classes {np.unique(self.ws.y[self.test_idx]).tolist()} "
                          "of " f"{list(range(len(self.ws.class_names)))}; metrics that need both classes (AUROC, "
                          "kappa) are reported as NaN for this fold", stacklevel=2)

    # -- facts the model needs (linked in LightningCLI) -----------------------------------------
    @property
    def ch_names(self) -> list[str]:
        return list(self.ws.ch_names)

    @property
    def n_times(self) -> int:
        return self.ws.n_times

    @property
    def n_classes(self) -> int:
        return len(self.ws.class_names)

    @property
    def class_weights(self) -> list[float]:
        """Inverse-frequency weights ``n / (n_classes · n_c)`` from the training windows of this fold."""
        counts = np.bincount(self.ws.y[self.train_idx], minlength=self.n_classes).astype(float)
        return (counts.sum() / (self.n_classes * counts)).tolist()  # every class is present (checked in __init__)

    def use_tokens(self, tokens: np.ndarray | None) -> None:
        """Serve cached tokens ``(n_windows, n_tokens, d_model)`` aligned with the WindowSet instead of ``x``."""
        if tokens is not None and len(tokens) != len(self.ws):
            raise ValueError(f"token cache has {len(tokens)} rows for {len(self.ws)} windows; rebuild the cache")
        self.tokens = tokens

    def _loader(self, idx, shuffle: bool) -> DataLoader:
        g = torch.Generator().manual_seed(self.hparams.split_seed + self.fold)
        if shuffle:  # the shuffling stream of this fit: saved in every checkpoint, restored on resume
            pending = getattr(self, "_resume_generator_state", None)
            if pending is not None:
                g.set_state(pending)
                self._resume_generator_state = None
            self._train_generator = g
        trainer = getattr(self, "trainer", None)
        on_cuda = trainer is not None and getattr(trainer.strategy.root_device, "type", "cpu") == "cuda"
        nw = self.hparams.num_workers
        return DataLoader(WindowDataset(self.ws, idx, self.tokens), batch_size=self.hparams.batch_size,
                          shuffle=shuffle, num_workers=nw, generator=g if shuffle else None,
                          pin_memory=on_cuda, persistent_workers=nw > 0)  # pinned host memory on CUDA only

    def state_dict(self) -> dict:
        """The training loader's shuffling generator (Lightning saves it in every checkpoint): a fit resumed from
        ``last.ckpt`` draws the next epochs' orders from where the interrupted fit was, not from the seed again."""
        g = getattr(self, "_train_generator", None)
        return {"train_generator": g.get_state()} if g is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict` (called by Lightning before the resumed fit builds its loaders)."""
        self._resume_generator_state = state_dict.get("train_generator")

    def train_dataloader(self):
        return self._loader(self.train_idx, True)

    def val_dataloader(self):
        return self._loader(self.val_idx, False)

    def test_dataloader(self):
        return self._loader(self.test_idx, False)

    def predict_dataloader(self):
        return self._loader(self.test_idx, False)
