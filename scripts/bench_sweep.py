"""Benchmark: wall time of the perturbation sweep vs the bare forward passes it needs (target ratio ≤ 1.15).

Same windows, same model, same number of conditions:

* ``forward``  — the bare forward passes: ``n_conditions`` × (every window through the model, in batches), on the
  clean windows (no perturbation, no metrics, no rows);
* ``perturb``  — the perturbations alone (``Condition.apply`` on every batch, as the sweep does);
* ``bare``     — the minimal sequential loop: perturb a batch, forward it, for every condition (no threads,
  no metrics, no rows);
* ``sweep``    — :func:`eegfm_bench.perturb.sweep.iter_sweep` with its background perturbation threads, plus the
  metrics and the result rows appended to a :class:`~eegfm_bench.results.ResultStore` after every condition,
  as ``eegfm-bench sweep`` does.

Printed ratios: ``sweep / forward`` (the target) and ``sweep / bare`` (the sweep machinery's own overhead).
Not-applicable conditions (removal for EEGNet) cost nothing and are not counted.

Usage::

    OMP_NUM_THREADS=1 EEGFM_DATA=/work/shared/data python scripts/bench_sweep.py            # real eegmmidb_mi
    python scripts/bench_sweep.py --synthetic --n-windows 256                             # no data needed
    python scripts/bench_sweep.py --model eegnet --conditions zero                         # other settings
    python scripts/bench_sweep.py --model labram-mean --n-windows 64                       # the quickstart's LaBraM
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


def _windows(args):
    from eegfm_bench.perturb.sweep import perturb_context

    if args.synthetic:
        from eegfm_bench.perturb.noise import FilterSpec
        from eegfm_bench.perturb.conditions import PerturbContext

        rng = np.random.default_rng(0)
        names = ['FC5', 'FC3', 'FC1', 'FCz', 'FC2', 'FC4', 'FC6', 'C5', 'C3', 'C1', 'Cz', 'C2', 'C4', 'C6', 'CP5',
                 'CP3', 'CP1', 'CPz', 'CP2', 'CP4', 'CP6', 'Fp1', 'Fpz', 'Fp2', 'AF7', 'AF3', 'AFz', 'AF4', 'AF8', 'F7',
                 'F5', 'F3', 'F1', 'Fz', 'F2', 'F4', 'F6', 'F8', 'FT7', 'FT8', 'T7', 'T8', 'T9', 'T10', 'TP7', 'TP8',
                 'P7', 'P5', 'P3', 'P1', 'Pz', 'P2', 'P4', 'P6', 'P8', 'PO7', 'PO3', 'POz', 'PO4', 'PO8', 'O1', 'Oz',
                 'O2', 'Iz']
        from eegfm_bench.models.backbones import BACKBONES

        prep = BACKBONES.get(_backbone(args)).preprocessing
        n_times = int(round(prep.sfreq * prep.window_s))
        X = (20 * rng.standard_normal((args.n_windows, 64, n_times))).astype(np.float32)
        y = rng.integers(0, 2, args.n_windows)
        ctx = PerturbContext("eegmmidb", "eegmmidb_mi", FilterSpec(prep.sfreq, prep.l_freq, prep.h_freq, 60.0), 0)
        return X, y, names, ctx, f"synthetic (64 ch, {n_times} samples at {prep.sfreq:g} Hz, eegmmidb filters)"
    from eegfm_bench.data.windows import load_windows
    from eegfm_bench.models.backbones import BACKBONES

    ws = load_windows("eegmmidb_mi", BACKBONES.get(_backbone(args)).preprocessing, subjects=args.subjects,
                      progress=False)
    idx = np.arange(min(len(ws), args.n_windows))
    ctx, _ = perturb_context(ws.meta, "eegmmidb_mi", 0)
    return (np.asarray(ws.X[idx], dtype=np.float32), ws.y[idx], list(ws.ch_names), ctx,
            f"eegmmidb_mi subjects {args.subjects} ({ws.n_times} samples at {ws.sfreq:g} Hz)")


def _backbone(args) -> str:
    return "labram" if args.model.startswith("labram") else "eegnet"


MODELS = {
    "eegnet-tiny": dict(backbone="eegnet", head="flatten", regime="full", backbone_kwargs=dict(F1=4, D=1, kernel_length=16)),
    "eegnet": dict(backbone="eegnet", head="flatten", regime="full"),
    "labram-mean": dict(backbone="labram", head="mean", regime="head_only"),
}
"""``eegnet-tiny``: the test model (F1=4, D=1, kernel_length=16; the cheapest forward, so the worst case for
the ratio); ``eegnet`` and ``labram-mean``: the quickstart's EEGNet and LaBraM head-only (random init)."""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--synthetic", action="store_true", help="random windows instead of real eegmmidb_mi")
    p.add_argument("--subjects", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--n-windows", type=int, default=128, help="windows in the 'fold' (at most)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=1, help="sweep's background perturbation threads")
    p.add_argument("--model", choices=tuple(MODELS), default="eegnet-tiny",
                   help="eegnet-tiny: F1=4, D=1, kernel_length=16 (the test model, cheapest forward); eegnet: "
                        "braindecode's EEGNet as in the quickstart; labram-mean: the quickstart's LaBraM head-only")
    p.add_argument("--conditions", choices=("all", "noise", "zero"), default="all",
                   help="all of App. D; only the noise conditions; only the zero-padding ones")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.perturb.conditions import condition_rng, default_conditions
    from eegfm_bench.perturb.sweep import condition_rows, iter_sweep, not_applicable_reason, predict_proba
    from eegfm_bench.results import ResultStore

    X, y, names, ctx, what = _windows(args)
    model = FMClassifier(ch_names=names, n_times=X.shape[-1], n_classes=2, **MODELS[args.model]).eval().to(args.device)
    conds = [c for c in default_conditions("eegmmidb_mi", variable_channels=True)
             if not_applicable_reason(c, model) is None]
    if args.conditions == "noise":
        conds = [c for c in conds if "snr" in c.name or c.name == "clean"]
    elif args.conditions == "zero":
        conds = [c for c in conds if c.name.endswith("_zero") or c.name == "clean"]
    bs, dev = args.batch_size, args.device
    batches = [(X[s:s + bs], names) for s in range(0, len(X), bs)]

    def t_forward():
        for _ in conds:
            predict_proba(model, batches, dev)

    def t_perturb():
        for c in conds:
            rng = condition_rng(ctx.seed, c)
            for s in range(0, len(X), bs):
                c.apply(X[s:s + bs], names, rng, ctx)

    def t_bare():
        for c in conds:
            rng = condition_rng(ctx.seed, c)
            with torch.inference_mode():
                for s in range(0, len(X), bs):
                    xb, nb = c.apply(X[s:s + bs], names, rng, ctx)
                    model(torch.from_numpy(np.ascontiguousarray(xb, dtype=np.float32)).to(dev), nb).softmax(-1).cpu()

    def t_sweep():
        with tempfile.TemporaryDirectory() as tmp:
            store = ResultStore(tmp)
            base = {"experiment": "bench", "task": "eegmmidb_mi", "model": model.hparams.backbone, "init": "random",
                    "regime": model.regime, "head": model.hparams.head, "fold": 0, "seed": 0, "n_windows": len(X), "n_subjects": 0, "fold_unit": "subject",
                    "config_hash": "bench", "code_version": "bench"}
            for results in iter_sweep(model, X, y, names, conds, ctx, batch_size=bs, device=dev, workers=args.workers):
                store.append([r for res in results for r in condition_rows(res, base)])

    def timed(fn):
        out = []
        for _ in range(args.repeats):
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
        return statistics.median(out), out

    t_forward()  # warm-up: filter design (cached), allocator, lazy imports
    t_sweep()
    res = {name: timed(fn) for name, fn in (("forward", t_forward), ("perturb", t_perturb), ("bare", t_bare),
                                            ("sweep", t_sweep))}
    n_par = sum(p.numel() for p in model.parameters())
    print(f"windows: {what}; {len(X)} windows x {len(conds)} conditions ({args.conditions}); batch {bs}; "
          f"{args.model} ({n_par} parameters); device {dev}; torch threads {torch.get_num_threads()}; "
          f"sweep workers {args.workers}; cpus {os.cpu_count()}; load avg {os.getloadavg()[0]:.2f}")
    for name, (med, allv) in res.items():
        print(f"  {name:8s} {med:8.3f} s  (median of {', '.join(f'{v:.3f}' for v in allv)})")
    r_fwd = res["sweep"][0] / res["forward"][0]
    r_bare = res["sweep"][0] / res["bare"][0]
    print(f"ratio sweep / bare forward passes = {r_fwd:.2f}  (target <= 1.15: {'met' if r_fwd <= 1.15 else 'NOT met'})")
    print(f"ratio sweep / bare perturb+forward loop = {r_bare:.2f}  (the sweep machinery's own overhead)")
    print(f"perturbation share of the bare loop = {res['perturb'][0] / res['bare'][0]:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
