"""A head declared in a separate installed package through an entry point runs in a cv (issue 36 item 5).

The test writes a real distribution into a folder on ``sys.path``: a package ``eegfm_sum_head`` and its
``eegfm_sum_head-0.1.dist-info`` (``METADATA`` and ``entry_points.txt`` with ``[eegfm_bench.heads]``), which is what
``pip install`` leaves and what ``importlib.metadata`` reads. A ``eegfm-bench cv`` subprocess with that folder on its
``PYTHONPATH`` trains the head by its name; nothing in eegfm_bench names it."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import yaml

from eegfm_testutils import HANG_S, REPO, cli_env, install_plugin, requires_data

PACKAGE = '''
from eegfm_bench.models.heads import PoolingHead


class SumHead(PoolingHead):
    """Sum over tokens, then linear."""

    name = "sum_ep"
    token_pooling = staticmethod(lambda t: t.sum(1))
'''


def _install(site) -> None:
    install_plugin(site, "eegfm_sum_head", PACKAGE, "eegfm_bench.heads", "sum_ep", "SumHead")


@requires_data
def test_a_head_from_an_installed_package_runs_in_a_cv_and_is_a_probe_pooling(tmp_path):
    site = tmp_path / "site"
    _install(site)
    cfg = {"experiment": "ep", "task": "eegmmidb_eyes", "out_dir": str(tmp_path / "cv"), "seed": 0, "confound": False,
           "data": {"max_windows_per_subject": 3, "batch_size": 16},
           "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1, "folds": [0]},
           "trainer": {"max_epochs": 1, "patience": 1},
           "runs": [{"model": "eegnet", "regime": "full", "heads": ["sum_ep"],
                     "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}]}
    (tmp_path / "cv.yaml").write_text(yaml.safe_dump(cfg))
    env = cli_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    r = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(tmp_path / "cv.yaml"),
                        "--no-progress"], env=env, cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = pd.read_parquet(tmp_path / "cv" / "results.parquet")
    assert set(rows["head"]) == {"sum_ep"}
    params = rows[rows.metric == "head_params"].value
    assert len(params) == 1 and params.iloc[0] > 0
    # the same process view a user's probes and controls get: the head's pooling is in the vocabulary
    code = ("from eegfm_bench.models.heads import token_poolings, pool_tokens\nimport numpy as np\n"
            "print(token_poolings(), pool_tokens(np.ones((1, 3, 2)), 'sum_ep').tolist())")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=HANG_S, check=True).stdout.strip().splitlines()[-1]
    assert out == "['flatten', 'max', 'mean', 'sum_ep'] [[3.0, 3.0]]"
    # without the package on the path the name is unknown, and the error lists the installed heads
    r = subprocess.run([sys.executable, "-m", "eegfm_bench.cli", "cv", "--config", str(tmp_path / "cv.yaml"),
                        "--out_dir", str(tmp_path / "cv2"), "--no-progress"], env=cli_env(), cwd=REPO,
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 2 and "sum_ep" in r.stderr and "mean_tile" in r.stderr


def test_a_plugin_that_takes_a_registered_name_is_refused(tmp_path):
    """An installed entry point named like a built-in head (``mean``) is not skipped in silence (the built-in would
    have won without a word): listing the heads refuses it, naming the entry point and the fix. A plug-in module
    that registers its head under its entry point's own name is the same object, not a collision."""
    site = tmp_path / "site"
    install_plugin(site, "eegfm_mean_head", PACKAGE.replace('"sum_ep"', '"mean"'), "eegfm_bench.heads", "mean",
                   "SumHead")
    install_plugin(site, "eegfm_self_reg", PACKAGE.replace("\nclass SumHead", "\nfrom eegfm_bench.models.heads import "
                                                           "HEADS\n\n\n@HEADS.register('self_reg')\nclass SumHead"),
                   "eegfm_bench.heads", "self_reg", "SumHead")
    env = cli_env()
    code = "from eegfm_bench.models.heads import HEADS\nprint(HEADS.names())"
    env["PYTHONPATH"] = f"{site / 'only_self'}:{env['PYTHONPATH']}"
    (site / "only_self").mkdir()
    for name in ("eegfm_self_reg", "eegfm_self_reg-0.1.dist-info"):
        (site / name).rename(site / "only_self" / name)
    ok = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    assert ok.returncode == 0 and "'self_reg'" in ok.stdout, ok.stderr[-2000:]
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    bad = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode != 0
    assert ("ValueError: head 'mean' of the installed entry point 'eegfm_mean_head:SumHead' (group eegfm_bench.heads) "
            "is already registered as <class 'eegfm_bench.models.heads.MeanHead'>; fix: rename the entry point") in bad.stderr
