"""Region lists, task assignments and region perturbations (paper 003 App. D.3, D.4, D.5, Table 6)."""
import warnings

import mne
import numpy as np
import pytest
from mne.datasets import eegbci

from eegfm_bench.perturb.channels import channel_key
from eegfm_bench.perturb.noise import FilterSpec, snr_db, signal_power
from eegfm_bench.perturb.regions import (
    MissingElectrodesWarning,
    load_regions,
    region_dropout,
    region_noise,
    region_substitution,
    resolve_region,
    task_regions,
)
from eegfm_bench.registry import UnknownNameError

# EEGMMIDB channel names as stored in its EDF files; mne.datasets.eegbci.standardize gives the 10-05 spelling
EEGMMIDB_RAW = ['Fc5.', 'Fc3.', 'Fc1.', 'Fcz.', 'Fc2.', 'Fc4.', 'Fc6.', 'C5..', 'C3..', 'C1..', 'Cz..', 'C2..', 'C4..',
                'C6..', 'Cp5.', 'Cp3.', 'Cp1.', 'Cpz.', 'Cp2.', 'Cp4.', 'Cp6.', 'Fp1.', 'Fpz.', 'Fp2.', 'Af7.', 'Af3.',
                'Afz.', 'Af4.', 'Af8.', 'F7..', 'F5..', 'F3..', 'F1..', 'Fz..', 'F2..', 'F4..', 'F6..', 'F8..', 'Ft7.',
                'Ft8.', 'T7..', 'T8..', 'T9..', 'T10.', 'Tp7.', 'Tp8.', 'P7..', 'P5..', 'P3..', 'P1..', 'Pz..', 'P2..',
                'P4..', 'P6..', 'P8..', 'Po7.', 'Po3.', 'Poz.', 'Po4.', 'Po8.', 'O1..', 'Oz..', 'O2..', 'Iz..']
# EEGMAT (19-channel 10-20 montage, old temporal names)
EEGMAT = ['Fp1', 'Fp2', 'F3', 'F4', 'F7', 'F8', 'T3', 'T4', 'C3', 'C4', 'T5', 'T6', 'P3', 'P4', 'O1', 'O2', 'Fz',
          'Cz', 'Pz']
FILT = FilterSpec(160.0, 0.5, 45.0, 60.0)
ignore_missing = pytest.mark.filterwarnings("ignore::eegfm_bench.perturb.regions.MissingElectrodesWarning")


@pytest.fixture(scope="module")
def eegmmidb():
    raw = mne.io.RawArray(np.zeros((64, 2)), mne.create_info(EEGMMIDB_RAW, 160.0, "eeg"), verbose=False)
    eegbci.standardize(raw)
    return list(raw.ch_names)


def test_motor_imagery_regions_on_eegmmidb(eegmmidb):
    with pytest.warns(MissingElectrodesWarning, match="TP9, TTP7h, TPP9h, TP10, TPP8h, TPP10h"):
        pri = resolve_region("eegmmidb_mi", "primary", eegmmidb)
    assert pri.regions == ("central_left", "central_middle", "central_right", "centroparietal_left",
                           "centroparietal_right")
    assert pri.channels == ("C5", "C3", "C1", "Cz", "C2", "C4", "C6", "CP5", "CP3", "CP4", "CP6", "T7", "T8", "T9",
                            "T10", "TP7", "TP8")  # montage order, montage spelling
    assert list(pri.indices) == sorted(pri.indices) and [eegmmidb[i] for i in pri.indices] == list(pri.channels)
    assert pri.missing == ("TP9", "TTP7h", "TPP9h", "TP10", "TPP8h", "TPP10h")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the control region is complete: no warning
        ctl = resolve_region("eegmmidb_mi", "control", eegmmidb)
    assert set(ctl.channels) == {"PO3", "POz", "PO4", "O1", "Oz", "O2", "Iz", "Fp1", "Fpz", "Fp2", "AF3", "AF4",
                                 "AF7", "AF8", "AFz"}
    assert ctl.missing == ()


def test_eyes_regions_on_eegmmidb(eegmmidb):
    pri = resolve_region("eegmmidb_eyes", "primary", eegmmidb, warn=False)
    assert set(pri.channels) == {"Fp1", "Fpz", "Fp2", "AF3", "AF4", "AF7", "AF8", "AFz", "PO7", "PO3", "POz", "PO4",
                                 "O1", "Oz", "O2", "Iz", "PO8"}
    assert pri.missing == ("PO5", "PO9", "CB1", "PO6", "PO10", "CB2")
    ctl = resolve_region("eegmmidb_eyes", "control", eegmmidb, warn=False)
    assert len(ctl.channels) == 4 + 6 + 4 + 4 + 3 + 4 - 2  # F9, F10 missing
    assert ctl.missing == ("F9", "F10")


@pytest.mark.parametrize("names", [EEGMAT, [{"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}.get(n, n) for n in EEGMAT],
                                   [n.upper() for n in EEGMAT]])
def test_working_memory_regions_on_the_19_channel_1020_montage(names):
    pri = resolve_region("eegmat", "primary", names, warn=False)
    assert pri.channels == tuple(names[EEGMAT.index(n)] for n in ("F3", "F4", "F7", "F8", "Fz"))
    ctl = resolve_region("eegmat", "control", names, warn=False)
    # T3/T4 are the 10-20 names of T7/T8 (Central L/R)
    assert ctl.channels == tuple(names[EEGMAT.index(n)] for n in ("T3", "T4", "C3", "C4", "O1", "O2"))
    assert "T7" not in ctl.missing and "PO3" in ctl.missing and "C5" in ctl.missing


def test_unknown_task_or_region_lists_valid_names():
    with pytest.raises(UnknownNameError, match="eegmat, eegmmidb_eyes, eegmmidb_mi.*motor_imagery"):
        task_regions("sleep")
    with pytest.raises(UnknownNameError, match="Valid regions: primary, control"):
        resolve_region("eegmat", "frontal", EEGMAT)


def test_region_without_any_electrode_raises():
    with pytest.raises(ValueError, match="none of its electrodes"):
        resolve_region("eegmmidb_eyes", "primary", ["Cz", "C3", "C4"])


def test_region_lists_match_the_paper_and_10_05_names():
    regions = load_regions()
    d3 = {k: v for k, v in regions.items() if not k.startswith("sleep_")}
    assert len(d3) == 18
    assert sum(len(v) for v in d3.values()) == 8 + 14 + 10 + 11 + 15 + 11 + 15
    flat = [channel_key(e) for v in d3.values() for e in v]
    assert len(flat) == len(set(flat)), "an electrode is in two D.3 regions"
    name = "colin27_1005" if "colin27_1005" in mne.channels.get_builtin_montages() else "standard_1005"
    montage = mne.channels.make_standard_montage(name).ch_names  # MNE's 10-05 names
    assert {e for v in d3.values() for e in v} - set(montage) == {"CB1", "CB2"}
    for task in ("movement", "motor_imagery", "visual_p300", "working_memory", "eyes_open_closed",
                 "seizure_detection"):
        r = task_regions(task)
        assert not set(r["primary"]) & set(r["control"])
    assert task_regions("eegmmidb_mi") == task_regions("motor_imagery")
    assert task_regions("eegmat")["control"] == ("posterior_middle", "central_left", "central_right")


@ignore_missing
def test_region_dropout_zero_and_removed(eegmmidb):
    x = np.random.default_rng(0).standard_normal((2, 64, 100)).astype(np.float32)
    y, names, sel = region_dropout(x, eegmmidb, "eegmmidb_mi", "primary", "zero")
    assert y.shape == x.shape and names == eegmmidb
    assert (y[:, list(sel.indices)] == 0).all()
    rest = [i for i in range(64) if i not in sel.indices]
    np.testing.assert_array_equal(y[:, rest], x[:, rest])
    y, names, sel = region_dropout(x, eegmmidb, "eegmmidb_mi", "control", "removed")
    assert y.shape == (2, 64 - 15, 100) and not set(names) & set(sel.channels)
    np.testing.assert_array_equal(y, x[:, [eegmmidb.index(n) for n in names]])


@ignore_missing
@pytest.mark.parametrize("snr", [5.0, -3.0])
def test_region_noise_hits_only_the_region_at_its_snr(eegmmidb, snr):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 64, 640)).astype(np.float64)
    sel0 = region_noise(x, eegmmidb, "eegmmidb_mi", "primary", snr, FILT, 0)[2]
    x[:, list(sel0.indices)] *= 3.0  # the region is stronger than the montage: the two SNR bases differ by ~6 dB
    y, names, sel = region_noise(x, eegmmidb, "eegmmidb_mi", "primary", snr, FILT, 0, power="region")
    rest = [i for i in range(64) if i not in sel.indices]
    np.testing.assert_array_equal(y[:, rest], x[:, rest])
    np.testing.assert_allclose(snr_db(x, y - x, picks=sel.indices), snr, atol=1e-6)
    # the default basis (the authors' code): the montage's signal power against the region's noise power
    ym, _, _ = region_noise(x, eegmmidb, "eegmmidb_mi", "primary", snr, FILT, 0)
    np.testing.assert_array_equal(ym[:, rest], x[:, rest])
    p_s = signal_power(x)
    p_n = signal_power(ym - x, picks=sel.indices)
    np.testing.assert_allclose(10 * np.log10(p_s / p_n), snr, atol=1e-6)
    assert abs(float(np.mean(snr_db(x, ym - x, picks=sel.indices))) - snr) > 0.3
    assert np.all(np.abs(snr_db(x, y - x) - snr) > 1.0)  # over all channels it is not the target


@ignore_missing
def test_region_substitution_on_primary(eegmmidb):
    x = np.random.default_rng(2).standard_normal((2, 64, 640))
    y, names, sel = region_substitution(x, eegmmidb, "eegmmidb_mi", "primary", FILT, 0)
    rest = [i for i in range(64) if i not in sel.indices]
    np.testing.assert_array_equal(y[:, rest], x[:, rest])
    target = np.median(np.sqrt((x[:, rest] ** 2).mean(-1)), axis=1)
    np.testing.assert_allclose(np.sqrt((y[:, list(sel.indices)] ** 2).mean(-1)),
                               np.repeat(target[:, None], len(sel.indices), axis=1), rtol=1e-9)
