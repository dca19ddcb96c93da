"""Ridge probe at corpus scale (issue 35 item 4): peak memory and time of :func:`eegfm_bench.models.ridge.ridge_probe`
on memory-mapped features at three sizes growing ×4, in the form ``auto`` picks (the primal when the fitting rows
outnumber the features).

Per size, one subprocess writes the features to a ``.npy`` file (float32, class signal in a few columns) and a
fresh one opens it as a memory map, fits the probe on 70 % of the rows (15 % validation, 15 % test) and reports
the probe's wall and CPU time, the peak of the memory the probe allocates (``tracemalloc``: numpy's buffers) and
the process's peak RSS. RSS also counts the map's pages that were read (file-backed, reclaimable by the kernel), so
it grows with the map even when the probe's own memory does not: the allocation peak is the bounded-memory
figure. Prints the ratios between sizes.

    python scripts/bench_ridge.py                     # 25,000 / 100,000 / 400,000 windows × 200 features
    python scripts/bench_ridge.py --sizes 1e4 4e4 1.6e5 --features 64
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make(n: int, p: int, folder: Path) -> None:
    rng = np.random.default_rng(0)
    X = np.lib.format.open_memmap(folder / f"features_{n}.npy", mode="w+", dtype=np.float32, shape=(n, p))
    y = rng.integers(0, 2, n)
    for r0 in range(0, n, 20_000):
        r1 = min(n, r0 + 20_000)
        X[r0:r1] = rng.normal(size=(r1 - r0, p)) + 0.2 * y[r0:r1, None] * (np.arange(p) < 8)
    X.flush()
    np.save(folder / f"labels_{n}.npy", y)


def one(n: int, folder: Path) -> dict:
    import tracemalloc

    from eegfm_bench.models.ridge import ridge_probe

    path = folder / f"features_{n}.npy"
    X = np.load(path, mmap_mode="r")
    y = np.load(folder / f"labels_{n}.npy")
    n_tr, n_va = int(0.7 * n), int(0.15 * n)
    tr, va, te = np.arange(n_tr), np.arange(n_tr, n_tr + n_va), np.arange(n_tr + n_va, n)
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    r = ridge_probe(X, y, tr, va, te)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    alloc = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"n": n, "p": X.shape[1], "form": r["form"], "map_mb": path.stat().st_size / 2**20, "wall_s": wall,
            "cpu_s": cpu, "alloc_mb": alloc, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "test_acc": float(np.mean(r["pred"] == y[te]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs=3, default=[25_000, 100_000, 400_000])
    ap.add_argument("--features", type=int, default=200)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--make", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.make:
        make(a.make, a.features, Path(a.folder))
        return
    if a.one:
        print(json.dumps(one(a.one, Path(a.folder))))
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in a.sizes):
            subprocess.run([sys.executable, __file__, "--make", str(n), "--features", str(a.features),
                            "--folder", tmp], check=True)
            out = subprocess.run([sys.executable, __file__, "--one", str(n), "--folder", tmp],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            for f in Path(tmp).iterdir():
                f.unlink()
    print("| windows | features | form | memmap MB | probe's peak allocation MB | peak RSS MB | wall s | CPU s "
          "| test acc |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['p']} | {r['form']} | {r['map_mb']:.0f} | {r['alloc_mb']:.1f} | "
              f"{r['peak_rss_mb']:.0f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['test_acc']:.3f} |")
    for a_, b_ in zip(rows, rows[1:]):
        print(f"{b_['n']:,} / {a_['n']:,} windows: memmap ×{b_['map_mb'] / a_['map_mb']:.2f}, probe's allocation "
              f"×{b_['alloc_mb'] / a_['alloc_mb']:.2f}, peak RSS ×{b_['peak_rss_mb'] / a_['peak_rss_mb']:.2f}, "
              f"CPU ×{b_['cpu_s'] / a_['cpu_s']:.2f}")


if __name__ == "__main__":
    main()
