"""Benchmark: one cv cell through the Lightning Trainer vs the minimal bare PyTorch loop doing the same work.

Same windows (fold 0 of ``eegmmidb_mi``), same model, same optimiser and schedule, same number of epochs, batches
and forward passes, measured in one run:

* ``bare``      — a hand-written loop: for each epoch, every training batch (forward, class-weighted cross-entropy,
  backward, AdamW step, warm-up + cosine step) then every validation batch (forward, balanced accuracy); then every
  test batch (forward, softmax);
* ``lightning`` — :class:`~eegfm_bench.models.module.FMClassifier` on :class:`~eegfm_bench.data.datamodule.EEGDataModule`
  through :func:`~eegfm_bench.trainer.build_trainer` (``trainer.fit`` with a fixed number of epochs, no early
  stopping, no checkpointing, no logger; then ``trainer.test``), as ``eegfm-bench cv`` trains a cell.

Printed ratio: ``lightning / bare`` (target ≤ 1.10; the framework's own overhead).

Usage::

    OMP_NUM_THREADS=1 EEGFM_DATA=../shared/data python scripts/bench_cv.py
    python scripts/bench_cv.py --model eegnet --epochs 3 --accelerator cuda --precision bf16-mixed
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np

MODELS = {"eegnet-tiny": dict(backbone="eegnet", head="flatten", backbone_kwargs=dict(F1=4, D=1, kernel_length=16)),
          "eegnet": dict(backbone="eegnet", head="flatten")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=tuple(MODELS), default="eegnet")
    p.add_argument("--subjects", type=int, nargs="+", default=list(range(1, 11)))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--precision", default="32-true")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import lightning as L
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from eegfm_bench.data.datamodule import EEGDataModule, WindowDataset
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.trainer import build_trainer, quiet_lightning

    quiet_lightning()
    dev = torch.device("cuda" if args.accelerator in ("cuda", "gpu") else "cpu")
    mixed = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(args.precision)
    dm = EEGDataModule(task="eegmmidb_mi", backbone=MODELS[args.model]["backbone"], fold=0, k=5, n_val_groups=1,
                       subjects=args.subjects, batch_size=args.batch_size)

    def model():
        L.seed_everything(0, verbose=False)
        return FMClassifier(regime="full", ch_names=dm.ch_names, n_times=dm.n_times, n_classes=dm.n_classes,
                            class_weights=dm.class_weights, warmup_epochs=1.0, **MODELS[args.model])

    def t_lightning():
        m = model()
        t = build_trainer({"accelerator": args.accelerator, "devices": 1, "precision": args.precision,
                           "max_epochs": args.epochs, "min_epochs": args.epochs, "num_sanity_val_steps": 0},
                          loggers=False)
        t.fit(m, dm)
        t.test(m, dm, verbose=False)

    def t_bare():
        import contextlib

        m = model().to(dev)
        g = torch.Generator().manual_seed(0)
        train = DataLoader(WindowDataset(dm.ws, dm.train_idx), batch_size=args.batch_size, shuffle=True, generator=g)
        val = DataLoader(WindowDataset(dm.ws, dm.val_idx), batch_size=args.batch_size)
        test = DataLoader(WindowDataset(dm.ws, dm.test_idx), batch_size=args.batch_size)
        opt = torch.optim.AdamW([q for q in m.parameters() if q.requires_grad], lr=1e-3, weight_decay=1e-2)
        total = args.epochs * len(train)
        warm = int(min(total - 1, round(total / args.epochs)))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / (warm + 1) if s < warm else
                                                  0.5 * (1 + math.cos(math.pi * min(1.0, (s - warm) / max(1, total - warm)))))
        w = m.class_weights.to(dev)
        ac = (lambda: torch.autocast(dev.type, dtype=mixed)) if mixed else contextlib.nullcontext
        for _ in range(args.epochs):
            m.train()
            for b in train:
                with ac():
                    loss = F.cross_entropy(m(b["x"].to(dev)), b["y"].to(dev), weight=w)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
            m.eval()
            with torch.no_grad(), ac():
                ys, ps = [], []
                for b in val:
                    ps.append(m(b["x"].to(dev)).argmax(1).cpu())
                    ys.append(b["y"])
                y, pr = torch.cat(ys).numpy(), torch.cat(ps).numpy()
                np.mean([np.mean(pr[y == c] == c) for c in np.unique(y)])
        with torch.no_grad(), ac():
            [m(b["x"].to(dev)).float().softmax(-1).cpu() for b in test]

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

    t_bare()  # warm-up
    t_lightning()
    res = {"bare": timed(t_bare), "lightning": timed(t_lightning)}
    print(f"eegmmidb_mi fold 0 (subjects {args.subjects}): {len(dm.train_idx)} train / {len(dm.val_idx)} val / "
          f"{len(dm.test_idx)} test windows; {args.model}; {args.epochs} epochs; batch {args.batch_size}; "
          f"{args.accelerator} {args.precision}; torch threads {torch.get_num_threads()}; cpus {os.cpu_count()}; "
          f"load avg {os.getloadavg()[0]:.2f}")
    for name, (med, allv) in res.items():
        print(f"  {name:10s} {med:8.3f} s  (median of {', '.join(f'{v:.3f}' for v in allv)})")
    r = res["lightning"][0] / res["bare"][0]
    print(f"ratio lightning / bare = {r:.2f}  (target <= 1.10: {'met' if r <= 1.10 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
