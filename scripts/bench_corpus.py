"""Ingestion at three corpus sizes growing ×4 (issue 35, item 8): CPU per hour of EEG, peak memory, disk per window,
and what two worker processes (``data.n_jobs 2``) buy, with the windows checked bit-equal to the serial build.

The corpus is TUAB-like and built from the staged PhysioNet eegmat EDFs (500 Hz, 21 channels, 19 kept): one
recording per new subject, named ``Sub<NNNN>_rest.edf`` or ``Sub<NNNN>_task.edf`` (the label comes from the file
name), each a symbolic link to a staged file (``SubjectNN_1.edf`` is 182 s of rest, ``SubjectNN_2.edf`` 62 s of
mental arithmetic; taken in turn), the ``files`` source, 10 s windows (the task's ``window_s``) under the chosen
model's preprocessing (default LaBraM: 200 Hz, 0.1-75 Hz, notch 50 Hz, average reference).

Every ingest runs ``eegfm-bench ingest`` in a fresh process with an empty cache, through a small wrapper process, so
``getrusage(RUSAGE_CHILDREN)`` of the wrapper is that ingest alone: user + sys CPU of the ingest and of its worker
processes, and the peak RSS of its largest process. The wrapper also samples the summed RSS of the process tree
every 0.1 s (psutil; a sampled figure, it can miss a short peak). The staged files are read once before the first
ingest so every run reads from the page cache.

Run it on an idle machine; on a shared one the figures are not idle figures::

    EEGFM_DATA=../shared/data python scripts/bench_corpus.py                 # 64, 256, 1024 recordings (about 8 min idle here)
    EEGFM_DATA=../shared/data python scripts/bench_corpus.py --sizes 8 32 128
    EEGFM_DATA=../shared/data python scripts/bench_corpus.py --quick         # 2 and 4 recordings: checks it works
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import yaml

from eegfm_bench.data.qc import edf_header
from eegfm_bench.data.windows import open_window_set
from eegfm_bench.data.sources import resolve_data_root

SOURCES = (("_1.edf", "rest"), ("_2.edf", "task"))


def build_corpus(where: Path, n: int, data_root: Path) -> tuple[Path, float]:
    """``n`` recordings (links to the staged eegmat EDFs) under ``where/corpus``, and the task YAML over them.
    Returns ``(task_yaml, hours of EEG)``."""
    staged = sorted((data_root / "eegmat").glob("Subject[0-9][0-9]_1.edf"))
    if not staged:
        sys.exit(f"no staged eegmat EDFs under {data_root / 'eegmat'}; fix: EEGFM_DATA pointing at the staged data")
    corpus = where / "corpus"
    corpus.mkdir(parents=True)
    seconds = 0.0
    for i in range(n):
        suffix, label = SOURCES[i % 2]
        src = staged[(i // 2) % len(staged)].with_name(staged[(i // 2) % len(staged)].name.replace("_1.edf", suffix))
        (corpus / f"Sub{i:04d}_{label}.edf").symlink_to(src)
        seconds += float(edf_header(src)["declared_s"])
    task = {"name": "corpus", "dataset": "corpus", "source": "files", "root": str(corpus),
            "files": {"glob": "Sub*_*.edf", "pattern": r"^(?P<subject>Sub\d+)_(?P<label>rest|task)\.edf$"},
            "classes": ["rest", "task"], "window_s": 10.0, "windows": {"mode": "fixed"},
            "channels": {"exclude": ["EEG A2-A1", "ECG ECG"]}, "line_freq": 50}
    path = where / "corpus.yaml"
    path.write_text(yaml.safe_dump(task))
    return path, seconds / 3600.0


def _measure(cmd: list[str]) -> dict:
    """Run ``cmd`` (in this wrapper process) and return its wall time, CPU, peak RSS and sampled tree RSS."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree_peak = [0]
    done = threading.Event()

    def sample():
        p = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [p] + p.children(recursive=True)
                tree_peak[0] = max(tree_peak[0], sum(q.memory_info().rss for q in procs if q.is_running()))
            except psutil.Error:
                pass
            done.wait(0.1)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = proc.communicate()
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rc": proc.returncode, "wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
            "maxrss_mb": ru.ru_maxrss / 1024.0, "tree_rss_mb": tree_peak[0] / 2**20, "tail": out[-2000:]}


def ingest(task: Path, data_root: Path, cache: Path, model: str, n_jobs: int, hit: bool = False) -> dict:
    """One ingest in a fresh wrapper process (so RUSAGE_CHILDREN holds that ingest alone), with its window set's
    window count, the bytes of every X.npy in the cache (the recordings' entries: the window set stores an index)
    and the sha256 of its windows. ``hit=True``: the cache already holds the window set, so the
    run measures the command's fixed start-up (imports, config, cache check) and nothing else is read."""
    cmd = [sys.executable, "-m", "eegfm_bench.cli", "ingest", "--task", str(task), "--model", model,
           "--data-root", str(data_root), "--cache-dir", str(cache), "--n-jobs", str(n_jobs), "--no-progress"]
    res = subprocess.run([sys.executable, __file__, "--_measure", json.dumps(cmd)], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"the measuring wrapper failed:\n{res.stderr[-3000:]}")
    m = json.loads(res.stdout.strip().splitlines()[-1])
    if m["rc"] != 0:
        sys.exit(f"ingest failed (rc {m['rc']}):\n{m['tail']}")
    if hit:
        return m
    sets = [d for d in cache.glob("corpus-*") if (d / "COMPLETE").is_file()]
    ws = open_window_set(sets[0])  # its windows live in the recordings' entries (the corpus on disk once)
    m["n_windows"] = len(ws)
    m["x_bytes"] = sum(f.stat().st_size for f in cache.rglob("X.npy"))
    m["cache_bytes"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    digest = hashlib.sha256()
    for s in range(0, len(ws), 256):  # the windows as a model receives them, a block at a time
        digest.update(np.ascontiguousarray(ws.X[s:s + 256]).tobytes())
    m["sha256"] = digest.hexdigest()
    return m


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[64, 256, 1024],
                    help="recordings per corpus (default 64 256 1024: 2.2, 8.7 and 34.7 h of EEG)")
    ap.add_argument("--quick", action="store_true", help="sizes 2 and 4 (checks that the script works)")
    ap.add_argument("--model", default="labram", help="whose preprocessing the windows get (default labram)")
    ap.add_argument("--n-jobs", type=int, default=2, help="the parallel run's data.n_jobs (default 2)")
    ap.add_argument("--_measure", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._measure:
        print(json.dumps(_measure(json.loads(a._measure))))
        return
    sizes = [2, 4] if a.quick else a.sizes
    data_root = resolve_data_root(None)
    for f in (data_root / "eegmat").glob("Subject*.edf"):  # every run reads from the page cache
        f.read_bytes()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_corpus") as tmp:
        for n in sizes:
            where = Path(tmp) / f"n{n}"
            task, hours = build_corpus(where, n, data_root)
            ser = ingest(task, data_root, where / "cache1", a.model, 1)
            par = ingest(task, data_root, where / f"cache{a.n_jobs}", a.model, a.n_jobs)
            hit = ingest(task, data_root, where / "cache1", a.model, 1, hit=True)
            ser["startup_cpu_s"], ser["startup_wall_s"] = hit["user_s"] + hit["sys_s"], hit["wall_s"]
            rows.append((n, hours, ser, par))
            print(f"{n} recordings ({hours:.2f} h): serial {ser['wall_s']:.1f} s wall, n_jobs={a.n_jobs} "
                  f"{par['wall_s']:.1f} s", flush=True)
    _print_table(rows, a.n_jobs, a.model)


def _beyond(run: dict, serial: dict, hours: float) -> float:
    """CPU-s per hour of EEG beyond the command's fixed start-up (the serial run's cache-hit ingest)."""
    return (run["user_s"] + run["sys_s"] - serial["startup_cpu_s"]) / hours


def _print_table(rows, n_jobs: int, model: str) -> None:
    print(f"\nmodel preprocessing: {model}; machine: {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (not an idle figure when it is high)")
    head = ("recs", "hours", "windows", "CPU-s/h serial", f"CPU-s/h n_jobs={n_jobs}", "peak RSS MB serial",
            f"peak RSS MB n_jobs={n_jobs} (max proc / tree sum)", "X.npy KB/window (all entries)", "cache KB/window",
            f"speedup n_jobs={n_jobs}", "start-up CPU-s / wall s", "CPU-s/h beyond start-up serial",
            f"CPU-s/h beyond start-up n_jobs={n_jobs}", f"speedup beyond start-up n_jobs={n_jobs}", "bit-equal")
    print(" | ".join(head))
    base = None
    for n, hours, s, p in rows:
        cpu_s, cpu_p = (s["user_s"] + s["sys_s"]) / hours, (p["user_s"] + p["sys_s"]) / hours
        print(" | ".join([str(n), f"{hours:.2f}", str(s["n_windows"]), f"{cpu_s:.1f}", f"{cpu_p:.1f}",
                          f"{s['maxrss_mb']:.0f}", f"{p['maxrss_mb']:.0f} / {p['tree_rss_mb']:.0f}",
                          f"{s['x_bytes'] / s['n_windows'] / 1024:.1f}", f"{s['cache_bytes'] / s['n_windows'] / 1024:.1f}",
                          f"{s['wall_s'] / p['wall_s']:.2f}x",
                          f"{s['startup_cpu_s']:.1f} / {s['startup_wall_s']:.1f}", f"{_beyond(s, s, hours):.2f}",
                          f"{_beyond(p, s, hours):.2f}",
                          f"{(s['wall_s'] - s['startup_wall_s']) / (p['wall_s'] - s['startup_wall_s']):.2f}x",
                          "yes" if s["sha256"] == p["sha256"] else "NO"]))
        base = base or (cpu_s, s["maxrss_mb"], _beyond(s, s, hours))
    print("\nratios to the smallest size (serial): " + "; ".join(
        f"{n} recs: CPU/h x{((s['user_s'] + s['sys_s']) / h) / base[0]:.2f} (beyond start-up "
        f"x{_beyond(s, s, h) / base[2]:.2f}), peak RSS x{s['maxrss_mb'] / base[1]:.2f}"
        for n, h, s, _ in rows))
    if len(rows) > 1:  # CPU = start-up + rate x hours, least squares over the sizes
        for name, k in (("serial", 2), (f"n_jobs={n_jobs}", 3)):
            rate, start = np.polyfit([r[1] for r in rows], [r[k]["user_s"] + r[k]["sys_s"] for r in rows], 1)
            print(f"{name}: {rate:.1f} CPU-s per hour of EEG beyond a fixed {start:.1f} CPU-s (start-up), fitted "
                  "over the sizes")
    if any(s["sha256"] != p["sha256"] for _, _, s, p in rows):
        sys.exit("the parallel build's windows differ from the serial one")


if __name__ == "__main__":
    main()
