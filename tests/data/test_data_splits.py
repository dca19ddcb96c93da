"""Subject-grouped folds: disjointness (property test), validation from training subjects, saved-split checks."""
import json

import numpy as np
import pytest

from eegfm_bench.data.splits import (SplitConfigError, SplitMismatchError, SplitSpec, make_split,
                                     save_or_verify)


def _toy(n_subjects=12, per=10, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"S{i:03d}" for i in range(n_subjects)], per)
    y = rng.integers(0, 2, size=groups.size)
    return y, groups


@pytest.mark.parametrize("seed", [0, 1, 7, 42])
@pytest.mark.parametrize("k", [2, 3, 5, 6])
def test_kfold_never_shares_subjects(seed, k):
    y, g = _toy(n_subjects=13, seed=seed)
    split = make_split(y, g, SplitSpec("kfold", k, seed, n_val_groups=2))
    assert len(split.folds) == k
    tests = [set(f.test) for f in split.folds]
    # each subject is a test subject exactly once across folds
    assert sorted(s for t in tests for s in t) == sorted(np.unique(g).tolist())
    for f in split.folds:
        tr, va, te = set(f.train), set(f.val), set(f.test)
        assert not (tr & va) and not (tr & te) and not (va & te)
        assert tr | va | te == set(np.unique(g))
        assert len(va) == 2
        tri, vai, tei = split.indices(g, f.fold)
        assert set(g[tri]).isdisjoint(g[tei]) and set(g[vai]).isdisjoint(g[tei]) and set(g[tri]).isdisjoint(g[vai])
        assert len(tri) + len(vai) + len(tei) == len(g)


def test_loso_one_subject_per_fold():
    y, g = _toy(n_subjects=6)
    split = make_split(y, g, SplitSpec("loso", n_val_groups=1))
    assert len(split.folds) == 6
    assert all(len(f.test) == 1 for f in split.folds)
    assert [f.test[0] for f in split.folds] == sorted(np.unique(g).tolist())


def test_stratified_where_possible():
    # 10 subjects with 10/30 class balance each: every test fold keeps both classes in about the same ratio
    g = np.repeat([f"S{i}" for i in range(10)], 40)
    y = np.tile(np.r_[np.zeros(10), np.ones(30)], 10).astype(int)
    split = make_split(y, g, SplitSpec("kfold", 5, 0))
    for f in split.folds:
        _, _, te = split.indices(g, f.fold)
        assert abs(y[te].mean() - 0.75) < 1e-9


def test_too_many_folds_is_a_clear_error():
    y, g = _toy(n_subjects=4)
    with pytest.raises(SplitConfigError, match="k ≤ 4"):
        make_split(y, g, SplitSpec("kfold", 5, 0))
    with pytest.raises(SplitConfigError, match="n_val_groups"):
        make_split(y, g, SplitSpec("kfold", 4, 0, n_val_groups=3))


def test_saved_split_reproduced_and_tamper_aborts(tmp_path):
    y, g = _toy()
    spec = SplitSpec("kfold", 4, 3, n_val_groups=1)
    path = tmp_path / "splits.json"
    s1 = save_or_verify(make_split(y, g, spec, "toy"), path)
    saved = json.loads(path.read_text())
    s2 = save_or_verify(make_split(y, g, spec, "toy"), path)  # rerun: identical, accepted
    assert s2.to_json() == saved == s1.to_json()
    # tamper: move one test subject of fold 0 into fold 1's test set
    saved["folds"][0]["test"], moved = saved["folds"][0]["test"][1:], saved["folds"][0]["test"][0]
    saved["folds"][1]["test"].append(moved)
    path.write_text(json.dumps(saved))
    with pytest.raises(SplitMismatchError, match="fold 0"):
        save_or_verify(make_split(y, g, spec, "toy"), path)


def test_split_file_not_matching_data_aborts(tmp_path):
    y, g = _toy(n_subjects=12)
    path = tmp_path / "splits.json"
    save_or_verify(make_split(y, g, SplitSpec("kfold", 3, 0), "toy"), path)
    y2, g2 = _toy(n_subjects=11)  # one subject fewer in the data now
    with pytest.raises(SplitMismatchError, match="groups"):
        save_or_verify(make_split(y2, g2, SplitSpec("kfold", 3, 0), "toy"), path)


def test_recording_level_requires_explicit_setting():
    assert SplitSpec().group_by == "subject"
    with pytest.raises(SplitConfigError, match="valid"):
        SplitSpec(group_by="window")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kfold_is_stratified_when_subjects_differ_in_class_balance(seed):
    """Subjects of different sizes hold 90 % of one class or the other: a grouped split that ignores the labels
    (GroupKFold: test folds up to 0.53 away from the overall class-1 share here) is refused; StratifiedGroupKFold
    keeps every test fold within 0.1 of it."""
    sizes = [27, 30, 14, 37, 23, 17, 13, 9, 11, 22, 37, 38]
    heavy1 = [0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0]
    groups, y = [], []
    for i, (n, h) in enumerate(zip(sizes, heavy1)):
        n1 = int(round(n * (0.9 if h else 0.1)))
        groups += [f"S{i:02d}"] * n
        y += [1] * n1 + [0] * (n - n1)
    y, groups = np.array(y), np.array(groups)
    split = make_split(y, groups, SplitSpec("kfold", 3, seed, n_val_groups=1))
    for f in split.folds:
        _, _, te = split.indices(groups, f.fold)
        assert abs(y[te].mean() - y.mean()) <= 0.1, f"fold {f.fold}: {y[te].mean():.2f} vs {y.mean():.2f} class 1"
