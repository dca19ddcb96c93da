"""A cold cv reads each recording once for all the preprocessings its models need (issue 26: "the reader, notch and
band-pass at the native rate shared; only resampling per model"), and its windows equal separate builds.

Counts are taken on the real source (EEGMMIDB EDFs of one subject): the number of ``read`` calls on the task's source
class, of notch passes and of band-pass passes, with the real functions run underneath.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from eegfm_bench.data import windows as W
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.qc import IngestReport
from eegfm_bench.data.tasks import get_task
from eegfm_bench.data.windows import load_window_sets, load_windows

from eegfm_testutils import requires_data

EEGNET = Preprocessing(sfreq=128.0, l_freq=1.0, h_freq=40.0, scale=1e6, unit="µV", window_s=4.0)
LABRAM = Preprocessing(sfreq=200.0, l_freq=0.1, h_freq=75.0, scale=1e4, unit="100 µV", window_s=4.0)
SAME_BAND = dataclasses.replace(LABRAM, sfreq=160.0, h_freq=40.0)  # no resampling at EEGMMIDB's 160 Hz
SAME_BAND_200 = dataclasses.replace(LABRAM, sfreq=200.0, h_freq=40.0)


def _count(monkeypatch, task: str) -> dict:
    n = {"read": 0, "notch": 0, "band": 0}
    src_cls = type(get_task(task).source(None))
    real_read, real_notch, real_band = src_cls.read, W.notch_native, W.bandpass_native

    def read(self, rec):
        n["read"] += 1
        return real_read(self, rec)

    def notch(*a, **k):
        n["notch"] += 1
        return real_notch(*a, **k)

    def band(*a, **k):
        n["band"] += 1
        return real_band(*a, **k)

    monkeypatch.setattr(src_cls, "read", read)
    monkeypatch.setattr(W, "notch_native", notch)
    monkeypatch.setattr(W, "bandpass_native", band)
    return n


def _same(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a.X), np.asarray(b.X))
    np.testing.assert_array_equal(a.y, b.y)
    assert list(a.ch_names) == list(b.ch_names) and a.sfreq == b.sfreq
    assert a.meta["cache_key"] == b.meta["cache_key"]


@requires_data
def test_two_models_preprocessings_read_each_recording_once(data_root, tmp_path, monkeypatch):
    separate = [load_windows("eegmmidb_mi", p, data_root=data_root, subjects=[1], cache_dir=tmp_path / "sep",
                             progress=False) for p in (EEGNET, LABRAM)]
    n = _count(monkeypatch, "eegmmidb_mi")
    together = load_window_sets("eegmmidb_mi", [EEGNET, LABRAM, EEGNET], data_root=data_root, subjects=[1],
                                cache_dir=tmp_path / "one", progress=False)
    assert n == {"read": 3, "notch": 3, "band": 6}  # 3 runs of S001 read and notched once each; two bands each
    _same(together[0], separate[0])
    _same(together[1], separate[1])
    assert together[2] is together[0]
    # the per-recording QC (what the ingest report says was applied) equals the separate build's
    for a, b in ((together[0], separate[0]), (together[1], separate[1])):
        ra, rb = (IngestReport.from_dict(json.loads(Path(ws.meta["ingest_report"]).with_suffix(".json").read_text()))
                  for ws in (a, b))
        assert [q.preprocessing for q in ra.recordings] == [q.preprocessing for q in rb.recordings]
        assert [q.to_dict()["actions"] for q in ra.recordings] == [q.to_dict()["actions"] for q in rb.recordings]
    # warm: nothing is read again
    load_window_sets("eegmmidb_mi", [EEGNET, LABRAM], data_root=data_root, subjects=[1], cache_dir=tmp_path / "one",
                     progress=False)
    assert n == {"read": 3, "notch": 3, "band": 6}


@requires_data
def test_preprocessings_with_one_band_share_the_band_pass(data_root, tmp_path, monkeypatch):
    separate = [load_windows("eegmmidb_mi", p, data_root=data_root, subjects=[1], cache_dir=tmp_path / "sep",
                             progress=False) for p in (SAME_BAND, SAME_BAND_200)]
    n = _count(monkeypatch, "eegmmidb_mi")
    together = load_window_sets("eegmmidb_mi", [SAME_BAND, SAME_BAND_200], data_root=data_root, subjects=[1],
                                cache_dir=tmp_path / "one", progress=False)
    assert n == {"read": 3, "notch": 3, "band": 3}  # one notch and one band-pass per recording, two resamplings
    _same(together[0], separate[0])
    _same(together[1], separate[1])
