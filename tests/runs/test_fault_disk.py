"""Issue 34 items 1-2: atomic, verified writes; a full disk and a damaged checkpoint as one line.

* Unit level (:mod:`eegfm_bench.atomic`): a write that fails after half its bytes (``ENOSPC`` injected at the write
  call) leaves the previous file as it was and no temporary; the error names the folder and the bytes needed; a
  checkpoint's sidecar catches a truncated or altered file; a checkpoint without one is checked by loading it.
* A real ``eegfm-bench cv`` (tiny EEGNet, staged EEGMMIDB) whose disk fills while fold 1's first checkpoint is
  written: one line, exit 2, fold 0's rows kept, no temporary, no truncated checkpoint, no 0-byte JSON; the rerun
  (space freed) finishes with the rows of an uninterrupted run.
* A truncated ``last.ckpt`` (what a full disk left before this fix): the rerun says so in one line, moves it aside
  and trains that cell from the start: the rows of an uninterrupted run.
* Half a ``best.ckpt`` given to ``eegfm-bench attribute``: one line naming the file and the cv command that writes it
  again, exit 2, no traceback.
* More faults: ``results.csv`` cut in half by another tool (the rerun rewrites it from the parts); ``splits.json``
  cut in half (one line naming the file and the fix, never a JSON traceback).
"""
from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from eegfm_bench import atomic
from eegfm_bench.atomic import (DamagedCheckpointError, DiskFullError, atomic_write_text, disk_full_error,
                                sidecar_of, verify_checkpoint, write_checkpoint_bytes)
from eegfm_bench.data.splits import SplitMismatchError, SplitSpec, make_split, save_or_verify

from eegfm_testutils import cli_env, requires_data

REPO = Path(__file__).resolve().parents[2]
TINY = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())

# A full disk at the write call: the first write of a checkpoint of fold 1 gets half its bytes onto the disk, then
# ENOSPC; every later write of the process fails too (the disk stays full).
INJECT = """
import errno, os, sys
import eegfm_bench.atomic as atomic
real, full = atomic.write_all, []
def write_all(fd, data):
    target = os.readlink(f"/proc/self/fd/{fd}")
    if not full and os.sep + "fold1" + os.sep in target and ".ckpt." in os.path.basename(target):
        full.append(target)
        real(fd, memoryview(data)[: len(data) // 2])
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real(fd, data)
atomic.write_all = write_all
from eegfm_bench.cli import main
sys.argv = ["eegfm-bench", *sys.argv[1:]]
sys.exit(main())
"""


def _cli(*args: str, inject: bool = False) -> subprocess.CompletedProcess:
    head = ["-c", INJECT] if inject else ["-m", "eegfm_bench.cli"]
    return subprocess.run([sys.executable, *head, *args, "--no-progress"], env=cli_env(), cwd=REPO,
                          capture_output=True, text=True)


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**TINY, "out_dir": str(tmp_path / name)}))
    return path


def _rows(out: Path) -> pd.DataFrame:
    """The rows that must not depend on a fault (timing and the out_dir's paths left out)."""
    df = pd.read_csv(out / "results.csv")
    df = df[df["metric"] != "fit_seconds"]
    cols = ["model", "regime", "head", "fold", "seed", "condition", "metric", "value", "n_windows", "config_hash"]
    return df[cols].sort_values(cols[:7]).reset_index(drop=True)


def _no_debris(out: Path) -> None:
    """No temporary file, no 0-byte JSON, and every checkpoint whole (its sidecar agrees)."""
    assert not [p for p in out.rglob("*.tmp")], sorted(out.rglob("*.tmp"))
    assert not [p for p in out.rglob("*.json") if p.stat().st_size == 0]
    for ck in out.rglob("*.ckpt"):
        assert sidecar_of(ck).is_file(), ck
        verify_checkpoint(ck, fix="-")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted tiny cv (2 folds), run once for the module."""
    tmp = tmp_path_factory.mktemp("reference")
    r = _cli("cv", "--config", str(_config(tmp, "ref")))
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / "ref"


# ------------------------------------------------------------------------------------------------- unit level
def _fail_after(monkeypatch, n_bytes: int, err: int = errno.ENOSPC) -> None:
    """``write_all`` writes ``n_bytes`` of each write, then raises ``OSError(err)`` (a disk that fills)."""
    real = atomic.write_all

    def write_all(fd, data):
        real(fd, memoryview(data)[:n_bytes])
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(atomic, "write_all", write_all)


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on device (ENOSPC)"),
                                         (errno.EDQUOT, "disk quota exceeded (EDQUOT)")])
def test_a_write_that_fills_the_disk_keeps_the_previous_file_and_says_where(tmp_path, monkeypatch, code, words):
    target = tmp_path / "failures.json"
    atomic_write_text(target, "[1, 2]\n")
    _fail_after(monkeypatch, 3, code)
    with pytest.raises(DiskFullError) as info:
        atomic_write_text(target, json.dumps(list(range(1000))))
    assert target.read_text() == "[1, 2]\n"  # the previous file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["failures.json"]  # the half-written temporary is gone
    msg = str(info.value)
    assert msg.startswith(f"{words} writing in {tmp_path}; the write needed 4.9 kB, ")
    assert " free there; fix: free space on that filesystem" in msg and "EEGFM_CACHE" in msg
    assert "\n" not in msg and info.value.folder == tmp_path and info.value.needed == 4890


def test_disk_full_is_found_through_wrapping_errors(tmp_path):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x" / "last.ckpt"))
        except OSError as inner:
            raise RuntimeError("the checkpoint could not be saved") from inner
    except RuntimeError as outer:
        full = disk_full_error(outer)
    assert isinstance(full, DiskFullError) and full.folder == tmp_path / "x"
    assert disk_full_error(RuntimeError("something else")) is None
    assert disk_full_error(OSError(errno.EACCES, "Permission denied")) is None


def test_a_checkpoint_sidecar_catches_truncation_and_alteration(tmp_path):
    buf = io.BytesIO()
    torch.save({"state_dict": {"w": torch.arange(1000.0)}}, buf)
    data = buf.getvalue()
    path = write_checkpoint_bytes(tmp_path / "best.ckpt", data)
    meta = json.loads(sidecar_of(path).read_text())
    assert meta["size"] == len(data) == path.stat().st_size and meta["file"] == "best.ckpt"
    verify_checkpoint(path, fix="-")  # whole
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedCheckpointError, match=rf"checkpoint {path} is damaged: {len(data) // 2} bytes, its "
                                                     rf"sidecar best.ckpt.json says {len(data)}; fix: rerun it"):
        verify_checkpoint(path, fix="rerun it")
    altered = bytearray(data)
    altered[len(data) // 2] ^= 0xFF  # same size, one byte changed
    path.write_bytes(bytes(altered))
    with pytest.raises(DamagedCheckpointError, match="is damaged: SHA-256 .*, its sidecar says"):
        verify_checkpoint(path, fix="-")
    # a checkpoint without a sidecar (an older run): whole loads, half does not
    sidecar_of(path).unlink()
    path.write_bytes(data)
    verify_checkpoint(path, fix="-")
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedCheckpointError, match="is damaged: torch.load cannot read it"):
        verify_checkpoint(path, fix="-")


def test_a_failed_checkpoint_save_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    old = write_checkpoint_bytes(tmp_path / "last.ckpt", b"old checkpoint bytes")
    _fail_after(monkeypatch, 5)
    with pytest.raises(DiskFullError, match="the write needed 1.0 MB"):
        write_checkpoint_bytes(old, b"x" * 1_000_000)
    assert old.read_bytes() == b"old checkpoint bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temporary; the old sidecar went first


# --------------------------------------------------------------------------------------- a real cv, end to end
@requires_data
def test_the_disk_fills_while_fold_1_saves_a_checkpoint(tmp_path, reference):
    cfg = _config(tmp_path, "full")
    out = tmp_path / "full"
    r = _cli("cv", "--config", str(cfg), inject=True)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    first = r.stderr.strip().splitlines()[0]
    fold1 = next(out.glob("checkpoints/*/fold1"))
    assert first.startswith(f"eegfm-bench cv: DiskFullError: no space left on device (ENOSPC) writing in {fold1}; "
                            "the write needed "), r.stderr
    assert "fix: free space on that filesystem" in first and "then rerun the same command" in first
    assert "failed:" not in r.stdout  # not recorded as the cell's failure and carried on
    assert not (out / "failures.json").exists()
    assert sorted(_rows(out)["fold"].unique()) == [0]  # the finished cell's rows are kept
    _no_debris(out)
    assert not list(fold1.glob("*.ckpt"))  # the half checkpoint never took the name

    r2 = _cli("cv", "--config", str(cfg))  # space freed
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "1 of 2 cells already have rows" in r2.stdout
    pd.testing.assert_frame_equal(_rows(out), _rows(reference))
    _no_debris(out)


@requires_data
def test_a_truncated_last_ckpt_is_moved_aside_and_its_cell_trains_from_the_start(tmp_path, reference):
    """The state a full disk left before this fix: a truncated ``last.ckpt`` without a sidecar beside the cell."""
    cfg = _config(tmp_path, "trunc")
    out = tmp_path / "trunc"
    src = next(reference.glob("checkpoints/*/fold0/best.ckpt"))
    folder = out / src.parent.relative_to(reference)
    folder.mkdir(parents=True)
    (folder / "last.ckpt").write_bytes(src.read_bytes()[:20480])
    r = _cli("cv", "--config", str(cfg))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if "last.ckpt" in x]
    assert len(lines) == 1, r.stdout
    aside = next(folder.glob("last.ckpt.damaged-*"))
    assert lines[0].startswith(f"cell eegnet/full/flatten fold 0: checkpoint {folder / 'last.ckpt'} is damaged: "
                               "torch.load cannot read it (20480 bytes, ")
    assert lines[0].endswith(f"; moved it to {aside}; training this cell from the start")
    assert aside.stat().st_size == 20480 and "resuming from" not in r.stdout
    pd.testing.assert_frame_equal(_rows(out), _rows(reference))


@requires_data
def test_half_a_best_ckpt_given_to_attribute_is_one_line_naming_the_file_and_the_fix(tmp_path, reference):
    ck = next(reference.glob("checkpoints/*/fold1/best.ckpt"))
    whole = ck.read_bytes()
    icfg = tmp_path / "interp.yaml"
    icfg.write_text(yaml.safe_dump({"cv_dir": str(reference), "out_dir": str(tmp_path / "interp"),
                                    "attribution": {"methods": ["gxi"], "max_windows_per_fold": 2,
                                                    "conservation_windows": 1, "randomisation_windows": 1,
                                                    "batch_size": 2}}))
    try:
        ck.write_bytes(whole[: len(whole) // 2])
        r = _cli("attribute", "--config", str(icfg))
    finally:
        ck.write_bytes(whole)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"eegfm-bench attribute: DamagedCheckpointError: checkpoint {ck} is damaged: "
                               f"{len(whole) // 2} bytes, its sidecar best.ckpt.json says {len(whole)}; fix: "
                               f"retrain the cv's cells: eegfm-bench cv --config {reference / 'config.yaml'} --force")
    assert lines[1:] == ["(EEGFM_TRACEBACK=1 shows the traceback)"]


@requires_data
def test_a_results_csv_cut_in_half_is_rewritten_whole_by_the_rerun(tmp_path, reference):
    """Another tool (or a copy) cut ``results.csv``; the rows live in ``parts/``: the rerun trains nothing and writes
    the whole table again."""
    out = tmp_path / "cut"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns(".eegfm-bench.lock"))
    csv = out / "results.csv"
    csv.write_bytes(csv.read_bytes()[: csv.stat().st_size // 2])
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    (tmp_path / "cut.yaml").write_text(yaml.safe_dump({**cfg, "out_dir": str(out)}))
    r = _cli("cv", "--config", str(tmp_path / "cut.yaml"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 of 2 cells already have rows" in r.stdout
    pd.testing.assert_frame_equal(_rows(out), _rows(reference))


def test_a_cut_splits_json_is_one_line_naming_the_file_and_the_fix(tmp_path):
    rng = np.random.default_rng(0)
    split = make_split(rng.integers(0, 2, 60), np.repeat([f"S{i}" for i in range(6)], 10), SplitSpec(k=3), "t")
    path = tmp_path / "splits.json"
    save_or_verify(split, path)
    whole = path.read_bytes()
    path.write_bytes(whole[:100])
    with pytest.raises(SplitMismatchError) as info:
        save_or_verify(split, path)
    msg = str(info.value)
    assert msg.startswith(f"split file {path} is damaged (100 bytes, not JSON: ") and "\n" not in msg
    assert msg.endswith(f"fix: move it aside (mv {path} {path}.damaged) and rerun: the folds are recomputed from the "
                        "data and config and written again")
    path.rename(tmp_path / "splits.json.damaged")
    save_or_verify(split, path)  # what the fix says: written again, whole
    assert path.read_bytes() == whole
