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
            y, names = cond.apply(x, EEGMMIDB, condition_rng(0, cond), CTX)
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
