"""Issue 34 items 4-5: one writer per out_dir, unique temporary names, and Ctrl-C as an instruction.

* Two ``eegfm-bench cv`` processes started together on one out_dir: one prints the waiting line naming the other's
  pid and trains nothing once it runs; under ``--no-wait`` the second refuses with one line and writes nothing.
* ``splits.json`` written by two writers at once (each has written its temporary file before either renames it):
  both succeed, whatever the order (a fixed temporary name makes the second rename fail).
* A SIGINT sent mid-fit to a real ``eegfm-bench cv`` (when the second cell's first ``last.ckpt`` shows its training
  started): one line, exit 130, the first cell's rows kept; the rerun resumes and its rows equal an uninterrupted
  run's.
* A stop whose ``KeyboardInterrupt`` a library swallowed (``Exception ignored in ...``) is taken at the next cell
  boundary: the loop does not carry on.

Every wait is on an event (a line printed, a file present, a barrier), never on a wall-clock deadline.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import eegfm_bench.runs.cv.loop as cv_loop
from eegfm_bench import interrupt
from eegfm_bench.data.splits import SplitSpec, make_split, save_or_verify
from eegfm_bench.atomic import unique_tmp
from eegfm_bench.locks import OUT_DIR_LOCK, OutDirBusyError, out_dir_lock
from eegfm_bench.runs.cv.confound import run_confound
from eegfm_bench.runs.cv.command import run_cv

from eegfm_testutils import cli_env, requires_data

REPO = Path(__file__).resolve().parents[2]
TINY = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())


def _config(tmp_path: Path, name: str, **over) -> Path:
    cfg = {**TINY, "out_dir": str(tmp_path / name), **over}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class _Cli:
    """An ``eegfm-bench`` subprocess whose stdout / stderr go to files (no pipe to fill while the test waits)."""

    def __init__(self, folder: Path, name: str, *args: str):
        self.out_path, self.err_path = folder / f"{name}.stdout", folder / f"{name}.stderr"
        with open(self.out_path, "w") as o, open(self.err_path, "w") as e:
            self.proc = subprocess.Popen([sys.executable, "-m", "eegfm_bench.cli", *args, "--no-progress"],
                                         env=cli_env(), cwd=REPO, stdout=o, stderr=e)
        self.pid = self.proc.pid

    def wait(self) -> tuple[int, str, str]:
        rc = self.proc.wait()
        return rc, self.out_path.read_text(), self.err_path.read_text()

    def wait_for_line(self, text: str) -> str:
        """Block until a line of stderr holds ``text`` (the process must still run); returns that line."""
        while True:
            for line in self.err_path.read_text().splitlines():
                if text in line:
                    return line
            assert self.proc.poll() is None, self.wait()
            time.sleep(0.05)


def _rows(out: Path) -> pd.DataFrame:
    """The rows that must not depend on an interruption (timing and the out_dir's paths left out)."""
    df = pd.read_csv(out / "results.csv")
    df = df[df["metric"] != "fit_seconds"]
    cols = ["model", "regime", "head", "fold", "seed", "condition", "metric", "value", "n_windows", "config_hash"]
    return df[cols].sort_values(cols[:7]).reset_index(drop=True)


# ------------------------------------------------------------------------------------------- unique temporary names
def test_unique_tmp_names_differ_and_stay_in_the_folder(tmp_path):
    a, b = unique_tmp(tmp_path / "splits.json"), unique_tmp(tmp_path / "splits.json")
    assert a != b and a.parent == b.parent == tmp_path
    assert a.name.startswith(".splits.json.") and f".{os.getpid()}-" in a.name and a.suffix == ".tmp"


def test_two_writers_of_splits_json_at_once_both_succeed(tmp_path, monkeypatch):
    """Both writers have written their temporary file before either renames it (a barrier after each write): with
    one fixed temporary name the second rename finds no file (the FileNotFoundError of issue 34)."""
    rng = np.random.default_rng(0)
    split = make_split(rng.integers(0, 2, 60), np.repeat([f"S{i}" for i in range(6)], 10), SplitSpec(k=3), "t")
    target = tmp_path / "out" / "splits.json"
    barrier = threading.Barrier(2, timeout=120)
    real_write = Path.write_text

    def write_then_wait(self, *a, **k):
        n = real_write(self, *a, **k)
        if self.parent == target.parent:
            barrier.wait()  # the other writer has written too
        return n

    monkeypatch.setattr(Path, "write_text", write_then_wait)
    errors: list = []

    def writer():
        try:
            save_or_verify(split, target)
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert save_or_verify(split, target) is split  # the file is whole and verifies
    assert sorted(p.name for p in target.parent.iterdir()) == ["splits.json"]  # no temporary file left


# ------------------------------------------------------------------------------------------------ out_dir lock
def test_out_dir_lock_names_its_holder_refuses_under_no_wait_and_is_reentrant(tmp_path, capfd):
    """The holder is another process (a lock between two processes); the waiting / refusing process is this one."""
    out = tmp_path / "out"
    code = ("import sys\nfrom eegfm_bench.locks import out_dir_lock\n"
            f"with out_dir_lock({str(out)!r}, 'cv'):\n    print('held', flush=True)\n    sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], env=cli_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutDirBusyError, match=rf"{out} is being written by pid {holder.pid} on .*lock {out}/"
                                                  rf"\{OUT_DIR_LOCK}.*fix: wait for it"):
            with out_dir_lock(out, "sweep", wait=False):
                pass
        got: dict = {}

        def waiter():
            with out_dir_lock(out, "sweep") as lock:
                got["waited"] = lock.waited_s
                with out_dir_lock(out, "cv", wait=False):  # re-entrant in the holding process: no self-deadlock
                    got["inner"] = True

        t = threading.Thread(target=waiter)
        t.start()
        seen = ""
        while "waiting for" not in seen:  # the thread is waiting (its one line), not a deadline
            seen += capfd.readouterr().err
            time.sleep(0.01)
        line = [x for x in seen.splitlines() if "waiting for" in x]
        assert len(line) == 1 and line[0].startswith(f"waiting for pid {holder.pid} on ")
        assert f"holding {out / OUT_DIR_LOCK} (another eegfm-bench command writing this out_dir; sweep starts" in line[0]
        holder.stdin.write("\n")
        holder.stdin.flush()
        t.join()
        assert got["inner"] and got["waited"] > 0
    finally:
        holder.kill()
        holder.wait()


def test_confound_on_a_cv_out_dir_another_process_writes_refuses_under_no_wait(tmp_path):
    out = tmp_path / "cv"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump({**TINY, "out_dir": str(out)}))
    code = ("import sys\nfrom eegfm_bench.locks import out_dir_lock\n"
            f"with out_dir_lock({str(out)!r}, 'cv'):\n    print('held', flush=True)\n    sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], env=cli_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutDirBusyError, match=rf"{out} is being written by pid {holder.pid} on "):
            run_confound(out, wait=False)
    finally:
        holder.kill()
        holder.wait()


@requires_data
def test_two_cv_processes_on_one_out_dir_one_waits_then_finds_the_cells_done(tmp_path):
    """Both start while the out_dir is held (by this test, so that both are sure to meet the lock): each prints the
    waiting line; once released, one trains and the other waits for it, then finds every cell done."""
    out = tmp_path / "out"
    cfg = _config(tmp_path, "out", split={**TINY["split"], "folds": [0]})
    with out_dir_lock(out, "cv"):
        procs = [_Cli(tmp_path, f"cv{i}", "cv", "--config", str(cfg)) for i in range(2)]
        for p in procs:
            line = p.wait_for_line("waiting for pid")
            assert line.startswith(f"waiting for pid {os.getpid()} on ") and f"holding {out / OUT_DIR_LOCK}" in line
        assert sorted(x.name for x in out.iterdir()) == [OUT_DIR_LOCK]  # nothing written while they wait
    results = [p.wait() for p in procs]
    assert [r[0] for r in results] == [0, 0], [r[2][-3000:] for r in results]
    second = [i for i, r in enumerate(results) if "1 of 1 cells already have rows" in r[1]]
    assert len(second) == 1, [r[1] for r in results]  # one trained the cell, the other ran after it: no double fit
    assert sorted(_rows(out)["fold"].unique()) == [0]


@requires_data
def test_cv_under_no_wait_refuses_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    cfg = _config(tmp_path, "out")
    with out_dir_lock(out, "cv"):  # this process holds the out_dir
        rc, _, err = _Cli(tmp_path, "nowait", "cv", "--config", str(cfg), "--no-wait").wait()
    assert rc == 2, err
    first = err.strip().splitlines()[0]
    assert first.startswith(f"eegfm-bench cv: OutDirBusyError: {out} is being written by pid {os.getpid()} on ")
    assert "Traceback" not in err and sorted(x.name for x in out.iterdir()) == [OUT_DIR_LOCK]


# ---------------------------------------------------------------------------------------------------- Ctrl-C
@requires_data
def test_sigint_mid_fit_stops_with_one_line_exit_130_and_a_rerun_equals_an_uninterrupted_run(tmp_path):
    over = {"trainer": {"max_epochs": 8, "patience": 8}}
    cfg = _config(tmp_path, "stopped", **over)
    ref = _config(tmp_path, "reference", **over)
    reference = _Cli(tmp_path, "reference", "cv", "--config", str(ref))  # uninterrupted, alongside
    p = _Cli(tmp_path, "stopped", "cv", "--config", str(cfg))
    ckpts = tmp_path / "stopped" / "checkpoints"
    while not list(ckpts.glob("*/fold1/last.ckpt")):  # the second cell's training has started (an epoch done)
        assert p.proc.poll() is None, p.wait()
        time.sleep(0.01)
    p.proc.send_signal(signal.SIGINT)
    rc, _, err = p.wait()
    assert rc == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line: no traceback, no "Exception ignored"
    assert lines[0].startswith(f"eegfm-bench cv: stopped by SIGINT; kept the rows of 1 of 2 cells in "
                               f"{tmp_path / 'stopped' / 'results.csv'}")
    assert "1 unfinished cell(s) resume from their last.ckpt" in lines[0]
    assert lines[0].endswith(f"resume: eegfm-bench cv --config {cfg} --no-progress")
    assert sorted(_rows(tmp_path / "stopped")["fold"].unique()) == [0]  # the finished cell's rows
    assert list(ckpts.glob("*/fold1/last.ckpt"))  # intact (never half-written): the rerun resumes from it

    rc2, out2, err2 = _Cli(tmp_path, "rerun", "cv", "--config", str(cfg)).wait()
    assert rc2 == 0, err2[-3000:]
    assert "fold 1: resuming from" in out2
    assert reference.wait()[0] == 0
    pd.testing.assert_frame_equal(_rows(tmp_path / "stopped"), _rows(tmp_path / "reference"))
    for fold in ("fold0", "fold1"):
        a = next((tmp_path / "stopped" / "predictions").glob(f"*-{fold}.csv"))
        b = next((tmp_path / "reference" / "predictions").glob(f"*-{fold}.csv"))
        pd.testing.assert_frame_equal(pd.read_csv(a), pd.read_csv(b))


@requires_data
def test_a_swallowed_interrupt_stops_the_loop_at_the_next_cell(tmp_path, monkeypatch):
    """The signal arrives as the first cell ends (recorded; a KeyboardInterrupt raised there could be swallowed by a
    finalizer, ``Exception ignored in ...``): the stop is taken before the second cell, which never trains; the
    first cell's rows and its summary are kept."""
    real_train, real_test = cv_loop.train_cell, cv_loop.evaluate_cell
    trained = []

    def train(ctx, cell):
        trained.append(cell.fold)
        return real_train(ctx, cell)

    def test_and_swallow(ctx, cell, t):
        rows = real_test(ctx, cell, t)
        try:
            interrupt._on_signal(signal.SIGINT, None)  # the signal, as the cell's test loop is torn down
        except KeyboardInterrupt:
            pass  # "Exception ignored in ...": a finalizer swallowed it
        return rows

    monkeypatch.setattr(cv_loop, "train_cell", train)
    monkeypatch.setattr(cv_loop, "evaluate_cell", test_and_swallow)
    cfg = {**TINY, "out_dir": str(tmp_path / "out")}
    with interrupt.stop_on_signals():
        with pytest.raises(interrupt.StopRequested) as info:
            run_cv(cfg, progress=False)
    interrupt.reset()
    assert trained == [0]
    assert info.value.kept.startswith(f"the rows of 1 of 2 cells in {tmp_path / 'out' / 'results.csv'}")
    assert sorted(_rows(tmp_path / "out")["fold"].unique()) == [0]
    assert (tmp_path / "out" / "summary.md").is_file()
