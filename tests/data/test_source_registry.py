"""The task schema reads the source registry (issue 36 item 5): a data source registered at runtime
(``SOURCES.register``) or by an installed package (an entry point in the group ``eegfm_bench.sources``) is named in a
task's ``source:`` and ingests staged data without any edit of :mod:`eegfm_bench.config.task`; an unknown source is
refused in one line listing the known ones and how to register one.

The plug-in source reads the staged EEGMAT files by name (``Subject00_1.edf``: subject ``Subject00``, ``_1`` rest,
``_2`` task); its windows must equal, sample for sample, those of ``source: files`` with the same pattern."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from eegfm_bench.config import ConfigError
from eegfm_bench.data.preprocessing import Preprocessing
from eegfm_bench.data.sources import SOURCES
from eegfm_bench.data.spec import parse_task_spec
from eegfm_bench.data.windows import load_windows
from eegfm_testutils import HANG_S, REPO, cli_env, install_plugin, requires_data

PREP = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit="µV", window_s=4.0)

# The plug-in: a module of its own (written to disk for the entry-point test, exec'd here for the runtime one).
PLUGIN = '''
import re
from dataclasses import dataclass, field

import mne

from eegfm_bench.config import ConfigRecord
from eegfm_bench.data.sources.base import Recording, Source, select_subjects


@dataclass(frozen=True)
class NamedEDFOptions(ConfigRecord):
    """Options of the named-EDF source.

    Args:
        conditions: file-name suffix -> class name.
    """

    conditions: dict = field(default_factory=dict)


class NamedEDFSource(Source):
    """EDF files named ``<subject>_<suffix>.edf`` in the task's root; the suffix gives the class."""

    name = "named_edf"
    options = NamedEDFOptions

    def recordings(self, subjects=None):
        recs = []
        for p in sorted(self.root.glob("*.edf")):
            subject, suffix = re.match(r"^(\\w+?)_(\\w+)$", p.stem).groups()
            recs.append(Recording(subject=subject, recording=p.stem, path=p, label=self.opts.conditions[suffix]))
        return select_subjects(recs, subjects, f"task {self.spec.name!r}")

    def read(self, rec):
        return mne.io.read_raw_edf(rec.path, preload=True, verbose="error")
'''


def _task(name: str, source: str, **section) -> dict:
    return {"name": name, "source": source, "root": "eegmat", "classes": ["rest", "task"],
            "windows": {"mode": "fixed"}, **section}


FILES_TASK = _task("mat_files", "files", files={"glob": "*.edf",
                                                "pattern": r"^(?P<subject>Subject\d+)_(?P<label>\d)\.edf$"},
                   labels={"map": {"1": "rest", "2": "task"}})


@pytest.fixture
def runtime_source():
    """``named_rt`` registered in this process for the test, removed after it."""
    ns: dict = {}
    exec(compile(PLUGIN, "named_edf_plugin", "exec"), ns)
    cls = type("RuntimeNamedEDF", (ns["NamedEDFSource"],), {"name": "named_rt"})
    SOURCES.register("named_rt")(cls)
    yield cls
    SOURCES._items.pop("named_rt", None)


@requires_data
def test_a_source_registered_at_runtime_is_a_valid_task_source_and_ingests(runtime_source, tmp_path):
    task = _task("mat_rt", "named_rt", named_rt={"conditions": {"1": "rest", "2": "task"}})
    spec = parse_task_spec(task)
    assert spec.source == "named_rt" and spec.source_options == {"conditions": {"1": "rest", "2": "task"}}
    ws = load_windows(task, PREP, subjects=[0, 1], cache_dir=tmp_path / "c", progress=False)
    ref = load_windows(FILES_TASK, PREP, subjects=[0, 1], cache_dir=tmp_path / "c", progress=False)
    assert len(ws.y) == len(ref.y) > 0 and set(ws.subject) == {"Subject00", "Subject01"}
    assert np.bincount(ws.y).tolist() == np.bincount(ref.y).tolist() and len(set(ws.y.tolist())) == 2
    np.testing.assert_array_equal(np.asarray(ws.X), np.asarray(ref.X))
    np.testing.assert_array_equal(ws.y, ref.y)
    # its options are checked against its own schema
    with pytest.raises(ConfigError, match=r"unknown key task\.named_rt\.condition\b.*conditions"):
        parse_task_spec(_task("mat_rt", "named_rt", named_rt={"condition": {}}))


def test_an_unknown_source_is_refused_in_one_line_naming_the_known_ones_and_how_to_register():
    with pytest.raises(ConfigError) as err:
        parse_task_spec(_task("x", "filez", files={"glob": "*.edf", "subject": "s"}))
    msg = str(err.value)
    assert "\n" not in msg and "unknown data source 'filez'" in msg and "Did you mean 'files'" in msg
    assert all(s in msg for s in ("bids", "braindecode", "moabb", "eegmmidb")) and "eegfm_bench.sources" in msg


def _install(site) -> None:
    install_plugin(site, "eegfm_named_edf", PLUGIN, "eegfm_bench.sources", "named_edf", "NamedEDFSource")


@requires_data
def test_a_source_from_an_installed_package_is_named_in_a_task_and_ingests(tmp_path):
    site = tmp_path / "site"
    _install(site)
    task = _task("mat_ep", "named_edf", named_edf={"conditions": {"1": "rest", "2": "task"}})
    code = (f"import json, numpy as np\nfrom eegfm_bench.data.windows import load_windows\n"
            f"from eegfm_bench.data.preprocessing import Preprocessing\n"
            f"prep = Preprocessing(sfreq=80.0, l_freq=1.0, h_freq=30.0, scale=1e6, unit='µV', window_s=4.0)\n"
            f"ws = load_windows({task!r}, prep, subjects=[0], cache_dir={str(tmp_path / 'c')!r}, progress=False)\n"
            "print(json.dumps({'n': np.bincount(ws.y).tolist(), 'subjects': sorted(set(ws.subject.tolist())), "
            "'sum': float(np.asarray(ws.X, dtype='float64').sum())}))")
    env = cli_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    ref = load_windows(FILES_TASK, PREP, subjects=[0], cache_dir=tmp_path / "c", progress=False)
    assert got["subjects"] == ["Subject00"] and got["n"] == np.bincount(ref.y).tolist()
    assert got["sum"] == pytest.approx(float(np.asarray(ref.X, dtype="float64").sum()), rel=1e-9)
    # without the package the name is unknown, and the error lists the registered sources
    r = subprocess.run([sys.executable, "-c", code], env=cli_env(), cwd=REPO, capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode != 0 and "unknown data source 'named_edf'" in r.stderr and "eegmmidb" in r.stderr
