"""Result store for many writers (issue 13): one immutable part per append, concurrent appends lose nothing, a
writer killed mid-append leaves no partial row, legacy folders migrate, the human tables are merged snapshots."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from eegfm_bench.results import ROW_COLUMNS, ResultStore, StoreSchemaError, done_cells, read_results_csv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


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
        p.join()  # no deadline: a hang is pytest-timeout's
        assert p.exitcode == 0
    store = ResultStore(tmp_path)
    assert len(store.parts()) == 80
    assert not (tmp_path / "results.csv").exists()  # workers never touch the shared tables
    df = store.merge()
    assert len(df) == 2 * 40 * 3 and df.drop_duplicates(["fold", "metric"]).shape[0] == 240
    assert len(pd.read_csv(tmp_path / "results.csv")) == 240 and len(pd.read_parquet(tmp_path / "results.parquet")) == 240


def _slow_writer(folder, written):
    import pyarrow.parquet as pq

    import eegfm_bench.results as R

    real = pq.write_table

    def slow(table, where, *a, **k):  # the kill lands while the part is being written
        real(table, where, *a, **k)
        written.set()
        time.sleep(3600)

    pq.write_table = slow
    R.ResultStore(folder, merge=False).append([_row(99, 1.0)])


def test_a_writer_killed_mid_append_leaves_no_partial_row_and_a_rerun_adds_only_the_missing(tmp_path):
    store = ResultStore(tmp_path)
    store.append([_row(0, 0.5), _row(1, 0.6)])
    ctx = mp.get_context("spawn")
    written = ctx.Event()
    p = ctx.Process(target=_slow_writer, args=(str(tmp_path), written))
    p.start()
    written.wait()  # the writer's temporary part is on disk, its os.replace not yet done
    assert sum(f.name.endswith(".tmp") for f in (tmp_path / "parts").iterdir()) == 1
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    df = store.load()
    assert sorted(df["fold"]) == ["0", "1"]  # the killed cell's row is not there, and nothing is broken
    store.append([_row(99, 1.0)])  # the rerun: the missing cell only
    df = store.load()
    assert sorted(df["fold"]) == ["0", "1", "99"] and not df.duplicated(["fold", "metric", "config_hash"]).any()


def test_newest_part_wins_columns_keep_their_types_and_legacy_folders_migrate(tmp_path):
    legacy = pd.DataFrame([_row(0, 0.1), _row("pooled", 0.2)])
    legacy.to_csv(tmp_path / "results.csv", index=False)
    store = ResultStore(tmp_path)
    assert len(store.load()) == 2  # read as is
    store.append([_row(0, 0.7), _row(1, np.nan)])
    df = store.load()
    assert (tmp_path / "parts" / "0-legacy.parquet").is_file()
    assert df.set_index("fold")["value"].to_dict().keys() == {"0", "1", "pooled"}
    assert df[df.fold == "0"]["value"].item() == 0.7 and np.isnan(df[df.fold == "1"]["value"].item())
    assert df["seed"].dtype.kind == "i" and df["n_windows"].dtype.kind == "i" and df["value"].dtype.kind == "f"
    # the merged tables hold the same rows; read back by the store (a CSV-only folder) they are the same frame
    (tmp_path / "csv_only").mkdir()
    shutil.copy(tmp_path / "results.csv", tmp_path / "csv_only" / "results.csv")
    pd.testing.assert_frame_equal(ResultStore(tmp_path / "csv_only").load(), df)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"), df, check_dtype=False)


def test_append_cost_does_not_grow_with_the_table(tmp_path):
    """Correctness of the bench's premise (the timing itself is in scripts/bench_launch.py): with merge=False an
    append writes one part of its own rows and reads nothing."""
    store = ResultStore(tmp_path, merge=False)
    store.append([_row(i, 0.0) for i in range(5000)])
    p = store.append([_row(-1, 1.0)])
    assert len(pd.read_parquet(p)) == 1 and not (tmp_path / "results.csv").exists()


def test_window_cache_publish_keeps_an_entry_another_process_completed(tmp_path):
    from eegfm_bench.data.windows import publish_entry

    final = tmp_path / "entry"
    a, b = tmp_path / "a.tmp", tmp_path / "b.tmp"
    for d, tag in ((a, "a"), (b, "b")):
        d.mkdir()
        (d / "X.npy").write_text(tag)
        (d / "COMPLETE").write_text("ok\n")
    publish_entry(a, final)
    publish_entry(b, final)  # a second builder of the same (content-keyed) entry: the published one stays
    assert (final / "X.npy").read_text() == "a" and not a.exists() and not b.exists()
    (final / "COMPLETE").unlink()  # an incomplete leftover is replaced
    c = tmp_path / "c.tmp"
    c.mkdir()
    (c / "X.npy").write_text("c")
    (c / "COMPLETE").write_text("ok\n")
    publish_entry(c, final)
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
    assert after.set_index("fold").value.to_dict() == {"0": 0.3, "1": 0.9}
    store.append([_row("0", 0.4)])  # a row written after the compaction still wins over the compacted one
    assert store.load().set_index("fold").value["0"] == 0.4
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_compacting_writer, args=(str(tmp_path / "race"), w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    race = ResultStore(tmp_path / "race")
    df = race.load()
    assert len(df) == 2 * 40 * 3 and not df.duplicated(["fold", "metric"]).any()  # no row lost or doubled
    assert len(race.parts()) <= 2 * 8 + 1  # folded as it went (without compaction: 80 parts)


def test_done_cells_reads_only_the_keys_and_agrees_with_the_full_load(tmp_path):
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


NUMERIC_LOOKING = ["123456e78901", "012345678901", "000000000000", "1234567e8901"]
"""Config hashes (12 hex digits) that read as numbers: 1e78901 overflows to inf, a leading 0 is lost."""


def _cv_folder(folder: Path, hashes: list[str]) -> None:
    """A cv-shaped folder (what ``eegfm-bench status`` reads): one cell per hash, one fold."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cells.json").write_text(json.dumps([{"model": "m", "regime": "r", "head": f"h{i}", "config_hash": h}
                                                   for i, h in enumerate(hashes)]))
    (folder / "splits.json").write_text(json.dumps({"folds": [{}]}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"experiment": "e", "split": {"folds": None}}))


def _cell_row(i, chash, **kw):
    return {**_row("0", 0.5 + i / 100, chash=chash), "experiment": "e", "condition": "clean", "model": "m",
            "regime": "r", "head": f"h{i}", **kw}


def test_a_config_hash_of_digits_and_e_round_trips_everywhere(tmp_path):
    """Issue 33 item 3: a hash that reads as a number stays the same string through append, merge, load (parts,
    and a CSV-only folder), keys, the done set and status."""
    from eegfm_bench.reports.status import status_markdown
    from eegfm_bench.runs.cv.progress import cv_status

    hashes = NUMERIC_LOOKING
    _cv_folder(tmp_path, hashes)
    store = ResultStore(tmp_path, merge=False)
    for i, h in enumerate(hashes):  # one part each: no part holds a letter in config_hash
        store.append([_cell_row(i, h)])
    assert done_cells(store, "e") == {("m", "r", f"h{i}", "0", h) for i, h in enumerate(hashes)}
    assert list(store.keys(config_hash=hashes[0])["config_hash"]) == [hashes[0]]
    df = store.load()
    assert df["config_hash"].tolist() == hashes and df["value"].tolist() == [0.5, 0.51, 0.52, 0.53]
    assert store.has(config_hash="123456e78901") and not store.has(config_hash="inf")
    rows, _ = cv_status(tmp_path)
    assert [r["state"] for r in rows] == ["done"] * 4
    merged = store.merge()
    pd.testing.assert_frame_equal(merged, df)
    assert pd.read_parquet(tmp_path / "results.parquet")["config_hash"].tolist() == hashes
    assert [line.split(",")[14] for line in (tmp_path / "results.csv").read_text().splitlines()[1:]] == hashes
    pd.testing.assert_frame_equal(read_results_csv(tmp_path / "results.csv"), df)
    (tmp_path / "csv_only").mkdir()
    shutil.copy(tmp_path / "results.csv", tmp_path / "csv_only" / "results.csv")  # a folder from before parts
    csv_only = ResultStore(tmp_path / "csv_only")
    assert csv_only.load()["config_hash"].tolist() == hashes
    assert done_cells(csv_only, "e") == done_cells(store, "e")
    assert status_markdown(*cv_status(tmp_path), unmerged=store.unmerged()).startswith("4 cells: 4 done, 0 running")


def test_unmerged_is_exact_when_a_part_and_the_csv_share_a_timestamp(tmp_path):
    """Issue 33 item 6: a part written in the CSV's timestamp tick (coarse mtimes) is still unmerged; a part merged
    is not, whatever its mtime."""
    store = ResultStore(tmp_path, merge=False)
    assert not store.unmerged()  # nothing written
    store.append([_row("0", 0.1)])
    assert store.unmerged()  # no results.csv yet
    store.merge()
    assert not store.unmerged()
    late = store.append([_row("1", 0.2)])
    csv_ns = (tmp_path / "results.csv").stat().st_mtime_ns
    os.utime(late, ns=(csv_ns, csv_ns))  # the same tick as the CSV: the mtime comparison takes it as merged
    assert store.unmerged()
    os.utime(late, ns=(csv_ns - 10**9, csv_ns - 10**9))  # a slow writer's part, stamped before the merge
    assert store.unmerged()
    store.merge()
    os.utime(tmp_path / "results.csv", ns=(1, 1))  # the CSV looks ancient: its parts are still all merged
    assert not store.unmerged()
    assert json.loads((tmp_path / "results.manifest.json").read_text())["parts"] == sorted(p.name for p in
                                                                                           store.parts())
    (tmp_path / "results.manifest.json").unlink()  # a folder merged before the manifest: merged again once
    assert store.unmerged()


def test_old_stores_written_before_the_typed_store_still_read(tmp_path):
    """Parts, merged tables and a CSV-only folder written by the store of commit 85b1fec
    (tests/fixtures/make_old_store.py): keys as strings, seeds as text, extra columns as objects."""
    shutil.copytree(FIXTURES / "old_store", tmp_path / "old")
    store = ResultStore(tmp_path / "old", merge=False)
    df = store.load()
    assert len(df) == 9 and list(df.columns[:len(ROW_COLUMNS)]) == ROW_COLUMNS
    assert df.dtypes[["seed", "devices"]].map(lambda t: t.kind).tolist() == ["i", "i"]
    assert df["n_windows"].dtype.kind == "f" and df["n_windows"].isna().sum() == 1  # the pooled row has none
    assert df["my_extra"].tolist() == ["007"] * 9  # an unknown column stays the string its writer gave
    new = df[df.config_hash == "0123456789ab"].set_index(["fold", "metric"])["value"]
    assert new.to_dict() == {("0", "balanced_accuracy"): 0.95, ("0", "auroc"): 0.95, ("2", "balanced_accuracy"): 0.7,
                             ("2", "auroc"): 0.75, ("pooled", "balanced_accuracy"): 0.66}
    assert done_cells(store, "old") == {("eegnet", "full", "mean", f, h) for f, h in
                                        (("0", "123456e78901"), ("1", "123456e78901"), ("0", "0123456789ab"),
                                         ("2", "0123456789ab"), ("pooled", "0123456789ab"))}
    assert store.unmerged()  # merged by the old code: no manifest, so merged once more
    store.append([{**_row("3", 0.8), "seed": 0, "intra_op_threads": 4}])  # a new part beside the old ones
    merged = store.merge()
    assert len(merged) == 10 and not store.unmerged()
    assert merged["intra_op_threads"].isna().sum() == 9 and merged["intra_op_threads"].max() == 4
    legacy = ResultStore(tmp_path / "csv", merge=True)
    shutil.copytree(FIXTURES / "old_csv_store", tmp_path / "csv", dirs_exist_ok=True)
    got = legacy.load()
    assert got["config_hash"].tolist() == ["abcdef012345"] * 4 and got["my_extra"].tolist() == ["007"] * 4
    assert got["fold"].tolist() == ["0", "0", "1", "1"] and got["seed"].dtype.kind == "i"
    legacy.append([_row("2", 0.3)])  # the CSV becomes the first part
    assert len(legacy.load()) == 5 and (tmp_path / "csv" / "parts" / "0-legacy.parquet").is_file()


def test_unknown_columns_keep_their_writers_type_and_a_bad_value_is_refused(tmp_path):
    store = ResultStore(tmp_path, merge=False)
    store.append([{**_row("0", 0.1), "extra_text": "1e5", "extra_num": 3}])
    store.append([{**_row("1", 0.2), "extra_text": "007", "extra_num": "three"}])  # two writers disagree
    df = store.load().set_index("fold")
    assert df["extra_text"].to_dict() == {"0": "1e5", "1": "007"}  # never retyped by what the values look like
    assert df["extra_num"].to_dict() == {"0": "3", "1": "three"}  # typed differently by two writers: text
    with pytest.raises(StoreSchemaError, match="'seed'.*fix: write seed as int64"):
        store.append([{**_row("2", 0.3), "seed": "x"}])
    with pytest.raises(StoreSchemaError, match="'n_windows'"):
        store.append([{**_row("2", 0.3), "n_windows": 2.5}])
    assert len(store.parts()) == 2  # nothing written
