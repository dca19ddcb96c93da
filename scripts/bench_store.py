"""Result-store append cost against the table's size (issue 13, item 2), measured in one run.

For tables of 10, 1,000 and 100,000 existing rows, times one append of a cell's rows (12 rows) as a launcher's
worker does it (``ResultStore(merge=False)``: one part file) and as a single-process command does it
(``merge=True``: the part plus a rewrite of results.csv / results.parquet), median of ``--repeats`` appends, and
prints the ratios to the 10-row table. The worker's append must not grow with the table; the merged one does (it
rewrites the human tables), which is why workers leave the merge to the parent.

Usage::

    python scripts/bench_store.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from eegfm_bench.results import ROW_COLUMNS, ResultStore


def rows(start: int, n: int) -> list[dict]:
    return [{**dict.fromkeys(ROW_COLUMNS, "x"), "fold": i % 10, "seed": 0, "metric": f"m{i}", "value": 0.5,
             "n_windows": 100, "n_subjects": 4, "config_hash": f"h{i // 12}"} for i in range(start, start + n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    res = {}
    for size in (10, 1_000, 100_000):
        for merge in (False, True):
            with tempfile.TemporaryDirectory() as d:
                ResultStore(d, merge=False).append(rows(0, size))
                store = ResultStore(d, merge=merge)
                ts = []
                for r in range(a.repeats):
                    t0 = time.perf_counter()
                    store.append(rows(size + 12 * r, 12))
                    ts.append(time.perf_counter() - t0)
                res[(size, merge)] = statistics.median(ts)
    print("| existing rows | worker append (merge=False), ms | ratio to 10 rows | command append (merge=True), ms "
          "| ratio to 10 rows |")
    print("|---:|---:|---:|---:|---:|")
    for size in (10, 1_000, 100_000):
        w, m = res[(size, False)], res[(size, True)]
        print(f"| {size:,} | {1e3 * w:.1f} | {w / res[(10, False)]:.2f} | {1e3 * m:.1f} | {m / res[(10, True)]:.2f} |")


if __name__ == "__main__":
    main()
