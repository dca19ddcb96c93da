"""Condition strings, the default App. D sweep, and applying conditions (paper 003 App. D)."""
import numpy as np
import pytest
import torch

from eegfm_bench.perturb.conditions import (
    AdditiveNoise,
    ChannelDropout,
    PerturbContext,
    RegionNoise,
    condition_rng,
    default_conditions,
    format_condition,
    parse_condition,
)
from eegfm_bench.perturb.channels import dropout_mask
from eegfm_bench.perturb.noise import FilterSpec, snr_db
from eegfm_bench.perturb.regions import MissingElectrodesWarning
from eegfm_bench.perturb.rng import WindowRNG, WindowRNGError
from eegfm_bench.registry import UnknownNameError

EEGMMIDB = ['FC5', 'FC3', 'FC1', 'FCz', 'FC2', 'FC4', 'FC6', 'C5', 'C3', 'C1', 'Cz', 'C2', 'C4', 'C6', 'CP5', 'CP3',
            'CP1', 'CPz', 'CP2', 'CP4', 'CP6', 'Fp1', 'Fpz', 'Fp2', 'AF7', 'AF3', 'AFz', 'AF4', 'AF8', 'F7', 'F5', 'F3',
            'F1', 'Fz', 'F2', 'F4', 'F6', 'F8', 'FT7', 'FT8', 'T7', 'T8', 'T9', 'T10', 'TP7', 'TP8', 'P7', 'P5', 'P3',
            'P1', 'Pz', 'P2', 'P4', 'P6', 'P8', 'PO7', 'PO3', 'POz', 'PO4', 'PO8', 'O1', 'Oz', 'O2', 'Iz']
CTX = PerturbContext(dataset="eegmmidb", task="eegmmidb_mi", filter=FilterSpec(160.0, 0.5, 45.0, 60.0), seed=0)

FIXED = ["clean",
         "white_snr=10dB", "white_snr=5dB", "white_snr=0dB", "white_snr=-3dB", "white_snr=-5dB", "white_snr=-15dB",
         "pink_snr=10dB", "pink_snr=5dB", "pink_snr=0dB", "pink_snr=-3dB", "pink_snr=-5dB",
         "dropout_p=0.1_zero", "dropout_p=0.3_zero", "dropout_p=0.5_zero",
         "region=primary_zero", "region=control_zero",
         "region_noise=primary_snr=5dB", "region_noise=primary_snr=-3dB",
         "region_noise=control_snr=5dB", "region_noise=control_snr=-3dB"]
VARIABLE = FIXED[:15] + ["dropout_p=0.1_removed", "dropout_p=0.3_removed", "dropout_p=0.5_removed"] + FIXED[15:17] \
    + ["region=primary_removed", "region=control_removed"] + FIXED[17:]


def test_default_conditions_in_order():
    assert [c.name for c in default_conditions("eegmmidb_mi", variable_channels=False)] == FIXED
    conds = default_conditions("eegmat", variable_channels=True)
    assert [c.name for c in conds] == VARIABLE
    assert [c.name for c in conds if c.needs_variable_channels] == [n for n in VARIABLE if n.endswith("_removed")]
    with_sub = default_conditions("eegmmidb_eyes", True, include_substitution=True)
    assert with_sub[-1].name == "region_sub=primary" and with_sub[-1].attribution_only
    assert not any(c.attribution_only for c in conds)


def test_parse_format_round_trip():
    for name in VARIABLE + ["region_sub=primary", "region_sub=control", "white_snr=2.5dB", "dropout_p=0.25_zero"]:
        assert parse_condition(name).name == name
        assert format_condition(name) == name
    assert format_condition("white_snr=-5.0dB") == "white_snr=-5dB"
    assert parse_condition("pink_snr=-3dB") == AdditiveNoise("pink", -3.0)
    assert parse_condition("dropout_p=0.5_removed") == ChannelDropout(0.5, "removed")
    assert parse_condition("region_noise=control_snr=5dB") == RegionNoise("control", 5.0)


@pytest.mark.parametrize("text,valid", [
    ("gaussian_snr=5dB", "white_snr=<snr>dB"),
    ("region=frontal_zero", "primary, control"),
    ("region_noise=occipital_snr=5dB", "primary, control"),
    ("region_sub=left", "primary, control"),
    ("dropout_p=0.5_padded", "zero, removed"),
    ("white_snr=5", "white_snr=<snr>dB"),
])
def test_unknown_condition_or_region_lists_valid_ones(text, valid):
    with pytest.raises(UnknownNameError, match=valid.replace("<", ".").replace(">", ".")):
        parse_condition(text)


def test_unknown_task_raises():
    with pytest.raises(UnknownNameError, match="eegmmidb_mi"):
        default_conditions("bci_iv_2a", False)


@pytest.mark.parametrize("text", ["white_snr=infdB", "pink_snr=-infdB", "region_noise=primary_snr=nandB"])
def test_non_finite_snr_raises(text):
    with pytest.raises(ValueError, match="finite"):
        parse_condition(text)


def test_every_default_condition_applies():
    x = np.random.default_rng(0).standard_normal((2, 64, 320)).astype(np.float32)
    with pytest.warns(MissingElectrodesWarning):  # the motor region's missing electrodes are reported
        for cond in default_conditions("eegmmidb_mi", True, include_substitution=True):
            y, names = cond.apply(x, EEGMMIDB, WindowRNG.from_seed(0, cond.name, len(x)), CTX)
            assert y.dtype == np.float32 and y.shape == (2, len(names), 320)
            assert (len(names) < 64) == cond.needs_variable_channels, cond.name
            if cond.name == "clean":
                assert y is x
            if isinstance(cond, AdditiveNoise):
                np.testing.assert_allclose(snr_db(x, y.astype(np.float64) - x), cond.snr_db, atol=0.1)


def test_dropout_condition_uses_the_dataset_mask_and_records_it():
    cond = parse_condition("dropout_p=0.3_removed")
    y, names = cond.apply(torch.zeros(1, 64, 10), EEGMMIDB, 0, CTX)
    mask = dropout_mask(EEGMMIDB, 0.3, seed=0, dataset="eegmmidb", rule=CTX.mask)  # the paper's rule by default
    assert CTX.mask == "paper"
    assert names == list(mask.kept) and isinstance(y, torch.Tensor) and y.shape[1] == 64 - mask.n_dropped
    rec = cond.details(EEGMMIDB, CTX)
    assert rec["dropped"] == list(mask.dropped) and rec["condition"] == "dropout_p=0.3_removed"
    region = parse_condition("region=primary_zero").details(EEGMMIDB, CTX)
    assert region["missing"] == ["TP9", "TTP7h", "TPP9h", "TP10", "TPP8h", "TPP10h"] and len(region["channels"]) == 17


def test_condition_rng_is_seeded_per_condition():
    a = condition_rng(0, "white_snr=5dB").standard_normal(4)
    np.testing.assert_array_equal(a, condition_rng(0, parse_condition("white_snr=5dB")).standard_normal(4))
    assert not np.allclose(a, condition_rng(0, "white_snr=0dB").standard_normal(4))
    assert not np.allclose(a, condition_rng(1, "white_snr=5dB").standard_normal(4))


# ---------------------------------------------------------------------------------------------- the rng a condition gets
def test_window_rng_draws_each_row_from_its_windows_generator():
    """Issue 33 item 4: the one rng type. Row i of every draw comes from window i's Generator, so a window's draws
    are the same in any batch; numpy's arguments pass through."""
    uids = np.array([7, 11, 13, 2 ** 63 + 5], dtype=np.uint64)
    batch = WindowRNG.for_windows(0, "spikes=2", uids)
    for draw in (lambda r, n: r.uniform(-2.0, 3.0, size=(n, 5)), lambda r, n: r.integers(0, 10, size=(n, 3, 2)),
                 lambda r, n: r.normal(1.0, 0.5, size=n), lambda r, n: r.standard_normal((n, 4), np.float32),
                 lambda r, n: r.random((n, 2)), lambda r, n: r.choice(9, size=(n, 3), replace=False)):
        got = draw(WindowRNG.for_windows(0, "spikes=2", uids), 4)
        np.testing.assert_array_equal(got, np.concatenate([draw(a, 1) for a in
                                                           [WindowRNG.for_windows(0, "spikes=2", uids[[i]])
                                                            for i in range(4)]]))
    u = batch.uniform(-2.0, 3.0, size=(4, 5))
    # window i's Generator: seeded with (seed, sha256 of the condition string, window uid), as the sweep always was
    import hashlib
    d = hashlib.sha256(b"spikes=2").digest()
    words = [0, 0, *[int.from_bytes(d[j:j + 4], "little") for j in range(0, 16, 4)]]
    own = np.random.default_rng([*words, 2 ** 63 + 5 & 0xFFFFFFFF, (2 ** 63 + 5) >> 32])
    np.testing.assert_array_equal(u[3], own.uniform(-2.0, 3.0, 5))
    assert u.min() >= -2.0 and u.max() < 3.0 and len(batch) == 4
    assert batch.integers(0, 10, size=(4, 6), dtype=np.int16).dtype == np.int16
    # another seed or condition, other draws; windows numbered 0..n-1 by from_seed
    assert not np.array_equal(WindowRNG.for_windows(1, "spikes=2", uids).random((4, 3)),
                              WindowRNG.for_windows(0, "spikes=2", uids).random((4, 3)))
    assert not np.array_equal(WindowRNG.for_windows(0, "spikes=3", uids).random((4, 3)),
                              WindowRNG.for_windows(0, "spikes=2", uids).random((4, 3)))
    np.testing.assert_array_equal(WindowRNG.from_seed(0, "x", 3).random((3, 2)),
                                  WindowRNG.for_windows(0, "x", np.arange(3, dtype=np.uint64)).random((3, 2)))
    assert WindowRNG.for_windows(0, "x", np.zeros(0, np.uint64)).normal(size=(0, 3)).shape == (0, 3)


def test_window_rng_refuses_a_draw_for_the_whole_batch():
    rng = WindowRNG.from_seed(0, "spikes=2", 3)
    with pytest.raises(WindowRNGError, match=r"without size .* fix: pass size=\(len\(rng\), \.\.\.\)"):
        rng.uniform(0.0, 1.0)
    with pytest.raises(WindowRNGError, match="batch of 3 windows; fix"):
        rng.normal(size=(4, 2))
    # a condition gets a WindowRNG (an int seed stands for one); a single Generator would tie noise to the batch
    x = np.random.default_rng(0).standard_normal((2, 64, 320)).astype(np.float32)
    cond = parse_condition("white_snr=0dB")
    a, _ = cond.perturb(x, EEGMMIDB, 5, CTX)
    b, _ = cond.perturb(x, EEGMMIDB, WindowRNG.from_seed(5, cond.name, 2), CTX)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="WindowRNG or an int seed"):
        cond.perturb(x, EEGMMIDB, np.random.default_rng(0), CTX)


def test_every_condition_carries_its_display_name_and_plot_family():
    """What the page labels a table with and the figure's panel, from the condition itself (issue 33 item 4)."""
    from eegfm_bench.perturb.conditions import DROPOUT_REMOVED_PANEL, DROPOUT_ZERO_PANEL, PINK_NOISE_PANEL, \
        WHITE_NOISE_PANEL

    want = {"clean": ("clean", None), "white_snr=-5dB": ("white noise (SNR in dB)", (WHITE_NOISE_PANEL, -5.0)),
            "pink_snr=10dB": ("pink noise (SNR in dB)", (PINK_NOISE_PANEL, 10.0)),
            "dropout_p=0.3_zero": ("random channel dropout, zero-padded", (DROPOUT_ZERO_PANEL, 0.3)),
            "dropout_p=0.5_removed": ("random channel dropout, channels removed", (DROPOUT_REMOVED_PANEL, 0.5)),
            "region=primary_zero": ("region removal, zero-padded", None),
            "region=control_removed": ("region removal, channels removed", None),
            "region_noise=primary_snr=-3dB": ("region noise", None),
            "region_sub=primary": ("region substitution", None)}
    for text, (label, plot) in want.items():
        c = parse_condition(text)
        assert (c.display_name, c.plot) == (label, plot), text
