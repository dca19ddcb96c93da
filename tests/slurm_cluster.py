"""A real single-node SLURM cluster for the launcher tests (Debian's ``slurm-wlm`` and ``munge``).

:func:`start` writes a munge key and a ``slurm.conf`` for this host (``proctrack/linuxproc``, ``task/none``,
``select/cons_tres`` with ``CR_Core_Memory``, the machine's cores and most of its memory, one default partition
``debug``, no accounting storage), starts ``munged``, ``slurmctld`` and ``slurmd`` and waits until ``sinfo`` shows
the node up. A cluster that already answers is reused, and the cluster is left running (:func:`stop`).
Needs root (the daemons) and the packages: ``apt-get install -y slurm-wlm munge`` (``.ci/run`` installs them).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
PARTITION = "debug"


def available() -> str:
    """Empty when a cluster can be started here, else why not."""
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch", "sinfo") if not shutil.which(b)]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install -y slurm-wlm munge)"
    if os.geteuid() != 0:
        return "starting SLURM's daemons needs root"
    return ""


def idle() -> bool:
    """Whether ``sinfo`` answers and shows the node up: idle, mixed or allocated (another copy of the suite, or
    another test, may be running jobs on it; a job of this suite then queues behind them)."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s.strip().rstrip("*") in ("idle", "mix", "alloc", "comp")
                                       for s in out.stdout.split())


def _conf(host: str) -> str:
    cpus = os.cpu_count() or 1
    mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    return "\n".join([
        "ClusterName=eegfm", f"SlurmctldHost={host}", "AuthType=auth/munge", "CredType=cred/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", "SlurmUser=root", "ReturnToService=2",
        "StateSaveLocation=/var/spool/slurmctld", "SlurmdSpoolDir=/var/spool/slurmd", "MpiDefault=none",
        "SlurmctldPidFile=/run/slurmctld.pid", "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log", "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1", "MaxArraySize=100001",
        "MinJobAge=300", "KillWait=5", "InactiveLimit=0",
        f"NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO", ""])


def start(timeout_s: float = 600.0) -> dict:
    """Start the cluster (or find it running); return ``{"partition", "started", "cpus", "mem_mb"}``.

    Raises
    ------
    RuntimeError
        If a daemon does not start or the node is not idle within ``timeout_s`` (the logs' tails are in the message).
    """
    if idle():
        return {"partition": PARTITION, "started": False}
    host = socket.gethostname()
    for d in ("/etc/slurm", "/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm", "/run/munge",
              "/var/lib/munge", "/var/log/munge"):
        Path(d).mkdir(parents=True, exist_ok=True)
    key = Path("/etc/munge/munge.key")
    if not key.is_file():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
    for p in ("/etc/munge", "/run/munge", "/var/lib/munge", "/var/log/munge"):
        shutil.chown(p, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    CONF.write_text(_conf(host))
    started = []
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True, timeout=30)
        started.append("munged")
    for daemon in ("slurmctld", "slurmd"):
        if subprocess.run(["pgrep", "-x", daemon], capture_output=True).returncode != 0:
            subprocess.run([daemon], check=True, timeout=30)
            started.append(daemon)
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if idle():
            return {"partition": PARTITION, "started": True, "daemons": started}
        time.sleep(1)
    logs = "\n".join(Path(f).read_text()[-1500:] for f in ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log")
                     if Path(f).is_file())
    raise RuntimeError(f"SLURM node not idle after {timeout_s:.0f} s; logs:\n{logs}")


def stop(info: dict) -> None:
    """Leave the cluster running. Another copy of the suite on this machine may be using it (one ``slurmctld`` per
    host): stopping its daemons, or cancelling root's jobs, as this function did until stop 40, would fail that
    copy's SLURM tests. The daemons end with the machine; the next session finds the cluster answering."""
    return None
