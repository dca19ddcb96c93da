"""Raw softmax attention per transformer block, reduced to per-channel attention (paper 003 App. I.4).

For every block the softmax attention matrices ``(batch, heads, n_query, n_key)`` are recomputed from the
block's attention input (captured with a forward pre-hook; the model's own output is unchanged). Per-channel
attention: **sum over the query dimension**, then **average over heads, time patches (the tokens of one
channel) and samples** (and, across a cv run, over folds). A CLS token is excluded as query and key.

Backbones (``ATTENTION_BACKBONES``):

* ``labram`` — full self-attention over ``1 + C·P`` tokens (CLS first, then channel-major patches): the
  ``(C·P) × (C·P)`` block without CLS, key token ``k`` → channel ``k // P``.
* ``cbramod`` — criss-cross attention: the *spatial* attention (``self_attn_s``: for each time patch,
  ``C × C`` attention between channels) gives per-channel attention; the temporal attention (patches within
  one channel) carries no between-channel weights and is not used.
* ``reve`` — full self-attention over ``C·P`` channel-major tokens (no CLS; paper 003 I.4–I.6 use REVE and
  LaBraM): key token ``k`` → channel ``k // P``; per-channel attention sums to exactly ``C``.

* a user model (:mod:`eegfm_bench.models.user`) that declares ``blocks``, ``token_layout`` and ``cls_tokens``:
  each block's ``nn.MultiheadAttention`` or declared ``lrp.attention`` module (``F.scaled_dot_product_attention``).

``eegnet`` has no attention modules; ``biot``'s linear attention (separate softmaxes over queries and keys)
has no ``n_query × n_key`` softmax matrix. Both raise :class:`~eegfm_bench.errors.UnsupportedMethodError`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from eegfm_bench.data.datamodule import WindowDataset
from eegfm_bench.interpret.lrp import redirect_sdpa, supported_methods
from eegfm_bench.errors import UnsupportedMethodError
from eegfm_bench.models.user import LRP_ATTENTION_MARK, dry_run_check, user_spec
from eegfm_bench.trainer import predict_gathered


def _labram_hooks(adapter, batch: int, n_chans: int, store: dict[int, list]) -> list:
    n_patches = adapter.n_times // adapter._patch

    def make(i, attn_module):
        def pre(_m, args):
            with torch.no_grad():
                a = attn_module.forward(args[0], return_attention=True)  # (B, H, 1+C·P, 1+C·P)
            a = a[:, :, 1:, 1:].sum(dim=2)  # drop CLS query/key; sum over queries → (B, H, C·P)
            a = a.mean(1).reshape(a.shape[0], n_chans, n_patches).mean(-1)  # heads, patches → (B, C)
            store.setdefault(i, []).append(a.float().cpu().numpy())
        return pre

    return [b.attn.register_forward_pre_hook(make(i, b.attn)) for i, b in enumerate(adapter.blocks)]


def _cbramod_hooks(adapter, batch: int, n_chans: int, store: dict[int, list]) -> list:
    def make(i, mha: nn.MultiheadAttention):
        def pre(_m, args, kwargs):
            xs = args[0] if args else kwargs["query"]  # ((B·P), C, d/2)
            with torch.no_grad():
                _, w = mha.forward(xs, xs, xs, need_weights=True, average_attn_weights=False)  # (B·P, H, C, C)
            a = w.sum(dim=2).mean(1)  # sum over queries, mean over heads → (B·P, C)
            a = a.reshape(batch, -1, n_chans).mean(1)  # mean over patches → (B, C)
            store.setdefault(i, []).append(a.float().cpu().numpy())
        return pre

    return [layer.self_attn_s.register_forward_pre_hook(make(i, layer.self_attn_s), with_kwargs=True)
            for i, layer in enumerate(adapter.blocks)]


def _reve_hooks(adapter, batch: int, n_chans: int, store: dict[int, list]) -> list:
    """REVE: full self-attention over ``C·P`` channel-major tokens (no CLS); the softmax is recomputed from the
    ``to_qkv`` output that enters braindecode's ``ClassicalAttention`` (``softmax(q kᵀ / √d)``, the matrix its
    SDPA call applies)."""
    n_patches = adapter._patches()

    def make(i, attend):
        def pre(_m, args):
            q, k, _ = args[0].chunk(3, dim=-1)  # (B, N, H·d) each
            h = attend.heads
            with torch.no_grad():
                q = q.reshape(q.shape[0], q.shape[1], h, -1).transpose(1, 2)
                k = k.reshape(k.shape[0], k.shape[1], h, -1).transpose(1, 2)
                a = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1)  # (B, H, N, N)
            a = a.sum(dim=2).mean(1)  # sum over queries, mean over heads → (B, N)
            a = a.reshape(a.shape[0], -1, n_patches).mean(-1)  # channel-major: mean over patches → (B, C)
            store.setdefault(i, []).append(a.float().cpu().numpy())
        return pre

    return [layer[0].attend.register_forward_pre_hook(make(i, layer[0].attend))
            for i, layer in enumerate(adapter.blocks)]


def _user_attention_modules(adapter) -> list[nn.Module]:
    """One attention module per block of a user model: the block's first ``nn.MultiheadAttention`` or module
    declared in ``lrp.attention`` (:mod:`eegfm_bench.models.user`)."""
    out = []
    for b in adapter.blocks:
        found = [m for m in b.modules() if isinstance(m, nn.MultiheadAttention) or getattr(m, LRP_ATTENTION_MARK, False)]
        out.append(found[0] if found else None)
    return out


def _user_hooks(adapter, batch: int, n_chans: int, store: dict[int, list]) -> list:
    """A user model: the softmax matrices of each block's attention module, recomputed from its input
    (``nn.MultiheadAttention`` with ``need_weights``; a declared module by running it once more with
    ``F.scaled_dot_product_attention`` replaced by ``softmax(q kᵀ · scale)``), then tokens → channels by the
    declared ``token_layout`` after the ``cls_tokens`` leading tokens."""
    um = adapter.user_spec
    cls, layout = int(um.cls_tokens), um.token_layout

    def per_channel(i, a):  # (B, H, N, N) → (B, C)
        if a.shape[0] != batch:
            raise UnsupportedMethodError(
                f"{adapter.name}: block {i}'s attention runs on {a.shape[0]} sequences for a batch of {batch} windows "
                "(attention within each time patch or channel, not over all of a window's tokens), so its keys do "
                "not map to channels by token_layout; fix: drop it from attention.models (probes and attribution "
                "still apply)")
        a = a[:, :, cls:, cls:].sum(dim=2).mean(1)  # sum over queries, mean over heads → (B, N - cls)
        n = a.shape[1]
        if n % n_chans:
            raise UnsupportedMethodError(f"{adapter.name}: block {i} attends over {n} tokens (after {cls} CLS), not a "
                                         f"multiple of the {n_chans} channels; fix: token_layout / cls_tokens in its "
                                         "declaration")
        a = a.reshape(a.shape[0], n_chans, -1) if layout == "channel_major" else \
            a.reshape(a.shape[0], -1, n_chans).transpose(1, 2)
        store.setdefault(i, []).append(a.mean(-1).float().cpu().numpy())

    def make_mha(i, mha):
        def pre(_m, args, kwargs):
            q = args[0] if args else kwargs["query"]
            k = args[1] if len(args) > 1 else kwargs.get("key", q)
            v = args[2] if len(args) > 2 else kwargs.get("value", k)
            with torch.no_grad():
                _, w = nn.MultiheadAttention.forward(mha, q, k, v, need_weights=True, average_attn_weights=False)
            per_channel(i, w)
        return pre

    def make_sdpa(i, mod):
        def pre(_m, args, kwargs):
            mats = []

            def capture(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **extra):
                s = scale if scale is not None else query.shape[-1] ** -0.5
                a = torch.softmax(query @ key.transpose(-2, -1) * s, dim=-1)
                mats.append(a)
                return a @ value

            with redirect_sdpa(capture), torch.no_grad():
                type(mod).forward(mod, *args, **kwargs)
            if not mats:
                raise UnsupportedMethodError(f"{adapter.name}: the declared attention module of block {i} made no "
                                             "F.scaled_dot_product_attention call")
            a = mats[0]
            per_channel(i, a if a.ndim == 4 else a[:, None])
        return pre

    handles = []
    for i, m in enumerate(_user_attention_modules(adapter)):
        fn = make_mha(i, m) if isinstance(m, nn.MultiheadAttention) else make_sdpa(i, m)
        handles.append(m.register_forward_pre_hook(fn, with_kwargs=True))
    return handles


ATTENTION_BACKBONES: dict[str, Callable] = {"labram": _labram_hooks, "cbramod": _cbramod_hooks,
                                            "reve": _reve_hooks}
"""Backbones with softmax attention maps and their hook installers (a user model with a declared
``token_layout`` uses :func:`_user_hooks`)."""


def _hooks_for(adapter) -> Callable:
    name = getattr(adapter, "name", type(adapter).__name__)
    return _user_hooks if getattr(adapter, "user_spec", None) is not None else ATTENTION_BACKBONES[name]


def check_attention_support(backbone: str) -> None:
    """Raise :class:`UnsupportedMethodError` if ``backbone`` has no softmax attention to extract.

    The message says what the backbone supports instead.
    """
    um = user_spec(backbone)
    if um is not None:
        if not um.blocks or not um.token_layout:
            raise UnsupportedMethodError(
                f"no attention maps for user model {backbone!r}: its declaration has no "
                f"{'blocks' if not um.blocks else 'token_layout'}; fix: declare blocks (the transformer "
                "layers), token_layout (channel_major or patch_major) and cls_tokens, or drop it from "
                "attention.models")
        problem = _user_attention_problem(backbone)
        if problem:
            raise UnsupportedMethodError(problem)
        return
    if backbone not in ATTENTION_BACKBONES:
        why = {"eegnet": "it is a convolutional network without attention modules",
               "biot": "its linear attention has no query × key softmax matrix"}.get(backbone, "no extractor is written")
        raise UnsupportedMethodError(
            f"no attention maps for backbone {backbone!r}: {why}; attention maps exist for "
            f"{sorted(ATTENTION_BACKBONES)}. {backbone} supports block-wise probes and attribution methods "
            f"{supported_methods(backbone)}; fix: drop {backbone!r} from attention.models")


_USER_ATTENTION_CHECKED: dict[str, str | None] = {}


def _user_attention_problem(backbone: str) -> str | None:
    """Why per-channel attention maps (paper 003 App. I.4) cannot be drawn for a user model, found on one random
    batch ``(2, n_chans, n_times)`` before any data is read (a config check, like the declaration's dry run:
    :func:`~eegfm_bench.models.user.dry_run_check`): every block needs an attention module, and its softmax
    matrices must map to channels by the declared layout. Cached per declaration."""
    def check(ad, um):
        ad.eval()
        missing = [i for i, m in enumerate(_user_attention_modules(ad)) if m is None]
        if missing:
            return (f"no attention maps for user model {backbone!r}: blocks {missing} hold no nn.MultiheadAttention "
                    "and no module declared in lrp.attention; fix: declare the attention modules (lrp.attention) or "
                    "drop it from attention.models")
        names = list(ad.ch_names)
        handles = _user_hooks(ad, 2, len(names), {})
        try:
            with torch.no_grad():
                ad.tokens(torch.randn(2, len(names), ad.n_times), names)
        except UnsupportedMethodError as err:
            return str(err)
        finally:
            for h in handles:
                h.remove()
        return None

    return dry_run_check(backbone, check, _USER_ATTENTION_CHECKED)


class AttentionExtractor(L.LightningModule):
    """``predict_step``: per-channel attention of every block for a batch of windows (hooks, output unchanged).

    Parameters
    ----------
    adapter : BackboneAdapter
        ``labram``, ``cbramod`` or ``reve`` adapter.
    ch_names : sequence of str
        Channel names of the windows.

    The step returns ``{"index", "attention"}`` with ``attention`` of shape ``(batch, n_blocks, n_chans)``: the
    attention received by each channel's tokens, summed over queries, averaged over heads and the channel's time
    patches. Summed over channels it equals the number of query tokens per attention matrix divided by the patch
    count (LaBraM: ``C``; CBraMod: ``C``; REVE: ``C``), since each softmax row sums to 1 (up to the CLS share for LaBraM).

    Raises
    ------
    UnsupportedMethodError
        For a backbone without softmax attention.
    """

    def __init__(self, adapter: nn.Module, ch_names: Sequence[str]):
        super().__init__()
        name = getattr(adapter, "name", type(adapter).__name__)
        check_attention_support(name)
        if getattr(adapter, "user_spec", None) is not None:
            missing = [i for i, m in enumerate(_user_attention_modules(adapter)) if m is None]
            if missing:
                raise UnsupportedMethodError(
                    f"no attention maps for user model {name!r}: blocks {missing} hold no nn.MultiheadAttention and no "
                    "module declared in lrp.attention; fix: declare the attention modules (lrp.attention) or drop "
                    "it from attention.models")
        self.adapter, self.ch_names, self.kind = adapter, list(ch_names), name

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> dict:
        x = batch["x"]
        store: dict[int, list] = {}
        handles = _hooks_for(self.adapter)(self.adapter, int(x.shape[0]), len(self.ch_names), store)
        try:
            self.adapter.tokens(x, self.ch_names)
        finally:
            for h in handles:
                h.remove()
        att = np.stack([np.concatenate(store[i]) for i in range(len(self.adapter.blocks))], axis=1)
        return {"index": batch["index"], "attention": torch.from_numpy(att)}


def channel_attention(adapter: nn.Module, x: torch.Tensor, ch_names: Sequence[str] | None = None,
                      trainer: dict | None = None) -> np.ndarray:
    """Per-channel attention of every block for a batch of windows ``x`` ``(batch, n_chans, n_times)``.

    Runs :class:`AttentionExtractor` in ``Trainer.predict`` (``trainer``: a ``trainer:`` section, default one CPU).

    Returns
    -------
    ndarray, shape (n_blocks, batch, n_chans)
    """
    names = list(ch_names) if ch_names is not None else list(adapter.ch_names)
    ds = _Dicts(TensorDataset(x.detach().cpu().float(), torch.arange(len(x))))
    out = predict_gathered(AttentionExtractor(adapter, names), ds, trainer or {"accelerator": "cpu"},
                           batch_size=len(x))
    return np.transpose(out["attention"], (1, 0, 2))


class _Dicts(torch.utils.data.Dataset):
    """``(x, index)`` tuples as the DataModule's batch dicts."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        x, j = self.ds[i]
        return {"x": x, "index": j}


def mean_channel_attention(adapter: nn.Module, ws, rows: np.ndarray, batch_size: int = 16,
                           trainer: dict | None = None) -> np.ndarray:
    """Per-channel attention of every block averaged over windows ``rows`` of ``ws`` → ``(n_blocks, n_chans)``.

    One ``Trainer.predict`` pass (:class:`AttentionExtractor`); under DDP every window is counted once.
    """
    out = predict_gathered(AttentionExtractor(adapter, ws.ch_names), WindowDataset(ws, np.sort(rows)), trainer,
                           batch_size=batch_size)
    return out["attention"].mean(0)
