"""``eegfm-bench plan --config X``: what a cv config will run, before it runs.

Prints, without training anything:

* the **cells** (model × regime × head × fold) with their config hashes, and how many already have rows of that
  hash (a rerun skips them);
* the **jobs** the configured launcher makes of the cells still to run;
* the **backbone passes saved** by the feature cache: a head-only run extracts its frozen backbone's tokens once
  for every window, shared by all its heads and folds, instead of a backbone pass per window, epoch, head and fold;
* an **estimate of device-hours**: window-passes × seconds per window. Seconds per window come from a throughput
  table (``scripts/bench_backbones.py --out FILE``'s ``.json``: ``fwd_per_s`` / ``fwd_bwd_per_s`` per model and
  device) when given, else from a short measurement here (``--measure``: 3 batches of the config's input through
  each model, forward and forward + backward). An estimate assumes every cell runs ``max_epochs`` (early stopping
  only shortens it) and counts the backbone, which dominates; validation and test passes are forward-only;
* **the whole command, stage by stage** (:mod:`eegfm_bench.runs.plan.stages`): start-up,
  the window read (or the ingestion this plan paid), the features, job start-ups, training, testing, each confound
  variation and the report, for the launcher and workers given, with its total wall time.
"""
from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path
from typing import Sequence

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.models.throughput import batch_seconds
from eegfm_bench.runs.cv.cells import enumerate_cells, fixed_batch_size, load_config, run_trainer, windows_for
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.cv.confound import derive
from eegfm_bench.config.confound import label
from eegfm_bench.runs.launch.launcher import as_launcher, chunks
from eegfm_bench.runs.plan.stages import (bootstrap_seconds, cell_stage_seconds, command_stages, compare_seconds,
                                          effective_parallel, features_cached, features_seconds, startup_seconds,
                                          timed_windows)
from eegfm_bench.runs.plan.text import throughput_summary
from eegfm_bench.runs.cv.progress import CellProgress
from eegfm_bench.stats import SUBJECT_SD_PILOT, min_detectable_delta
from eegfm_bench.trainer import build_trainer, fit_callbacks, fixed_numerics


def measure_backbone(model: str, ch_names: list[str], n_times: int, backbone_kwargs: dict | None, batch: int, *, min_batches: int = 5,
             min_seconds: float = 2.0) -> dict:
    """Windows/s of one backbone on this machine's CPU, forward (eval, no grad) and forward + backward (train), at
    ``batch`` windows per step: 2 warm-up steps, then at least ``min_batches`` timed steps and ``min_seconds``
    (:func:`~eegfm_bench.models.throughput.batch_seconds`); the median step sets the rate, the quartiles its
    spread. Also the seconds to save the model's weights once (each epoch writes ``best`` and ``last``), to build
    the model (``build_s``), the warm-up steps' extra seconds (``*_warmup_excess_s``: a fresh model's first steps),
    the input size and the number of blocks (what a depth-truncated variant scales by)."""
    torch.manual_seed(0)
    kwargs = dict(backbone_kwargs or {})
    t0 = time.perf_counter()
    ad = BACKBONES.get(model)(ch_names, n_times, n_outputs=2, **kwargs)
    build_s = time.perf_counter() - t0
    x = torch.randn(batch, len(ch_names), n_times)
    out: dict = {"model": model, "n_chans": len(ch_names), "n_times": int(n_times), "backbone_kwargs": kwargs,
                 "batch": batch, "device": "cpu", "source": "measured (CPU)"}
    for key, train in (("fwd", False), ("fwd_bwd", True)):
        t0 = time.perf_counter()
        t = np.asarray(batch_seconds(ad, ch_names, x, train=train, min_batches=min_batches, min_seconds=min_seconds))
        q1, med, q3 = np.percentile(t, [25, 50, 75])
        # the 2 warm-up steps' time beyond 2 median steps: what a fresh model (every cell) pays once
        out[f"{key}_warmup_excess_s"] = max(0.0, time.perf_counter() - t0 - float(t.sum()) - 2 * float(med))
        out[f"{key}_per_s"] = batch / med
        out[f"{key}_batches"] = int(len(t))
        out[f"{key}_spread"] = [batch / q3, batch / q1]  # windows/s at the slow and the fast quartile step
    t0 = time.perf_counter()
    torch.save(ad.state_dict(), io.BytesIO())
    out["save_s"] = time.perf_counter() - t0
    out["build_s"] = build_s
    out["n_blocks"] = len(list(getattr(ad, "blocks", []) or []))
    return out


def throughput_key(model: str, n_chans: int | None = None, n_times: int | None = None,
                   backbone_kwargs: dict | None = None) -> tuple:
    """The key of one throughput entry: the model alone, or with its input size and architecture overrides."""
    if n_chans is None:
        return (model,)
    return (model, int(n_chans), int(n_times), json.dumps(backbone_kwargs or {}, sort_keys=True))


def read_bench(path: str | Path) -> dict:
    """A throughput table (``scripts/bench_backbones.py --out FILE``'s ``.json``, or ``python -m
    eegfm_bench.runs.plan.command --write-bench``'s): every row under its model (the first row of a model) and, for rows
    that give their input size (``n_chans``, ``n_times``), under that too; rows with an ``error`` are skipped."""
    table: dict = {}
    for r in json.loads(Path(path).read_text()):
        if "error" in r:
            continue
        r = {**r, "source": r.get("source_label") or f"{path} ({r.get('device', '?')})"}
        table.setdefault(throughput_key(r["model"]), r)
        if r.get("n_chans") is not None and r.get("n_times") is not None:
            table[throughput_key(r["model"], r["n_chans"], r["n_times"], r.get("backbone_kwargs"))] = r
    return table


def lookup(table: dict, model: str, n_chans: int, n_times: int, backbone_kwargs: dict | None = None, *,
           exact: bool = False) -> dict | None:
    """The throughput of ``model`` at this input size: the exact entry, else a depth-truncated model's base model
    scaled by the blocks it keeps (``L / (depth + 1)``), else the model's entry that gives no input size, else (not
    ``exact``) its entry at another size (said in its ``source``); None when the table has nothing for it."""
    kw = dict(backbone_kwargs or {})
    hit = table.get(throughput_key(model, n_chans, n_times, kw))
    if hit is not None:
        return hit
    if model.endswith("_truncated") and kw.get("depth") is not None:
        base_kw = {k: v for k, v in kw.items() if k != "depth"}
        base = lookup(table, model[:-len("_truncated")], n_chans, n_times, base_kw, exact=exact)
        if base is not None and base.get("n_blocks"):
            f = base["n_blocks"] / (int(kw["depth"]) + 1)
            scaled = {k: (v * f if k in ("fwd_per_s", "fwd_bwd_per_s") else v) for k, v in base.items()}
            for k in ("fwd_spread", "fwd_bwd_spread"):
                if k in base:
                    scaled[k] = [v * f for v in base[k]]
            scaled["source"] = f"{base['source']}, scaled by {base['n_blocks']}/{int(kw['depth']) + 1} blocks"
            return scaled
    hit = table.get(throughput_key(model))
    if hit is not None and hit.get("n_chans") is not None and exact:
        return None
    if hit is not None and hit.get("n_chans") not in (None, n_chans):
        return {**hit, "source": f"{hit['source']}; measured at {hit['n_chans']} × {hit['n_times']}, not "
                                 f"{n_chans} × {n_times}"}
    return hit


def cell_seconds(fwd: float, bwd: float, tput: dict | None, over: dict | None, epochs: int) -> np.ndarray:
    """Seconds of one cell at the median, slow-quartile and fast-quartile steps: its backbone forward and forward +
    backward passes at the throughput's rates, plus Lightning's per-cell and per-epoch cost and two checkpoint
    saves per epoch (zeros without a throughput)."""
    if tput is None:
        return np.zeros(3)
    rates = [(tput["fwd_per_s"], tput["fwd_bwd_per_s"])]
    rates += [(tput.get("fwd_spread", [tput["fwd_per_s"]] * 2)[i],
               tput.get("fwd_bwd_spread", [tput["fwd_bwd_per_s"]] * 2)[i]) for i in (0, 1)]
    fixed = over["per_cell"] + epochs * (over["per_epoch"] + 2 * tput.get("save_s", 0.0)) if over else 0.0
    return np.array([fwd / f + bwd / b + fixed for f, b in rates])


def cell_passes(regime: str, epochs: int, n_train: int, n_val: int, n_test: int, n_all: int,
                first_extraction: bool) -> tuple[int, int]:
    """Backbone (forward, forward + backward) window-passes of one cell: a head-only cell extracts its frozen
    backbone's tokens once for every window (``n_all``), shared by every head and fold of that backbone (so only
    the first such cell pays them); a fine-tuned cell trains ``epochs`` epochs and tests once."""
    if regime == "head_only":
        return (n_all if first_extraction else 0), 0
    return epochs * n_val + n_test, epochs * n_train


class _Toy(L.LightningModule):
    """A linear classifier on 8 features: what a cell costs with no model (Trainer, loops, callbacks)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 2)

    def training_step(self, batch, i):
        return torch.nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, i):
        self.log("val/bacc", (self.lin(batch[0]).argmax(1) == batch[1]).float().mean())

    def test_step(self, batch, i):
        self.log("test/bacc", (self.lin(batch[0]).argmax(1) == batch[1]).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_overhead(tr: dict) -> dict:
    """Seconds a cell spends outside the model on this machine: a Trainer with the cv's callbacks (early stopping,
    checkpoint, RNG state) fitting and testing a toy model for 1 and for 4 epochs; ``per_epoch`` is the slope,
    ``per_cell`` the rest (Trainer start, test loop) and ``test`` the test loop's part of it (mean of the two)."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    cost, test = {}, []
    for epochs in (1, 4):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            cbs, _ = fit_callbacks(d, patience=None, save_last=True)
            t = build_trainer({**tr, "max_epochs": epochs, "accelerator": "cpu", "devices": 1}, callbacks=cbs,
                              loggers=False, enable_checkpointing=True, enable_progress_bar=False)
            t.fit(_Toy(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
            t1 = time.perf_counter()
            t.test(_Toy(), DataLoader(data, batch_size=16), verbose=False)
            cost[epochs] = time.perf_counter() - t0
            test.append(time.perf_counter() - t1)
    per_epoch = max(0.0, (cost[4] - cost[1]) / 3)
    per_cell = max(0.0, cost[1] - per_epoch)
    return {"per_epoch": per_epoch, "per_cell": per_cell, "test": min(per_cell, float(np.mean(test)))}


def run_plan(config, args: Sequence[str] = (), *, bench: str | None = None, measure: bool = True) -> dict:
    """The plan of a cv config as a dict (cells, jobs, passes, estimate); see the module docstring.

    The confound check the cv runs after its headline cells (on by default for event-locked tasks) is planned too:
    each variation's cells, jobs and estimate under ``confound``, and in the total estimate.

    Raises
    ------
    ConfigError
        From the config, as ``eegfm-bench cv`` would.
    """
    startup = startup_seconds()  # first: the process's age is its start-up only before the plan's own work
    cfg = load_config(config, args)
    table: dict = read_bench(bench) if bench else {}
    if table or measure:
        with fixed_numerics(cfg.intra_op_threads):
            over = lightning_overhead(cfg.trainer)
    else:
        over = None
    head = _plan_part(cfg, table, measure, over)
    conf, parts = [], []
    cc = cfg.confound
    if cc.enabled:
        for v in cc.variations:
            part = _plan_part(derive(cfg, v), table, measure, over)
            parts.append(part)
            conf.append({"condition": label(v, cc), "out_dir": part["out_dir"], "n_cells": part["n_cells"],
                         "n_todo": len(part["todo"]), "n_jobs": part["n_jobs"], "seconds": part["seconds"],
                         "parallel": part["parallel"]})
    known = bool(table) or not head["todo"]
    stages = _command_stages(cfg, startup[0], head, conf, parts) if known else None
    hours = lambda sec: [x / 3600.0 for x in sec] if known else None  # noqa: E731
    total = np.asarray(head["seconds"]) + sum((np.asarray(c["seconds"]) for c in conf), np.zeros(3))
    # wall clock: each part's jobs run `parallel` at once (on their own devices); the confound check after the headline
    wall = np.asarray(head["seconds"]) / head["parallel"] + sum((np.asarray(c["seconds"]) / c["parallel"]
                                                                  for c in conf), np.zeros(3))
    return {"config": cfg.experiment, "out_dir": head["out_dir"], "n_cells": head["n_cells"],
            "n_done": head["n_cells"] - len(head["todo"]), "todo": head["todo"], "launcher": head["launcher"],
            "n_jobs": head["n_jobs"], "parallel": head["parallel"],
            "backbone_passes_saved_by_cache": head["passes_saved"],
            "throughput": throughput_summary(table, head["used"]),
            "overhead_s": over,
            "estimate_device_hours": total[0] / 3600.0 if known else None,
            "estimate_device_hours_range": sorted(hours(total)[1:]) if known else None,
            "estimate_wall_hours": wall[0] / 3600.0 if known else None,
            "estimate_headline_device_hours": head["seconds"][0] / 3600.0 if known else None,
            "confound": [{**{k: v for k, v in c.items() if k != "seconds"},
                          "estimate_device_hours": c["seconds"][0] / 3600.0 if known else None} for c in conf],
            "heads": {f"{m}/{r}/{h}": c for (m, r, h), c in head["current"].items()},
            "detectable": detectable_delta(cfg),
            "stages": stages, "startup": {"seconds": startup[0], "source": startup[1]},
            "estimate_command_wall_s": sum(r["wall_s"] for r in stages) if stages else None,
            "ingested_by_plan": [{"part": c["condition"] if c else "headline", "seconds": p["windows"]["ingest_s"],
                                  "entries": p["windows"]["built"]}
                                 for c, p in zip([None, *conf], [head, *parts]) if p["windows"]["built"]]}


def _command_stages(cfg: CVConfig, startup_s: float, head: dict, conf: list[dict], parts: list[dict]) -> list[dict]:
    """The stages of the whole cv command (:func:`~eegfm_bench.runs.plan.stages.command_stages`) from the planned
    parts: the headline and each confound variation, for the configured launcher (a new process per job: start-up
    and the window read again) and the jobs that run at once without sharing cores."""
    tr = cfg.trainer
    acc = str(tr.get("accelerator", "auto"))
    if acc == "auto":
        acc = "gpu" if torch.cuda.is_available() else "cpu"
    kind = cfg.launcher.kind

    def part(p: dict) -> dict:
        st = p["stage_seconds"]
        return {"windows_s": p["windows"]["read_s"], "features_s": st["features"][0], "training_s": st["training"][0],
                "testing_s": st["testing"][0], "n_jobs": p["n_jobs"], "launched": kind != "none",
                "parallel": effective_parallel(kind, p["parallel"], cfg.intra_op_threads, acc),
                "job_start_s": startup_s + p["windows"]["read_s"]}

    variations = []
    if conf:
        sz = head["size"]
        boot = bootstrap_seconds(sz["n_windows"], sz["n_subjects"], sz["n_folds"], sz["n_classes"],
                                 int(cfg.confound.n_boot))
        for c, p in zip(conf, parts):  # the comparison runs even when the variation's cells are done
            variations.append({**part(p), "condition": c["condition"],
                               "compare_s": compare_seconds(sz["n_groups"], sz["n_subjects"], boot)})
    return command_stages(startup_s, part(head), variations)


def detectable_delta(cfg: CVConfig, sd_subject: float = SUBJECT_SD_PILOT) -> dict:
    """The held-out subjects of the configured folds and the smallest paired Δ their subject-cluster bootstrap
    detects (:func:`~eegfm_bench.stats.min_detectable_delta`: 95 % interval, 80 % power, per-subject SD
    ``sd_subject``, by default the eyes control's spread :data:`~eegfm_bench.stats.SUBJECT_SD_PILOT`)."""
    cells, _, split = enumerate_cells(cfg, {}, progress=False)
    n = len({str(s) for f in {c.fold for c in cells} for s in split.folds[f].test})
    return {"n_subjects": n, "sd_subject": sd_subject, "level": 0.95, "power": 0.8,
            "delta": min_detectable_delta(n, sd_subject) if n >= 2 else None}


def _plan_part(cfg: CVConfig, table: dict, measure: bool, over: dict | None) -> dict:
    """Cells, jobs, backbone passes and seconds of one resolved cv config (the headline or a confound variation):
    the cells a run would train (:class:`~eegfm_bench.runs.cv.progress.CellProgress`, as the cv decides them), and
    the seconds of its stages (:mod:`eegfm_bench.runs.plan.stages`: the windows read, the features, the cells'
    training and testing). Throughputs are measured with the cells' intra-op threads."""
    out = Path(cfg.out_dir)
    windows: dict = {}
    win = timed_windows(cfg, windows)
    cells, current, split = enumerate_cells(cfg, windows, progress=False)
    todo = CellProgress.of_cells(out, cfg.experiment, cells).todo()
    lc = cfg.launcher
    jobs = chunks([c.id for c in todo], lc) if lc.kind != "none" else ([[None] * len(todo)] if todo else [])
    rows, passes_saved, used = [], 0, {}
    seconds = np.zeros(3)  # at the median step, the slow quartile and the fast quartile
    stage = {"features": np.zeros(3), "training": np.zeros(3), "testing": np.zeros(3)}
    extracted = set()
    for c in todo:
        run, fold = c.run, c.fold
        ws = windows_for(cfg, run.model, windows)
        tr = run_trainer(cfg, run)
        epochs = int(tr.get("max_epochs") or 1)
        groups = ws.subject if cfg.split.group_by == "subject" else ws.recording
        n_train, n_val, n_test = (len(i) for i in split.indices(groups, fold))
        kw = run.backbone_kwargs
        batch = max(1, min(fixed_batch_size(cfg.data), n_train or 1))
        tput = lookup(table, run.model, len(ws.ch_names), int(ws.n_times), kw)
        if tput is None and measure:
            with fixed_numerics(cfg.intra_op_threads):  # the threads every cell runs with
                tput = measure_backbone(run.model, list(ws.ch_names), int(ws.n_times), kw, batch)
            table[throughput_key(run.model, len(ws.ch_names), int(ws.n_times), kw)] = tput
            table.setdefault(throughput_key(run.model), tput)
        if tput is not None:
            label = run.model if used.get(run.model, tput) is tput else f"{run.model} {kw}"
            used.setdefault(label, tput)
        key = (run.model, json.dumps(kw, sort_keys=True), run.pretrained)
        first = key not in extracted
        if run.regime == "head_only":
            would = epochs * (n_train + n_val) + n_test  # backbone passes without the cache (per head and fold)
            passes_saved += would - (0 if key in extracted else len(ws))
            if first and not features_cached(cfg, run.model, kw, ws):
                stage["features"] += features_seconds(len(ws), tput)
        fwd, bwd = cell_passes(run.regime, epochs, n_train, n_val, n_test, len(ws), first)
        if run.regime == "head_only":
            extracted.add(key)
        seconds += cell_seconds(fwd, bwd, tput, over, epochs)
        for k, v in cell_stage_seconds(run.regime, epochs, n_train, n_val, n_test, batch, tput, over).items():
            stage[k] += v
        rows.append({"cell": c.id, "epochs": epochs,
                     "windows": {"train": n_train, "val": n_val, "test": n_test},
                     "backbone_passes": {"forward": fwd, "forward_backward": bwd}})
    n_subjects = len({str(s) for w in windows.values() for s in w.subject})
    n_classes = max((len(np.unique(w.y)) for w in windows.values()), default=2)
    return {"out_dir": str(out), "n_cells": len(cells), "todo": rows, "launcher": lc.kind, "n_jobs": len(jobs),
            "passes_saved": int(passes_saved), "seconds": seconds.tolist(), "current": current, "overhead": over,
            "parallel": parallel_jobs(lc, len(jobs)), "used": used, "windows": win,
            "stage_seconds": {k: v.tolist() for k, v in stage.items()},
            "size": {"n_windows": max((len(w) for w in windows.values()), default=0), "n_subjects": n_subjects,
                     "n_classes": int(n_classes), "n_folds": len({c.fold for c in cells}),
                     "n_groups": len(current)}}


def parallel_jobs(lc, n_jobs: int) -> int:
    """How many of the jobs run at once: SLURM's ``array_parallelism``, the local ``workers``, else 1."""
    lc = as_launcher(lc)
    if lc.kind == "slurm":
        return max(1, min(n_jobs, int(lc.slurm.array_parallelism or n_jobs)))
    if lc.kind == "local":
        return max(1, min(n_jobs, int(lc.workers or 1)))
    return 1


__all__ = ["run_plan"]
