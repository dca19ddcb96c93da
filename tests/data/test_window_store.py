"""The corpus on disk once (issue 35, item 1): a window set keeps an index into the per-recording entries, and its
``X`` reads the windows from them — bit for bit the windows the assembly used to copy into an ``X.npy`` of its own,
with the cache's window bytes about the windows' bytes, entries shared by subject subsets, and a damaged entry found.

Real staged EEG: EEGMAT and EEGMMIDB copies pooled under ``channels.montage: intersect`` with ``windows.balance``
(columns, rows and the average reference all chosen at assembly), and EEGMMIDB motor imagery.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import eegfm_bench.data.windows as W
from eegfm_bench.data.preprocessing import Preprocessing, reference_windows
from eegfm_bench.data.windows import DamagedEntryError, EntryWindows, MissingEntryError, load_windows

from eegfm_testutils import requires_data

PREP = Preprocessing(sfreq=128.0, l_freq=0.5, h_freq=45.0, scale=1e6, unit="µV", window_s=4.0)
EEGMMIDB = "eegmmidb/MNE-eegbci-data/files/eegmmidb/1.0.0"
# sha256 of the assembled X.npy's windows that the previous layout wrote (commit 5519624, same inputs)
POOL_SHA = "2f9170fafce104e4e21fa72ee6558bda225a92fa6fef4510540120b440e6f798"
MI_SHA = "a62d3de7c2ba15567ae2898d2ca7f9b2ea4f5c86547bc5ec29edb078befff2a1"


def _sha(X) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(X)).tobytes()).hexdigest()


def _pool(data_root: Path, tmp: Path) -> dict:
    root = tmp / "pool"
    root.mkdir()
    for s in (0, 1):
        shutil.copy(data_root / "eegmat" / f"Subject{s:02d}_1.edf", root / f"mat_S{s:02d}.edf")
    for s in (1, 2):
        shutil.copy(data_root / EEGMMIDB / f"S{s:03d}" / f"S{s:03d}R04.edf", root / f"mmi_S{s:02d}x.edf")
    return {"name": "pool", "source": "files", "root": str(root), "classes": ["mat", "mmi"],
            "files": {"glob": "*.edf", "pattern": r"^(?P<label>mat|mmi)_(?P<subject>S\d+x?)\.edf$"},
            "windows": {"mode": "fixed", "balance": {"max_windows": 7, "per": "subject", "seed": 3}},
            "channels": {"montage": "intersect"}}


def _from_entries(ws) -> np.ndarray:
    """The windows as the previous assembly wrote them: each entry's X.npy read whole, its kept rows and channels
    taken, the average reference applied over the recording's windows at once."""
    X = ws.X
    out = []
    for p, name in enumerate(X.entries):
        full = np.load(X.root / name / "X.npy")
        rows = X.rows[X.start[p]:X.start[p + 1]]
        out.append(reference_windows(np.ascontiguousarray(full[rows][:, X.cols[p]], dtype=np.float32), "average"))
    return np.concatenate(out)


@requires_data
def test_windows_read_through_the_index_equal_the_assembled_ones_bit_for_bit(data_root, tmp_path):
    ws = load_windows(_pool(data_root, tmp_path), PREP, cache_dir=tmp_path / "c", progress=False)
    folder = Path(ws.meta["ingest_report"]).parent
    assert isinstance(ws.X, EntryWindows) and not (folder / "X.npy").exists()
    assert ws.X.shape == (28, 19, 512) and np.bincount(ws.y).tolist() == [14, 14]
    assert ws.X.entry_shape[:, 0].sum() > 28 and (ws.X.entry_shape[:, 1] == 64).sum() == 2  # rows and channels chosen
    full = np.asarray(ws.X)
    assert _sha(full) == POOL_SHA  # what the assembled X.npy held
    np.testing.assert_array_equal(full, _from_entries(ws))
    # every way a consumer indexes reads the same bits as the whole array
    for i in range(len(ws)):  # the datamodule: one window at a time
        assert ws.X[i].tobytes() == full[i].tobytes()
    idx = np.array([27, 3, 3, 14, 0, -1])
    np.testing.assert_array_equal(ws.X[idx], full[idx])  # unsorted, repeated, negative (perturbations)
    np.testing.assert_array_equal(ws.X[5:23:4], full[5:23:4])  # slices (controls)
    np.testing.assert_array_equal(ws.X[ws.y == 1], full[ws.y == 1])
    np.testing.assert_array_equal(ws.X[:, [4, 0, 2]], full[:, [4, 0, 2]])  # select_channels
    np.testing.assert_array_equal(ws.X[[1, 2], 3, 100:110], full[[1, 2], 3, 100:110])
    np.testing.assert_array_equal(ws.subset(np.array([2, 9])).X, full[[2, 9]])
    with pytest.raises(IndexError):
        ws.X[28]
    copy = pickle.loads(pickle.dumps(ws.X))  # a DataLoader worker's copy: the index, no window
    assert len(pickle.dumps(ws.X)) < 20_000 and copy[7].tobytes() == full[7].tobytes()
    mi = load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[1], cache_dir=tmp_path / "c",
                      progress=False)
    assert _sha(mi.X) == MI_SHA and mi.X.shape == (45, 64, 512)


@requires_data
def test_the_cache_holds_the_windows_once_and_subject_subsets_share_their_entries(data_root, tmp_path, monkeypatch):
    cache = tmp_path / "c"
    kw = dict(data_root=data_root, cache_dir=cache, progress=False)
    reads: list[str] = []
    real = W._read_recording
    monkeypatch.setattr(W, "_read_recording", lambda task, src, rec, *a: (reads.append(rec.recording),
                                                                          real(task, src, rec, *a))[1])
    one = load_windows("eegmmidb_mi", PREP, subjects=[1], **kw)
    two = load_windows("eegmmidb_mi", PREP, subjects=[1, 2], **kw)
    assert len(reads) == 6 and len(set(reads)) == 6  # subject 2's three runs read for the second set, not subject 1's
    assert set(one.X.entries) < set(two.X.entries) and len(two.X.entries) == 6
    np.testing.assert_array_equal(np.asarray(two.X)[two.subject == "S001"], np.asarray(one.X))
    x_bytes = sum(f.stat().st_size for f in cache.rglob("X.npy"))
    all_bytes = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert two.X.nbytes == 90 * 64 * 512 * 4
    assert two.X.nbytes <= x_bytes <= 1.1 * two.X.nbytes, (x_bytes, two.X.nbytes)  # the larger set's windows, once
    assert all_bytes <= 1.1 * two.X.nbytes, (all_bytes, two.X.nbytes)  # labels, indexes, reports: small
    assert not list(cache.glob("eegmmidb_mi-*/X.npy"))


@requires_data
def test_a_damaged_entry_is_named_and_built_again(data_root, tmp_path, monkeypatch, capsys):
    kw = dict(data_root=data_root, subjects=[1], cache_dir=tmp_path / "c", progress=False)
    ws = load_windows("eegmmidb_mi", PREP, **kw)
    before = np.asarray(ws.X)
    entry = ws.X.root / ws.X.entries[1]
    rec = json.loads((entry / "qc.json").read_text())["qc"]["recording"]
    data = (entry / "X.npy").read_bytes()
    (entry / "X.npy").write_bytes(data[:len(data) // 2])  # truncated (a full disk, a killed copy)
    fresh = W.open_window_set(Path(ws.meta["ingest_report"]).parent)  # memmaps not opened yet
    fresh.X[0]  # the first entry is whole
    with pytest.raises(DamagedEntryError, match=rf"{entry.name}/X.npy cannot be read .*fix: load the windows again"):
        fresh.X[20]
    with pytest.raises(MissingEntryError, match=rf"{rec}: its per-recording entry .* is missing at assembly"):
        load_windows("eegmmidb_mi", PREP, build_missing=False, **kw)  # an assembly only: named, never left out
    assert not entry.exists()
    reads: list[str] = []
    real = W._read_recording
    monkeypatch.setattr(W, "_read_recording", lambda task, src, r, *a: (reads.append(r.recording),
                                                                        real(task, src, r, *a))[1])
    np.testing.assert_array_equal(np.asarray(load_windows("eegmmidb_mi", PREP, **kw).X), before)
    assert reads == [rec]  # the damaged recording alone is read again
    with open(entry / "X.npy", "ab") as f:  # grown: another size than the index recorded
        f.write(b"\0" * 64)
    reads.clear()
    capsys.readouterr()
    again = load_windows("eegmmidb_mi", PREP, **kw)
    out = capsys.readouterr()
    assert reads == [rec] and f"reads {entry}, which is damaged (its X.npy holds" in out.out + out.err
    assert again.X.entries == ws.X.entries
    np.testing.assert_array_equal(np.asarray(again.X), before)
