"""One builder per cache entry (issue 26: "concurrent jobs that need the same frozen tokens or windows build them
once"): a process that needs an entry another process is building waits on the entry's lock and then opens what
the holder published, without reading a recording or running a forward pass of its own.

Each test holds the lock of an entry itself, starts a builder in a thread, checks that the builder waits (no
temporary folder, nothing read), publishes a finished copy of the entry and releases the lock: the builder must then
open that copy. Without the lock the thread builds its own entry and the test fails. The real-cluster version (two
SLURM jobs at once, one extraction) is in ``tests/runs/test_slurm_commands.py``.
"""
from __future__ import annotations

import shutil
import threading

import numpy as np
import torch
from torch import nn

from eegfm_bench import locks
from eegfm_bench.data.cache import BuildLock, cache_entries
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.windows import WindowSet, load_windows
from eegfm_bench.models.features import extract_features

from eegfm_testutils import requires_data

PREP = Preprocessing(sfreq=160.0, l_freq=1.0, h_freq=40.0, window_s=4.0)


def _waiting_event(monkeypatch) -> threading.Event:
    """Set when a builder prints its waiting line, just before it blocks on the lock (an event, not a deadline)."""
    waiting = threading.Event()
    real = locks.tqdm.write

    def write(s, *a, **k):
        real(s, *a, **k)
        if s.startswith("waiting for another process"):
            waiting.set()

    monkeypatch.setattr(locks.tqdm, "write", write)
    return waiting


def _in_thread(fn):
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the test
            box["error"] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


@requires_data
def test_a_second_window_builder_waits_and_opens_the_published_set(data_root, tmp_path, capfd, monkeypatch):
    first = load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[1], cache_dir=tmp_path / "a",
                         progress=False)
    name = f"eegmmidb_mi-{first.meta['cache_key']}"
    lock = BuildLock(tmp_path / "b" / name).acquire()
    waiting = _waiting_event(monkeypatch)
    t, box = _in_thread(lambda: load_windows("eegmmidb_mi", PREP, data_root=data_root, subjects=[1],
                                             cache_dir=tmp_path / "b", progress=False))
    waiting.wait()
    assert t.is_alive(), box  # waiting on the lock
    assert not list((tmp_path / "b").glob(f"{name}.tmp*")) and not (tmp_path / "b" / "recordings").exists()
    # what the holder publishes: the recordings' entries, then the window set (its index into them)
    shutil.copytree(tmp_path / "a" / "recordings", tmp_path / "b" / "recordings")
    shutil.copytree(tmp_path / "a" / name, tmp_path / "b" / name)
    inodes = {f: f.stat().st_ino for f in (tmp_path / "b" / "recordings").rglob("X.npy")}
    lock.release()
    t.join()  # no deadline: a hang is pytest-timeout's
    assert "error" not in box, box.get("error")
    ws = box["value"]
    np.testing.assert_array_equal(np.asarray(ws.X), np.asarray(first.X))
    assert {f: f.stat().st_ino for f in (tmp_path / "b" / "recordings").rglob("X.npy")} == inodes  # none rebuilt
    assert ws.X.root == tmp_path / "b" / "recordings"  # read from the published entries
    assert f"waiting for another process that is building the window set {name}" in capfd.readouterr().out
    kinds = sorted(e.kind for e in cache_entries(tmp_path / "b"))
    assert kinds == ["recording"] * 3 + ["windows"]  # the lock files are not entries


class ToyAdapter(nn.Module):
    """Adapter-shaped toy with one block: tokens are channel 0 cut into 4 tokens of 10 samples."""

    name = "toy"
    arch_kwargs: dict = {}

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self._blocks = nn.ModuleList([nn.Identity()])

    @property
    def blocks(self):
        return list(self._blocks)

    def block_to_tokens(self, out):
        return out

    def tokens(self, x, ch_names=None):
        return self._blocks[0](self.scale * x[:, 0].reshape(len(x), 4, 10))


def _toy_windows(n: int = 120) -> WindowSet:
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], n // 2)
    X = rng.standard_normal((n, 4, 40)).astype(np.float32)
    return WindowSet(X, y.astype(np.int64), np.array([f"S{i % 10:02d}" for i in range(n)]),
                     np.array([f"r{i}" for i in range(n)]), np.zeros(n, dtype=np.int64), np.full(n, "toy"),
                     ["C3", "Cz", "C4", "Pz"], 100.0, ["a", "b"], {"cache_key": "toylock"})


def test_a_second_feature_extraction_waits_and_runs_no_forward_pass(tmp_path, capfd, monkeypatch):
    ws = _toy_windows()
    first = extract_features(ToyAdapter(), ws, parts=("blocks",), cache_dir=tmp_path / "a",
                             trainer={"accelerator": "cpu"})
    assert "features: toy blocks of 120 windows extracted" in capfd.readouterr().out
    target = tmp_path / "b" / "features" / first.folder.name
    lock = BuildLock(target).acquire()
    waiting = _waiting_event(monkeypatch)
    ad = ToyAdapter()
    ad.tokens = lambda *a, **k: (_ for _ in ()).throw(AssertionError("a forward pass while another job builds"))
    t, box = _in_thread(lambda: extract_features(ad, ws, parts=("blocks",), cache_dir=tmp_path / "b",
                                                 trainer={"accelerator": "cpu"}))
    waiting.wait()
    assert t.is_alive(), box
    assert not list(target.parent.glob("*.partial-*"))
    shutil.copytree(first.folder, target)
    lock.release()
    t.join()  # no deadline: a hang is pytest-timeout's
    assert "error" not in box, box.get("error")
    got = box["value"]
    assert got.from_cache and got.folder == target
    np.testing.assert_array_equal(got.tokens(0), first.tokens(0))
    out = capfd.readouterr().out
    assert "waiting for another process that is building the toy features" in out and "extracted" not in out
