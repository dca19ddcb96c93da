"""Block-output cache and block-wise linear probes (paper 003 App. I.5) on synthetic block outputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from eegfm_bench.data.windows import WindowSet
from eegfm_bench.interpret.probes import fit_probe, probe_blocks
from eegfm_bench.models.features import extract_features, state_hash
from eegfm_bench.reports.probes import plot_probe_curves, pooling_colors, probe_markdown, probe_table


def compute_block_outputs(adapter, ws, cache_dir, batch_size=16):
    return extract_features(adapter, ws, parts=("blocks",), cache_dir=cache_dir, batch_size=batch_size,
                            trainer={"accelerator": "cpu"})

N_CHANS, N_TIMES = 4, 40


class _Select(nn.Module):
    """Block whose output is channel ``ch`` of the input cut into 4 tokens of 10 samples: (batch, 4, 10)."""

    def __init__(self, ch: int):
        super().__init__()
        self.ch = ch
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.scale * x[:, self.ch].reshape(len(x), 4, 10)


class ToyAdapter(nn.Module):
    """Adapter-shaped toy: block 0 sees the label channel, block 1 a pure-noise channel."""

    name = "toy"

    def __init__(self):
        super().__init__()
        self.arch_kwargs = {}
        self._blocks = nn.ModuleList([_Select(0), _Select(3)])
        self.calls = 0

    @property
    def blocks(self):
        return list(self._blocks)

    def block_to_tokens(self, out):
        return out

    def tokens(self, x, ch_names=None):
        self.calls += 1
        self._blocks[0](x)
        return self._blocks[1](x)


def _windows(n_per_class: int = 60, seed: int = 0) -> WindowSet:
    """Channel 0 carries the label as a DC offset (±1); channels 1–3 are unit white noise."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n_per_class)
    X = rng.standard_normal((len(y), N_CHANS, N_TIMES)).astype(np.float32)
    X[:, 0] += np.where(y == 1, 1.0, -1.0)[:, None]
    subj = np.array([f"S{i % 10:02d}" for i in range(len(y))])
    return WindowSet(X, y.astype(np.int64), subj, np.array([f"r{i}" for i in range(len(y))]),
                     np.zeros(len(y), dtype=np.int64), np.full(len(y), "toy"), ["C3", "Cz", "C4", "Pz"], 100.0,
                     ["a", "b"], {"cache_key": f"toy{seed}"})


def _split(ws):
    subj = np.asarray(ws.subject)
    tr = np.flatnonzero(np.isin(subj, [f"S{i:02d}" for i in range(6)]))
    va = np.flatnonzero(np.isin(subj, ["S06", "S07"]))
    te = np.flatnonzero(np.isin(subj, ["S08", "S09"]))
    return tr, va, te


def test_block_cache_is_read_not_recomputed(tmp_path):
    ws = _windows()
    ad = ToyAdapter()
    first = compute_block_outputs(ad, ws, cache_dir=tmp_path, batch_size=32)
    calls = ad.calls
    assert not first.from_cache and calls == 4  # 120 windows / 32 per batch
    stamp = {p.name: p.stat().st_mtime_ns for p in first.folder.iterdir()}
    ad.tokens = lambda *a, **k: (_ for _ in ()).throw(AssertionError("backbone forward on a cached run"))
    second = compute_block_outputs(ad, ws, cache_dir=tmp_path, batch_size=32)
    assert second.from_cache and second.folder == first.folder
    # nothing rewritten; the read only touches the entry's LAST_USED marker (eegfm-bench cache --prune)
    assert {p.name: p.stat().st_mtime_ns for p in second.folder.iterdir() if p.name != "LAST_USED"} == stamp
    assert (second.folder / "LAST_USED").is_file()
    # exact content: block 0 tokens are channel 0 cut into 4 × 10 (float16), mean is the token mean (float32)
    np.testing.assert_array_equal(second.tokens(0), ws.X[:, 0].reshape(-1, 4, 10).astype(np.float16))
    np.testing.assert_allclose(second.mean(0), ws.X[:, 0].reshape(-1, 4, 10).mean(1), rtol=1e-6)
    assert second.tokens(1).dtype == np.float16 and second.tokens(1).shape == (120, 4, 10)
    # probe inputs by head name (one pooling vocabulary): max over tokens of the stored float16 tokens
    np.testing.assert_array_equal(second.features(0, "max", np.arange(3)),
                                  ws.X[:3, 0].reshape(-1, 4, 10).astype(np.float16).astype(np.float32).max(1))
    assert second.features(0, "flatten").shape == (120, 40)
    # other weights → another key → recomputed
    ad2 = ToyAdapter()
    with torch.no_grad():
        ad2._blocks[0].scale.fill_(2.0)
    assert state_hash(ad2) != state_hash(ToyAdapter())
    assert not compute_block_outputs(ad2, ws, cache_dir=tmp_path).from_cache


def test_probe_near_one_on_label_block_and_chance_on_noise_block(tmp_path):
    ws = _windows()
    tr, va, te = _split(ws)
    outs = compute_block_outputs(ToyAdapter(), ws, cache_dir=tmp_path)
    rows = probe_blocks(outs, ws.y, tr, va, te, n_classes=2, poolings=("mean", "flatten", "max"), max_epochs=20,
                        patience=5, lr=1e-2)
    got = {(r["block"], r["pooling"]): r["bacc"] for r in rows}
    assert got[(0, "mean")] >= 0.95 and got[(0, "flatten")] >= 0.95
    assert got[(0, "max")] >= 0.8  # the max of 10 samples of N(±1, 1) still separates the classes
    assert abs(got[(1, "mean")] - 0.5) <= 0.2 and abs(got[(1, "flatten")] - 0.5) <= 0.2
    assert {r["relative_depth"] for r in rows} == {0.0, 1.0}
    assert all(r["epochs"] <= 20 for r in rows)


def test_fit_probe_early_stops_and_flatten_uses_rmsnorm():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 30)).astype(np.float32)
    y = rng.integers(0, 2, 200)
    fit = fit_probe(X[:120], y[:120], X[120:160], y[120:160], X[160:], y[160:], "flatten", 2, max_epochs=20,
                    patience=2, lr=1e-3)
    assert fit.epochs <= 20 and fit.epochs - fit.best_epoch <= 2
    from eegfm_bench.interpret.probes import LinearProbe

    p = LinearProbe(30, 2, "flatten")
    assert isinstance(p.norm, nn.RMSNorm) and p.norm.weight is None
    assert sum(q.numel() for q in p.parameters()) == 30 * 2 + 2  # a single linear layer


def test_probe_table_markdown_and_plot(tmp_path):
    import pandas as pd

    rows = []
    for fold, v in enumerate([0.6, 0.8]):
        for b in range(3):
            for stage in ("frozen", "fine-tuned"):
                rows.append({"model": "m", "stage": stage, "pooling": "mean", "block": b, "relative_depth": b / 2,
                             "fold": fold, "value": v + 0.05 * b})
    table = probe_table(pd.DataFrame(rows))
    r = table[(table.stage == "frozen") & (table.block == 2)].iloc[0]
    assert r["mean"] == pytest.approx(0.8) and r["std"] == pytest.approx(np.std([0.7, 0.9], ddof=1))
    md = probe_markdown(table)
    assert "| 2 | 1.00 | 0.800 ± 0.141 | 0.800 ± 0.141 |" in md
    png = plot_probe_curves(table, tmp_path / "c.png", chance=0.5)
    assert png.stat().st_size > 1000


def test_every_pooling_of_a_probe_figure_has_its_own_colour():
    """A pooling beyond mean and flatten (a registered ``max`` or a plug-in's) is drawn in a colour of its own:
    left to matplotlib's cycle, the third curve was blue again, the colour of ``mean``."""
    got = pooling_colors(["std", "max", "mean", "max", "flatten"])
    assert got == {"mean": "C0", "flatten": "C1", "max": "C2", "std": "C3"}
    assert pooling_colors(["max"]) == {"max": "C0"}
