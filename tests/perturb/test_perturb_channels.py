"""Random channel dropout: one mask per dataset and p, zero-padding and removal (paper 003 App. D.2)."""
import numpy as np
import pytest
import torch

from eegfm_bench.perturb.channels import (
    channel_uniforms,
    drop_channels,
    dropout_mask,
    random_dropout,
    remove_channels,
    zero_channels,
)
from eegfm_bench.registry import UnknownNameError

EEGMMIDB = ['FC5', 'FC3', 'FC1', 'FCz', 'FC2', 'FC4', 'FC6', 'C5', 'C3', 'C1', 'Cz', 'C2', 'C4', 'C6', 'CP5', 'CP3',
            'CP1', 'CPz', 'CP2', 'CP4', 'CP6', 'Fp1', 'Fpz', 'Fp2', 'AF7', 'AF3', 'AFz', 'AF4', 'AF8', 'F7', 'F5', 'F3',
            'F1', 'Fz', 'F2', 'F4', 'F6', 'F8', 'FT7', 'FT8', 'T7', 'T8', 'T9', 'T10', 'TP7', 'TP8', 'P7', 'P5', 'P3',
            'P1', 'Pz', 'P2', 'P4', 'P6', 'P8', 'PO7', 'PO3', 'POz', 'PO4', 'PO8', 'O1', 'Oz', 'O2', 'Iz']


def batch(n_chans=len(EEGMMIDB)):
    return np.random.default_rng(0).standard_normal((3, n_chans, 50)).astype(np.float32)


def test_mask_is_shared_across_calls_folds_and_channel_order():
    a = dropout_mask(EEGMMIDB, 0.3, seed=0, dataset="eegmmidb")
    b = dropout_mask(EEGMMIDB, 0.3, seed=0, dataset="eegmmidb")  # another fold / model: same call
    assert a == b and a.n_dropped > 0
    shuffled = list(np.random.default_rng(1).permutation(EEGMMIDB))
    assert set(dropout_mask(shuffled, 0.3, seed=0, dataset="eegmmidb").dropped) == set(a.dropped)
    upper = [n.upper() for n in EEGMMIDB]  # names match case-insensitively
    assert dropout_mask(upper, 0.3, 0, "eegmmidb").dropped == tuple(n.upper() for n in a.dropped)


def test_mask_changes_with_seed_and_dataset():
    a = dropout_mask(EEGMMIDB, 0.5, seed=0, dataset="eegmmidb").dropped
    assert dropout_mask(EEGMMIDB, 0.5, seed=1, dataset="eegmmidb").dropped != a
    assert dropout_mask(EEGMMIDB, 0.5, seed=0, dataset="other").dropped != a


def test_masks_are_nested_across_p_and_recorded_in_montage_order():
    m = {p: dropout_mask(EEGMMIDB, p, seed=3, dataset="eegmmidb") for p in (0.1, 0.3, 0.5)}
    assert set(m[0.1].dropped) <= set(m[0.3].dropped) <= set(m[0.5].dropped)
    assert list(m[0.5].dropped) == [n for n in EEGMMIDB if n in m[0.5].dropped]
    assert m[0.5].as_dict()["dropped"] == list(m[0.5].dropped)
    assert set(m[0.5].kept) | set(m[0.5].dropped) == set(EEGMMIDB)


def test_each_channel_is_dropped_with_probability_p():
    names = EEGMMIDB
    for p in (0.1, 0.3, 0.5):
        frac = np.mean([dropout_mask(names, p, seed=s, dataset="eegmmidb").n_dropped / len(names)
                        for s in range(150)])
        assert frac == pytest.approx(p, abs=0.025)
    u = channel_uniforms(names, 0, "eegmmidb")
    assert u.shape == (64,) and (u >= 0).all() and (u < 1).all()


def test_zero_padding_keeps_channel_count():
    x = batch()
    y, names, mask = random_dropout(x, EEGMMIDB, 0.5, 0, "eegmmidb", "zero")
    assert y.shape == x.shape and names == EEGMMIDB
    idx = [EEGMMIDB.index(n) for n in mask.dropped]
    keep = [i for i in range(64) if i not in idx]
    assert (y[:, idx] == 0).all()
    np.testing.assert_array_equal(y[:, keep], x[:, keep])


def test_removal_lowers_channel_count():
    x = batch()
    y, names, mask = random_dropout(x, EEGMMIDB, 0.5, 0, "eegmmidb", "removed")
    assert y.shape == (3, 64 - mask.n_dropped, 50) and mask.n_dropped > 0
    assert names == list(mask.kept)
    np.testing.assert_array_equal(y, x[:, [EEGMMIDB.index(n) for n in names]])


def test_torch_tensor_and_named_drop():
    x = torch.from_numpy(batch(4))
    y, names = remove_channels(x, ["Cz", "C3", "C4", "Pz"], ["cz", "PZ"])
    assert isinstance(y, torch.Tensor) and names == ["C3", "C4"]
    torch.testing.assert_close(y, x[:, [1, 2]])
    z, _ = zero_channels(x, ["Cz", "C3", "C4", "Pz"], ["C4"])
    assert torch.count_nonzero(z[:, 2]) == 0 and torch.equal(z[:, 0], x[:, 0])


def test_errors():
    x = batch(4)
    with pytest.raises(ValueError, match="not in the montage"):
        zero_channels(x, ["Cz", "C3", "C4", "Pz"], ["Oz"])
    with pytest.raises(ValueError, match="every channel"):
        remove_channels(x, ["Cz", "C3", "C4", "Pz"], ["Cz", "C3", "C4", "Pz"])
    with pytest.raises(UnknownNameError, match="zero, removed"):
        drop_channels(x, ["Cz", "C3", "C4", "Pz"], ["Cz"], "padded")
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        dropout_mask(EEGMMIDB, 1.5, 0, "eegmmidb")
    with pytest.raises(ValueError, match="same electrode"):
        dropout_mask(["Cz", "CZ"], 0.5, 0, "d")
    with pytest.raises(ValueError, match="4 channel names for 3"):
        zero_channels(x[:, :3], ["Cz", "C3", "C4", "Pz"], ["Cz"])


def test_mask_derivation_is_pinned():
    """Recorded masks must stay valid: changing how masks are derived would silently change past results."""
    assert dropout_mask(EEGMMIDB, 0.1, 0, "eegmmidb").dropped == ('FC2', 'Fpz', 'AFz', 'F3', 'P2', 'PO7')
    assert dropout_mask(EEGMMIDB, 0.3, 0, "eegmmidb").dropped == (
        'FC2', 'C3', 'C2', 'CP6', 'Fp1', 'Fpz', 'AFz', 'F3', 'F6', 'T10', 'TP8', 'P2', 'PO7', 'PO3', 'PO4', 'PO8',
        'O1', 'Oz', 'Iz')
