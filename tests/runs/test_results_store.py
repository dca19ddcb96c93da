"""Result store for many writers (issue 13): one immutable part per append, concurrent appends lose nothing, a
writer killed mid-append leaves no partial row, legacy folders migrate, the human tables are merged snapshots."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pandas as pd

from eegfm_bench.results import ROW_COLUMNS, ResultStore


def _row(fold, value, chash="h1", metric="balanced_accuracy"):
    return {**dict.fromkeys(ROW_COLUMNS, "x"), "fold": fold, "metric": metric, "value": value, "config_hash": chash,
            "seed": 0, "n_windows": 10, "n_subjects": 2}


def _writer(folder, wid, n):
    store = ResultStore(folder, merge=False)
    for i in range(n):
        store.append([_row(f"{wid}-{i}", float(i), metric=f"m{j}") for j in range(3)])


def test_two_processes_appending_at_once_lose_no_row(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = ResultStore(tmp_path)
    assert len(store.parts()) == 80
    assert not (tmp_path / "results.csv").exists()  # workers never touch the shared tables
    df = store.merge()
    assert len(df) == 2 * 40 * 3 and df.drop_duplicates(["fold", "metric"]).shape[0] == 240
    assert len(pd.read_csv(tmp_path / "results.csv")) == 240 and len(pd.read_parquet(tmp_path / "results.parquet")) == 240


def _slow_writer(folder):
    import eegfm_bench.results as R

    real = pd.DataFrame.to_parquet

    def slow(self, path, *a, **k):  # the kill lands while the part is being written
        real(self, path, *a, **k)
        time.sleep(30)

    pd.DataFrame.to_parquet = slow
    R.ResultStore(folder, merge=False).append([_row(99, 1.0)])


def test_a_writer_killed_mid_append_leaves_no_partial_row_and_a_rerun_adds_only_the_missing(tmp_path):
    store = ResultStore(tmp_path)
    store.append([_row(0, 0.5), _row(1, 0.6)])
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_slow_writer, args=(str(tmp_path),))
    p.start()
    deadline = time.time() + 60
    while not any(f.name.endswith(".tmp") for f in (tmp_path / "parts").iterdir()):
        assert time.time() < deadline
        time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    df = store.load()
    assert sorted(df["fold"]) == [0, 1]  # the killed cell's row is not there, and nothing is broken
    store.append([_row(99, 1.0)])  # the rerun: the missing cell only
    df = store.load()
    assert sorted(df["fold"]) == [0, 1, 99] and not df.duplicated(["fold", "metric", "config_hash"]).any()


def test_newest_part_wins_types_match_the_csv_and_legacy_folders_migrate(tmp_path):
    legacy = pd.DataFrame([_row(0, 0.1), _row("pooled", 0.2)])
    legacy.to_csv(tmp_path / "results.csv", index=False)
    store = ResultStore(tmp_path)
    assert len(store.load()) == 2  # read as is
    store.append([_row(0, 0.7), _row(1, np.nan)])
    df = store.load()
    assert (tmp_path / "parts" / "0-legacy.parquet").is_file()
    assert df.set_index("fold")["value"].to_dict().keys() == {"0", "1", "pooled"}
    assert df[df.fold == "0"]["value"].item() == 0.7 and np.isnan(df[df.fold == "1"]["value"].item())
    # the same table as reading the merged CSV back
    csv = pd.read_csv(tmp_path / "results.csv")
    pd.testing.assert_frame_equal(df.reset_index(drop=True), csv, check_dtype=False)
    assert df["seed"].dtype.kind == "i" and df["n_windows"].dtype.kind == "i"


def test_append_cost_does_not_grow_with_the_table(tmp_path):
    """Correctness of the bench's premise (the timing itself is in scripts/bench_launch.py): with merge=False an
    append writes one part of its own rows and reads nothing."""
    store = ResultStore(tmp_path, merge=False)
    store.append([_row(i, 0.0) for i in range(5000)])
    p = store.append([_row(-1, 1.0)])
    assert len(pd.read_parquet(p)) == 1 and not (tmp_path / "results.csv").exists()


def test_window_cache_publish_keeps_an_entry_another_process_completed(tmp_path):
    from eegfm_bench.data.windows import _publish

    final = tmp_path / "entry"
    a, b = tmp_path / "a.tmp", tmp_path / "b.tmp"
    for d, tag in ((a, "a"), (b, "b")):
        d.mkdir()
        (d / "X.npy").write_text(tag)
        (d / "COMPLETE").write_text("ok\n")
    _publish(a, final)
    _publish(b, final)  # a second builder of the same (content-keyed) entry: the published one stays
    assert (final / "X.npy").read_text() == "a" and not a.exists() and not b.exists()
    (final / "COMPLETE").unlink()  # an incomplete leftover is replaced
    c = tmp_path / "c.tmp"
    c.mkdir()
    (c / "X.npy").write_text("c")
    (c / "COMPLETE").write_text("ok\n")
    _publish(c, final)
    assert (final / "X.npy").read_text() == "c"
