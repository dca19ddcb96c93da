"""Benchmark: block-output extraction through ``Trainer.predict`` vs the minimal bare PyTorch loop (target ≤ 1.10).

Same windows (real ``eegmmidb_mi``), same backbone, same batches, measured in one run with an empty cache each time:

* ``bare``      — forward hooks on the backbone's ``blocks``, ``tokens`` on every batch under ``torch.inference_mode``,
  each block's tokens (float16) and their mean (float32) written into ``.npy`` memmaps;
* ``lightning`` — :func:`eegfm_bench.models.features.extract_features` with ``parts=("blocks",)``: the
  :class:`~eegfm_bench.models.features.FeatureExtractor` in ``Trainer.predict`` with the
  :class:`~eegfm_bench.models.features.FeatureWriter` filling the cache entry (the path of ``eegfm-bench probe``).

Printed ratio: ``lightning / bare``.

Usage::

    OMP_NUM_THREADS=1 EEGFM_DATA=../shared/data python scripts/bench_features.py                 # tiny LaBraM
    python scripts/bench_features.py --model labram --n-windows 64                                # the quickstart's
    python scripts/bench_features.py --model labram --accelerator cuda --precision bf16-mixed --n-windows 720
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

MODELS = {"labram-tiny": dict(num_layers=4, num_heads=2, conv_out_channels=4), "labram": {}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=tuple(MODELS), default="labram-tiny")
    p.add_argument("--subjects", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--n-windows", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--precision", default="32-true")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    from eegfm_bench.data.windows import load_windows
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.features import extract_features
    from eegfm_bench.trainer import quiet_lightning

    quiet_lightning()
    cls = BACKBONES.get("labram")
    ws = load_windows("eegmmidb_mi", cls.preprocessing, subjects=args.subjects, progress=False)
    ws = ws.subset(np.arange(min(len(ws), args.n_windows)))
    torch.manual_seed(0)
    adapter = cls(list(ws.ch_names), ws.n_times, **MODELS[args.model]).eval()
    dev = torch.device("cuda" if args.accelerator in ("cuda", "gpu") else "cpu")
    mixed = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(args.precision)

    def t_bare():
        import contextlib

        with tempfile.TemporaryDirectory() as tmp:
            adapter.to(dev)
            captured = {}
            hooks = [b.register_forward_hook(lambda _m, _i, o, i=i: captured.__setitem__(i, adapter.block_to_tokens(o)))
                     for i, b in enumerate(adapter.blocks)]
            tok, mean = {}, {}
            try:
                with torch.inference_mode(), (torch.autocast(dev.type, dtype=mixed) if mixed else contextlib.nullcontext()):
                    for s in range(0, len(ws), args.batch_size):
                        x = torch.from_numpy(np.asarray(ws.X[s:s + args.batch_size], dtype=np.float32)).to(dev)
                        adapter.tokens(x, list(ws.ch_names))
                        for i, t in captured.items():
                            t = t.float().cpu()
                            if i not in tok:
                                tok[i] = np.lib.format.open_memmap(Path(tmp) / f"t{i}.npy", mode="w+", dtype=np.float16,
                                                                   shape=(len(ws),) + tuple(t.shape[1:]))
                                mean[i] = np.lib.format.open_memmap(Path(tmp) / f"m{i}.npy", mode="w+",
                                                                    dtype=np.float32, shape=(len(ws), t.shape[-1]))
                            tok[i][s:s + len(t)] = t.numpy().astype(np.float16)
                            mean[i][s:s + len(t)] = t.mean(1).numpy()
                for a in list(tok.values()) + list(mean.values()):
                    a.flush()
            finally:
                for h in hooks:
                    h.remove()

    def t_lightning():
        with tempfile.TemporaryDirectory() as tmp:
            extract_features(adapter, ws, parts=("blocks",), batch_size=args.batch_size, cache_dir=tmp,
                             trainer={"accelerator": args.accelerator, "devices": 1, "precision": args.precision})

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
    print(f"eegmmidb_mi subjects {args.subjects}: {len(ws)} windows x {len(ws.ch_names)} ch x {ws.n_times} samples; "
          f"{args.model} ({sum(q.numel() for q in adapter.parameters())} parameters, {len(adapter.blocks)} blocks); "
          f"batch {args.batch_size}; {args.accelerator} {args.precision}; torch threads {torch.get_num_threads()}; "
          f"cpus {os.cpu_count()}; load avg {os.getloadavg()[0]:.2f}")
    for name, (med, allv) in res.items():
        print(f"  {name:10s} {med:8.3f} s  (median of {', '.join(f'{v:.3f}' for v in allv)})")
    r = res["lightning"][0] / res["bare"][0]
    print(f"ratio lightning / bare = {r:.2f}  (target <= 1.10: {'met' if r <= 1.10 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
