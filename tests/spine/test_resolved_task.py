"""Resolve once (issue 36 item 2): each command's loader resolves the task and the typed config carries it
(``cfg.resolved_task``), while what the user wrote is what is saved and hashed: the hashes of the shipped configs are
those the code before the change computed (main at 5519624, hard-coded here). No data is read."""
from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from eegfm_bench.config import ConfigError
from eegfm_bench.data.ingest import DeclaredTask
from eegfm_bench.results import config_hash

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "configs" / "experiment"

# computed on main (5519624) before the change: config_hash(cfg.to_dict()) and every cell_hash(cfg, run, head, "k")
MAIN_HASHES = {
    "quickstart.yaml": ("b8a181525dd7", ["d2c80cb7375c", "9e16f176f5e5", "b2682e87186a"]),
    "controls_eegmat_cv.yaml": ("b0158890550e", ["468ab44f68fd", "49be3aeb264f"]),
    "tiny_ci.yaml": ("791090d7a99e", ["84024999c191"]),
}


@pytest.mark.parametrize("name", sorted(MAIN_HASHES))
def test_cv_config_carries_its_resolved_task_and_keeps_every_hash(name):
    from eegfm_bench.runs.cv.cells import cell_hash, load_config

    cfg = load_config(str(EXP / name))
    written = yaml.safe_load((EXP / name).read_text())["task"]
    assert isinstance(cfg.resolved_task, DeclaredTask) and cfg.task == written
    assert cfg.resolved_task.name == (written if isinstance(written, str) else written["name"])
    # not a key: neither in the saved mapping, nor hashed, nor an option
    assert "resolved_task" not in cfg.to_dict()
    whole, cells = MAIN_HASHES[name]
    # ``data.feature_dtype`` (the float16 feature store) was added after 5519624: the whole mapping differs from
    # main's by that key alone, at its default; the cell hashes, which key every row, are main's
    saved = cfg.to_dict()
    assert saved["data"].pop("feature_dtype") == "float32"
    assert config_hash(saved) == whole
    assert [cell_hash(cfg, r, h, "k") for r in cfg.runs for h in r.heads] == cells
    # kept by a changed copy and by pickling (a launcher's worker), compared by the fields only
    assert replace(cfg, seed=7).resolved_task is cfg.resolved_task
    assert pickle.loads(pickle.dumps(cfg)).resolved_task.name == cfg.resolved_task.name
    assert replace(cfg, resolved_task=None) == cfg


def test_resolved_task_is_no_config_key():
    from eegfm_bench.runs.cv.cells import load_config

    with pytest.raises(ConfigError, match="resolved_task"):
        load_config({"runs": [{"model": "eegnet"}], "resolved_task": "eegmat"})
    with pytest.raises(ConfigError):
        load_config({"runs": [{"model": "eegnet"}]}, ["--resolved_task", "eegmat"])


def test_controls_config_resolves_its_task_and_the_identity_tasks_once():
    from eegfm_bench.runs.controls.config import load_config

    cfg = load_config(str(EXP / "controls_eegmat.yaml"), ["--cv_out_dir", "null"])
    assert config_hash(cfg.to_dict()) == "f891a437a381"  # main (5519624)
    assert cfg.resolved_task.name == "eegmat" and cfg.resolved_task.dataset == "eegmat"
    assert [t.name for t in cfg.resolved_identity] == cfg.identity.tasks
    assert len({t.dataset for t in cfg.resolved_identity}) == 2
    assert "resolved_task" not in cfg.to_dict() and "resolved_identity" not in cfg.to_dict()
    no_identity = load_config(str(EXP / "controls_eegmat.yaml"), ["--cv_out_dir", "null", "--identity", "null"])
    assert no_identity.resolved_identity is None and no_identity.resolved_task.name == "eegmat"


def test_the_cv_reads_the_task_its_loader_resolved(monkeypatch):
    """Downstream of the loader nothing resolves the task again: a loaded config whose carried task is swapped for
    another, then loaded, is read through the carried one (not ``cfg.task`` again)."""
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.runs.cv.cells import load_config, model_preprocessing

    cfg = load_config({"task": "eegmmidb_mi", "runs": [{"model": "labram"}], "confound": False})
    assert model_preprocessing(cfg, "labram").n_times == 800  # 4 s at 200 Hz
    other = replace(cfg, resolved_task=get_task({"preset": "eegmmidb_mi", "window_s": 3.0}))
    assert other.resolved_preprocessing is None  # resolved for the other task: dropped, never read stale
    with pytest.raises(ConfigError, match="load_config"):
        model_preprocessing(other, "labram")


def test_the_cv_carries_its_effective_preprocessing_resolved_once(monkeypatch):
    """Resolve once (issue 36 item 2): ``load_config`` resolves every run's window preprocessing once (the model's
    declaration, the task's window, ``data.band``, ``data.window_shorten_s``) and the typed config carries it; every
    reader takes the carried one. A copy whose band, shortening or task changed carries none (refused, naming the
    fix), one whose subjects or seed changed keeps it."""
    import eegfm_bench.runs.cv.cells as cells

    calls = []
    real = cells.resolve_preprocessing
    monkeypatch.setattr(cells, "resolve_preprocessing", lambda *a, **k: calls.append(k["model"]) or real(*a, **k))
    cfg = cells.load_config({"task": "eegmmidb_mi", "confound": False, "data": {"band": [2, 50], "window_shorten_s": 1},
                             "runs": [{"model": "labram", "heads": ["mean", "flatten"]}, {"model": "eegnet"},
                                      {"model": "labram", "regime": "full"}]})
    assert calls == ["labram", "eegnet"]  # once per model, however many runs and heads name it
    rp = cfg.resolved_preprocessing
    assert rp.inputs == ('"eegmmidb_mi"', cfg.resolved_task.key, "{}", (2.0, 50.0), 1.0)
    assert sorted(rp.by_model) == ["eegnet", "labram"]
    lab = cells.model_preprocessing(cfg, "labram")
    assert (lab.prep.l_freq, lab.prep.h_freq, lab.prep.window_s, lab.n_times) == (2.0, 50.0, 3.0, 600)  # 0.1-75 Hz inside 2-50 Hz; 4 s less 1 s at 200 Hz
    eeg = cells.model_preprocessing(cfg, "eegnet").prep
    assert (eeg.l_freq, eeg.h_freq, eeg.window_s) == (2.0, 40.0, 3.0)  # EEGNet's 1-40 Hz inside 2-50 Hz
    assert len(calls) == 2  # reading it resolves nothing
    assert "resolved_preprocessing" not in cfg.to_dict()
    assert replace(cfg, data=replace(cfg.data, subjects=[1, 2]), seed=3).resolved_preprocessing is rp
    assert replace(cfg, runs=cfg.runs[1:2]).resolved_preprocessing is rp  # a subset of the runs: still resolved
    assert pickle.loads(pickle.dumps(cfg)).resolved_preprocessing.by_model["labram"] == lab
    for changed in (replace(cfg.data, band=[8, 30]), replace(cfg.data, band=None), replace(cfg.data, window_shorten_s=0)):
        with pytest.raises(ConfigError, match="replaced after loading, or runs naming another model; fix: read the"):
            cells.model_preprocessing(replace(cfg, data=changed), "labram")
    with pytest.raises(ConfigError, match=r"no run names it \(runs: \['eegnet', 'labram'\]\)"):
        cells.model_preprocessing(cfg, "biot")
    # the task as written, the user models or a run of another model replaced: resolved for something else, dropped
    for changed in (replace(cfg, task="eegmat"), replace(cfg, user_models={"x": {"class_path": "m.X"}}),
                    replace(cfg, runs=[*cfg.runs, replace(cfg.runs[0], model="biot")])):
        assert changed.resolved_preprocessing is None
        with pytest.raises(ConfigError, match="or runs naming another model; fix: read the config with"):
            cells.model_preprocessing(changed, "labram")
    fresh = cells.load_config(replace(cfg, data=replace(cfg.data, band=[8, 30])))  # a changed copy, loaded
    assert cells.model_preprocessing(fresh, "labram").prep.l_freq == 8.0
