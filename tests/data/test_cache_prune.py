"""``eegfm-bench cache``: the cache root's entries are listed, and a prune removes those not read for N days and
unfinished builds of killed runs, keeping an old entry that was read recently (its LAST_USED file) and the recording
entries that a kept window set reads its windows from (the corpus is on disk once: the window set has no copy)."""
from __future__ import annotations

import os
import time

import numpy as np

from eegfm_testutils import requires_data


@requires_data
def test_prune_removes_unread_entries_and_leftover_builds_but_keeps_recently_read_ones(tmp_path, data_root, capsys):
    from eegfm_bench.cli import main
    from eegfm_bench.data.cache import cache_entries, prune_plan
    from eegfm_bench.data.preprocessing import Preprocessing
    from eegfm_bench.data.windows import load_windows

    root = tmp_path / "cache"
    kw = dict(data_root=data_root, cache_dir=root, subjects=[0, 1], progress=False)
    load_windows("eegmat", Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, window_s=4.0), **kw)
    load_windows("eegmat", Preprocessing(sfreq=100.0, l_freq=1.0, h_freq=40.0, window_s=4.0), **kw)
    (root / "eegmat-dead.tmpab12").mkdir()  # a build killed mid-way
    (root / "eegmat-dead.tmpab12" / "X.npy").write_bytes(b"\0" * 1000)
    entries = {e.path.name: e for e in cache_entries(root)}
    assert sorted(e.kind for e in entries.values() if e.kind != "recording") == ["partial", "windows", "windows"]
    assert sum(e.kind == "recording" for e in entries.values()) == 8  # 4 recordings x 2 preprocessings
    old = time.time() - 90 * 86400
    for e in entries.values():  # everything built 90 days ago
        for f in [e.path, *e.path.iterdir()]:
            os.utime(f, (old, old))
    first = sorted(n for n, e in entries.items() if e.kind == "windows")[0]
    kept_name = [n for n, e in entries.items() if e.kind == "windows" and n != first][0]
    # the 128 Hz entry is read again now: LAST_USED is touched, so it survives the prune
    prep128 = Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, window_s=4.0)
    ws = load_windows("eegmat", prep128, **kw)
    read_now = ws.meta["ingest_report"].split(os.sep)[-2]
    doomed = {e.path.name for e in prune_plan(cache_entries(root), older_than_days=30)}
    reads = {str(n) for n in ws.X.entries}  # the 128 Hz window set's 4 recording entries, built 90 days ago
    assert len(reads) == 4 and all(entries[n].kind == "recording" for n in reads)
    assert doomed == {n for n in entries if n != read_now and n not in reads} and "eegmat-dead.tmpab12" in doomed
    assert main(["cache", "--cache-dir", str(root), "--prune", "--older-than", "30"]) == 0  # dry run
    assert "dry run: pass --yes" in capsys.readouterr().out and (root / first).exists() and (root / kept_name).exists()
    assert main(["cache", "--cache-dir", str(root), "--prune", "--older-than", "30", "--yes"]) == 0
    assert f"deleted {len(doomed)} entries" in capsys.readouterr().out
    assert [p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("eegmat")] == [read_now]
    assert main(["cache", "--cache-dir", str(root)]) == 0
    assert "5 entries" in capsys.readouterr().out  # the window set and the 4 recordings it reads
    assert {p.name for p in (root / "recordings").iterdir() if not p.name.startswith(".")} == reads
    again = load_windows("eegmat", prep128, **kw)  # the surviving entry still serves, its windows unchanged
    np.testing.assert_array_equal(np.asarray(again.X), np.asarray(ws.X))
