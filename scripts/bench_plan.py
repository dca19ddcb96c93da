"""Benchmark: ``eegfm-bench plan``'s whole-command estimate against the command's measured wall time.

Runs, one after the other, in fresh processes: ``eegfm-bench plan --json`` on a cv config (it builds a missing
window cache, so the cv then reads it, as the plan assumes), then ``eegfm-bench cv`` on the same config into the
same ``--out_dir``; prints the plan's stages, its total, the cv's wall / user / sys seconds, the ratio cv / plan
(issue 35 item 6: within 2×) and the load average before and after each (the machine's load changes both the
rates the plan measures and the run). Also times one experiment page (``refresh``) on the finished run: the
constant :data:`eegfm_bench.runs.plan.stages.REFRESH_S`.

Usage::

    EEGFM_DATA=../shared/data python scripts/bench_plan.py --config configs/experiment/plan_tiny.yaml
    python scripts/bench_plan.py --config configs/experiment/quickstart.yaml -- --launcher local --workers 2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _run(cmd: list[str]) -> tuple[float, float, float, str]:
    """Wall, user and sys seconds of a child command, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", default="/tmp/bench_plan", help="the cv's out_dir (emptied first)")
    ap.add_argument("extra", nargs="*", help="after --: more arguments for both plan and cv (e.g. --workers 2)")
    a = ap.parse_args(argv)
    shutil.rmtree(a.out, ignore_errors=True)
    exe = shutil.which("eegfm-bench") or "eegfm-bench"
    common = ["--config", a.config, "--out_dir", a.out, *a.extra]
    load0 = os.getloadavg()[0]
    pw, pu, ps, text = _run([exe, "plan", *common, "--json"])
    plan = json.loads(text[text.index("{"):])
    load1 = os.getloadavg()[0]
    cw, cu, cs, _ = _run([exe, "cv", *common, "--no-progress"])
    load2 = os.getloadavg()[0]
    print(f"plan {a.config} ({' '.join(a.extra) or 'sequential'}): {pw:.1f} s wall to plan (load {load0:.1f} → "
          f"{load1:.1f}, {os.cpu_count()} cores)")
    for r in plan["stages"]:
        print(f"  {r['stage']:<45} {r['wall_s']:8.1f} s wall  {r['seconds']:8.1f} s summed over jobs")
    est = plan["estimate_command_wall_s"]
    print(f"  {'total':<45} {est:8.1f} s")
    for b in plan.get("ingested_by_plan") or []:
        print(f"  (ingest {b['part']}: {b['seconds']:.1f} s, paid by the plan)")
    print(f"cv: {cw:.1f} s wall, {cu:.1f} s user, {cs:.1f} s sys (load {load1:.1f} → {load2:.1f})")
    timing = Path(a.out) / "timing.json"
    if timing.is_file():
        print(f"cv's own timing.json: {timing.read_text().strip()}")
    print(f"ratio cv / plan: {cw / est:.2f} (target: between 0.5 and 2)")
    from eegfm_bench.reports.page import refresh

    t0 = time.perf_counter()
    refresh([a.out], quiet=True)
    print(f"one experiment page (refresh): {time.perf_counter() - t0:.2f} s (REFRESH_S)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
