"""The one ``lightning.Trainer`` builder every command uses (Lightning owns every loop: docs/guide/architecture.md).

A command's ``trainer:`` section (:mod:`eegfm_bench.config`) holds any ``lightning.Trainer`` argument plus the
package's ``patience`` and ``loggers``. :func:`check_trainer` builds a throw-away Trainer from it before any data is
read, so a device, strategy or precision the machine cannot honour stops the command at once with one line naming
the value and the fix; :func:`build_trainer` builds the Trainer of one cell (loggers under the command's
``out_dir``, the command's callbacks), so devices, DDP, bf16 and loggers come from that one section for cv
training and testing, perturbation sweeps, block-output and token extraction, attribution, and the embeddings of
the controls and the provenance demo alike.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import random
import warnings
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.plugins.io import CheckpointIO, TorchCheckpointIO
from threadpoolctl import threadpool_limits
from torch.utils.data import DataLoader, Subset

from eegfm_bench.atomic import remove_checkpoint, verify_checkpoint, write_checkpoint_bytes
from eegfm_bench.config import INTRA_OP_THREADS, TRAINER_DEFAULTS, TRAINER_EXTRAS, ConfigError
from eegfm_bench.distributed import gather_by_index, is_global_zero, world_size

NOT_IN_HASH = frozenset({"enable_progress_bar", "enable_model_summary", "loggers", "log_every_n_steps", "profiler",
                         "barebones", "num_sanity_val_steps", "detect_anomaly", "reload_dataloaders_every_n_epochs",
                         "model_registry"})
"""Trainer keys that never change a number (left out of the config hash of a cell)."""

INFERENCE_HASH_KEYS = ("precision", "inference_mode", "deterministic")
"""Trainer keys that can change the numbers of an inference-only command (sweep, probe, attribute): the
device count and strategy cannot (each window is predicted once, gathered across ranks)."""

_LOGGERS = ("csv", "tensorboard", "wandb")


def trainer_kwargs(tr: dict) -> dict:
    """The ``lightning.Trainer`` arguments of a ``trainer:`` section (without :data:`TRAINER_EXTRAS`)."""
    return {k: v for k, v in tr.items() if k not in TRAINER_EXTRAS}


PRECISION_ALIASES = {"32": "32-true", 32: "32-true", "16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed",
                     "64": "64-true", 64: "64-true", None: "32-true"}
"""Lightning's short precision spellings and what they mean (equal settings hash equally)."""


def normalised_for_hash(tr: dict) -> dict:
    """Spellings that mean the same run hash the same: precision aliases (``32`` = ``32-true``), the accelerator as
    resolved on this machine (``auto`` = ``cpu`` without a GPU; ``gpu`` = ``cuda``)."""
    tr = dict(tr)
    if "precision" in tr:
        tr["precision"] = PRECISION_ALIASES.get(tr["precision"], tr["precision"])
    acc = str(tr.get("accelerator", "auto"))
    if acc in ("auto", "gpu"):
        tr["accelerator"] = "cuda" if torch.cuda.is_available() and acc in ("auto", "gpu") else "cpu"
    return tr


def hashable_trainer(tr: dict, inference: bool = False) -> dict:
    """The part of a ``trainer:`` section that enters a config hash (after :func:`normalised_for_hash`).

    Training cells hash every argument that can change the optimisation (devices and num_nodes included: they
    change the effective batch); inference commands hash only :data:`INFERENCE_HASH_KEYS`.
    """
    tr = normalised_for_hash(tr)
    if inference:
        return {k: tr.get(k) for k in INFERENCE_HASH_KEYS}
    return {k: v for k, v in sorted(tr.items()) if k not in NOT_IN_HASH}


@contextlib.contextmanager
def fixed_numerics(threads: int = INTRA_OP_THREADS):
    """Run the enclosed cell with exactly ``threads`` intra-op threads, whoever runs it, and restore the caller's
    settings afterwards.

    A float sum split over another number of threads rounds differently (1e-7 to 1e-6 on a predicted probability:
    enough to move a window near 0.5 to the other class), so a cell's rows would depend on the launcher (a local
    worker used to get ``cpu_count // workers`` threads, a SLURM job its ``cpus_per_task``, a DDP rank what
    Lightning's launcher picks) rather than on its config. Inside the block: ``torch.set_num_threads(threads)``;
    ``OMP_NUM_THREADS=threads`` in the environment (Lightning's DDP launcher then leaves the count alone, and the
    ranks it starts inherit it); numpy's BLAS and OpenMP pools limited to ``threads`` (threadpoolctl: the ridge
    head's solve). The cv wraps every cell in it (:meth:`eegfm_bench.runs.cv.loop.CVLoop.advance`); every Trainer
    on a CPU also uses torch's deterministic algorithms (:func:`build_trainer`). docs/guide/scaling.md says what
    stays device-dependent.

    Parameters
    ----------
    threads : int
        Intra-op threads (``intra_op_threads`` of the config), >= 1.

    Raises
    ------
    ConfigError
        ``threads`` below 1.
    """
    n = int(threads)
    if n < 1:
        raise ConfigError(f"intra_op_threads = {threads}; fix: a whole number >= 1 (the default is {INTRA_OP_THREADS})")
    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env


def deterministic_setting(tr: dict) -> Any:
    """The ``deterministic`` argument a Trainer of section ``tr`` is built with: on a CPU (``accelerator: cpu``, or
    ``auto`` without a GPU) ``"warn"`` unless the section asks for ``true`` (torch's deterministic algorithms; an op
    without one warns instead of failing; the CPU kernels this package runs compute the same numbers either way, so
    the setting enters no config hash); on a GPU the section's own value (deterministic kernels are slower there;
    docs/guide/scaling.md gives the tolerance without them)."""
    value = tr.get("deterministic", TRAINER_DEFAULTS["deterministic"])
    on_cpu = normalised_for_hash({"accelerator": tr.get("accelerator", "auto")})["accelerator"] == "cpu"
    return "warn" if on_cpu and not value else value


def quiet_lightning() -> None:
    """Hide Lightning's per-Trainer chatter (GPU/TPU availability, tips, 'few workers' notes) in command output."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for pat in (".*does not have many workers.*", ".*number of training batches.*", ".*is smaller than the logging.*",
                ".*GPU available but not used.*", ".*Found .* module\\(s\\) in eval mode.*",
                ".*You are using `torch.load` with `weights_only=False`.*", ".*recommended to use .*sync_dist=True.*",
                ".*Checkpoint directory .* exists and is not empty.*", ".*predict_dataloader.*does not have many.*",
                ".*Using `DistributedSampler` with the dataloaders.*",  # padding is removed by window index
                # the product starts every Trainer itself (inside submitit's srun on SLURM): the hint does not apply
                ".*The `srun` command is available on your system but is not used.*"):
        warnings.filterwarnings("ignore", message=pat)


def check_trainer(tr: dict, where: str = "trainer") -> None:
    """Refuse, before any data is read, trainer settings this machine cannot honour.

    Builds a ``lightning.Trainer`` (nothing is launched) and turns its complaint into one line naming the value
    and the fix; also refuses ``precision: 16-mixed`` without CUDA (Lightning would silently switch to bf16) and
    logger names it does not know.

    Raises
    ------
    ConfigError
    """
    kw = trainer_kwargs(tr)
    acc = str(kw.get("accelerator", "auto"))
    cuda = torch.cuda.is_available()
    strategy = str(kw.get("strategy", "auto"))
    if strategy.startswith(("ddp_spawn", "ddp_notebook")) or strategy in ("ddp_fork",):
        raise ConfigError(f"{where}.strategy: {strategy!r} starts its processes by pickling or forking the model, which "
                          "braindecode's weight-parametrized modules and the commands' data do not survive; fix: "
                          "strategy: ddp (the command is launched once per device, as on a cluster)")
    if str(kw.get("precision")) in ("16-mixed", "16", "16-true") and not cuda and acc in ("auto", "cpu"):
        raise ConfigError(f"{where}.precision: {kw['precision']!r} needs a CUDA GPU (fp16 autocast); this machine has "
                          "none. fix: precision: bf16-mixed (CPU and recent GPUs) or 32-true")
    for lg in tr.get("loggers") or []:
        name = lg.get("name") if isinstance(lg, dict) else lg
        if name not in _LOGGERS:
            raise ConfigError(f"{where}.loggers: unknown logger {name!r}; valid: {', '.join(_LOGGERS)} (or a mapping "
                              "{name: wandb, project: ...})")
    quiet_lightning()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L.Trainer(**{**kw, "logger": False, "enable_checkpointing": False, "enable_progress_bar": False})
    except Exception as err:  # noqa: BLE001  (Lightning raises MisconfigurationException, ValueError, TypeError)
        vals = ", ".join(f"{k}={kw.get(k)!r}" for k in ("accelerator", "strategy", "devices", "num_nodes", "precision")
                         if k in kw)
        msg = str(err).lower()
        if "strateg" in msg:
            fix = "fix: strategy: ddp (or auto) on this machine"
        elif ("gpu" in msg or "cuda" in msg) and not cuda:
            fix = "fix: accelerator: cpu (or auto) on a machine without a GPU"
        elif "devices" in msg:
            fix = "fix: devices: an int > 0 (the number of processes / GPUs), or auto"
        else:
            fix = "fix: change the value named above (`eegfm-bench <command> --keys` lists the trainer keys)"
        raise ConfigError(f"{where}: this machine cannot run {vals}: {' '.join(str(err).split())} {fix}") from None


def make_loggers(specs: Sequence, out_dir: Path, name: str, version: str, experiment: str) -> list:
    """Lightning loggers from ``trainer.loggers`` (CSV under ``logs/``, TensorBoard under ``tb/``, W&B offline
    unless ``WANDB_MODE`` is set), each run named ``<name>`` / ``<version>``."""
    out = []
    for spec in specs or []:
        kind, kw = (spec, {}) if isinstance(spec, str) else (spec["name"], {k: v for k, v in spec.items() if k != "name"})
        if kind == "csv":
            out.append(CSVLogger(out_dir / "logs", name=name, version=version, **kw))
        elif kind == "tensorboard":
            out.append(TensorBoardLogger(out_dir / "tb", name=name, version=version, **kw))
        elif kind == "wandb":
            os.environ.setdefault("WANDB_MODE", "offline")
            kw.setdefault("project", experiment)
            out.append(WandbLogger(name=f"{name}-{version}", save_dir=str(out_dir), **kw))
        else:
            raise ConfigError(f"unknown logger {kind!r}; valid: {', '.join(_LOGGERS)}")
    return out


def build_trainer(tr: dict, *, out_dir: str | os.PathLike | None = None, name: str = "run",
                  version: str | None = None, experiment: str = "eegfm_bench", callbacks: Sequence = (),
                  loggers: bool = True, **overrides: Any):
    """The ``lightning.Trainer`` of one cell of a command.

    Parameters
    ----------
    tr : dict
        The command's resolved ``trainer:`` section.
    out_dir : path, optional
        Loggers write below it (``logs/``, ``tb/``, ``wandb/``); ``None``: no loggers.
    name, version : str
        Logger run name and version (e.g. ``eegnet-full-flatten`` / ``fold0``).
    experiment : str
        W&B project when the logger spec sets none.
    callbacks : sequence of lightning.Callback
    loggers : bool
        ``False`` for internal passes that should not open a tracker run (e.g. a token-cache fill).
    **overrides
        Trainer arguments the command fixes (e.g. ``inference_mode=False`` for attribution,
        ``enable_checkpointing=True`` with a ``ModelCheckpoint`` in ``callbacks``).

    Returns
    -------
    lightning.Trainer
        On a CPU with torch's deterministic algorithms (:func:`deterministic_setting`).
    """
    quiet_lightning()
    kw = trainer_kwargs(tr)
    for k in ("enable_progress_bar", "enable_model_summary", "log_every_n_steps"):  # a partial section (Python API)
        kw.setdefault(k, TRAINER_DEFAULTS[k])
    kw.setdefault("enable_checkpointing", False)
    kw["deterministic"] = deterministic_setting(tr)
    kw.update(overrides)
    strategy = str(kw.get("strategy", ""))
    if "fsdp" not in strategy and "deepspeed" not in strategy:  # those save sharded checkpoints their own way
        plugins = kw.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            kw["plugins"] = plugins + [VerifiedCheckpointIO()]
    if out_dir is not None and loggers and tr.get("loggers"):
        lg = make_loggers(tr["loggers"], Path(out_dir), name, version or "0", experiment)
    else:
        lg = False
    return L.Trainer(**kw, logger=lg or False, callbacks=list(callbacks))


class VerifiedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O, written whole or not at all and verified when read (:mod:`eegfm_bench.atomic`).

    ``save_checkpoint`` serializes with ``torch.save`` into memory, writes the bytes to a unique temporary name in
    the checkpoint's folder, ``fsync``-s and renames it, then writes the sidecar ``<name>.ckpt.json`` (size in bytes,
    SHA-256). A failed save (a full disk: :class:`~eegfm_bench.atomic.DiskFullError`) leaves the previous
    checkpoint as it was. ``load_checkpoint`` checks the file against its sidecar first (a file without one, from
    an older run, is read as before); ``remove_checkpoint`` removes the sidecar too.

    Raises
    ------
    DamagedCheckpointError
        On load: the file's size or digest differs from its sidecar, or it cannot be read.
    DiskFullError
        On save: ``ENOSPC`` / ``EDQUOT``.
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options")
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint_bytes(path, buf.getbuffer())

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict:
        if Path(path).is_file():
            verify_checkpoint(path, fix=f"delete {path} (and {Path(path).name}.json beside it) and rerun the "
                                        "command that wrote it")
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path) -> None:
        remove_checkpoint(path)


def close_loggers(trainer) -> None:
    """Finish the W&B run of a cell (one tracker run per cell: the next cell starts its own)."""
    for lg in getattr(trainer, "loggers", []) or []:
        if type(lg).__name__ == "WandbLogger":
            try:
                lg.experiment.finish()
            except Exception:  # noqa: BLE001  (offline runs may already be closed)
                pass


def expected_world_size(tr: dict) -> int:
    """The number of processes a ``trainer:`` section runs on (devices × num_nodes; the live group's size once one
    exists). ``devices: auto`` counts the visible GPUs on a GPU accelerator, else 1."""
    if world_size() > 1:
        return world_size()
    dev, nodes = tr.get("devices", 1), int(tr.get("num_nodes", 1) or 1)
    if isinstance(dev, (list, tuple)):
        n = len(dev)
    elif isinstance(dev, int) or (isinstance(dev, str) and dev.strip().lstrip("-").isdigit()):
        n = int(dev)
        if n == -1:
            n =  torch.cuda.device_count() or 1
    else:
        n = torch.cuda.device_count() if str(tr.get("accelerator", "auto")) in ("auto", "cuda", "gpu") else 1
    return max(1, n) * max(1, nodes)


def pad_to_ranks(dataset, tr: dict):
    """A dataset with at least one item per rank: Lightning's unrepeated predict sampler refuses a rank without a
    window, so a set smaller than the number of processes repeats its first items (the duplicates are removed by
    window index when the outputs are gathered)."""
    n, ranks = len(dataset), expected_world_size(tr)
    if 0 < n < ranks:
        return Subset(dataset, list(range(n)) + [0] * (ranks - n))
    return dataset


def predict_gathered(module, dataset, tr: dict | None = None, *, batch_size: int = 32, num_workers: int = 0,
                     progress: bool = False, **overrides) -> dict:
    """``Trainer.predict`` over ``dataset`` with every rank's per-window outputs gathered, each window once.

    ``module.predict_step`` must return a mapping with ``index`` (window index, shape ``(batch,)``) and per-window
    arrays (tensors or ndarrays with a first axis of ``batch``). Outputs are small per window here (probabilities,
    per-channel attention, channel maps); large features go through
    :class:`~eegfm_bench.models.features.FeatureWriter` instead.

    Parameters
    ----------
    module : LightningModule
    dataset : torch Dataset
        Yields the DataModule's batch dicts.
    tr : dict, optional
        A ``trainer:`` section (default: one device, fp32).
    batch_size, num_workers : int
    progress : bool
    **overrides
        Trainer arguments (e.g. ``inference_mode=False`` for gradients).

    Returns
    -------
    dict str -> ndarray
        Concatenated over batches and ranks, one row per window, sorted by ``index`` (the same on every rank).
    """
    tr = dict(tr or {"accelerator": "auto", "devices": 1, "precision": "32-true"})
    if len(dataset) == 0:
        return {}
    dataset = pad_to_ranks(dataset, tr)
    t = build_trainer({**tr, "enable_progress_bar": bool(progress) and is_global_zero()}, loggers=False, **overrides)
    outs = t.predict(module, dataloaders=DataLoader(dataset, batch_size=batch_size, shuffle=False,
                                                    num_workers=num_workers), return_predictions=True) or []

    def arr(v):
        return v.detach().float().cpu().numpy() if isinstance(v, torch.Tensor) and v.is_floating_point() else \
            (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v))

    local = {}
    if outs:
        for k in outs[0]:
            local[k] = np.concatenate([arr(o[k]) for o in outs])
    return gather_by_index(local)  # a collective: every rank calls it, even with no window


def log_summary(tr: dict, out_dir: str | os.PathLike, name: str, metrics: dict, *, hparams: dict | None = None,
                experiment: str = "eegfm_bench") -> list:
    """Log a command's summary numbers to the trackers of ``trainer.loggers`` (rank 0; CSV, TensorBoard, W&B).

    Commands whose last step runs on cached features (probe fits, attribution checks, the controls' statistics)
    report their tables here, so every command shows up in the user's tracker like the training runs do.

    Returns
    -------
    list
        The loggers used (closed).
    """
    if not is_global_zero() or not tr.get("loggers"):
        return []
    loggers = make_loggers(tr["loggers"], Path(out_dir), name, "summary", experiment)
    clean = {k: float(v) for k, v in metrics.items() if v is not None and v == v}
    for lg in loggers:
        if hparams:
            lg.log_hyperparams(hparams)
        lg.log_metrics(clean, step=0)
        lg.finalize("success")
        if type(lg).__name__ == "WandbLogger":
            try:
                lg.experiment.finish()
            except Exception:  # noqa: BLE001
                pass
    return loggers


def best_fitted(trainer, pl_module):
    """``(module, path)``: a CPU copy at the trainer's best checkpoint, or ``(pl_module, "")`` when none was saved.

    Used by the probe and attribution callbacks after ``fit``: they analyse the model the cv tests (early stopping
    keeps the best validation epoch, not the last). Loads with ``weights_only=True``.
    """
    cb = trainer.checkpoint_callback
    best = getattr(cb, "best_model_path", "") if cb else ""
    if not best:
        return pl_module, ""
    model = copy.deepcopy(pl_module).cpu()
    model.load_state_dict(torch.load(best, map_location="cpu", weights_only=True)["state_dict"])
    return model, best


class ResumableRNG(Callback):
    """Random-number states in every checkpoint, restored when ``fit`` resumes from one.

    A requeued or preempted cell resumes from its ``last.ckpt``; Lightning restores the weights, optimiser,
    scheduler and loop counters but not the random streams, so without this the resumed epochs would shuffle as the
    first epoch did (the training loader's generator starts again from its seed) and draw other dropout masks, and
    the cell would end with other numbers than an uninterrupted run. Saved: torch's global CPU (and CUDA) state,
    NumPy's and Python's; restored at the start of the first epoch after the resume. (The training loader's
    shuffling generator is the datamodule's state: :meth:`EEGDataModule.state_dict`.) Reading a state consumes
    nothing: uninterrupted runs are unchanged.
    """

    KEY = "eegfm_rng_states"

    def __init__(self):
        self._pending = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        # tensors and plain numbers only: every checkpoint loads with torch.load(weights_only=True)
        states = {"torch": torch.get_rng_state(),
                  "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                            "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)},
                  "python": {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
                             "gauss_next": gauss_next}}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
        checkpoint[self.KEY] = states

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self._pending = checkpoint.get(self.KEY)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if not self._pending:
            return
        s, self._pending = self._pending, None
        torch.set_rng_state(s["torch"])
        n = s["numpy"]
        np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
        py = s["python"]
        random.setstate((py["version"], tuple(int(v) for v in py["internal"].tolist()), py["gauss_next"]))
        if "cuda" in s and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(s["cuda"])


def selection_metric(val_labels) -> tuple[str, str, str]:
    """The metric that picks the best epoch and stops training: ``("val/bacc", "max", "")``, or
    ``("val/loss", "min", note)`` when the validation windows hold one class.

    On one class the balanced accuracy is undefined (:class:`~eegfm_bench.models.module.FMClassifier` logs NaN,
    never half the accuracy), and early stopping on NaN would stop after the first epoch with that epoch's weights.
    The validation loss stays defined, so it selects the epoch instead; ``note`` is the line that says so (the
    command prints it and the rows record ``selected_on``). Typical where each subject holds one label (patients
    vs controls) and ``split.n_val_groups`` is 1; the fix for a balanced-accuracy selection is a validation draw
    that holds every class (``split.n_val_groups`` ≥ the number of classes).

    Parameters
    ----------
    val_labels : int array, shape (n_val_windows,)
        The fold's validation labels.
    """
    present = np.unique(np.asarray(val_labels))
    if present.size != 1:
        return "val/bacc", "max", ""
    return "val/loss", "min", (f"the validation windows hold only class {present[0]}: balanced accuracy is undefined "
                               "there, so the best epoch and early stopping use val/loss; fix for a balanced-accuracy "
                               "selection: split.n_val_groups >= the number of classes")


def fit_callbacks(dirpath: str | os.PathLike, *, patience: int | None, filename: str = "best",
                  monitor: str = "val/bacc", save_last: bool = False, mode: str = "max") -> tuple[list, Any]:
    """The one early-stopping + checkpoint pair every training command uses, with :class:`ResumableRNG`.

    Returns ``(callbacks, checkpoint)``: ``EarlyStopping(monitor, mode, patience)`` (none when ``patience``
    is None: a fixed schedule), a ``ModelCheckpoint`` keeping the best epoch by ``monitor`` as ``<filename>.ckpt``
    in ``dirpath`` (and ``last.ckpt`` with ``save_last``, what a requeued job resumes from), and the RNG states.
    ``monitor`` / ``mode`` come from :func:`selection_metric` in the cv.
    """
    ckpt = ModelCheckpoint(dirpath=dirpath, filename=filename, monitor=monitor, mode=mode, save_top_k=1,
                           enable_version_counter=False, save_last=save_last)
    callbacks = ([EarlyStopping(monitor, mode=mode, patience=int(patience))] if patience is not None else []) + \
        [ckpt, ResumableRNG()]
    return callbacks, ckpt
