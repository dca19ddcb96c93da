"""Ingestion, the feature stage and one head-only fold at three corpus sizes growing ×4 (issue 35, item 8): CPU per
hour of EEG, peak memory and disk per window of each stage, the ratios between the sizes, and what two worker
processes (``data.n_jobs 2``) buy at ingestion, with the windows checked bit-equal to the serial build.

The corpus is TUAB-like and built from the staged PhysioNet eegmat EDFs (500 Hz, 21 channels, 19 kept): one
recording per new subject, named ``Sub<NNNN>_rest.edf`` or ``Sub<NNNN>_task.edf`` (the label comes from the file
name), each a symbolic link to a staged file (``SubjectNN_1.edf`` is 182 s of rest, ``SubjectNN_2.edf`` 62 s of
mental arithmetic; taken in turn), the ``files`` source, 10 s windows (the task's ``window_s``) under the chosen
model's preprocessing (default LaBraM: 200 Hz, 0.1-75 Hz, notch 50 Hz, average reference).

Per size, each in a fresh process:

1. ``eegfm-bench ingest`` serial and with ``--n-jobs 2``, each into an empty cache, then once more on the serial
   cache (a cache hit: the command's fixed start-up: imports, config, cache check).
2. ``eegfm-bench features`` on a cv config over the serial cache: the frozen tokens of the model's head-only run
   (the quickstart's: LaBraM, random init, ``head_only``, ``mean`` head), extracted once as the stage does without
   a launcher. LaBraM because the windows already have its preprocessing (nothing is read again) and it is the
   backbone whose features the quickstart and ``docs/guide/scaling.md`` price; one forward pass per window, the
   stage's whole cost.
3. ``eegfm-bench cv`` of the same config restricted to fold 0 (``split.folds [0]``, subject-grouped ``kfold``): one
   head-only fold on the cached tokens (quickstart's training settings), its training, testing and report.

Steps 2-3 run once per ``--feature-dtypes`` (``data.feature_dtype``; default ``float32``); with ``float16`` too the
table adds that entry's disk per window and the fold's balanced accuracy and AUROC on float16 tokens.

Every command runs through a small wrapper process, so ``getrusage(RUSAGE_CHILDREN)`` of the wrapper is that command
alone: user + sys CPU of it and of its worker processes, and the peak RSS of its largest process. The wrapper also
samples the summed RSS of the process tree every 0.1 s (psutil; a sampled figure, it can miss a short peak) and the
largest process's anonymous memory (RSS less Linux's file-backed and shared pages: the memory-mapped windows and
tokens a stage reads or writes count in RSS, but the kernel can drop them; the anonymous part it cannot). Disk is
``du`` of the cache (the blocks its files take, each file once: whatever the window store is), split into the window
store (everything but ``features/``) and each feature entry. The staged files are read once before the first ingest
so every run reads from the page cache.

Run it on an idle machine; on a shared one the figures are not idle figures::

    EEGFM_DATA=../shared/data python scripts/bench_corpus.py                 # 64, 256, 1024 recordings
    EEGFM_DATA=../shared/data python scripts/bench_corpus.py --sizes 8 32 128 --feature-dtypes float32 float16
    EEGFM_DATA=../shared/data python scripts/bench_corpus.py --quick         # 8 and 16 recordings: checks it works
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import yaml

from eegfm_bench.data.qc import edf_header
from eegfm_bench.data.sources import resolve_data_root
from eegfm_bench.data.windows import open_window_set

SOURCES = (("_1.edf", "rest"), ("_2.edf", "task"))
QUICK_SIZES = (8, 16)  # the fewest recordings whose folds hold both classes in training, validation and test
STAGES = ("ingest", "features", "fold")


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


def cv_config(where: Path, task: Path, data_root: Path, cache: Path, model: str, n: int, dtype: str) -> Path:
    """A cv config over the corpus: ``model`` head-only (the quickstart's run and training settings), fold 0 of a
    subject-grouped ``kfold`` (5 folds from 20 recordings, else 4), its tokens stored as ``dtype``."""
    cfg = {"experiment": f"bench_corpus_{dtype}", "task": str(task), "out_dir": str(where / f"out-{dtype}"),
           "seed": 0, "confound": False,
           "data": {"data_root": str(data_root), "cache_dir": str(cache), "batch_size": 64, "feature_dtype": dtype},
           "split": {"scheme": "kfold", "k": 5 if n >= 20 else 4, "seed": 0, "n_val_groups": 2, "folds": [0]},
           "trainer": {"max_epochs": 15, "patience": 5, "loggers": ["csv"]},
           "optim": {"lr": 0.001, "weight_decay": 0.01, "warmup_epochs": 1},
           "runs": [{"model": model, "regime": "head_only", "heads": ["mean"], "pretrained": None}]}
    path = where / f"cv-{dtype}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _measure(cmd: list[str]) -> dict:
    """Run ``cmd`` (in this wrapper process) and return its wall time, CPU, peak RSS, the sampled RSS of its process
    tree and the sampled anonymous memory of its largest process (MB = 2**20 bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree_peak, anon_peak = [0], [0]
    done = threading.Event()

    def sample():
        p = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                mem = [q.memory_info() for q in [p] + p.children(recursive=True) if q.is_running()]
                tree_peak[0] = max(tree_peak[0], sum(m.rss for m in mem))
                # anonymous memory (RSS less the file-backed and shared pages, Linux's ``shared``): what the process
                # holds itself, unlike the pages of memory-mapped windows and tokens that the kernel can drop
                anon_peak[0] = max(anon_peak[0], max((m.rss - getattr(m, "shared", 0) for m in mem), default=0))
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
            "maxrss_mb": ru.ru_maxrss / 1024.0, "tree_rss_mb": tree_peak[0] / 2**20, "anon_mb": anon_peak[0] / 2**20,
            "tail": out[-2000:]}


def measured(args: list[str], what: str) -> dict:
    """``eegfm-bench <args>`` in a fresh wrapper process (so RUSAGE_CHILDREN holds that command alone); exits with
    its output's tail when it fails."""
    cmd = [sys.executable, "-m", "eegfm_bench.cli", *args, "--no-progress"]
    res = subprocess.run([sys.executable, __file__, "--_measure", json.dumps(cmd)], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"the measuring wrapper failed:\n{res.stderr[-3000:]}")
    m = json.loads(res.stdout.strip().splitlines()[-1])
    if m["rc"] != 0:
        sys.exit(f"{what} failed (rc {m['rc']}):\n{m['tail']}")
    m["cpu_s"] = m["user_s"] + m["sys_s"]
    return m


def du(path: Path, skip: str | None = None) -> int:
    """Bytes the files under ``path`` take on disk (``du``: allocated blocks, each inode once, links not followed),
    leaving out the top-level folder ``skip``."""
    seen, total = set(), 0
    for root, dirs, files in os.walk(path):
        if skip and Path(root) == path and skip in dirs:
            dirs.remove(skip)
        for f in files:
            st = os.lstat(os.path.join(root, f))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _window_set(cache: Path) -> Path:
    sets = [d for d in cache.glob("corpus-*") if (d / "COMPLETE").is_file()]
    if len(sets) != 1:
        sys.exit(f"expected one complete corpus window set under {cache}, found {len(sets)}")
    return sets[0]


def windows_digest(cache: Path) -> str:
    """sha256 of the cache's window set as a model receives it (``WindowSet.X``, read a block at a time from the
    recordings' entries: the window set stores an index, the corpus is on disk once)."""
    ws = open_window_set(_window_set(cache))
    h = hashlib.sha256()
    for s in range(0, len(ws), 256):
        h.update(np.ascontiguousarray(ws.X[s:s + 256]).tobytes())
    return h.hexdigest()


def ingest(task: Path, data_root: Path, cache: Path, model: str, n_jobs: int, hit: bool = False) -> dict:
    """One ingest, measured, with its window set's window count, one window's bytes, the cache's ``du`` and the
    digest of its windows. ``hit=True``: the cache already holds the window set, so the run measures the command's
    fixed start-up (imports, config, cache check) and nothing else is read."""
    m = measured(["ingest", "--task", str(task), "--model", model, "--data-root", str(data_root), "--cache-dir",
                  str(cache), "--n-jobs", str(n_jobs)], "ingest")
    if hit:
        return m
    meta = json.loads((_window_set(cache) / "meta.json").read_text())
    m["n_windows"] = int(meta["n_windows"])
    m["window_bytes"] = int(len(meta["ch_names"]) * round(meta["sfreq"] * meta["preprocessing"]["window_s"]) * 4)
    m["disk_bytes"] = du(cache)
    m["sha256"] = windows_digest(cache)
    return m


def feature_entry_of(cache: Path, dtype: str) -> Path:
    """The complete feature entry of ``cache`` whose tokens are stored as ``dtype``."""
    found = [d for d in (cache / "features").glob("*") if (d / "COMPLETE").is_file()
             and json.loads((d / "meta.json").read_text()).get("tokens_dtype", "float32") == dtype]
    if len(found) != 1:
        sys.exit(f"expected one complete {dtype} feature entry under {cache / 'features'}, found {len(found)}")
    return found[0]


def features_and_fold(cfg: Path, cache: Path, dtype: str) -> dict:
    """The feature stage and one head-only fold of ``cfg``, measured, with the entry's ``du``, one window's token
    bytes and the fold's test balanced accuracy and AUROC."""
    feat = measured(["features", "--config", str(cfg)], f"features ({dtype})")
    entry = feature_entry_of(cache, dtype)
    tokens = np.load(entry / "tokens.npy", mmap_mode="r")
    feat["disk_bytes"], feat["token_bytes"] = du(entry), int(tokens[0].nbytes)
    fold = measured(["cv", "--config", str(cfg)], f"head-only fold ({dtype})")
    rows = pd.read_parquet(Path(yaml.safe_load(cfg.read_text())["out_dir"]) / "results.parquet")
    test = rows[rows.condition == "clean"] if "condition" in rows and (rows.condition == "clean").any() else rows
    fold.update({k: float(test.loc[test.metric == m, "value"].iloc[0]) for k, m in (("bacc", "balanced_accuracy"),
                                                                                      ("auroc", "auroc"))
                 if (test.metric == m).any()})
    return {"features": feat, "fold": fold}


def run_size(n: int, where: Path, data_root: Path, a) -> dict:
    """Every stage at one size: its corpus, the ingests, then per feature dtype the feature stage and the fold."""
    task, hours = build_corpus(where, n, data_root)
    ser = ingest(task, data_root, where / "cache1", a.model, 1)
    par = ingest(task, data_root, where / f"cache{a.n_jobs}", a.model, a.n_jobs)
    hit = ingest(task, data_root, where / "cache1", a.model, 1, hit=True)
    ser["startup_cpu_s"], ser["startup_wall_s"] = hit["cpu_s"], hit["wall_s"]
    row = {"n": n, "hours": hours, "serial": ser, "parallel": par, "dtypes": {}}
    print(f"{n} recordings ({hours:.2f} h, {ser['n_windows']} windows): ingest serial {ser['wall_s']:.1f} s wall, "
          f"n_jobs={a.n_jobs} {par['wall_s']:.1f} s", flush=True)
    for dtype in a.feature_dtypes:
        cfg = cv_config(where, task, data_root, where / "cache1", a.model, n, dtype)
        row["dtypes"][dtype] = r = features_and_fold(cfg, where / "cache1", dtype)
        print(f"  {dtype}: features {r['features']['wall_s']:.1f} s wall, head-only fold {r['fold']['wall_s']:.1f} "
              f"s wall", flush=True)
    row["disk_total_bytes"] = du(where / "cache1")
    row["disk_windows_bytes"] = du(where / "cache1", skip="features")
    shutil.rmtree(where)  # the next size's caches never sit beside this one's (the largest alone takes gigabytes)
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[64, 256, 1024],
                    help="recordings per corpus (default 64 256 1024: 2.2, 8.7 and 34.7 h of EEG)")
    ap.add_argument("--quick", action="store_true",
                    help=f"sizes {' and '.join(map(str, QUICK_SIZES))}, features float32 and float16 (checks that "
                         "the script works)")
    ap.add_argument("--model", default="labram",
                    help="whose preprocessing the windows get and whose head-only tokens are extracted (default "
                         "labram, the quickstart's head-only backbone)")
    ap.add_argument("--n-jobs", type=int, default=2, help="the parallel ingest's data.n_jobs (default 2)")
    ap.add_argument("--feature-dtypes", nargs="+", choices=["float32", "float16"], default=None,
                    help="data.feature_dtype of the feature stage and the fold, one run each (default float32)")
    ap.add_argument("--json", type=Path, help="also write every figure measured to this file")
    ap.add_argument("--_measure", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._measure:
        print(json.dumps(_measure(json.loads(a._measure))))
        return
    sizes = list(QUICK_SIZES) if a.quick else a.sizes
    a.feature_dtypes = a.feature_dtypes or (["float32", "float16"] if a.quick else ["float32"])
    if min(sizes) < QUICK_SIZES[0]:
        sys.exit(f"sizes below {QUICK_SIZES[0]} recordings leave a fold without both classes; fix: --sizes >= "
                 f"{QUICK_SIZES[0]}")
    data_root = resolve_data_root(None)
    for f in (data_root / "eegmat").glob("Subject*.edf"):  # every run reads from the page cache
        f.read_bytes()
    with tempfile.TemporaryDirectory(prefix="bench_corpus") as tmp:
        rows = [run_size(n, Path(tmp) / f"n{n}", data_root, a) for n in sizes]
    if a.json:
        a.json.write_text(json.dumps({"model": a.model, "n_jobs": a.n_jobs, "load_average": os.getloadavg(),
                                      "rows": rows}, indent=1, default=str))
    _print_ingest(rows, a.n_jobs, a.model)
    _print_stages(rows, a.feature_dtypes)
    if any(r["serial"]["sha256"] != r["parallel"]["sha256"] for r in rows):
        sys.exit("the parallel build's windows differ from the serial ones")


def _beyond(run: dict, serial: dict, hours: float) -> float:
    """CPU-s per hour of EEG beyond the command's fixed start-up (the serial run's cache-hit ingest)."""
    return (run["cpu_s"] - serial["startup_cpu_s"]) / hours


def _table(head: list[str], lines: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for line in lines:
        print("| " + " | ".join(line) + " |")


def _print_ingest(rows: list[dict], n_jobs: int, model: str) -> None:
    print(f"\nmodel: {model}; machine: {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (not an idle figure when it is high)\n\ningest:")
    lines = []
    for r in rows:
        n, hours, s, p = r["n"], r["hours"], r["serial"], r["parallel"]
        lines.append([str(n), f"{hours:.2f}", str(s["n_windows"]), f"{s['cpu_s'] / hours:.1f}",
                      f"{p['cpu_s'] / hours:.1f}", f"{s['maxrss_mb']:.0f}",
                      f"{p['maxrss_mb']:.0f} / {p['tree_rss_mb']:.0f}", f"{s['wall_s'] / p['wall_s']:.2f}x",
                      f"{s['startup_cpu_s']:.1f} / {s['startup_wall_s']:.1f}", f"{_beyond(s, s, hours):.2f}",
                      f"{_beyond(p, s, hours):.2f}",
                      f"{(s['wall_s'] - s['startup_wall_s']) / max(p['wall_s'] - s['startup_wall_s'], 1e-9):.2f}x",
                      "yes" if s["sha256"] == p["sha256"] else "NO"])
    _table(["recs", "hours", "windows", "CPU-s/h serial", f"CPU-s/h n_jobs={n_jobs}", "peak RSS MB serial",
            f"peak RSS MB n_jobs={n_jobs} (max proc / tree sum)", f"speedup n_jobs={n_jobs}",
            "start-up CPU-s / wall s", "CPU-s/h beyond start-up serial", f"CPU-s/h beyond start-up n_jobs={n_jobs}",
            f"speedup beyond start-up n_jobs={n_jobs}", "windows bit-equal"], lines)
    if len(rows) > 1:  # CPU = start-up + rate x hours, least squares over the sizes
        for name, k in (("serial", "serial"), (f"n_jobs={n_jobs}", "parallel")):
            rate, start = np.polyfit([r["hours"] for r in rows], [r[k]["cpu_s"] for r in rows], 1)
            print(f"ingest {name}: {rate:.1f} CPU-s per hour of EEG beyond a fixed {start:.1f} CPU-s, fitted over "
                  "the sizes")


def _stage_runs(r: dict, dtype: str) -> dict:
    return {"ingest": r["serial"], "features": r["dtypes"][dtype]["features"], "fold": r["dtypes"][dtype]["fold"]}


def _print_stages(rows: list[dict], dtypes: list[str]) -> None:
    """Per size: each stage's CPU per hour of EEG and peak RSS, disk per window, the fold's scores; then the ratios
    of the largest size to the smallest."""
    kb = 1024.0
    for dtype in dtypes:
        print(f"\nstages (ingest serial; features and fold with tokens stored as {dtype}):")
        lines = []
        for r in rows:
            runs, s, f = _stage_runs(r, dtype), r["serial"], r["dtypes"][dtype]
            nw = s["n_windows"]
            lines.append([str(r["n"]), f"{r['hours']:.2f}", str(nw)]
                         + [f"{runs[k]['cpu_s'] / r['hours']:.1f}" for k in STAGES]
                         + [f"{1000 * f['features']['cpu_s'] / nw:.0f}"]
                         + [f"{runs[k]['maxrss_mb']:.0f} / {runs[k]['anon_mb']:.0f}" for k in STAGES]
                         + [f"{s['window_bytes']}", f"{r['disk_windows_bytes'] / nw / kb:.1f}",
                            f"{f['features']['token_bytes']}", f"{f['features']['disk_bytes'] / nw / kb:.1f}",
                            f"{(r['disk_windows_bytes'] + f['features']['disk_bytes']) / nw / kb:.1f}",
                            f"{f['fold'].get('bacc', float('nan')):.3f}", f"{f['fold'].get('auroc', float('nan')):.3f}"])
        _table(["recs", "hours", "windows", "ingest CPU-s/h", "features CPU-s/h", "fold CPU-s/h",
                "features CPU-ms/window"] + [f"{k} peak RSS / anon MB" for k in STAGES] + [
                "bytes of one window", "windows du KB/window", f"bytes of one window's {dtype} tokens",
                f"{dtype} features du KB/window", "windows + features du KB/window", "fold bacc", "fold AUROC"], lines)
        if len(rows) > 1:
            lo, hi = rows[0], rows[-1]
            big, small = _stage_runs(hi, dtype), _stage_runs(lo, dtype)
            print(f"ratios {hi['n']} / {lo['n']} recordings ({hi['hours'] / lo['hours']:.1f}x the hours): " + "; ".join(
                f"{k} CPU-s/h x{(big[k]['cpu_s'] / hi['hours']) / (small[k]['cpu_s'] / lo['hours']):.2f}, "
                f"peak RSS x{big[k]['maxrss_mb'] / small[k]['maxrss_mb']:.2f} "
                f"(anon x{big[k]['anon_mb'] / small[k]['anon_mb']:.2f})"
                for k in STAGES))
            for k in STAGES[1:]:
                rate, start = np.polyfit([r["hours"] for r in rows], [_stage_runs(r, dtype)[k]["cpu_s"] for r in rows], 1)
                print(f"{k} ({dtype}): {rate:.1f} CPU-s per hour of EEG beyond a fixed {start:.1f} CPU-s, fitted over "
                      "the sizes")
    if len(dtypes) > 1:
        print("\nfeature storage: " + "; ".join(
            f"{r['n']} recs: " + ", ".join(f"{d} {r['dtypes'][d]['features']['disk_bytes'] / r['serial']['n_windows'] / kb:.1f} "
                                          f"KB/window, bacc {r['dtypes'][d]['fold'].get('bacc', float('nan')):.3f}, "
                                          f"AUROC {r['dtypes'][d]['fold'].get('auroc', float('nan')):.3f}" for d in dtypes)
            for r in rows))


if __name__ == "__main__":
    main()
