"""Benchmark: the sweep's Lightning test loop vs the bare PyTorch loops doing the same work (targets ≤ 1.10).

Same windows, same model, same conditions, measured in one run:

* ``forward``  — the bare forward passes the sweep needs: ``n_conditions`` × (every window through the model in
  batches, ``torch.inference_mode``), on the clean windows (no perturbation, no metrics, no rows);
* ``bare``     — the minimal sequential PyTorch loop doing the sweep's work: for every condition, fetch each batch
  of :class:`~eegfm_bench.perturb.dataset.PerturbedWindows` (the same per-window noise) and forward it;
* ``sweep``    — :func:`eegfm_bench.runs.sweep.command.evaluate_conditions`: one ``trainer.test`` with one dataloader
  per condition (``--num-workers`` DataLoader processes perturb ahead), the gathering and metrics of
  :class:`~eegfm_bench.callbacks.sweep.TestSweep` and the result rows appended to a
  :class:`~eegfm_bench.results.ResultStore` after every condition, as ``eegfm-bench sweep`` does.

Printed ratios: ``sweep / forward`` (the sweep vs the forward passes it needs) and ``sweep / bare`` (the Lightning
loop's own overhead over the minimal loop). Not-applicable conditions (removal for EEGNet) cost nothing and are not
counted.

Usage::

    OMP_NUM_THREADS=1 EEGFM_DATA=../shared/data python scripts/bench_sweep.py            # real eegmmidb_mi
    python scripts/bench_sweep.py --synthetic --n-windows 256                           # no data needed
    python scripts/bench_sweep.py --model eegnet --num-workers 1                        # other settings
    python scripts/bench_sweep.py --model labram-mean --n-windows 64 --precision bf16-mixed --accelerator cuda
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

NAMES = ['FC5', 'FC3', 'FC1', 'FCz', 'FC2', 'FC4', 'FC6', 'C5', 'C3', 'C1', 'Cz', 'C2', 'C4', 'C6', 'CP5', 'CP3',
         'CP1', 'CPz', 'CP2', 'CP4', 'CP6', 'Fp1', 'Fpz', 'Fp2', 'AF7', 'AF3', 'AFz', 'AF4', 'AF8', 'F7', 'F5', 'F3',
         'F1', 'Fz', 'F2', 'F4', 'F6', 'F8', 'FT7', 'FT8', 'T7', 'T8', 'T9', 'T10', 'TP7', 'TP8', 'P7', 'P5', 'P3',
         'P1', 'Pz', 'P2', 'P4', 'P6', 'P8', 'PO7', 'PO3', 'POz', 'PO4', 'PO8', 'O1', 'Oz', 'O2', 'Iz']

MODELS = {
    "eegnet-tiny": dict(backbone="eegnet", head="flatten", regime="full", backbone_kwargs=dict(F1=4, D=1, kernel_length=16)),
    "eegnet": dict(backbone="eegnet", head="flatten", regime="full"),
    "labram-mean": dict(backbone="labram", head="mean", regime="head_only"),
}
"""``eegnet-tiny``: the test model (the cheapest forward, so the worst case for the ratio); ``eegnet`` and
``labram-mean``: the quickstart's EEGNet and LaBraM head-only (random init)."""


def _windows(args):
    from eegfm_bench.data.windows import WindowSet
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.perturb.evaluate import perturb_context

    prep = BACKBONES.get(MODELS[args.model]["backbone"]).preprocessing
    if args.synthetic:
        rng = np.random.default_rng(0)
        n_times = int(round(prep.sfreq * prep.window_s))
        n = args.n_windows
        X = (20 * rng.standard_normal((n, 64, n_times))).astype(np.float32)
        meta = {"dataset": "eegmmidb", "cache_key": "bench", "preprocessing": {
            "sfreq": prep.sfreq, "l_freq": prep.l_freq, "h_freq": prep.h_freq, "notch": 60.0}}
        ws = WindowSet(X, rng.integers(0, 2, n), np.array(["S1"] * n), np.array(["R1"] * n), np.arange(n),
                       np.full(n, "eegmmidb"), NAMES, prep.sfreq, ["left", "right"], meta)
        what = f"synthetic (64 ch, {n_times} samples at {prep.sfreq:g} Hz, eegmmidb filters)"
    else:
        from eegfm_bench.data.windows import load_windows

        ws = load_windows("eegmmidb_mi", prep, subjects=args.subjects, progress=False)
        what = f"eegmmidb_mi subjects {args.subjects} ({ws.n_times} samples at {ws.sfreq:g} Hz)"
    rows = np.arange(min(len(ws), args.n_windows))
    ctx, _ = perturb_context(ws.meta, "eegmmidb_mi", 0)
    return ws, rows, ctx, what


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--synthetic", action="store_true", help="random windows instead of real eegmmidb_mi")
    p.add_argument("--subjects", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--n-windows", type=int, default=128, help="windows in the 'fold' (at most)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers of the sweep and the bare loop")
    p.add_argument("--model", choices=tuple(MODELS), default="eegnet-tiny")
    p.add_argument("--conditions", choices=("all", "noise", "zero"), default="all",
                   help="all of App. D; only the noise conditions; only the zero-padding ones")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--precision", default="32-true")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch
    from torch.utils.data import DataLoader

    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.perturb.conditions import default_conditions
    from eegfm_bench.perturb.dataset import PerturbedWindows
    from eegfm_bench.perturb.evaluate import condition_rows, not_applicable_reason
    from eegfm_bench.runs.sweep.command import evaluate_conditions
    from eegfm_bench.results import ResultStore
    from eegfm_bench.trainer import quiet_lightning

    quiet_lightning()
    ws, rows, ctx, what = _windows(args)
    model = FMClassifier(ch_names=list(ws.ch_names), n_times=ws.n_times, n_classes=2, **MODELS[args.model]).eval()
    conds = [c for c in default_conditions("eegmmidb_mi", variable_channels=True)
             if not_applicable_reason(c, model) is None]
    if args.conditions == "noise":
        conds = [c for c in conds if "snr" in c.name or c.name == "clean"]
    elif args.conditions == "zero":
        conds = [c for c in conds if c.name.endswith("_zero") or c.name == "clean"]
    bs = args.batch_size
    dev = torch.device("cuda" if args.accelerator in ("cuda", "gpu") else "cpu")
    mixed = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(args.precision)
    X = np.asarray(ws.X[rows], dtype=np.float32)
    names = list(ws.ch_names)

    def autocast():
        import contextlib

        return torch.autocast(dev.type, dtype=mixed) if mixed else contextlib.nullcontext()

    def t_forward():
        model.to(dev)
        with torch.inference_mode(), autocast():
            for _ in conds:
                for s in range(0, len(X), bs):
                    model(torch.from_numpy(X[s:s + bs]).to(dev), names).float().softmax(-1).cpu()

    def t_bare():
        model.to(dev)
        with torch.inference_mode(), autocast():
            for c in conds:
                ds = PerturbedWindows(ws, rows, c, ctx)
                for b in DataLoader(ds, batch_size=bs, shuffle=False, num_workers=args.num_workers):
                    model(b["x"].to(dev), ds.ch_names).float().softmax(-1).cpu()

    def t_sweep():
        with tempfile.TemporaryDirectory() as tmp:
            store = ResultStore(tmp)
            base = {"experiment": "bench", "task": "eegmmidb_mi", "model": model.hparams.backbone, "init": "random",
                    "regime": model.regime, "head": model.hparams.head, "fold": 0, "seed": 0, "n_windows": len(rows),
                    "n_subjects": 0, "fold_unit": "subject", "config_hash": "bench", "code_version": "bench"}
            evaluate_conditions({"m": model}, ws, rows, conds, ctx, batch_size=bs, num_workers=args.num_workers,
                                trainer={"accelerator": args.accelerator, "devices": 1, "precision": args.precision},
                                sink=lambda rs: store.append([r for res in rs for r in condition_rows(res, base)]))

    def timed(fn):
        out = []
        for _ in range(args.repeats):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
        return statistics.median(out), out

    t_forward()  # warm-up: filter design (cached), allocator, lazy imports
    t_sweep()
    res = {name: timed(fn) for name, fn in (("forward", t_forward), ("bare", t_bare), ("sweep", t_sweep))}
    n_par = sum(p.numel() for p in model.parameters())
    print(f"windows: {what}; {len(rows)} windows x {len(conds)} conditions ({args.conditions}); batch {bs}; "
          f"{args.model} ({n_par} parameters); {args.accelerator} {args.precision}; torch threads "
          f"{torch.get_num_threads()}; DataLoader workers {args.num_workers}; cpus {os.cpu_count()}; load avg "
          f"{os.getloadavg()[0]:.2f}")
    for name, (med, allv) in res.items():
        print(f"  {name:8s} {med:8.3f} s  (median of {', '.join(f'{v:.3f}' for v in allv)})")
    r_fwd = res["sweep"][0] / res["forward"][0]
    r_bare = res["sweep"][0] / res["bare"][0]
    print(f"ratio sweep / bare forward passes = {r_fwd:.2f}  (target <= 1.10: {'met' if r_fwd <= 1.10 else 'NOT met'})")
    print(f"ratio sweep / bare perturb+forward loop = {r_bare:.2f}  (target <= 1.10: "
          f"{'met' if r_bare <= 1.10 else 'NOT met'}; the Lightning loop's own overhead)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
