"""Process settings that send the CPU to compute: keep freed memory instead of having the kernel
zero new pages on every pass.

Ground floor, like :mod:`eegfm_bench.trainer`: it imports nothing from the package and nothing heavy, so the CLI
calls :func:`tune_process` before torch is imported (OpenMP reads its settings when it is loaded).

* **Freed memory is kept.** glibc serves every allocation above its mmap threshold (128 KiB to 32 MiB) with a
  fresh ``mmap`` and returns it on ``free``; a tensor of a window batch is far above that, so every pass maps
  new pages and the kernel zeroes each one on first touch. ``mallopt(M_MMAP_MAX, 0)`` makes large blocks come
  from the heap and ``mallopt(M_TRIM_THRESHOLD, -1)`` keeps freed heap for reuse instead of giving it back
  (the process's RSS stays at its peak: the memory a job must be granted anyway). Measured here (LaBraM, 48
  windows of 128 × 800, five no-grad forwards, one thread, paired runs in fresh processes, outputs equal to the
  last bit): 19.1 M / 18.9 M minor page faults and 41.7 s / 37.3 s of system CPU (43.3 s / 43.9 s user) with
  glibc's defaults; 0.40 M faults and 0.70 s / 0.67 s of system CPU (37.5 s / 35.3 s user) with both settings;
  peak RSS 2.1 → 2.4 GB. Keeping only 1 GiB before trimming was not enough (6.3 s and 29.9 s of system CPU in
  two runs: a forward frees more than 1 GiB at once). glibc's own tuning interface was chosen over an allocator
  the install would have to bring (jemalloc or tcmalloc through ``LD_PRELOAD``: a system package and a
  re-exec); on another C library it does nothing and :func:`process_settings` says so.
* **Threads: OpenMP's default kept, measured.** libgomp's waiting threads spin before they sleep. Under
  contention (more threads than cores) that spinning is CPU taken from the work, and ``OMP_WAIT_POLICY=PASSIVE``
  removes it; on an idle machine it costs wall time instead, since every small parallel region must wake its
  threads. Paired here (EEGNet, 64 × 512, batch 64, 40 training steps, 2 threads, idle machine): PASSIVE
  14.4 / 17.6 s wall against ACTIVE 11.8 / 14.1 s, the same CPU (23.2 / 27.5 s against 23.4 / 28.1 s); the
  quickstart with PASSIVE took 6 min 41 s against 5 min 8 s before. So this module leaves the policy to the user:
  set ``OMP_WAIT_POLICY=PASSIVE`` where cells share cores (``--workers`` above the cores, a shared SLURM node).

Neither setting changes a number: the allocator decides where a buffer lives, not what is computed in it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = -1
"""``M_TRIM_THRESHOLD`` value that keeps all freed heap (glibc reads it as the largest ``size_t``)."""

_STATE: dict[str, str] = {}


def tune_process(environ=None) -> dict[str, str]:
    """Keep freed memory in this process (module docstring) and record the OpenMP wait policy in force;
    idempotent. The CLI calls it before torch is imported.

    Parameters
    ----------
    environ : mutable mapping, optional
        The environment to read ``OMP_WAIT_POLICY`` from (default ``os.environ``).

    Returns
    -------
    dict
        :func:`process_settings`: ``{"malloc": "keep-freed (glibc mallopt)" | "default (<why>)",
        "omp_wait_policy": ...}``.
    """
    env = os.environ if environ is None else environ
    if "malloc" not in _STATE:
        _STATE["malloc"] = _keep_freed_memory()
    _STATE["omp_wait_policy"] = env.get("OMP_WAIT_POLICY", "default")
    return process_settings()


def _keep_freed_memory() -> str:
    if not sys.platform.startswith("linux") or os.environ.get("EEGFM_DEFAULT_MALLOC"):
        return "default (not Linux)" if not sys.platform.startswith("linux") else "default (EEGFM_DEFAULT_MALLOC)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
    except (OSError, AttributeError):
        return "default (no glibc mallopt)"
    return "keep-freed (glibc mallopt)" if ok else "default (mallopt refused)"


def process_settings() -> dict[str, str]:
    """What :func:`tune_process` set in this process (empty before it ran): for the run's provenance."""
    return dict(_STATE)


__all__ = ["tune_process", "process_settings"]
