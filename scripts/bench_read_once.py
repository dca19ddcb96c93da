"""What a cold cv pays to read its recordings for several models: each model's preprocessing built on
its own (every recording read, filtered and resampled once per model) against one read per recording shared by
all of them (:func:`eegfm_bench.data.windows.load_window_sets`).

Both builds start from an empty cache (a fresh temporary folder each), on the same recordings, in one process, and
the windows are checked equal. The files are read once before either build, so both read from the page cache. Prints the wall time of each and the ratio.

Usage::

    EEGFM_DATA=../shared/data python scripts/bench_read_once.py                      # quickstart: EEGNet + LaBraM
    EEGFM_DATA=../shared/data python scripts/bench_read_once.py --models eegnet labram cbramod --subjects 1 2 3
"""
from __future__ import annotations

import argparse
import tempfile
import time

from pathlib import Path

import numpy as np

from eegfm_bench.data.tasks import get_task
from eegfm_bench.data.windows import load_window_sets, load_windows
from eegfm_bench.models.backbones import BACKBONES


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="eegmmidb_mi")
    ap.add_argument("--models", nargs="+", default=["eegnet", "labram"])
    ap.add_argument("--subjects", nargs="*", type=int, default=None, help="default: every staged subject")
    a = ap.parse_args(argv)
    preps = [BACKBONES.get(m).preprocessing for m in a.models]
    for rec in get_task(a.task).source(None).recordings(a.subjects):  # both builds read from the page cache
        if rec.path is not None:
            Path(rec.path).read_bytes()
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        t0 = time.perf_counter()
        sep = [load_windows(a.task, p, subjects=a.subjects, cache_dir=d1, progress=False) for p in preps]
        t_sep = time.perf_counter() - t0
        t0 = time.perf_counter()
        one = load_window_sets(a.task, preps, subjects=a.subjects, cache_dir=d2, progress=False)
        t_one = time.perf_counter() - t0
        for x, y in zip(sep, one):
            np.testing.assert_array_equal(np.asarray(x.X), np.asarray(y.X))
    n = len(np.unique(sep[0].recording))
    print(f"{a.task}, {n} recordings, models {', '.join(a.models)} ({len(set(preps))} preprocessings), cold cache:")
    print(f"  one build per model (each recording read per model): {t_sep:.1f} s")
    print(f"  one read per recording for all models:               {t_one:.1f} s")
    print(f"  ratio: {t_sep / t_one:.2f}x (windows equal)")


if __name__ == "__main__":
    main()
