"""The public Python API (issue 25): every name in ``eegfm_bench.__all__`` resolves, ``import eegfm_bench`` stays
light, and the notebook-style example runs on the staged data at tiny size."""
from __future__ import annotations

import ast
import builtins
import json
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

from eegfm_testutils import HANG_S, REPO, cli_env, requires_data


def _third_party(w) -> bool:
    """Whether a recorded warning is one of the third-party warnings the CLI hides (eegfm_bench.quiet)."""
    from eegfm_bench.quiet import THIRD_PARTY_WARNINGS

    for f in THIRD_PARTY_WARNINGS:
        if "category" in f and not issubclass(w.category, f["category"]):
            continue
        if "module" in f and not re.match(f["module"], _module_of(w.filename)):
            continue
        if "message" in f and not re.match(f["message"], str(w.message)):
            continue
        return True
    return False


def _module_of(filename: str) -> str:
    """``.../site-packages/braindecode/models/eegpt.py`` -> ``braindecode.models.eegpt`` (what ``module=`` matches)."""
    parts = Path(filename).with_suffix("").parts
    return ".".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else Path(filename).stem


def test_the_stub_lists_every_public_name_with_its_real_import():
    """``eegfm_bench/__init__.pyi`` (what IDEs and type checkers read) and ``_API`` (the run-time list) name the same
    names from the same modules, ``__all__`` is both, and every name resolves to its module's object."""
    import eegfm_bench as eb

    stub = ast.parse((REPO / "eegfm_bench" / "__init__.pyi").read_text())
    imported, listed = {}, None
    for node in stub.body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                assert a.asname == a.name, f"{a.name}: the stub re-exports as `import {a.name} as {a.name}`"
                imported[a.name] = node.module
        elif isinstance(node, ast.Assign) and node.targets[0].id == "__all__":
            listed = ast.literal_eval(node.value)
    fix = "; fix: run `python scripts/write_api_stub.py` after changing eegfm_bench._API"
    assert imported == eb._API, f"stub and _API differ: {set(imported.items()) ^ set(eb._API.items())}{fix}"
    assert listed == sorted(eb._API) == eb.__all__, fix
    for name, module in eb._API.items():
        real = getattr(__import__(module, fromlist=[name]), name)
        got = getattr(eb, name)
        assert getattr(got, "__wrapped__", got) is real, name
        if hasattr(got, "__wrapped__"):  # a public function (run quietly) pickles as itself (submitit, joblib)
            assert pickle.loads(pickle.dumps(got)) is got, name


def test_importing_and_calling_the_api_shows_no_third_party_warning(tmp_path):
    """In a fresh process with every warning shown, the dependencies' import-time deprecations (braindecode's
    montage names, wfdb's pandas call) reach a user of braindecode, and neither a user of ``eegfm_bench.<name>`` nor
    one of the modules the extension guide imports (``eegfm_bench.models.backbones``: its examples run quiet)."""
    code = ("import json, warnings\nwarnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    {call}\n"
            "print(json.dumps([[w.category.__name__, w.filename, str(w.message)] for w in seen]))")
    calls = {"control": "import braindecode.models",
             "module": "from eegfm_bench.models.backbones import BACKBONES; BACKBONES.get('eegnet').preprocessing",
             "api": "import eegfm_bench as eb; eb.BACKBONES.get('eegnet').preprocessing; eb.preset_names()"}
    found = {}
    for k, call in calls.items():
        r = subprocess.run([sys.executable, "-c", code.format(call=call)], env={**cli_env(), "PYTHONWARNINGS": ""},
                           cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
        assert r.returncode == 0, r.stderr[-2000:]
        recs = json.loads(r.stdout.strip().splitlines()[-1])
        found[k] = [m for c, f, m in recs
                    if _third_party(warnings.WarningMessage(m, getattr(builtins, c, Warning), f, 0))]
    assert found["control"], "the control import shows no third-party warning: the test would prove nothing"
    assert found["module"] == [] and found["api"] == []


def test_every_public_name_resolves_and_the_import_is_light():
    import eegfm_bench as eb

    assert eb.__all__ == sorted(eb.__all__) and len(eb.__all__) >= 30
    for name in eb.__all__:
        assert getattr(eb, name) is not None, name
    assert issubclass(eb.ConfigError, eb.EEGFMError)
    assert [n for n in dir(eb) if not n.startswith("__")] == eb.__all__  # not the helpers __init__ imports
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
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        table = eb.run_cv(cfg, progress=False)
    # the API is as quiet about dependencies' deprecations as the CLI (Lightning's pytree check warns in fit)
    assert not [str(w.message) for w in seen if _third_party(w)]
    assert list(table["model"]) == ["eegnet"]
    assert table.attrs["confound"]["condition"].tolist() == ["confound=offset1s+band4-40"]
    rows = eb.ResultStore(tmp_path / "cv").load()
    ba = rows[(rows.metric == "balanced_accuracy") & (rows.condition == "clean")]
    assert len(ba) == 1 and 0.0 <= float(ba.value.iloc[0]) <= 1.0
    assert np.isfinite(float(ba.value.iloc[0]))
