"""The launcher section of every command (``launcher:``; :mod:`eegfm_bench.runs.launch.launcher` submits the jobs).

Frozen :class:`~eegfm_bench.config.ConfigRecord` dataclasses (their ``Args:`` / ``Parameters`` blocks are the
``--help`` text).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from eegfm_bench.config import ConfigError, ConfigRecord


@dataclass(frozen=True)
class SlurmConfig(ConfigRecord):
    """sbatch settings of the ``slurm`` launcher.

    Args:
        partition: ``--partition``.
        account: ``--account``.
        qos: ``--qos``.
        gpus_per_node: GPUs per job. null (default): the trainer's ``devices`` (one task per GPU, as Lightning's
            SLURM DDP runs), or 0 with ``accelerator: cpu``; fewer GPUs than ``devices`` is refused.
        cpus_per_task: CPU cores per task.
        mem_gb: memory per node in GB.
        array_parallelism: jobs of the array running at once.
        setup: shell lines run before the job (``module load cuda``, ``source .venv/bin/activate``).
        additional: any other sbatch option (``{constraint: h100}``).
    """

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpus_per_node: Optional[int] = None
    cpus_per_task: int = 8
    mem_gb: int = 64
    array_parallelism: int = 64
    setup: list[str] = field(default_factory=list)
    additional: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LauncherConfig(ConfigRecord):
    """Where the cells run.

    Args:
        kind: ``none`` (sequential, this process), ``local`` (worker processes) or ``slurm``.
        workers: concurrent local workers.
        cells_per_job: cells per SLURM job (local workers take every ``workers``-th cell).
        folder: submitit's folder for job pickles and logs (default ``<out_dir>/jobs``).
        timeout_min: wall time per job in minutes.
        threads: torch threads of a local worker's process outside a cell (window loading; the units of sweep,
            probe, attribute and controls); default: CPU cores // workers. A cv cell computes with the config's
            ``intra_op_threads`` instead, under every launcher, so its rows do not depend on this.
        slurm: sbatch settings.
    """

    kind: Literal["none", "local", "slurm"] = "none"
    workers: int = 2
    cells_per_job: int = 1
    folder: Optional[str] = None
    timeout_min: int = 240
    threads: Optional[int] = None
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


def launcher_overrides(launcher: str | None, workers: int | None) -> tuple[list[str], str | None]:
    """The command-line options ``--launcher X --workers N`` as dotted overrides of the ``launcher:`` section, and
    the note to print when ``--workers`` comes alone (it means ``--launcher local``), else None.

    Raises
    ------
    ConfigError
        ``--workers`` below 1.
    """
    note = None
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}; fix: a number of worker processes >= 1")
    if workers is not None and launcher is None:
        note = (f"--workers {workers} without --launcher: running the cells on {workers} local workers "
                "(--launcher local)")
        launcher = "local"
    return ((["--launcher.kind", launcher] if launcher else [])
            + (["--launcher.workers", str(workers)] if workers is not None else [])), note
