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


def _compacting_writer(folder, wid, n):
    store = ResultStore(folder, merge=False)
    store.COMPACT_EVERY = 8  # fold often: compactions race the other writer's appends
    for i in range(n):
        store.append([_row(f"{wid}-{i}", float(i), metric=f"m{j}") for j in range(3)])


def test_compaction_folds_parts_keeps_the_newest_row_and_races_writers_without_loss(tmp_path):
    store = ResultStore(tmp_path, merge=False)
    for v in (0.1, 0.2, 0.3):  # the same key three times: the newest wins, before and after compaction
        store.append([_row("0", v)])
    store.append([_row("1", 0.9)])
    before = store.load()
    assert store.compact() is not None and len(store.parts()) == 1
    after = store.load()
    pd.testing.assert_frame_equal(before, after)
    assert after.set_index("fold").value.to_dict() == {0: 0.3, 1: 0.9}
    store.append([_row("0", 0.4)])  # a row written after the compaction still wins over the compacted one
    assert store.load().set_index("fold").value[0] == 0.4
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_compacting_writer, args=(str(tmp_path / "race"), w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    race = ResultStore(tmp_path / "race")
    df = race.load()
    assert len(df) == 2 * 40 * 3 and not df.duplicated(["fold", "metric"]).any()  # no row lost or doubled
    assert len(race.parts()) <= 2 * 8 + 1  # folded as it went (without compaction: 80 parts)


def test_done_cells_reads_only_the_keys_and_agrees_with_the_full_load(tmp_path):
    from eegfm_bench.results import done_cells

    store = ResultStore(tmp_path, merge=False)
    store.append([{**_row("0", 0.7), "experiment": "e", "condition": "clean", "model": "m", "regime": "r",
                   "head": "h"}])
    store.append([{**_row("1", 0.6), "experiment": "e", "condition": "noise", "model": "m", "regime": "r",
                   "head": "h"}])  # not a clean row: not done
    store.append([{**_row("2", 0.6, metric="auroc"), "experiment": "e", "condition": "clean", "model": "m",
                   "regime": "r", "head": "h"}])  # no balanced accuracy: not done
    store.append([{**_row("3", 0.6), "experiment": "other", "condition": "clean", "model": "m", "regime": "r",
                   "head": "h"}])
    assert done_cells(store, "e") == {("m", "r", "h", "0", "h1")}


def test_the_digest_memo_is_appended_and_read_incrementally(tmp_path):
    from eegfm_bench.data import qc

    files = []
    for i in range(30):
        f = tmp_path / f"r{i}.bin"
        f.write_bytes(os.urandom(64) + bytes([i]))
        files.append(f)
    cache = tmp_path / "cache"
    first = [qc.file_sha256(f, cache) for f in files]
    lines = (cache / "sha256.jsonl").read_text().splitlines()
    assert len(lines) == 30  # one line per digest: never the whole memo rewritten
    qc._SHA_MEMO.clear()
    qc._SHA_MEMO_POS.clear()  # a new process: reads the memo once, hashes nothing again
    import hashlib

    calls = []
    real = hashlib.sha256
    hashlib.sha256 = lambda *a: calls.append(1) or real(*a)
    try:
        assert [qc.file_sha256(f, cache) for f in files] == first
    finally:
        hashlib.sha256 = real
    assert not calls
    files[3].write_bytes(b"edited")  # an edited file is hashed again and appended
    assert qc.file_sha256(files[3], cache) == real(b"edited").hexdigest()
    assert len((cache / "sha256.jsonl").read_text().splitlines()) == 31
