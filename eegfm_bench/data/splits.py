"""Subject-grouped folds (k-fold, stratified where possible; leave-one-subject-out), saved and verified.

Folds are assignments of *subjects* (or, only when a config asks for it, of recordings) to train / val /
test. Validation subjects are drawn from each fold's training subjects only. The assignment is written as
JSON next to the results and, on every rerun, recomputed and compared with the saved file: any difference
aborts with :class:`SplitMismatchError` (a silently different split would make reruns incomparable).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from sklearn.model_selection import LeaveOneGroupOut, StratifiedGroupKFold

from eegfm_bench.atomic import atomic_write_text


SCHEMES = ("kfold", "loso")
GROUP_UNITS = ("subject", "recording")


class SplitMismatchError(RuntimeError):
    """The saved split file does not match the folds recomputed for this data and config."""


class SplitConfigError(ValueError):
    """A split configuration that cannot be satisfied (e.g. more folds than subjects)."""


@dataclass
class Fold:
    """One fold: disjoint lists of group ids (subjects, or recordings for recording-level folds)."""

    fold: int
    train: list[str]
    val: list[str]
    test: list[str]

    def check_disjoint(self) -> None:
        """Assert that no group is in two of train / val / test."""
        tr, va, te = set(self.train), set(self.val), set(self.test)
        overlap = (tr & va) | (tr & te) | (va & te)
        assert not overlap, f"fold {self.fold}: groups {sorted(overlap)} are in more than one of train/val/test"


@dataclass
class SplitSpec:
    """How folds are made.

    Parameters
    ----------
    scheme : {"kfold", "loso"}
        Subject-grouped k-fold (``StratifiedGroupKFold``) or leave-one-subject-out (``LeaveOneGroupOut``).
    k : int
        Number of folds for ``kfold``.
    seed : int
        Shuffling seed for ``kfold`` and the validation draw.
    n_val_groups : int
        Number of validation subjects drawn from each fold's training subjects (≥ 1).
    group_by : {"subject", "recording"}
        ``recording`` gives recording-level folds (windows of one subject may then be in train and test);
        allowed only when set explicitly, and the results record it (``fold_unit``).
    """

    scheme: str = "kfold"
    k: int = 5
    seed: int = 0
    n_val_groups: int = 1
    group_by: str = "subject"

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise SplitConfigError(f"unknown split scheme {self.scheme!r}; valid: {SCHEMES}")
        if self.group_by not in GROUP_UNITS:
            raise SplitConfigError(f"unknown group_by {self.group_by!r}; valid: {GROUP_UNITS}")
        if self.n_val_groups < 1:
            raise SplitConfigError("n_val_groups must be ≥ 1 (early stopping needs validation subjects)")


@dataclass
class Split:
    """Folds plus what they were made from (written to ``splits.json``)."""

    spec: SplitSpec
    task: str
    groups: list[str]
    n_windows: int
    folds: list[Fold] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"task": self.task, "spec": asdict(self.spec), "groups": self.groups, "n_windows": self.n_windows,
                "folds": [asdict(f) for f in self.folds]}

    def indices(self, groups_per_window: np.ndarray, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Window indices ``(train, val, test)`` of fold ``fold`` given each window's group id."""
        f = self.folds[fold]
        g = np.asarray(groups_per_window).astype(str)
        idx = [np.flatnonzero(np.isin(g, part)) for part in (f.train, f.val, f.test)]
        return idx[0], idx[1], idx[2]


def make_split(y: np.ndarray, groups: np.ndarray, spec: SplitSpec, task: str = "") -> Split:
    """Build subject-grouped folds.

    Parameters
    ----------
    y : ndarray, shape (n_windows,)
        Labels (used for stratification where possible).
    groups : ndarray of str, shape (n_windows,)
        Subject (or recording) id per window.
    spec : SplitSpec

    Returns
    -------
    Split
        With ``len(folds) == k`` (kfold) or the number of subjects (loso); every fold passes
        :meth:`Fold.check_disjoint`.

    Raises
    ------
    SplitConfigError
        If there are too few groups for ``k`` folds plus validation groups.
    """
    y = np.asarray(y)
    groups = np.asarray(groups).astype(str)
    uniq = np.unique(groups)
    rng = np.random.default_rng(spec.seed)
    if spec.scheme == "kfold":
        if spec.k < 2 or spec.k > uniq.size:
            raise SplitConfigError(f"kfold with k={spec.k} needs 2 ≤ k ≤ number of {spec.group_by}s ({uniq.size}); "
                                   f"fix: set split.k ≤ {uniq.size} or use scheme: loso")
        splitter = StratifiedGroupKFold(n_splits=spec.k, shuffle=True, random_state=spec.seed)
        parts = splitter.split(np.zeros(len(y)), y, groups)
    else:
        parts = LeaveOneGroupOut().split(np.zeros(len(y)), y, groups)
    folds = []
    for i, (tr, te) in enumerate(parts):
        train_groups = np.unique(groups[tr])
        if train_groups.size <= spec.n_val_groups:
            raise SplitConfigError(f"fold {i} has {train_groups.size} training {spec.group_by}s, too few to hold out "
                                   f"{spec.n_val_groups} for validation; fix: lower split.n_val_groups or split.k")
        val = _draw_validation(train_groups, groups, y, spec.n_val_groups, rng, i)
        f = Fold(i, sorted(set(train_groups.tolist()) - set(val)), val, sorted(np.unique(groups[te]).tolist()))
        f.check_disjoint()
        folds.append(f)
    return Split(spec, task, uniq.tolist(), int(len(y)), folds)


def _draw_validation(train_groups: np.ndarray, groups: np.ndarray, y: np.ndarray, n: int, rng, fold: int) -> list:
    """Validation groups drawn from a fold's training groups.

    When every group holds one class (a per-subject label such as a diagnosis) the draw is stratified — groups are
    taken class by class in turn — so the validation set holds every class it can: a one-class validation set makes
    early stopping on balanced accuracy meaningless. Otherwise (each group holds several classes) a plain draw.
    A validation set that still holds one class is warned about.
    """
    per = {g: np.unique(y[groups == g]) for g in train_groups}
    if all(v.size == 1 for v in per.values()):
        by_class: dict = {}
        for g in rng.permutation(train_groups):
            by_class.setdefault(int(per[g][0]), []).append(g)
        order = [c for c in sorted(by_class)]
        val: list = []
        while len(val) < n:
            for c in order:
                if by_class[c] and len(val) < n:
                    val.append(by_class[c].pop(0))
        if len({int(per[g][0]) for g in val}) < 2 and len(order) >= 2:
            warnings.warn(f"fold {fold}: the {n} validation group(s) hold one class (one label per group); early "
                          "stopping on validation balanced accuracy is then uninformative. fix: split.n_val_groups >= "
                          f"{len(order)}", stacklevel=3)
        return sorted(val)
    return sorted(rng.choice(train_groups, size=n, replace=False).tolist())


def save_or_verify(split: Split, path: str | Path, write: bool = True) -> Split:
    """Write ``split`` to ``path`` if absent; otherwise compare with the saved file.

    ``write=False`` (every DDP rank but 0) only verifies an existing file.

    Raises
    ------
    SplitMismatchError
        If the saved split differs (other subjects, windows, fold contents or spec): the message names the
        first difference and the fix (restore the file, or use a fresh output directory).
        Also when the saved file is not JSON (cut or overwritten): the message names it and the fix.
    """
    path = Path(path)
    new = split.to_json()
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as err:  # cut or overwritten by something else than this package
            raise SplitMismatchError(
                f"split file {path} is damaged ({path.stat().st_size} bytes, not JSON: {err}); fix: move it aside "
                f"(mv {path} {path}.damaged) and rerun: the folds are recomputed from the data and config and "
                "written again") from None
        for key in ("task", "spec", "groups", "n_windows", "folds"):
            if old.get(key) != new[key]:
                detail = ""
                if key == "folds":
                    for fo, fn in zip(old.get("folds", []), new["folds"]):
                        if fo != fn:
                            detail = f" (fold {fn['fold']}: saved test={fo.get('test')} vs recomputed test={fn['test']})"
                            break
                raise SplitMismatchError(
                    f"split file {path} does not match this data/config: field {key!r} differs{detail}.\n"
                    "fix: the data, subjects or split settings changed since the file was written (or it was edited); "
                    "restore the original file/config, or write to a new out_dir to start a new experiment")
        for f in split.folds:
            f.check_disjoint()
        return split
    if not write:
        return split
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(new, indent=1))  # a unique temporary name: concurrent writers never collide
    return split
