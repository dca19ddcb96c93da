"""Throughput and peak memory of every registered backbone at the quickstart's input size.

For each backbone (default, published-size architecture, random init) this measures, on the CPU and on a CUDA
GPU when one is present:

* forward throughput (windows/s): ``adapter.tokens(x)`` in eval mode without gradients;
* forward + backward throughput (windows/s): train mode, ``tokens(x).pow(2).mean().backward()`` through every
  parameter (full fine-tuning);
* peak memory: on the GPU ``torch.cuda.max_memory_allocated`` over both passes; on the CPU the peak resident set
  size of a fresh process that builds the model and runs both passes (each model runs in its own subprocess, so
  peaks do not mix), minus the peak of the same process before the model is built (Python, torch, braindecode).

Input: the quickstart's EEGMMIDB montage (64 channels) and each backbone's declared window (4 s; LUNA 5 s) at its
declared sampling rate. Models that read a fixed subset take it from those 64 channels by name (BENDR and EEG-DINO
19, BIOT-bipolar 16 derivations, EEGPT the 58 it has embeddings for); ST-EEGFormer uses ``channel_slots=
'build_order'`` (its vocabulary file is not available offline). Prints one Markdown table.

Usage::

    python scripts/bench_backbones.py                      # every backbone, CPU (+ GPU if present)
    python scripts/bench_backbones.py --models labram reve --batch-size 8 --batches 3 --threads 2
    python scripts/bench_backbones.py --out results/bench_backbones.md
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

EEGMMIDB_64 = ["FC5", "FC3", "FC1", "FCz", "FC2", "FC4", "FC6", "C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP5",
               "CP3", "CP1", "CPz", "CP2", "CP4", "CP6", "Fp1", "Fpz", "Fp2", "AF7", "AF3", "AFz", "AF4", "AF8", "F7",
               "F5", "F3", "F1", "Fz", "F2", "F4", "F6", "F8", "FT7", "FT8", "T7", "T8", "T9", "T10", "TP7", "TP8",
               "P7", "P5", "P3", "P1", "Pz", "P2", "P4", "P6", "P8", "PO7", "PO3", "POz", "PO4", "PO8", "O1", "Oz",
               "O2", "Iz"]
"""EEGMMIDB's 64 electrodes (PhysioNet eegmmidb 1.0.0, the quickstart task) in 10-05 spelling."""

OPTIONS = {"eegpt": {"channels": "known"}, "steegformer": {"channel_slots": "build_order"}}


def _peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_one(name: str, device: str, batch_size: int, n_batches: int, threads: int) -> dict:
    """Measure one backbone in this process (run it in a fresh subprocess for a clean CPU peak)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    import braindecode.models  # noqa: F401  (imported before the baseline: its import is not the model's memory)

    from eegfm_bench.data.montage import canonical_names, standard_1005
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.throughput import token_throughput

    standard_1005()
    base_rss = _peak_rss_mb()
    names = canonical_names(EEGMMIDB_64)
    cls = BACKBONES.get(name)
    n_times = cls.preprocessing.n_times
    torch.manual_seed(0)
    adapter = cls(names, n_times, n_outputs=2, **OPTIONS.get(name, {})).to(device)
    params = sum(p.numel() for p in adapter.parameters())
    x = torch.randn(batch_size, len(names), n_times, device=device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    fwd = token_throughput(adapter, names, x, n=n_batches, train=False)
    fwd_bwd = token_throughput(adapter, names, x, n=n_batches, train=True)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _peak_rss_mb() - base_rss
    return {"model": name, "device": device, "params": params, "n_chans": len(names), "n_times": n_times,
            "sfreq": cls.preprocessing.sfreq, "tokens": [adapter.n_tokens(len(names)), adapter.d_model], "batch_size": batch_size,
            "fwd_per_s": fwd, "fwd_bwd_per_s": fwd_bwd, "peak_mb": peak,
            "peak_kind": "cuda max allocated" if cuda else "RSS increase"}


def _run_child(name: str, device: str, args) -> dict:
    cmd = [sys.executable, __file__, "--one", name, "--device", device, "--batch-size", str(args.batch_size),
           "--batches", str(args.batches), "--threads", str(args.threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"model": name, "device": device, "error": tail[0][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    """Markdown table of :func:`bench_one` results."""
    out = ["| model | device | input (ch × samples @ Hz) | tokens | params | forward (windows/s) | "
           "forward+backward (windows/s) | peak memory (MB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['device']} | – | – | – | failed: {r['error']} | – | – |")
            continue
        p = r["params"]
        ps = f"{p / 1e6:.2f} M" if p >= 1e6 else f"{p / 1e3:.1f} K"
        out.append(f"| {r['model']} | {r['device']} | {r['n_chans']} × {r['n_times']} @ {r['sfreq']:g} | "
                   f"{r['tokens'][0]} × {r['tokens'][1]} | {ps} | {r['fwd_per_s']:.1f} | {r['fwd_bwd_per_s']:.1f} | "
                   f"{r['peak_mb']:.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", default=None, help="backbone names (default: all registered)")
    p.add_argument("--devices", nargs="*", default=None, help="default: cpu, plus cuda when available")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--batches", type=int, default=3, help="timed batches per pass (after one warm-up batch)")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per model and device")
    p.add_argument("--out", type=Path, default=None, help="also write the table (and a .json) here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(bench_one(args.one, args.device, args.batch_size, args.batches, args.threads)))
        return 0
    import torch

    from eegfm_bench.models.backbones import BACKBONES

    models = args.models or BACKBONES.names()
    devices = args.devices or (["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    rows = []
    for device in devices:
        for name in models:
            r = _run_child(name, device, args)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    md = (f"batch {args.batch_size}, {args.batches} timed batches after 1 warm-up, {args.threads} CPU thread(s), "
          f"torch {torch.__version__}\n\n" + table(rows))
    print(md)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
