"""One window length (issue 33 item 2): the window's preprocessing is resolved once, model → task → cv
(:func:`eegfm_bench.data.windows.resolve_preprocessing`), so the confound check's offset keeps the headline's end
for a task with or without ``window_s``; and the default confound check of a user's event-locked task."""
from __future__ import annotations

import numpy as np
import pytest

from eegfm_bench.config import ConfigError
from eegfm_bench.data.windows import load_windows, resolve_preprocessing
from eegfm_bench.models.backbones import BACKBONES
from eegfm_bench.runs.cv.cells import load_config, model_preprocessing, windows_for
from eegfm_bench.runs.cv.confound import derive

EEGNET = BACKBONES.get("eegnet").preprocessing  # 128 Hz, 1-40 Hz, 4 s
RUNS = [{"model": "eegnet", "regime": "full", "heads": ["flatten"]}]


def _cv(tmp_path, task, **data) -> dict:
    return {"experiment": "w", "task": task, "out_dir": str(tmp_path / "o"), "runs": RUNS,
            "data": {"cache_dir": str(tmp_path / "c"), **data}, "confound": {"enabled": True, "variations": ["offset"]}}


@pytest.mark.parametrize("window_s", [None, 3.0])
def test_offset_window_ends_where_the_headline_ends(data_root, tmp_path, window_s):
    """EEGMMIDB subject 1 under EEGNet: the offset variation's windows are the headline's from 1 s after the cue to
    the same last sample (sample for sample), with the model's 4 s window and with the task's ``window_s: 3``."""
    task = "eegmmidb_mi" if window_s is None else {"preset": "eegmmidb_mi", "window_s": window_s}
    cfg = load_config(_cv(tmp_path, task, data_root=str(data_root), subjects=[1]))
    off = derive(cfg, "offset")
    length = window_s or 4.0
    head_w, off_w = model_preprocessing(cfg, "eegnet"), model_preprocessing(off, "eegnet")
    assert (head_w.start_s, head_w.end_s) == (0.0, length)
    assert (off_w.start_s, off_w.end_s) == (1.0, length)  # 1 s later, the same end: 1 s shorter
    head, var = windows_for(cfg, "eegnet", {}), windows_for(off, "eegnet", {})
    assert head.n_times == round(length * 128) and var.n_times == round((length - 1) * 128)
    assert len(head) == len(var) == 45
    np.testing.assert_array_equal(var.recording, head.recording)
    np.testing.assert_array_equal(var.window_index, head.window_index)
    # start sample 128 (1 s at 128 Hz) of each headline window to its last sample: the offset window, exactly
    np.testing.assert_array_equal(np.asarray(var.X), np.asarray(head.X)[:, :, 128:])


def test_precedence_model_then_task_then_cv():
    """The model's window, replaced by the task's ``window_s``, then shortened by the cv; the band intersected."""
    mi = "eegmmidb_mi"
    assert resolve_preprocessing(mi, EEGNET).prep == EEGNET  # nothing declared: the model's own
    w3 = {"preset": mi, "window_s": 3.0, "reference": "none"}
    r = resolve_preprocessing(w3, EEGNET)
    assert (r.prep.window_s, r.prep.reference, r.n_times, r.declared) == (3.0, "none", 384, EEGNET)
    r = resolve_preprocessing(w3, EEGNET, shorten_s=1.0, band=[4, 45])
    assert (r.prep.window_s, r.n_times, r.prep.l_freq, r.prep.h_freq) == (2.0, 256, 4.0, 40.0)
    assert resolve_preprocessing(mi, EEGNET, shorten_s=1.0).prep.window_s == 3.0  # the model's 4 s, shortened
    assert resolve_preprocessing("eegmat", EEGNET).start_s is None  # fixed windows have no onset
    with pytest.raises(ConfigError, match=r"leaves no window of the 3 s \(task 'eegmmidb_mi'.s window_s\); fix"):
        resolve_preprocessing(w3, EEGNET, shorten_s=3.0)
    with pytest.raises(ConfigError, match="leave no band; fix"):
        resolve_preprocessing(mi, EEGNET, band=[41, 60])


def test_offset_past_a_declared_window_is_refused_before_any_data(tmp_path, monkeypatch):
    """ku_erp declares 1 s windows: an offset of 1 s leaves nothing, said at load time (not after the headline)."""
    import eegfm_bench.data.windows as W

    monkeypatch.setattr(W, "load_windows", lambda *a, **k: pytest.fail("data read"))
    with pytest.raises(ConfigError, match=r"offset variation of eegnet.*leaves no window of the 1 s \(task 'ku_erp'"):
        load_config(_cv(tmp_path, "ku_erp"))
    cfg = _cv(tmp_path, "ku_erp")
    cfg["confound"]["keep_length"] = True  # the window keeps its length and ends later: allowed
    assert load_config(cfg).confound.keep_length


def test_a_resolved_preprocessing_is_refused_for_another_task(tmp_path):
    with pytest.raises(ValueError, match="resolved for another task than 'eegmat'"):
        load_windows("eegmat", resolve_preprocessing("eegmmidb_mi", EEGNET), cache_dir=tmp_path, progress=False)


def test_plan_paper_counts_the_resolved_window():
    from eegfm_bench.data.tasks import get_task
    from eegfm_bench.runs.plan.paper_plan import n_times

    # n_times takes the task a member's loader resolved (its config's resolved_task)
    assert n_times(get_task("eegmmidb_mi"), "labram") == 800  # 4 s at 200 Hz
    assert n_times(get_task({"preset": "eegmmidb_mi", "window_s": 3.0}), "labram") == 600
    assert n_times(get_task("ku_erp"), "eegnet") == 128
    assert n_times(load_config({"task": "eegmmidb_mi", "runs": [{"model": "eegnet"}]}).resolved_task, "labram") == 800


def test_a_user_event_locked_task_gets_the_offset_band_check(tmp_path):
    """A declared event-locked task without ``confound:`` resolves to the same default check as eegmmidb_mi
    (offset+band, on); a declared fixed-window task to none (off)."""
    from eegfm_bench.data.spec import default_confound_variations, parse_task_spec

    mine = {"name": "mine", "source": "files", "root": str(tmp_path), "classes": ["a", "b"],
            "files": {"glob": "*.fif", "pattern": r"^(?P<subject>S\d+)_raw\.fif$"},
            "labels": {"events": {"a": "a", "b": "b"}}, "windows": {"mode": "events"}}
    assert default_confound_variations(parse_task_spec(mine)) == ["offset+band"]
    base = {"experiment": "u", "out_dir": str(tmp_path / "o"), "runs": RUNS}
    cc = load_config({**base, "task": mine}).confound
    ref = load_config({**base, "task": "eegmmidb_mi"}).confound
    assert (cc.enabled, cc.variations) == (ref.enabled, ref.variations) == (True, ["offset+band"])
    fixed = {**mine, "windows": {"mode": "fixed"}, "labels": {}, "files": {**mine["files"],
             "pattern": r"^(?P<subject>S\d+)_(?P<label>a|b)_raw\.fif$"}}
    cc = load_config({**base, "task": fixed}).confound
    assert (cc.enabled, cc.variations) == (False, [])
