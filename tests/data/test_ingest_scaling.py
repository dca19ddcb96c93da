"""Ingestion that scales (issue 35, items 1-2): recordings read in parallel give the serial build's files byte for
byte, and assembling a window set holds one recording's windows, not the corpus.

Real staged EEGMMIDB (motor imagery, subjects 1-3: 9 EDF runs).
"""
from __future__ import annotations

import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from eegfm_bench.config import ConfigError
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.windows import ingest_workers, load_window_sets, load_windows

from eegfm_testutils import requires_data

EEGNET = Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0)
LABRAM = Preprocessing(sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0)
FILES = ("index.npz", "labels.npz", "meta.json", "ingest_report.json", "ingest_report.md")


def _files(ws) -> dict[str, bytes]:
    folder = Path(ws.meta["ingest_report"]).parent
    return {**{f: (folder / f).read_bytes() for f in FILES}, "X": np.asarray(ws.X).tobytes()}


@requires_data
def test_parallel_ingestion_gives_the_serial_files_byte_for_byte(data_root, tmp_path):
    kw = dict(data_root=data_root, subjects=[1, 2], progress=False)
    serial = load_windows("eegmmidb_mi", EEGNET, cache_dir=tmp_path / "serial", n_jobs=1, **kw)
    parallel = load_windows("eegmmidb_mi", EEGNET, cache_dir=tmp_path / "two", n_jobs=2, **kw)
    assert len(serial) == 90 and list(np.unique(serial.subject)) == ["S001", "S002"]  # 45 cues per subject
    a, b = _files(serial), _files(parallel)
    for f in FILES + ("X",):  # windows, labels / subjects / recordings in order, meta and the ingest report
        assert a[f] == b[f], f
    # one read for two preprocessings (the per-recording entries filled in parallel), then assembled
    one = load_window_sets("eegmmidb_mi", [EEGNET, LABRAM], cache_dir=tmp_path / "sets", n_jobs=2, **kw)
    assert _files(one[0]) == a


def test_n_jobs_resolves_to_the_cores_of_the_job_or_is_refused():
    assert ingest_workers(None) == ingest_workers(-1) == len(os.sched_getaffinity(0))
    assert ingest_workers(3) == 3
    with pytest.raises(ConfigError, match="data.n_jobs = 0; fix"):
        ingest_workers(0)


@requires_data
def test_assembly_holds_one_recording_not_the_corpus(data_root, tmp_path):
    """With every recording's entry cached, assembling 9 recordings peaks at about what assembling 3 does: the
    assembly reads the entries' headers and writes the index (an assembly that gathers them in RAM peaks ~3x higher)."""
    cache = tmp_path / "c"
    kw = dict(data_root=data_root, cache_dir=cache, progress=False)
    load_windows("eegmmidb_mi", LABRAM, subjects=[1, 2, 3], **kw)  # fills the 9 per-recording entries
    for entry in cache.glob("eegmmidb_mi-*"):  # the window sets are assembled again from the entries
        shutil.rmtree(entry)

    def peak(subjects) -> tuple[int, int]:
        tracemalloc.start()
        ws = load_windows("eegmmidb_mi", LABRAM, subjects=subjects, **kw)
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top, int(ws.X.nbytes)

    small, small_bytes = peak([1])
    large, large_bytes = peak([1, 2, 3])
    assert large_bytes > 2.8 * small_bytes  # 135 vs 45 windows
    assert large < 1.3 * small, (large, small)
