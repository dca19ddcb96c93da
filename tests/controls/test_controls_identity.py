"""Dataset-identity probe (paper 001 §4.4)."""
import numpy as np
import pytest

from eegfm_bench.controls import identity as I

FS = 200.0


def recordings(n_rec, n_win, d, offset, seed):
    rng = np.random.default_rng(seed)
    units = np.repeat([f"r{seed}_{k}" for k in range(n_rec)], n_win)
    F = rng.standard_normal((units.size, d)) + rng.standard_normal((n_rec, d)).repeat(n_win, 0)
    F[:, :10] += offset
    return F, units


def test_shared_channels_case_insensitive_in_order_of_a():
    assert I.shared_channels(["Fp1", "FP2", "Cz", "O1"], ["cz", "fp2", "T7"]) == ["FP2", "Cz"]
    Xa = np.arange(2 * 4 * 3).reshape(2, 4, 3)
    Xb = np.arange(2 * 3 * 3).reshape(2, 3, 3) + 100
    a, b, shared = I.restrict_to_shared(Xa, ["Fp1", "FP2", "Cz", "O1"], Xb, ["cz", "fp2", "T7"])
    assert shared == ["FP2", "Cz"]
    np.testing.assert_array_equal(a, Xa[:, [1, 2]])
    np.testing.assert_array_equal(b, Xb[:, [1, 0]])


def test_no_shared_channel_names_what_each_dataset_has():
    with pytest.raises(ValueError, match=r"share no channel: ds004504 has \['Fp1', 'Fp2'\], caueeg has \['T7', 'T8'\]"):
        I.shared_channels(["Fp1", "Fp2"], ["T7", "T8"], names=("ds004504", "caueeg"))


def test_decodable_datasets_reach_ceiling_and_null_is_chance():
    Fa, ua = recordings(20, 5, 60, 0.0, seed=1)
    Fb, ub = recordings(40, 5, 60, 1.5, seed=2)
    res = I.dataset_identity_probe(Fa, ua, Fb, ub, subjects_a=ua, subjects_b=ub, names=("a", "b"), n_permutations=10, n_balanced=4)
    assert res.n_units == (20, 40)
    assert res.auroc_full > 0.97 and res.auroc_pca > 0.97
    assert res.pca_k == 48  # 60 units × 4/5 in training < 50
    assert abs(res.null_aurocs.mean() - 0.5) < 0.12
    assert res.balanced_aurocs.min() > 0.9
    d = res.to_dict()
    assert d["null_mean"] == pytest.approx(res.null_aurocs.mean())


def test_same_distribution_is_not_decodable():
    Fa, ua = recordings(30, 4, 10, 0.0, seed=3)
    Fb, ub = recordings(30, 4, 10, 0.0, seed=4)
    res = I.dataset_identity_probe(Fa, ua, Fb, ub, subjects_a=ua, subjects_b=ub, n_permutations=5, n_balanced=2)
    assert abs(res.auroc_full - 0.5) < 0.15


def test_units_are_recordings_not_windows():
    Fa, ua = recordings(10, 7, 5, 0.0, seed=5)
    U, ids = I.aggregate_units(Fa, ua)
    assert U.shape == (10, 5)
    np.testing.assert_allclose(U[0], Fa[ua == ids[0]].mean(0))


def test_too_few_recordings_for_folds_raises():
    Fa, ua = recordings(3, 5, 6, 0.0, seed=6)
    Fb, ub = recordings(30, 5, 6, 1.0, seed=7)
    with pytest.raises(ValueError, match="'a' has 3 subjects for 5 folds"):
        I.dataset_identity_probe(Fa, ua, Fb, ub, subjects_a=ua, subjects_b=ub, names=("a", "b"))


def test_identity_from_raw_windows_uses_shared_channels():
    rng = np.random.default_rng(0)
    t = np.arange(800) / FS
    Xa = rng.standard_normal((30, 3, 800))
    Xb = rng.standard_normal((30, 4, 800))
    Xb[:, 0] += 2 * np.sin(2 * np.pi * 10 * t)  # B has strong occipital alpha (O1)
    u = np.repeat(np.arange(15), 2)
    kw = dict(names=("a", "b"), n_folds=3, n_permutations=3, n_balanced=2, subjects_a=u, subjects_b=u)
    res = I.identity_from_windows(Xa, ["Fp1", "Cz", "O1"], u, Xb, ["O1", "T7", "Cz", "Pz"], u, FS, **kw)
    assert res.n_features == 9 * 2 + 2  # Cz and O1 shared
    assert res.auroc_full > 0.95
    # a common-mode signal on every channel is not a dataset difference once the shared channels are re-referenced
    Xc = rng.standard_normal((30, 4, 800)) + 2 * np.sin(2 * np.pi * 10 * t)
    same = I.identity_from_windows(Xa, ["Fp1", "Cz", "O1"], u, Xc, ["O1", "T7", "Cz", "Pz"], u, FS, **kw)
    assert same.auroc_full < 0.8, same.auroc_full
    raw = I.identity_from_windows(Xa, ["Fp1", "Cz", "O1"], u, Xc, ["O1", "T7", "Cz", "Pz"], u, FS, reference="none",
                                  **kw)
    assert raw.auroc_full > 0.95


def test_subject_leakage_inflates_the_auroc_and_subject_grouped_folds_remove_it():
    """Issue 23: units carry a subject fingerprint and no dataset signal. With recording-level folds a subject's
    other recordings sit in training and the probe recognises the subject (hence its dataset): AUROC far above
    chance. Grouped by subject (the default) every recording of a subject is in one fold: chance."""
    from eegfm_bench.controls.identity import dataset_identity_probe

    rng = np.random.default_rng(0)
    n_sub, n_rec, n_win, dim = 12, 4, 3, 40

    def dataset(tag):
        F, units, subj = [], [], []
        for s in range(n_sub):
            finger = rng.normal(0, 3, dim)  # the subject's own, shared by its recordings
            for r in range(n_rec):
                F.append(finger + rng.normal(0, 1, (n_win, dim)))
                units += [f"{tag}{s}r{r}"] * n_win
                subj += [f"s{s}"] * n_win  # the same ids in both datasets: kept apart by the dataset name
        return np.vstack(F), np.array(units), np.array(subj)

    Fa, ua, sa = dataset("a")
    Fb, ub, sb = dataset("b")
    kw = dict(names=("A", "B"), n_folds=4, pca_k=10, n_permutations=10, n_balanced=2, seed=0)
    leaky = dataset_identity_probe(Fa, ua, Fb, ub, group_by="recording", **kw)
    grouped = dataset_identity_probe(Fa, ua, Fb, ub, subjects_a=sa, subjects_b=sb, **kw)
    assert leaky.auroc_full > 0.8, leaky.auroc_full
    assert abs(grouped.auroc_full - 0.5) < 0.15, grouped.auroc_full
    assert grouped.n_groups == (12, 12) and leaky.to_dict()["fold_unit"].startswith("recording folds, NOT")
    with pytest.raises(ValueError, match="needs subjects_a and subjects_b"):
        dataset_identity_probe(Fa, ua, Fb, ub, **kw)
