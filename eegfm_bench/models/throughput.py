"""Token throughput of a backbone adapter: windows per second of ``adapter.tokens`` on one batch.

The one timing loop behind ``eegfm-bench plan`` (its CPU measurement), ``scripts/bench_backbones.py`` and
``scripts/bench_gpu.py``: one warm-up step, then ``n`` timed steps, synchronised on CUDA. A training step is the
forward, a scalar loss (mean square of the tokens, in fp32) and its backward; an inference step is the forward
under ``torch.no_grad``. These are micro-benchmarks of the backbone alone (no data loading, head or optimiser),
so they run outside a ``lightning.Trainer`` by design: they size jobs, they produce no result rows.
"""
from __future__ import annotations

import contextlib
import time
from typing import Sequence

import torch
from torch import nn


def _step(adapter: nn.Module, ch_names: Sequence[str], x: torch.Tensor, train: bool, bf16: bool) -> None:
    ctx = torch.autocast(device_type=x.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    if train:
        with ctx:
            loss = adapter.tokens(x, list(ch_names)).float().pow(2).mean()
        loss.backward()
        adapter.zero_grad(set_to_none=True)
    else:
        with torch.no_grad(), ctx:
            adapter.tokens(x, list(ch_names))


def token_throughput(adapter: nn.Module, ch_names: Sequence[str], x: torch.Tensor, *, n: int, train: bool,
                     bf16: bool = False) -> float:
    """Windows per second of ``adapter.tokens`` on ``x`` ``(batch, n_chans, n_times)``.

    Parameters
    ----------
    adapter : BackboneAdapter
        Put in train mode for ``train`` and eval mode otherwise (left so).
    ch_names : sequence of str
    x : Tensor, shape (batch, n_chans, n_times)
        On the device to time.
    n : int
        Timed steps (after one untimed warm-up step).
    train : bool
        Forward + backward (True) or forward only under ``no_grad``.
    bf16 : bool
        Under ``torch.autocast(bfloat16)`` (the ``bf16-mixed`` precision).

    Returns
    -------
    float
        ``batch · n / seconds``.

    Raises
    ------
    torch.OutOfMemoryError
        When the batch does not fit (callers probing the largest batch catch it).
    """
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    adapter.train(train)
    _step(adapter, ch_names, x, train, bf16)  # warm-up
    sync()
    t = time.perf_counter()
    for _ in range(int(n)):
        _step(adapter, ch_names, x, train, bf16)
    sync()
    return len(x) * int(n) / (time.perf_counter() - t)


def batch_seconds(adapter: nn.Module, ch_names: Sequence[str], x: torch.Tensor, *, train: bool, warmup: int = 2,
                  min_batches: int = 5, min_seconds: float = 2.0, max_batches: int = 40,
                  bf16: bool = False) -> list[float]:
    """Seconds of each timed step of ``adapter.tokens`` on ``x`` ``(batch, n_chans, n_times)``, after ``warmup``
    untimed steps: at least ``min_batches`` steps and ``min_seconds`` in all, at most ``max_batches``.

    What ``eegfm-bench plan`` estimates from (median and spread of the steps): one warm-up step and three timed ones
    of 8 windows, as before, under-estimated a LaBraM cell 3× (32 s planned, 99 s measured), because the first
    steps after the warm-up and the machine's load dominate so few.

    Returns
    -------
    list of float
        One duration (s) per timed step, in order.
    """
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    adapter.train(train)
    for _ in range(int(warmup)):
        _step(adapter, ch_names, x, train, bf16)
    sync()
    out: list[float] = []
    while len(out) < max_batches and (len(out) < min_batches or sum(out) < min_seconds):
        t = time.perf_counter()
        _step(adapter, ch_names, x, train, bf16)
        sync()
        out.append(time.perf_counter() - t)
    return out


def fits(adapter: nn.Module, ch_names: Sequence[str], x: torch.Tensor, bf16: bool = True) -> bool:
    """Whether one training step on ``x`` fits in device memory (the cache is emptied after)."""
    try:
        adapter.train()
        _step(adapter, ch_names, x, True, bf16)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        adapter.zero_grad(set_to_none=True)
        if x.device.type == "cuda":
            torch.cuda.empty_cache()


__all__ = ["batch_seconds", "token_throughput", "fits"]
