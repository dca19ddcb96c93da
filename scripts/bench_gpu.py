"""GPU benchmark per backbone at 64 channels × 4 s, to compare with paper 003's H100 table.

For each backbone (published-size architecture, random init; the quickstart's 64 EEGMMIDB electrodes at the
backbone's declared rate and window) on one CUDA device:

* the **largest batch that fits** for forward + backward (full fine-tuning) in ``bf16-mixed``: doubling from
  ``--start`` until CUDA runs out of memory, then bisection, capped at ``--max-batch`` (paper 003's batch sizes at
  64 × 800: LaBraM 1024, REVE 256, BIOT 8192);
* **windows/s** forward (eval, no grad) and forward + backward (train) in ``32-true`` and ``bf16-mixed``
  (``torch.autocast(dtype=torch.bfloat16)``, as Lightning's ``bf16-mixed``), at the largest batch or ``--batch``;
* **peak memory** (``torch.cuda.max_memory_allocated``) of the forward + backward pass.

Every model runs in its own subprocess (an OOM never poisons the next one). The whole run keeps to ``--budget``
seconds (default 540: one 10-minute device call with room to start and copy back): each model gets at most its
share of what is left (``--timeout`` caps it), a model cut by its share gets a row saying so, and the models not
reached get a ``not run: budget spent`` row. The table (Markdown on stdout and, with ``--out FILE.md``, in
``FILE.md`` and ``FILE.json``, the ``plan --bench`` format: ``fwd_per_s`` / ``fwd_bwd_per_s`` are the
bf16-mixed figures) is rewritten after every model, so a run killed from outside still leaves every row measured
so far. On the CPU there is no allocator peak: the peak-memory column says ``n/a (CPU)``.

Usage::

    python scripts/bench_gpu.py --out results/bench_gpu.md                 # every backbone, cuda:0, 9 min at most
    python scripts/bench_gpu.py --models labram reve biot --max-batch 4096
    python scripts/bench_gpu.py --device cpu --models eegnet --max-batch 16  # smoke test without a GPU

Without CUDA (and without ``--device cpu``) it stops with a message saying so.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_backbones import EEGMMIDB_64, OPTIONS  # noqa: E402


def _build(name: str, device: str):
    import torch

    from eegfm_bench.data.montage import canonical_names
    from eegfm_bench.models.backbones import BACKBONES

    names = canonical_names(EEGMMIDB_64)
    cls = BACKBONES.get(name)
    torch.manual_seed(0)
    return cls(names, cls.preprocessing.n_times, n_outputs=2, **OPTIONS.get(name, {})).to(device), names


def bench_one(name: str, device: str, start: int, max_batch: int, batch: int | None, n: int) -> dict:
    import warnings

    import torch

    from eegfm_bench.models.throughput import fits, token_throughput

    warnings.filterwarnings("ignore")
    ad, names = _build(name, device)
    n_chans, n_times = len(names), ad.n_times
    cuda = device.startswith("cuda")

    def fit(b: int) -> bool:
        return fits(ad, names, torch.randn(b, n_chans, n_times, device=device))

    if batch is None:  # largest batch for forward + backward in bf16-mixed
        lo, hi = 0, start
        while hi <= max_batch and fit(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, max_batch + 1)
        while hi - lo > max(1, lo // 16):  # bisection to ~6 %
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fit(mid) else (lo, mid)
        batch = lo
    if batch < 1:
        return {"model": name, "device": device, "error": f"batch {start} does not fit"}
    x = torch.randn(batch, n_chans, n_times, device=device)
    out = {"model": name, "device": torch.cuda.get_device_name(0) if cuda else device, "n_chans": n_chans,
           "n_times": n_times, "sfreq": ad.preprocessing.sfreq, "batch": batch,
           "params": sum(p.numel() for p in ad.parameters()), "cuda": cuda}
    for prec, bf16 in (("fp32", False), ("bf16", True)):
        for kind, train in (("fwd", False), ("fwd_bwd", True)):
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            out[f"{kind}_{prec}_per_s"] = token_throughput(ad, names, x, n=n, train=train, bf16=bf16)
            if train and cuda:
                out[f"peak_mb_{prec}"] = torch.cuda.max_memory_allocated() / 2 ** 20
    out["fwd_per_s"], out["fwd_bwd_per_s"] = out["fwd_bf16_per_s"], out["fwd_bwd_bf16_per_s"]
    return out



def _run_one(a, name: str, seconds: float) -> dict:
    """One model in its own subprocess, cut after ``seconds``: its row, or a row with the error."""
    cmd = [sys.executable, __file__, "--one", name, "--device", a.device, "--start", str(a.start),
           "--max-batch", str(a.max_batch), "--batches", str(a.batches)] + (["--batch", str(a.batch)] if a.batch
                                                                             else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return {"model": name, "device": a.device, "error": f"cut after its share of the budget ({seconds:.0f} s)"}
    if proc.returncode:
        return {"model": name, "device": a.device,
                "error": ((proc.stderr or proc.stdout).strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _peak(r: dict) -> str:
    if not r.get("cuda"):
        return "n/a (CPU)"
    return f"{r.get('peak_mb_fp32', float('nan')):.0f} / {r.get('peak_mb_bf16', float('nan')):.0f}"


def _write(rows: list[dict], out: Path | None) -> str:
    """The Markdown table of ``rows`` (written to ``out`` and its ``.json`` when given)."""
    lines = ["| model | device | input | largest batch (bf16, fwd+bwd) | fwd fp32 | fwd bf16 | fwd+bwd fp32 | "
             "fwd+bwd bf16 (windows/s) | peak MB fp32 / bf16 |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['device']} | – | {r['error']} | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['device']} | {r['n_chans']} × {r['n_times']} @ {r['sfreq']:g} Hz | "
                     f"{r['batch']} | {r['fwd_fp32_per_s']:.0f} | {r['fwd_bf16_per_s']:.0f} | "
                     f"{r['fwd_bwd_fp32_per_s']:.0f} | {r['fwd_bwd_bf16_per_s']:.0f} | {_peak(r)} |")
    md = "\n".join(lines)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(md + "\n")
        tmp.replace(out)
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return md


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--start", type=int, default=32, help="first batch size tried")
    p.add_argument("--max-batch", type=int, default=8192)
    p.add_argument("--batch", type=int, default=None, help="fixed batch (skips the search)")
    p.add_argument("--batches", type=int, default=10, help="timed batches per pass after one warm-up")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run (default 540)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds at most for one model")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(bench_one(a.one, a.device, a.start, a.max_batch, a.batch, a.batches)))
        return 0
    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; run it on a GPU machine (or --device cpu for a smoke test)")
        return 2
    from eegfm_bench.models.backbones import BACKBONES

    names = a.models or [n for n in BACKBONES.names() if not n.endswith("_truncated")]
    rows: list[dict] = []
    t_end = time.monotonic() + a.budget
    for i, name in enumerate(names):
        left = t_end - time.monotonic()
        if left < 5:
            rows += [{"model": n, "device": a.device, "error": f"not run: budget spent ({a.budget:.0f} s)"}
                     for n in names[i:]]
            break
        share = min(a.timeout, max(left / (len(names) - i), min(left, 60.0)))
        rows.append(_run_one(a, name, share))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        _write(rows, a.out)
    md = _write(rows, a.out)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
