"""float16 storage of the cached tokens (issue 35, item 3: ``data.feature_dtype``).

A float16 entry holds half the bytes of the float32 one, its tokens are the float32 tokens rounded to float16 (the
nearest float16, so within 2⁻¹¹ relative), it lives under another key (a float16 entry is never opened when float32
tokens are asked for, nor the reverse), tokens beyond float16's range are refused instead of stored as ``inf``, the
head reads them back as float32, and the setting is part of the config hash of the cells that read cached tokens
only. A toy adapter whose tokens are the windows' samples (known answers), then a tiny LaBraM on real staged EEGMMIDB
through the feature stage. The measured effect on a head-only result is in ``docs/guide/scaling.md``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from eegfm_bench.config.cv import CVConfig, DataConfig, RunConfig
from eegfm_bench.data.datamodule import WindowDataset
from eegfm_bench.data.windows import WindowSet
from eegfm_bench.models.features import FeatureDtypeError, extract_features
from eegfm_bench.runs.cv.cells import cell_hash, load_config
from eegfm_bench.runs.cv.feature_stage import run_feature_stage

from eegfm_testutils import requires_data


class Samples(nn.Module):
    """Tokens ``(batch, 4, 10)``: ``scale`` × the first channel's 40 samples."""

    name = "samples"
    arch_kwargs: dict = {}

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.full((1,), float(scale)))

    @property
    def blocks(self):
        return []

    def tokens(self, x, ch_names=None):
        return self.scale * x[:, 0].reshape(len(x), 4, 10)


def _windows(n: int = 24) -> WindowSet:
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((n, 2, 40)) * 3).astype(np.float32)
    return WindowSet(X, np.repeat([0, 1], n // 2).astype(np.int64), np.array([f"S{i % 6}" for i in range(n)]),
                     np.array([f"r{i}" for i in range(n)]), np.zeros(n, dtype=np.int64), np.full(n, "toy"),
                     ["C3", "C4"], 100.0, ["a", "b"], {"cache_key": "dtype-toy"})


def _extract(ws, cache, dtype, scale=1.0):
    return extract_features(Samples(scale), ws, cache_dir=cache, trainer={"accelerator": "cpu"}, batch_size=8,
                            dtype=dtype)


def test_a_float16_entry_has_half_the_bytes_the_rounded_tokens_and_its_own_key(tmp_path):
    ws = _windows()
    f32 = _extract(ws, tmp_path, "float32")
    f16 = _extract(ws, tmp_path, "float16")
    assert f16.folder != f32.folder and not f16.from_cache  # another key: the float32 entry was not opened
    t32, t16 = f32.array("tokens"), f16.array("tokens")
    assert t32.dtype == np.float32 and t16.dtype == np.float16 and t16.shape == t32.shape == (24, 4, 10)
    assert t16.nbytes * 2 == t32.nbytes == 24 * 40 * 4
    assert (f16.folder / "tokens.npy").stat().st_size - 128 == ((f32.folder / "tokens.npy").stat().st_size - 128) // 2
    expected = ws.X[:, 0].reshape(24, 4, 10)
    np.testing.assert_array_equal(t32, expected)  # float32: the samples themselves
    np.testing.assert_array_equal(t16, expected.astype(np.float16))  # float16: their nearest float16
    err = np.abs(t16.astype(np.float32) - expected)
    assert 0 < err.max() and np.all(err <= np.abs(expected) * 2.0 ** -11)
    assert f16.meta["tokens_dtype"] == "float16" and f32.meta["tokens_dtype"] == "float32"
    # each dtype reopens its own entry, never the other's
    again32, again16 = _extract(ws, tmp_path, "float32"), _extract(ws, tmp_path, "float16")
    assert again32.from_cache and again32.folder == f32.folder and again32.array("tokens").dtype == np.float32
    assert again16.from_cache and again16.folder == f16.folder and again16.array("tokens").dtype == np.float16


def test_a_float16_cache_is_never_read_for_float32_tokens(tmp_path):
    ws = _windows()
    f16 = _extract(ws, tmp_path, "float16")  # the float16 entry first, in an otherwise empty cache
    f32 = _extract(ws, tmp_path, "float32")
    assert not f32.from_cache and f32.folder != f16.folder
    np.testing.assert_array_equal(f32.array("tokens"), ws.X[:, 0].reshape(24, 4, 10))


def test_tokens_beyond_float16_are_refused_with_the_fix(tmp_path):
    ws = _windows()
    with pytest.raises(FeatureDtypeError, match=r"do not fit float16.*fix: data.feature_dtype: float32"):
        _extract(ws, tmp_path, "float16", scale=1e5)  # |tokens| up to ~1e6 > 65504
    assert _extract(ws, tmp_path, "float32", scale=1e5).array("tokens").max() > 65504
    with pytest.raises(ValueError, match="valid"):
        _extract(ws, tmp_path, "bfloat8")


def test_the_head_reads_float16_tokens_as_float32(tmp_path):
    ws = _windows()
    t16 = _extract(ws, tmp_path, "float16").array("tokens")
    item = WindowDataset(ws, np.arange(24), t16)[5]
    assert item["tokens"].dtype == torch.float32
    np.testing.assert_array_equal(item["tokens"].numpy(), t16[5].astype(np.float32))


def test_feature_dtype_is_hashed_for_token_reading_cells_only():
    def h(regime, dtype, head="mean"):
        run = RunConfig(model="labram", regime=regime, heads=[head])
        return cell_hash(CVConfig(runs=[run], data=DataConfig(feature_dtype=dtype)), run, head, "k")

    assert h("head_only", "float16") != h("head_only", "float32")
    assert h("head_only", "float16", "ridge") != h("head_only", "float32", "ridge")
    assert h("lp_ft", "float16") != h("lp_ft", "float32")
    assert h("full", "float16") == h("full", "float32")  # reads no cached token


@requires_data
def test_the_feature_stage_stores_float16_labram_tokens_equal_to_float32_rounded(tmp_path):
    def stage(dtype):
        cfg = {"experiment": "fd", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "o"), "confound": False,
               "data": {"subjects": [1, 2, 3], "max_windows_per_subject": 4, "batch_size": 8,
                        "cache_dir": str(tmp_path / "c"), "feature_dtype": dtype},
               "split": {"k": 3, "n_val_groups": 1},
               "runs": [{"model": "labram", "regime": "head_only", "heads": ["mean"],
                         "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]}
        (folder,) = run_feature_stage(load_config(cfg), progress=False)
        return folder, np.load(folder / "tokens.npy")

    (d32, t32), (d16, t16) = stage("float32"), stage("float16")
    assert d32 != d16 and t32.dtype == np.float32 and t16.dtype == np.float16 and t32.shape[0] == 24
    assert t16.nbytes * 2 == t32.nbytes
    assert np.abs(t32).max() > 0.1  # real tokens, not zeros
    np.testing.assert_array_equal(t16, t32.astype(np.float16))
