"""A new user's launcher mistakes, each answered in one line naming the fix, before any data work:

* a mistyped ``launcher.kind`` (``slurn``), from the command line of ``ingest --task`` and from a config: the kinds,
  the closest first, before a recording is listed;
* a mistyped ``--launcher.slurm.<key>``: its key path and the valid keys, closest first (not a class name);
* a SLURM controller that does not answer: the real messages of ``sbatch``, ``squeue`` and ``sinfo`` are
  classified (the controller's fix is ``scontrol ping``, the ``slurm.conf`` read and its controller host, not the
  partition's); with the installed SLURM commands pointed (``SLURM_CONF``) at a controller on a closed local port,
  ``check_launcher`` and a submission refuse with that fix, and a job-state poll that cannot ask the controller
  does not take the jobs for finished;
* Ctrl-C under ``--launcher local``: one stop line, no worker traceback, the workers stopped, finished cells kept.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.runs.launch.launcher import (QueueInfoWatcher, SlurmUnreachableError, SubmissionError, as_launcher,
                                              check_launcher, make_executor, slurm_failure, submit_jobs)
from eegfm_bench.interrupt import EXIT_STOPPED
from eegfm_bench.runs.launch.ingest import run_ingest

from eegfm_testutils import REPO, cli_env, requires_data

TINY = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())

REAL_MESSAGES = {  # as SLURM 22.05 prints them
    "controller": ["sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
                   "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
                   "slurm_load_partitions: Unable to contact slurm controller (connect failure)",
                   "squeue: error: slurm_receive_msg: Socket timed out on send/recv operation"],
    "partition": ["sbatch: error: Batch job submission failed: Invalid partition name specified"],
    "account": ["sbatch: error: Batch job submission failed: Invalid account or account/partition combination "
                "specified"],
    "limit": ["sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates "
              "accounting/QOS policy (job submit limit, user's size and/or time limits)"],
    "memory": ["sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission "
               "failed: Requested node configuration is not available"],
    "auth": ["sbatch: error: Batch job submission failed: Invalid authentication credential"],
}


def test_a_mistyped_launcher_kind_is_refused_before_any_recording_is_listed(tmp_path):
    # the data root holds nothing: listing recordings would fail with a data error, so the kind is checked first
    with pytest.raises(ConfigError) as err:
        run_ingest("eegmmidb_mi", ["eegnet"], data_root=tmp_path / "no_data", cache_dir=tmp_path / "c",
                   launcher={"kind": "slurn"}, progress=False)
    msg = str(err.value)
    assert msg.startswith("launcher.kind 'slurn' is not a launcher. Did you mean 'slurm'? fix: --launcher.kind "
                          "slurm / "), msg
    assert "\n" not in msg and "none" in msg and "local" in msg


def test_a_mistyped_launcher_kind_in_a_config_names_the_kinds(capsys):
    from eegfm_bench.cli import main

    with pytest.raises(ConfigError, match=r"launcher\.kind 'slurn' is not one of none, local, slurm\. Did you mean "
                                          r"'slurm'\? fix: launcher\.kind: slurm / "):
        main(["cv", "--config", "configs/experiment/quickstart.yaml", "--launcher.kind", "slurn", "--print-config"])


def test_a_mistyped_slurm_key_names_its_path_and_the_valid_keys_closest_first(tmp_path, monkeypatch, capsys):
    with pytest.raises(ConfigError) as err:
        as_launcher({"kind": "slurm", "slurm": {"partitoin": "debug"}})
    msg = str(err.value)
    assert msg.startswith("unknown key launcher.slurm.partitoin. Did you mean 'partition'"), msg
    assert "fix: one of partition, " in msg and "cpus_per_task" in msg and "SlurmConfig" not in msg, msg
    # the console script: one line, exit 2, before any data
    from eegfm_bench.cli import main

    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "ingest", "--task", "eegmmidb_mi", "--data-root",
                                      str(tmp_path / "no_data"), "--launcher", "slurm",
                                      "--launcher.slurm.partitoin", "debug"])
    assert main() == 2
    err = capsys.readouterr().err
    assert err.startswith("eegfm-bench ingest: ConfigError: unknown key launcher.slurm.partitoin. Did you mean "
                          "'partition'"), err
    assert len(err.strip().splitlines()) == 2 and "Traceback" not in err  # the line and the EEGFM_TRACEBACK hint


@pytest.mark.parametrize("cause", sorted(REAL_MESSAGES))
def test_slurm_failure_messages_are_classified(cause, monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=ctl-node-7(10.0.0.7)\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    for message in REAL_MESSAGES[cause]:
        got, fix = slurm_failure(message)
        assert got == cause, (message, got)
        if cause == "controller":
            assert "scontrol ping" in fix and str(conf) in fix and "ctl-node-7(10.0.0.7)" in fix, fix
            assert "partition" not in fix, fix
    assert slurm_failure("sbatch: error: something new")[0] == "other"


@pytest.fixture
def unreachable_controller(tmp_path, monkeypatch) -> Path:
    """SLURM's commands pointed at a controller on a closed local port (connection refused at once)."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        pytest.skip("SLURM's commands are not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=9\nAuthType=auth/munge\n"
                    "MessageTimeout=2\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
                    "PartitionName=debug Nodes=localhost Default=YES State=UP\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


LC = {"kind": "slurm", "timeout_min": 5, "slurm": {"partition": "debug", "cpus_per_task": 1, "mem_gb": 1}}


def test_an_unreachable_controller_is_named_before_any_data_and_at_submission(unreachable_controller, tmp_path):
    with pytest.raises(SlurmUnreachableError) as err:
        check_launcher(LC, trainer={"accelerator": "cpu", "devices": 1})
    msg = str(err.value)
    assert "Unable to contact slurm controller" in msg and "scontrol ping" in msg, msg
    assert str(unreachable_controller) in msg and "(localhost)" in msg and "sinfo -s" not in msg, msg
    # sbatch's own refusal (the controller went away after the check): the same fix, no partition advice
    ex = make_executor(LC, tmp_path / "jobs", accelerator="cpu")
    with pytest.raises(SubmissionError) as err:
        submit_jobs(ex, LC, [(print, "x")])
    msg = str(err.value)
    assert isinstance(err.value, SlurmUnreachableError), msg
    assert msg.startswith("sbatch refused the job array of 1 job(s): ") and "Unable to contact slurm controller" in msg
    assert "scontrol ping" in msg and "no job was started" in msg and "sacctmgr" not in msg, msg


def test_a_job_state_poll_that_cannot_reach_the_controller_does_not_end_the_jobs(unreachable_controller, capsys):
    w = QueueInfoWatcher(delay_s=60)
    w.register_job("4242")
    w._start_time = 0.0  # registered long ago: a job missing from a successful squeue would count as ended
    w.update()
    assert w._info_dict.get("4242", {}).get("State") != "COMPLETED"
    assert "squeue cannot reach the controller" in capsys.readouterr().out


# ---------------------------------------------------------------------------------- Ctrl-C under --launcher local
@requires_data
def test_ctrl_c_under_local_workers_prints_one_line_stops_the_workers_and_keeps_finished_cells(tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground process group (the command, submitit's controller and the
    worker): sent so (``killpg``) once the one worker has finished its first cell and started the second, the
    command prints one stop line, no traceback (submitit's controller writes to the same terminal), exits 130, the
    worker processes are gone when it has exited, and the first cell's rows are kept."""
    cfg = {**TINY, "out_dir": str(tmp_path / "o"), "trainer": {"max_epochs": 8, "patience": 8}}
    path = tmp_path / "cv.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with open(tmp_path / "stdout", "w") as o, open(tmp_path / "stderr", "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(path), "--launcher",
                                 "local", "--workers", "1", "--no-progress"], env=cli_env(), cwd=REPO, stdout=o,
                                stderr=e, start_new_session=True)  # its own process group, as a terminal's job
    ckpts = tmp_path / "o" / "checkpoints"
    while not list(ckpts.glob("*/fold1/last.ckpt")):  # the worker finished fold 0 and trains fold 1 (an epoch done)
        assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
        time.sleep(0.05)
    controllers = [c for c in psutil.Process(proc.pid).children() if "submitit.local._local" in c.cmdline()]
    workers = controllers + [w for c in controllers for w in c.children(recursive=True)]
    assert len(controllers) == 1 and len(workers) >= 2, [w.cmdline() for w in workers]  # the controller, the worker
    for w in workers:  # each ignores the terminal's SIGINT (bit 2 - 1 of SigIgn): the command stops them itself
        ignored = int(next(x for x in Path(f"/proc/{w.pid}/status").read_text().splitlines()
                           if x.startswith("SigIgn:")).split()[1], 16)
        assert ignored & (1 << (signal.SIGINT - 1)), w.cmdline()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait() == EXIT_STOPPED
    err = (tmp_path / "stderr").read_text()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eegfm-bench cv: stopped by SIGINT; kept the rows of 1 of 2 cells"), err
    alive = [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [w.cmdline() for w in alive]  # stopped by the command, before it exited
    rows = pd.read_csv(tmp_path / "o" / "results.csv")
    assert sorted(rows["fold"].unique()) == [0]


# ------------------------------------------------------------------------------------- shards: reduced, reused
@requires_data
def test_a_reduced_shards_count_is_said_and_in_the_ingest_report(tmp_path, monkeypatch, capsys):
    """``--shards 8`` over 3 recordings (subject 1's runs 4, 8, 12) runs 3 jobs: said, and in the report. The jobs
    run in this process (run_jobs replaced): the count is decided before any job."""
    import eegfm_bench.runs.launch.ingest as ingest_mod

    monkeypatch.setattr(ingest_mod, "run_jobs", lambda lc, cfg, units, out, **kw:
                        ingest_mod.ingest_shard(cfg, worker_units=units)["failures"])
    report = run_ingest("eegmmidb_mi", ["eegnet"], cache_dir=tmp_path / "c", subjects=[1], out_dir=tmp_path / "o",
                        launcher={"kind": "local", "workers": 2}, shards=8, progress=False)
    note = "--shards 8 reduced to 3: only 3 recording(s) lack their entry (of 3)"
    assert f"ingest: {note}" in capsys.readouterr().out
    assert f"- {note}" in report.read_text()
    (entry,) = json.loads(report.with_suffix(".json").read_text()).values()
    assert entry["launcher_notes"] == [note]


@requires_data
def test_the_feature_stage_says_a_reduced_shards_count_and_the_shards_it_reused(tmp_path, monkeypatch, capsys):
    """24 windows in batches of 4 are at most 6 shards: ``--shards 8`` is said reduced; a stage killed after shard 0
    (the in-process jobs run only it) is resumed with shard 0 reused and said so, in the output, the stage's
    ``feature_stage.json`` and the entry's ``meta.json``."""
    import eegfm_bench.runs.cv.feature_stage as stage_mod
    from eegfm_bench.runs.cv.feature_stage import feature_shard, run_feature_stage
    from eegfm_bench.models.features import FeatureShardError
    from eegfm_bench.runs.cv.cells import load_config

    cfg = load_config({"experiment": "fs", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "seed": 0,
                       "confound": False, "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 4,
                                                   "batch_size": 4, "cache_dir": str(tmp_path / "c")},
                       "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
                       "trainer": {"max_epochs": 1}, "launcher": {"kind": "local", "workers": 2},
                       "runs": [{"model": "labram", "regime": "head_only", "heads": ["mean"],
                                 "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]})
    only: dict = {"shards": {0}}

    def in_process(lc, job_cfg, units, out, **kw):
        return feature_shard(job_cfg, worker_units=[u for u in units if int(u.split(":")[1]) in only["shards"]])[
            "failures"]

    monkeypatch.setattr(stage_mod, "run_jobs", in_process)
    with pytest.raises(FeatureShardError, match="shard 1 has no finished chunk"):  # "killed" after shard 0
        run_feature_stage(cfg, shards=8, progress=False)
    first = capsys.readouterr().out
    assert "feature stage: --shards 8 reduced to 6: only 6 batch(es) of 4 windows (24 windows of labram)" in first
    assert "reused" not in first
    only["shards"] = set(range(6))
    (folder,) = run_feature_stage(cfg, shards=8, progress=False)
    second = capsys.readouterr().out
    assert "feature stage: 1 of 6 shards reused (shard(s) 0, finished by an earlier run), 5 to extract" in second
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["stage"]["shards"] == 6 and meta["stage_run"]["reused"] == [0]
    assert meta["stage_run"]["extracted"] == [1, 2, 3, 4, 5]
    (record,) = json.loads((tmp_path / "o" / "features" / "feature_stage.json").read_text())
    assert record["reused"] == [0] and record["shards_asked"] == 8 and record["model"] == "labram"
