"""CPU that goes to compute (issue 35 item 5): the CLI keeps freed memory (glibc ``mallopt``) and leaves
OpenMP's wait policy to the user (:mod:`eegfm_bench.runtime`). Counted, not timed: minor page faults of a loop that
allocates and frees a 64 MiB buffer are a property of the allocator, not of the machine's speed or load."""
from __future__ import annotations

import subprocess
import sys

import pytest

LOOP = """
import ctypes, resource, sys
if sys.argv[1] == "tuned":
    from eegfm_bench.runtime import tune_process
    print(tune_process())
else:
    print()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
n = 64 * 2**20  # 64 MiB, above glibc's largest mmap threshold (a batch of windows or tokens is larger)
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    buf = libc.malloc(n)
    ctypes.memset(buf, 1, n)
    libc.free(buf)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_reused_instead_of_mapped_and_zeroed_again():
    def faults(mode: str) -> tuple[int, str]:
        out = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, check=True,
                             env={"PATH": "", "OMP_WAIT_POLICY": "ACTIVE"}).stdout.split("\n")
        return int(out[-2]), out[0]

    default, _ = faults("default")
    tuned, settings = faults("tuned")
    # 20 passes: each maps and zeroes the buffer anew by default (16,384 pages of 4 KiB, fewer with transparent
    # huge pages); with freed memory kept only the first pass faults
    assert tuned * 5 < default, (default, tuned)
    assert "keep-freed (glibc mallopt)" in settings
    assert "'omp_wait_policy': 'ACTIVE'" in settings  # the user's value, recorded


def test_cli_tunes_the_process_before_torch_loads():
    code = ("import sys, os; os.environ.pop('OMP_WAIT_POLICY', None)\n"
            "from eegfm_bench import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "from eegfm_bench.runtime import process_settings\n"
            "print(process_settings(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    last = out.strip().splitlines()[-1]
    assert last.endswith("False"), last  # torch not loaded yet
    assert "'omp_wait_policy': 'default'" in last  # OpenMP's own policy is left in place (runtime docstring)
    assert "keep-freed" in last
