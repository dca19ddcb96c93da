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


__all__ = ["token_throughput", "fits"]
