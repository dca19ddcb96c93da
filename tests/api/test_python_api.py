"""The public Python API (issue 25): every name in ``eegfm_bench.__all__`` resolves, ``import eegfm_bench`` stays
light, and the notebook-style example runs on the staged data at tiny size."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np

from eegfm_testutils import requires_data


def test_every_public_name_resolves_and_the_import_is_light():
    import eegfm_bench as eb

    assert eb.__all__ == sorted(eb.__all__) and len(eb.__all__) >= 30
    for name in eb.__all__:
        assert getattr(eb, name) is not None, name
    assert issubclass(eb.ConfigError, eb.EEGFMError)
    code = "import sys, eegfm_bench; print(int('torch' in sys.modules), int('lightning' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "0"]  # nothing heavy until a name is used


@requires_data
def test_the_notebook_example_runs_end_to_end(tmp_path, data_root):
    """What a notebook user writes: load windows, run a tiny cv (and its default confound check), read the rows."""
    import eegfm_bench as eb

    ws = eb.load_windows("eegmat", eb.BACKBONES.get("eegnet").preprocessing, data_root=data_root, subjects=[0, 1],
                         progress=False)
    assert ws.X.shape[1:] == (19, 512) and set(ws.class_names) == {"rest", "mental_arithmetic"}
    cfg = {"experiment": "api", "task": "eegmmidb_mi", "out_dir": str(tmp_path / "cv"), "seed": 0,
           "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = eb.run_cv(cfg, progress=False)
    assert list(table["model"]) == ["eegnet"]
    assert table.attrs["confound"]["condition"].tolist() == ["confound=offset1s+band4-40"]
    rows = eb.ResultStore(tmp_path / "cv").load()
    ba = rows[(rows.metric == "balanced_accuracy") & (rows.condition == "clean")]
    assert len(ba) == 1 and 0.0 <= float(ba.value.iloc[0]) <= 1.0
    assert np.isfinite(float(ba.value.iloc[0]))
