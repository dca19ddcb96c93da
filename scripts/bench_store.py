"""What the result store costs at a paper-sized grid: 10², 10⁴ and 10⁵ cells.

For each size a cv-shaped folder is built (``cells.json``, ``splits.json``, ``config.yaml``: cells × 5 folds, 12
metric rows per cell as a cv writes them), its rows stored the way a long SLURM array leaves them with the store's
leveled compaction (compacted parts plus the small parts of the last jobs), then timed, each in a fresh process
(cold: nothing cached):

* ``append``: one worker appending one cell's rows (``merge=False``);
* ``startup``: a job's start-up read, the done set (:func:`eegfm_bench.results.done_cells`);
* ``load``: every current row, typed (:meth:`ResultStore.load`, what the summary and the page read);
* ``status``: ``eegfm-bench status`` (:func:`eegfm_bench.runs.cv.progress.cv_status` and its table);
* ``merge``: the parent's final merge (a full compaction, then ``results.csv`` + ``results.parquet``).

``--uncompacted N`` also times a store of N cells written one part per cell without compaction (how the store was
before; building 10⁵ such parts takes long, so the default stops at 10⁴). ``--worker-appends K`` times K appends
by one worker on top of the largest store, compactions included (amortised cost per append).

Usage::

    python scripts/bench_store.py                         # 1e2, 1e4, 1e5 cells
    python scripts/bench_store.py --sizes 100 10000 --uncompacted 10000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eegfm_bench.results import ROW_COLUMNS, ResultStore, _atomic_write, _part_table  # noqa: E402

METRICS = ["balanced_accuracy", "accuracy", "auroc", "cohen_kappa", "epochs", "fit_seconds", "head_params",
           "batch_size", "trainable_fraction", "recall_0", "recall_1", "loss"]
FOLDS = 5


def _rows(cells: range, k_models: int = 50) -> pd.DataFrame:
    """12 metric rows per cell; cell i = (model i // (FOLDS*k) ...) folded into models × heads × folds."""
    i = np.repeat(np.asarray(cells), len(METRICS))
    n = len(i)
    return pd.DataFrame({
        "experiment": "bench", "task": "eegmmidb_mi", "model": [f"m{v}" for v in (i // FOLDS) % k_models],
        "init": "random", "regime": "full", "head": [f"h{v}" for v in (i // FOLDS) // k_models],
        "fold": (i % FOLDS).astype(str), "seed": "0", "condition": "clean",
        "metric": np.tile(METRICS, len(cells)), "value": np.random.default_rng(0).random(n),
        "n_windows": 100, "n_subjects": 4, "fold_unit": "subject",
        "config_hash": [f"{v:012x}" for v in (i // FOLDS)], "code_version": "bench"})[ROW_COLUMNS]


def build(folder: Path, n_cells: int, *, compacted: bool, tail_parts: int = 100) -> None:
    """A cv-shaped folder of ``n_cells`` cells (``n_cells // FOLDS`` configurations × 5 folds)."""
    folder.mkdir(parents=True)
    n_cfg = max(1, n_cells // FOLDS)
    cells = [{"model": f"m{c % 50}", "regime": "full", "head": f"h{c // 50}", "config_hash": f"{c:012x}"}
             for c in range(n_cfg)]
    (folder / "cells.json").write_text(json.dumps(cells))
    (folder / "splits.json").write_text(json.dumps({"folds": [{} for _ in range(FOLDS)]}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"experiment": "bench", "split": {"folds": None}}))
    parts = folder / "parts"
    parts.mkdir()
    done = n_cfg * FOLDS
    if compacted:  # what a long array leaves: MAX_FOLDED compacted parts, then the small parts of the last jobs
        tail = min(tail_parts, done)
        bounds = np.linspace(0, done - tail, ResultStore.MAX_FOLDED + 1).astype(int)
        t = 1
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                _atomic_write(_part_table(_rows(range(a, b))), parts / f"{t:020d}-~compact-{t:08x}.parquet")
                t += 1
        start = done - tail
    else:
        start, t = 0, 1
    for c in range(start, done):
        _atomic_write(_part_table(_rows(range(c, c + 1))), parts / f"{t + c:020d}-bench-{c}.parquet")


def _timed(snippet: str, folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of the process) of ``snippet`` in a fresh Python process (imports
    excluded)."""
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from eegfm_bench.results import ResultStore, done_cells, ROW_COLUMNS\n"
            "from eegfm_bench.reports.status import status_markdown\nfrom eegfm_bench.runs.cv.progress import cv_status\n"
            "folder = %r\nt0, c0 = time.perf_counter(), time.process_time()\n%s\n"
            "print(time.perf_counter() - t0, time.process_time() - c0)") % (str(REPO), str(folder), snippet)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


SNIPPETS = {
    "append": "ResultStore(folder, merge=False).append([{**dict.fromkeys(ROW_COLUMNS, 'x'), 'fold': '0', 'seed': 0, "
              "'metric': f'bench{i}', 'value': 0.5, 'n_windows': 1, 'n_subjects': 1} for i in range(12)])",
    "startup": "done_cells(ResultStore(folder, write=False), 'bench')",
    "load": "ResultStore(folder, write=False).load()",
    "status": "rows, cmd = cv_status(folder); status_markdown(rows, cmd)",
    "merge": "ResultStore(folder).merge()",
}


def measure(folder: Path) -> dict:
    """``{figure: wall seconds, figure_cpu: CPU seconds}`` of every snippet, and the folder's parts."""
    out = {"parts": len(list((folder / "parts").glob("*.parquet")))}
    for name in ("startup", "load", "status", "append", "merge"):  # merge last: it compacts the folder
        out[name], out[f"{name}_cpu"] = _timed(SNIPPETS[name], folder)
    return out


def worker_appends(folder: Path, k: int) -> float:
    code = ("import sys, time; sys.path.insert(0, %r)\nfrom eegfm_bench.results import ResultStore, ROW_COLUMNS\n"
            "s = ResultStore(%r, merge=False)\nt0 = time.perf_counter()\n"
            "for c in range(%d):\n"
            "    s.append([{**dict.fromkeys(ROW_COLUMNS, 'x'), 'fold': str(c), 'seed': 0, 'metric': f'w{j}', "
            "'value': 0.5, 'n_windows': 1, 'n_subjects': 1} for j in range(12)])\n"
            "print(time.perf_counter() - t0)") % (str(REPO), str(folder), k)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1]) / k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    ap.add_argument("--uncompacted", type=int, nargs="*", default=[10_000])
    ap.add_argument("--worker-appends", type=int, default=1000)
    ap.add_argument("--out", help="also write the table as Markdown here")
    a = ap.parse_args(argv)
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench_store_"))
    rows = []
    try:
        for n in a.sizes:
            t0 = time.time()
            build(tmp / f"c{n}", n, compacted=True)
            r = {"cells": n, "store": "leveled compaction", "build_s": time.time() - t0, **measure(tmp / f"c{n}")}
            rows.append(r)
            print(r, flush=True)
        for n in a.uncompacted or []:
            t0 = time.time()
            build(tmp / f"u{n}", n, compacted=False)
            r = {"cells": n, "store": "one part per cell, uncompacted", "build_s": time.time() - t0,
                 **measure(tmp / f"u{n}")}
            rows.append(r)
            print(r, flush=True)
        if a.worker_appends:
            big = max(a.sizes)
            shutil.rmtree(tmp / f"c{big}")
            build(tmp / f"c{big}", big, compacted=True)
            per = worker_appends(tmp / f"c{big}", a.worker_appends)
            print(f"{a.worker_appends} worker appends on the {big}-cell store: {per * 1e3:.1f} ms per append, "
                  "compactions included", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    df = pd.DataFrame(rows)
    lines = [f"Load average at the start: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) on "
             f"{os.cpu_count()} cores; each figure: wall s (CPU s).", "",
             "| cells | store | parts | job start-up (s) | load rows (s) | status (s) | append (s) | final merge (s) |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.cells:,} | {r.store} | {r.parts:,} | {r.startup:.2f} ({r.startup_cpu:.2f}) | "
              f"{r.load:.2f} ({r.load_cpu:.2f}) | {r.status:.2f} ({r.status_cpu:.2f}) | "
              f"{r.append:.3f} ({r.append_cpu:.3f}) | {r.merge:.2f} ({r.merge_cpu:.2f}) |" for r in df.itertuples()]
    if a.worker_appends:
        lines += ["", f"{a.worker_appends} appends by one worker on the {max(a.sizes):,}-cell store, compactions "
                  f"included: {per * 1e3:.1f} ms per append."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
