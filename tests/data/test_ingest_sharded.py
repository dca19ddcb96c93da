"""Sharded ingestion (issue 35, item 2): ``ingest --launcher local`` reads the recordings in one job per disjoint
shard and only assembles in the launching process; the files equal the serial ingest's byte for byte, a shard that
leaves a recording out is an error naming it (never a window set without it), and a rerun builds only what is
missing.

Real staged EEGMMIDB (motor imagery, subjects 1-2: 6 EDF runs). The SLURM array is in
``tests/runs/test_slurm_ingest.py``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import eegfm_bench.runs.launch.ingest as ingest_mod
from eegfm_bench.data.windows import MissingEntryError, load_windows, open_window_set
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.runs.launch.ingest import ShardError, run_ingest, shard_slices

from eegfm_testutils import requires_data

FILES = ("index.npz", "labels.npz", "meta.json", "ingest_report.json", "ingest_report.md")
EEGNET = BACKBONES.get("eegnet").preprocessing


def _files(ws_or_folder) -> dict[str, bytes]:
    folder = ws_or_folder if isinstance(ws_or_folder, Path) else Path(ws_or_folder.meta["ingest_report"]).parent
    return {**{f: (folder / f).read_bytes() for f in FILES}, "X": np.asarray(open_window_set(folder).X).tobytes()}


def _window_set(cache: Path) -> Path:
    (folder,) = [p for p in cache.glob("eegmmidb_mi-*") if (p / "COMPLETE").is_file()]
    return folder


def test_shards_are_disjoint_ordered_slices_covering_every_recording():
    assert shard_slices(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert shard_slices(2, 5) == [[0], [1]]  # never an empty shard
    assert shard_slices(4, 1) == [[0, 1, 2, 3]]


@requires_data
def test_local_two_shards_give_the_serial_files_byte_for_byte(data_root, tmp_path, capsys):
    kw = dict(data_root=data_root, subjects=[1, 2], progress=False)
    serial = load_windows("eegmmidb_mi", EEGNET, cache_dir=tmp_path / "serial", n_jobs=1, **kw)
    run_ingest("eegmmidb_mi", ["eegnet"], cache_dir=tmp_path / "sharded", out_dir=tmp_path / "out", n_jobs=1,
               launcher={"kind": "local", "workers": 2}, shards=2, **kw)
    printed = capsys.readouterr().out
    assert "6 of 6 recordings lack their entry: 2 shard(s) of 3-3 recordings" in printed, printed
    assert len(list((tmp_path / "out" / "jobs").glob("*_result.pkl"))) == 2  # two jobs ran
    a, b = _files(serial), _files(_window_set(tmp_path / "sharded"))
    for f in FILES + ("X",):  # windows, labels / subjects / recordings in order, meta and the ingest report
        assert a[f] == b[f], f
    assert len(serial) == 90


@requires_data
def test_more_shards_than_local_workers_run_on_the_workers_given(data_root, tmp_path, capsys):
    """``--shards 3 --workers 2``: three shards, two worker processes (each takes every second shard), not three;
    the files equal the serial ingest's."""
    kw = dict(data_root=data_root, subjects=[1, 2], progress=False)
    serial = load_windows("eegmmidb_mi", EEGNET, cache_dir=tmp_path / "serial", n_jobs=1, **kw)
    run_ingest("eegmmidb_mi", ["eegnet"], cache_dir=tmp_path / "sharded", out_dir=tmp_path / "out", n_jobs=1,
               launcher={"kind": "local", "workers": 2}, shards=3, **kw)
    printed = capsys.readouterr().out
    assert "3 shard(s) of 2-2 recordings, 1 read at once per job (launcher local, 2 worker(s))" in printed, printed
    assert len(list((tmp_path / "out" / "jobs").glob("*_result.pkl"))) == 2  # two workers, not one per shard
    a, b = _files(serial), _files(_window_set(tmp_path / "sharded"))
    for f in FILES + ("X",):
        assert a[f] == b[f], f


@requires_data
def test_a_shard_that_skips_a_recording_is_named_and_a_rerun_builds_only_it(data_root, tmp_path, monkeypatch):
    """The jobs run in this process (run_jobs replaced); shard 1 leaves its last recording out: the ingest stops with
    the recording named and no window set; the rerun reads that recording alone and gives the serial files."""
    cache = tmp_path / "c"
    kw = dict(data_root=data_root, subjects=[1], cache_dir=cache, progress=False, n_jobs=1)
    calls = []

    def in_process(lc, cfg, units, out, *, skip_last_of=None, **_):
        calls.append([[cfg.recs[i].recording for i in s] for s in cfg.shards])
        shards = [s[:-1] if i == skip_last_of else s for i, s in enumerate(cfg.shards)]
        cfg = type(cfg)(**{**cfg.__dict__, "shards": shards})
        return [f for u in units for f in ingest_mod.ingest_shard(cfg, worker_units=[u])["failures"]]

    monkeypatch.setattr(ingest_mod, "run_jobs", lambda *a, **k: in_process(*a, skip_last_of=1, **k))
    with pytest.raises(ShardError, match=r"shard 1 ended without building the entries of (\S+)") as err:
        run_ingest("eegmmidb_mi", ["eegnet"], launcher={"kind": "local", "workers": 2}, shards=2, **kw)
    skipped = calls[0][1][-1]
    assert skipped in str(err.value) and "rerun the same command" in str(err.value)
    assert not list(cache.glob("eegmmidb_mi-*/COMPLETE"))  # no window set without the recording
    assert len(list((cache / "recordings").glob("*/COMPLETE"))) == 2
    monkeypatch.setattr(ingest_mod, "run_jobs", in_process)
    run_ingest("eegmmidb_mi", ["eegnet"], launcher={"kind": "local", "workers": 2}, shards=2, **kw)
    assert calls[1] == [[skipped]]  # the rerun: one shard, the missing recording alone
    serial = load_windows("eegmmidb_mi", EEGNET, data_root=data_root, subjects=[1], cache_dir=tmp_path / "serial",
                          progress=False, n_jobs=1)
    assert _files(_window_set(cache)) == _files(serial)


@requires_data
def test_assembly_only_refuses_a_missing_entry_by_name(data_root, tmp_path):
    kw = dict(data_root=data_root, subjects=[1], cache_dir=tmp_path / "c", progress=False)
    ws = load_windows("eegmmidb_mi", EEGNET, **kw)
    rec = str(ws.recording[-1])
    shutil.rmtree(Path(ws.meta["ingest_report"]).parent)  # the window set is assembled again ...
    entries = sorted((tmp_path / "c" / "recordings").glob("eegmmidb_mi-*"),
                     key=lambda p: (p / "qc.json").read_text().find(rec) < 0)
    shutil.rmtree(entries[0])  # ... and one recording's entry is gone
    with pytest.raises(MissingEntryError, match=rf"{rec}: its per-recording entry .* is missing at assembly"):
        load_windows("eegmmidb_mi", EEGNET, build_missing=False, **kw)
