"""Array plumbing shared by the perturbation functions (private).

The perturbations compute in numpy. A ``torch.Tensor`` input is converted to numpy (detached, on the CPU)
and the result is converted back to a tensor with the input's dtype and device, so callers get back the
type they passed in. Everything else about the input is checked here once: shape ``(batch, n_chans,
n_times)``, a floating dtype, and one channel name per channel.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import numpy as np

from eegfm_bench.perturb.rng import WindowRNG


def is_torch(x: Any) -> bool:
    """True if ``x`` is a ``torch.Tensor`` (without importing torch when it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x: Any, ch_names: Sequence[str] | None = None) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Validate ``x`` and return it as a numpy array plus a function that restores the input's type.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (batch, n_chans, n_times)
        Floating-point signal.
    ch_names : sequence of str or None
        If given, must hold exactly ``n_chans`` names.

    Returns
    -------
    arr : numpy.ndarray, shape (batch, n_chans, n_times)
        The data (a view where possible; callers copy before writing).
    restore : callable
        ``restore(out)`` casts a numpy result back to the input's dtype (and device, for a tensor).

    Raises
    ------
    TypeError
        If ``x`` is neither a numpy array nor a torch tensor, or is not floating point.
    ValueError
        If ``x`` is not 3-D or ``len(ch_names) != n_chans``.
    """
    if is_torch(x):
        torch = sys.modules["torch"]
        if not torch.is_floating_point(x):
            raise TypeError(f"expected a floating-point tensor, got dtype {x.dtype}; fix: cast with x.float()")
        device, dtype = x.device, x.dtype
        arr = x.detach().cpu().numpy()

        def restore(out: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(out)).to(device=device, dtype=dtype)

    elif isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"expected a floating-point array, got dtype {x.dtype}; fix: cast with x.astype(np.float32)")
        arr = x
        dtype_np = x.dtype

        def restore(out: np.ndarray) -> Any:
            return out.astype(dtype_np, copy=False)

    else:
        raise TypeError(f"expected a numpy array or torch tensor, got {type(x).__name__}")
    if arr.ndim != 3:
        raise ValueError(
            f"expected shape (batch, n_chans, n_times), got {tuple(arr.shape)}; fix: add the batch axis with x[None]"
        )
    if ch_names is not None and len(ch_names) != arr.shape[1]:
        raise ValueError(f"{len(ch_names)} channel names for {arr.shape[1]} channels; fix: pass one name per channel")
    return arr, restore


def as_rng(rng: np.random.Generator | WindowRNG | int) -> np.random.Generator | WindowRNG:
    """A numpy Generator from an explicit seed, or the Generator or per-window source
    (:class:`~eegfm_bench.perturb.rng.WindowRNG`, what a condition receives) itself.

    Raises
    ------
    TypeError
        If ``rng`` is neither an int, a ``numpy.random.Generator`` nor a ``WindowRNG`` (``None`` is refused: every
        perturbation is seeded explicitly).
    """
    if isinstance(rng, (np.random.Generator, WindowRNG)):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"expected an int seed, a numpy.random.Generator or a WindowRNG, got {type(rng).__name__}; "
        "fix: pass an explicit seed, e.g. rng=0"
    )
