"""Launcher benchmark: wall time of the quickstart cv sequentially, with 1 and with 2 local workers, and
whether the three give the same rows; then the store's append cost (``scripts/bench_store.py``).

Every variant trains into its own fresh ``out_dir`` (the window and feature caches are warmed first, so all three
measure training only). Prints one table of wall times and ratios to the sequential run, measured in this run.

Usage::

    EEGFM_DATA=../shared/data python scripts/bench_launch.py [--config configs/experiment/quickstart.yaml]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def run(config: str, out: Path, extra: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", config, "--out_dir", str(out),
                    "--no-progress", *extra], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def rows(out: Path) -> pd.DataFrame:
    df = pd.read_csv(out / "results.csv")
    df = df[~df["metric"].isin(["fit_seconds"])]
    return df.sort_values(["model", "head", "fold", "metric"])[["model", "head", "fold", "metric", "value"]] \
        .reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/experiment/quickstart.yaml")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        run(a.config, d / "warm", [])  # windows and frozen-token caches
        t = {"sequential": run(a.config, d / "seq", []),
             "local, 1 worker": run(a.config, d / "w1", ["--launcher", "local", "--workers", "1"]),
             "local, 2 workers": run(a.config, d / "w2", ["--launcher", "local", "--workers", "2"])}
        ref = rows(d / "seq")
        diff = {}
        for k, o in (("local, 1 worker", "w1"), ("local, 2 workers", "w2")):
            r = rows(d / o)
            m = ref.merge(r, on=["model", "head", "fold", "metric"], suffixes=("", "_w"))
            dv = (m["value"] - m["value_w"]).abs()
            diff[k] = (len(r) == len(ref), float(dv.max()),
                       ", ".join(sorted(set(m.loc[dv > 1e-6, "metric"]))) or "none")
    print("| run | wall (s) | ratio to sequential | same rows | max abs. difference | metrics differing > 1e-6 |")
    print("|---|---:|---:|---|---:|---|")
    for k, v in t.items():
        same, mx, which = diff.get(k, (True, 0.0, "none"))
        print(f"| {k} | {v:.1f} | {v / t['sequential']:.2f} | {same} | {mx:.2g} | {which} |")
    subprocess.run([sys.executable, str(REPO / "scripts" / "bench_store.py")], check=True)


if __name__ == "__main__":
    main()
