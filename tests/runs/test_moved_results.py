"""A results folder is self-contained (issue 34 item 3): rows name their checkpoint and prediction files relative to
the folder holding the store, and every command that reads a cv folder reads the files inside the folder it is given.

The real-data test trains one tiny EEGNet cv (eegmmidb_eyes, one fold, one epoch, three windows per subject), moves
it (``shutil.move``: the original location no longer exists), archives and restores it (``tarfile``), and runs
``sweep``, ``probe`` and ``attribute`` on the moved folder; a ``cp -r`` copy whose own ``best.ckpt`` is cut in half
must open the copy's file, never the original's (the original is intact and would load). The other tests use small
synthetic folders: old stores with absolute paths, rows that point outside the folder, symbolic links.
"""
from __future__ import annotations

import os
import shutil
import sys
import tarfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from eegfm_bench.errors import EEGFMError, OutsideFolderError, is_user_error
from eegfm_bench.results import PATH_COLUMNS, ResultStore, resolve_row_path, row_path

from eegfm_testutils import requires_data

CV = {"experiment": "moved", "task": "eegmmidb_eyes", "seed": 0, "confound": False,
      "data": {"max_windows_per_subject": 3, "batch_size": 16},
      "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
      "trainer": {"max_epochs": 1, "patience": 1, "accelerator": "cpu"},
      "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}


def _main(args: list[str]) -> int:
    from eegfm_bench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return main(args + ["--no-progress"])


def _inside(folder: Path, store: Path, value: str) -> Path:
    """The file a row's relative path names, asserted to lie inside ``folder`` and to exist."""
    assert isinstance(value, str) and value and not os.path.isabs(value), value
    path = (store / value).resolve()
    assert path.is_relative_to(folder.resolve()) and path.is_file(), (value, store, folder)
    return path


@pytest.fixture(scope="module")
def moved_cv(tmp_path_factory):
    """A finished tiny cv, written at ``<a>/cv`` and moved to ``<b>/moved`` (``<a>`` then removed): ``(moved,
    written)``."""
    a, b = tmp_path_factory.mktemp("written"), tmp_path_factory.mktemp("elsewhere")
    (a / "cv.yaml").write_text(yaml.safe_dump({**CV, "out_dir": str(a / "cv")}))
    assert _main(["cv", "--config", str(a / "cv.yaml")]) == 0
    shutil.move(str(a / "cv"), str(b / "moved"))
    shutil.rmtree(a)
    return b / "moved", a / "cv"


@requires_data
def test_a_moved_cv_is_read_where_it_is_by_sweep_probe_and_attribute(moved_cv, tmp_path):
    moved, old = moved_cv
    assert Path(yaml.safe_load((moved / "config.yaml").read_text())["out_dir"]) == old  # the old place, now gone
    assert not old.parent.exists()
    cv = pd.read_csv(moved / "results.csv")
    for col in PATH_COLUMNS:  # the cv's rows name their files inside the folder, relative to it
        assert {_inside(moved, moved, v).parent.name for v in cv[col]} == {"fold0" if col == "checkpoint" else
                                                                          "predictions"}
    # sweep into <moved>/sweep (its default), two conditions
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"cv_out_dir": str(moved), "conditions": ["clean", "white_snr=-15dB"], "batch_size": 16, "reference": None,
         "trainer": {"accelerator": "cpu"}}))
    assert _main(["sweep", "--config", str(tmp_path / "sweep.yaml")]) == 0
    sw = pd.read_csv(moved / "sweep" / "results.csv")
    assert set(sw["condition"]) == {"clean", "white_snr=-15dB"}
    assert {_inside(moved, moved / "sweep", v) for v in sw["checkpoint"]} == \
        {_inside(moved, moved, v) for v in cv["checkpoint"]}
    # probe and attribute into a folder inside the moved one
    (tmp_path / "interp.yaml").write_text(yaml.safe_dump(
        {"cv_dir": str(moved), "out_dir": str(moved / "interp"),
         "probe": {"poolings": ["mean"], "max_epochs": 2, "cache_dir": str(tmp_path / "cache")},
         "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 2, "conservation_windows": 1,
                         "randomisation_windows": 1, "batch_size": 2}}))
    for cmd, store in (("probe", "probes"), ("attribute", "attribution")):
        assert _main([cmd, "--config", str(tmp_path / "interp.yaml")]) == 0
        rows = pd.read_csv(moved / "interp" / store / "results.csv")
        fine = rows[rows["checkpoint"].fillna("") != ""]  # a probe's frozen stage names no checkpoint
        assert len(fine) and {_inside(moved, moved / "interp" / store, v) for v in fine["checkpoint"]} == \
            {_inside(moved, moved, v) for v in cv["checkpoint"]}
    # the cv itself continues in the moved folder when told where it is now (its config.yaml names the old place)
    before = pd.read_csv(moved / "results.csv")
    assert _main(["cv", "--config", str(moved / "config.yaml"), "--out_dir", str(moved)]) == 0
    pd.testing.assert_frame_equal(before, pd.read_csv(moved / "results.csv"))  # every cell found, none retrained
    assert not old.parent.exists()  # nothing written at the old place
    # an archive of the folder, restored elsewhere: its rows name the restored files
    with tarfile.open(tmp_path / "cv.tar", "w") as tar:
        tar.add(moved, arcname="cv")
    with tarfile.open(tmp_path / "cv.tar") as tar:
        tar.extractall(tmp_path / "restored", filter="data")
    from eegfm_bench.runs.cv.output import CVRun

    ck = CVRun(tmp_path / "restored" / "cv").checkpoints()
    assert [c.path for c in ck] == [(tmp_path / "restored" / "cv" / v).absolute() for v in cv["checkpoint"].unique()]
    assert ck[0].path.is_file()
    assert all(Path(c.predictions).is_relative_to(tmp_path / "restored" / "cv") for c in ck)


@requires_data
def test_a_copy_with_a_damaged_checkpoint_opens_its_own_file(moved_cv, tmp_path, monkeypatch, request):
    """``cp -r`` of a finished cv whose original stays where it was written, the copy's ``best.ckpt`` cut in half:
    ``attribute`` on the copy opens the copy's file (and fails on it), never the intact original's weights."""
    import eegfm_bench.runs.interpret.attribute as attribute
    import eegfm_bench.runs.cv.output as output

    moved, original = moved_cv
    shutil.copytree(moved, original)  # the original back where it was written, its rows unchanged
    request.addfinalizer(lambda: shutil.rmtree(original.parent))
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    (ck,) = list(copy.rglob("best.ckpt"))
    data = ck.read_bytes()
    ck.write_bytes(data[:len(data) // 2])
    asked: list[Path] = []  # the checkpoints the command asks for, and the files torch opens
    opened: list[Path] = []
    fold_model, load = output.load_fold_model, torch.load
    monkeypatch.setattr(attribute, "load_fold_model", lambda p, *a, **k: (asked.append(Path(p)),
                                                                          fold_model(p, *a, **k))[1])
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: (opened.append(Path(f)), load(f, *a, **k))[1])
    (tmp_path / "interp.yaml").write_text(yaml.safe_dump(
        {"cv_dir": str(copy), "out_dir": str(tmp_path / "interp"),
         "attribution": {"methods": ["gxi"], "percentile": 0, "max_windows_per_fold": 2, "conservation_windows": 1,
                         "randomisation_windows": 1, "batch_size": 2}}))
    with pytest.raises(Exception) as err:  # a user error (one line, exit 2) naming the copy's file
        _main(["attribute", "--config", str(tmp_path / "interp.yaml")])
    msg = str(err.value)
    assert is_user_error(err.value) and str(ck) in msg and str(original) not in msg and "fix:" in msg
    assert asked and {p.resolve() for p in asked} == {ck.resolve()}, asked
    assert {p.resolve() for p in opened if p.suffix == ".ckpt"} <= {ck.resolve()}, opened
    assert output.load_fold_model(next(original.rglob("best.ckpt")))  # the original is intact: it would have loaded


# ------------------------------------------------------------------------------------------- synthetic folders
def test_rows_store_paths_relative_to_their_folder(tmp_path):
    """``append`` stores an absolute path relative to the store's folder (``..`` for a file beside it), whatever
    symbolic link the folder is reached through; a relative one is kept."""
    real = tmp_path / "real"
    (real / "checkpoints" / "c" / "fold0").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    ckpt = real / "checkpoints" / "c" / "fold0" / "best.ckpt"
    base = {"experiment": "e", "task": "t", "model": "m", "init": "random", "regime": "full", "head": "h", "seed": 0,
            "condition": "clean", "metric": "balanced_accuracy", "value": 0.5, "n_windows": 1, "n_subjects": 1,
            "fold_unit": "subject", "config_hash": "abc", "code_version": "x"}
    store = ResultStore(tmp_path / "link")
    store.append([{**base, "fold": 0, "checkpoint": str(ckpt), "predictions": "predictions/m-fold0.csv"},
                  {**base, "fold": 1, "checkpoint": str(tmp_path / "other.ckpt"), "predictions": ""}])
    df = store.load()
    assert df["checkpoint"].tolist() == ["checkpoints/c/fold0/best.ckpt", "../other.ckpt"]
    assert df["predictions"].tolist()[0] == "predictions/m-fold0.csv"
    assert row_path(tmp_path / "link" / "x" / "y.csv", real) == "x/y.csv"
    assert row_path("", real) == ""


def test_old_absolute_paths_are_read_inside_the_folder_given_and_never_outside(tmp_path, caplog):
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    for d in (orig, copy):
        (d / "checkpoints" / "c" / "fold0").mkdir(parents=True)
        (d / "checkpoints" / "c" / "fold0" / "best.ckpt").write_text(d.name)
    old = str(orig / "checkpoints" / "c" / "fold0" / "best.ckpt")
    # a new row: relative to the folder
    assert resolve_row_path("checkpoints/c/fold0/best.ckpt", copy).read_text() == "copy"
    # an old row inside the folder given: used as it is
    assert resolve_row_path(old, orig) == Path(old)
    # an old row of the original read in a copy: the copy's file at the same place, with a line saying so
    with caplog.at_level("WARNING"):
        assert resolve_row_path(old, copy).read_text() == "copy"
    assert str(copy) in caplog.text and old in caplog.text
    # an old row relative to the working directory of the time: the same
    assert resolve_row_path("results/copy/checkpoints/c/fold0/best.ckpt", copy).read_text() == "copy"
    # a missing file inside the folder: its path in the folder (the caller says what is missing)
    assert resolve_row_path("checkpoints/c/fold1/best.ckpt", copy) == copy.absolute() / "checkpoints/c/fold1/best.ckpt"
    # a row pointing outside, with no such file inside: one user error naming both
    (copy / "checkpoints" / "c" / "fold0" / "best.ckpt").unlink()
    for rec in (old, "../orig/checkpoints/c/fold0/best.ckpt"):
        with pytest.raises(OutsideFolderError) as err:
            resolve_row_path(rec, copy, what="checkpoint of c fold 0")
        msg = str(err.value)
        assert isinstance(err.value, EEGFMError) and "\n" not in msg and rec in msg and str(copy) in msg
        assert "fix:" in msg


@requires_data
def test_cvrun_refuses_a_row_that_points_outside_its_folder(moved_cv, tmp_path, capsys, monkeypatch):
    """A cv folder whose row names a checkpoint outside it (hand-edited, or an old store whose file is gone from
    the copy): ``sweep`` exits 2 with one line naming the row's path and the folder, and writes nothing."""
    copy = tmp_path / "copy"
    shutil.copytree(moved_cv[0], copy)
    outside = tmp_path / "elsewhere.ckpt"
    shutil.copy(next(moved_cv[0].rglob("best.ckpt")), outside)
    rows = ResultStore(copy).load()
    rows["checkpoint"] = str(outside)
    ResultStore(copy).append(rows.astype(object).where(rows.notna(), None).to_dict("records"))  # newer rows win
    assert set(pd.read_csv(copy / "results.csv")["checkpoint"]) == {"../elsewhere.ckpt"}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"cv_out_dir": str(copy), "out_dir": str(tmp_path / "sweep"), "conditions": ["clean"], "reference": None,
         "trainer": {"accelerator": "cpu"}}))
    from eegfm_bench.cli import main

    monkeypatch.delenv("EEGFM_TRACEBACK", raising=False)
    monkeypatch.setattr(sys, "argv", ["eegfm-bench", "sweep", "--config", str(tmp_path / "sweep.yaml"),
                                      "--no-progress"])
    assert main() == 2  # the console script: one line, exit 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("eegfm-bench sweep: OutsideFolderError: ") and "Traceback" not in "".join(err)
    assert "../elsewhere.ckpt" in err[0] and str(copy) in err[0] and "fix:" in err[0]
    assert not (tmp_path / "sweep" / "results.csv").exists()


@requires_data
def test_confound_on_a_moved_cv_writes_in_the_folder_given(moved_cv, monkeypatch):
    """``eegfm-bench confound --cv <moved>`` checks (and writes) the folder given, not the out_dir its
    ``config.yaml`` names (the place it was written, gone)."""
    import eegfm_bench.runs.cv.confound as C

    moved, old = moved_cv
    seen = []
    monkeypatch.setattr(C, "confound_check", lambda cfg, **k: seen.append(cfg.out_dir) or pd.DataFrame())
    monkeypatch.setattr(C, "refresh", lambda *a, **k: None)
    (moved / "config.yaml").write_text((moved / "config.yaml").read_text().replace(str(moved), str(old)))
    C.run_confound(moved, variations=["band"], progress=False)
    assert seen == [str(moved)] and not old.exists()
