"""Show that one tiny cv gives the same rows to the last bit however it is launched (issue 33, item 1).

Runs the tests' near-threshold cv (EEGNet on 6 EEGMMIDB subjects, folds 0 and 1 of 3; fold 1 holds a test window a
few 1e-6 from p = 0.5) four ways, each as a user would, through ``eegfm-bench cv``:

1. ``sequential`` — one process;
2. ``workers2`` — ``--launcher local --workers 2``;
3. ``slurm`` — a SLURM job array on the tests' single-node cluster (``tests/slurm_cluster.py``; needs root and
   ``slurm-wlm``; ``--no-slurm`` leaves it out);
4. ``resumed`` — sequential, stopped by SIGINT as soon as fold 0's first ``last.ckpt`` is on disk (mid-fit with
   ``--max-epochs 3``), then rerun to the end.

Each run's rows (every column but the two that name its own folder, ``checkpoint`` and ``predictions``, and the
wall-time metric ``fit_seconds``; values written with 17 significant digits, enough to round-trip a float64) and its
prediction files are dumped into ``<out>/dump/<run>/``, and ``diff -r`` of each against ``sequential`` is printed.
An empty diff is the claim.

Usage::

    EEGFM_DATA=../shared/data python scripts/same_rows.py --out /tmp/same_rows [--max-epochs 3] [--no-slurm]
"""
from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


def config(out: Path, max_epochs: int, **over) -> dict:
    """The tests' near-threshold cv (``tests/eegfm_testutils.py:cfg_near_threshold``) with ``max_epochs``."""
    cfg = {"experiment": "det", "task": "eegmmidb_mi", "out_dir": str(out), "seed": 0, "confound": False,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 16, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0, 1]},
           "trainer": {"max_epochs": max_epochs, "patience": max_epochs},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]}
    cfg.update(over)
    return cfg


def cv(cfg: dict, path: Path, *extra: str) -> subprocess.Popen:
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.Popen([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(path), "--no-progress",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(p: subprocess.Popen, name: str) -> None:
    out, _ = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"{name}: exit {p.returncode}\n{out[-3000:]}")
    print(f"{name}: exit 0")


def dump(run: Path, to: Path) -> None:
    """Rows (sorted, 17 significant digits) and prediction files of one run, as plain text for ``diff``."""
    to.mkdir(parents=True, exist_ok=True)
    df = pd.read_parquet(run / "results.parquet")
    df = df[df.metric != "fit_seconds"].drop(columns=["checkpoint", "predictions"])
    df = df.sort_values(["model", "regime", "head", "fold", "condition", "metric"])
    df.to_csv(to / "rows.csv", index=False, float_format="%.17g")
    for p in sorted((run / "predictions").glob("*.csv")):
        shutil.copyfile(p, to / p.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-epochs", type=int, default=3)
    ap.add_argument("--no-slurm", action="store_true")
    a = ap.parse_args(argv)
    out = a.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    runs = ["sequential", "workers2", "resumed"]
    finish(cv(config(out / "sequential", a.max_epochs), out / "sequential.yaml"), "sequential")
    finish(cv(config(out / "workers2", a.max_epochs), out / "workers2.yaml", "--launcher", "local", "--workers", "2"),
           "workers2")
    if not a.no_slurm:
        sys.path.insert(0, str(REPO / "tests"))
        import slurm_cluster

        info = slurm_cluster.start()
        launcher = {"kind": "slurm", "timeout_min": 20,
                    "slurm": {"partition": info["partition"], "cpus_per_task": 1, "mem_gb": 2,
                              "array_parallelism": 2}}
        finish(cv(config(out / "slurm", a.max_epochs, launcher=launcher), out / "slurm.yaml"), "slurm")
        runs.insert(2, "slurm")
    # resumed: SIGINT as soon as fold 0's last.ckpt exists (after its first epoch), then the same command again
    rcfg = config(out / "resumed", a.max_epochs)
    p = cv(rcfg, out / "resumed.yaml")
    while p.poll() is None and not list((out / "resumed").rglob("last.ckpt")):
        time.sleep(0.05)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    first, _ = p.communicate()
    print(f"resumed: interrupted, exit {p.returncode}; last line: {first.strip().splitlines()[-1] if first else ''}")
    finish(cv(rcfg, out / "resumed.yaml"), "resumed (rerun)")
    for r in runs:
        dump(out / r, out / "dump" / r)
    fold1 = pd.read_csv(next((out / "sequential" / "predictions").glob("*-fold1.csv")))
    print(f"closest test window to p = 0.5 in fold 1: |p1 - 0.5| = {(fold1.p1 - 0.5).abs().min():.3g}")
    same = True
    for r in runs[1:]:
        d = subprocess.run(["diff", "-r", str(out / "dump" / "sequential"), str(out / "dump" / r)],
                           capture_output=True, text=True)
        n = len(list((out / "dump" / r).iterdir()))
        print(f"$ diff -r dump/sequential dump/{r}   # {n} files: rows.csv + prediction files")
        print(d.stdout or "(empty)")
        same &= d.returncode == 0
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
