"""The package's import structure (docs/guide/architecture.md): no import cycle between modules, only the two
package-level back-edges the architecture page names (each with its reason in its module's docstring), at most 40
function-local imports each with its reason, and no function over 100 lines. Measured with the same ``ast`` walk as
``scripts/structure_counts.py``."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sc():
    spec = importlib.util.spec_from_file_location("structure_counts", REPO / "scripts" / "structure_counts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycle_and_only_the_named_back_edges(sc):
    *_, edges = sc.scan()
    assert sc.cycles(edges) == []
    assert sc.back_edges(edges) == [("data", "models"), ("provenance", "reports")]
    # the reason is written where a reader meets the edge: the importing module's docstring says "back-edge"
    for low, high in sc.back_edges(edges):
        importers = [m for m, ts in edges.items() if m.split(".")[1:2] == [low]
                     and any(t.split(".")[1:2] == [high] for t in ts)]
        assert importers
        for m in importers:
            path = REPO / (m.replace(".", "/") + ".py")
            assert "back-edge" in path.read_text(), f"{path}: imports {high} with no reason in its docstring"


def test_runs_launch_sits_below_every_command_package(sc):
    """Imports between ``runs/`` packages go one way (issue 36): the commands (``runs/cv``, ``sweep``, ...) import
    ``runs/launch`` to run their units as jobs; nothing in ``runs/launch`` imports a command's package (a command's
    own stage over jobs, the cv's feature stage, lives in its package). The launcher reaches each command's worker
    entry by name only (``WORKER_ENTRY``)."""
    *_, edges = sc.scan()
    launch = {m: sorted(t for t in ts if t.startswith("eegfm_bench.runs.")
                        and not t.startswith("eegfm_bench.runs.launch"))
              for m, ts in edges.items() if m.startswith("eegfm_bench.runs.launch")}
    assert launch and all(v == [] for v in launch.values()), {m: v for m, v in launch.items() if v}
    assert any(t.startswith("eegfm_bench.runs.launch") for t in edges["eegfm_bench.runs.cv.loop"])


def test_function_local_imports_are_few_and_say_why(sc):
    found = sc.local_imports()
    assert len(found) <= 40, found
    for path, line, text in found:
        above = (REPO / path).read_text().splitlines()[line - 3:line - 1]
        assert "reason:" in text or any("reason:" in x for x in above), f"{path}:{line}: {text} (no `# reason:`)"


def test_no_private_name_is_imported_across_modules(sc):
    """Issue 36: a helper two modules share is public, with a docstring, in a module whose name is public; nothing
    imports ``_name`` from another module, nor a module named ``_x`` (the split controls modules once shared
    ``_Ctx`` / ``_score``, every backbone the ``_common`` helpers)."""
    assert sc.private_imports() == []


def test_command_entry_points_are_run_star_and_no_public_name_starts_with_test():
    """Issue 36: one naming style for the commands (``run_cv``, ``run_sweep``, ``run_controls``, ``run_audit``, ...: no
    ``*_main`` beside ``run_*``), and no module-level public function named ``test_*`` (pytest would collect one
    imported into a test module)."""
    import ast

    bad = []
    for path in (REPO / "eegfm_bench").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    node.name.startswith("test_") or (node.name.endswith("_main") and not node.name.startswith("_"))):
                bad.append(f"{path.relative_to(REPO).as_posix()}:{node.name}")
    assert bad == []


def test_no_function_over_100_lines(sc):
    _, _, _, long_fns, _ = sc.scan()
    assert long_fns == []


def test_the_cli_answers_help_without_loading_the_commands():
    import subprocess
    import sys

    code = ("import sys\nfrom eegfm_bench import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'lightning', 'mne', 'eegfm_bench.commands') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_every_schema_lives_in_the_config_package_and_loads_through_the_one_loader():
    """Issue 25: all schemas in one package (``eegfm_bench.config``), one loader (``config.load_typed``). Every
    frozen config class of the package is defined there, and no module outside it parses a config itself (the
    CLI's ``--print-config`` prints the parsed mapping: the one exception)."""
    import ast

    pkg = REPO / "eegfm_bench"
    outside, parsing = [], []
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "ConfigRecord" for b in node.bases) \
                    and not rel.startswith("eegfm_bench/config/"):
                outside.append(f"{rel}:{node.name}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "parse_config" \
                    and not rel.startswith("eegfm_bench/config/") and rel != "eegfm_bench/commands.py":
                parsing.append(f"{rel}:{node.lineno}")
    assert outside == [] and parsing == [], (outside, parsing)
    import eegfm_bench.commands  # noqa: F401  (every command module, so every schema class, is imported)
    from eegfm_bench.config import ConfigRecord

    def subclasses(c):
        return {c} | {s for x in c.__subclasses__() for s in subclasses(x)}

    found = {c.__module__ for c in subclasses(ConfigRecord)} - {"eegfm_bench.config"}
    assert found and all(m.startswith("eegfm_bench.config.") for m in found), sorted(found)


def test_a_config_is_read_by_attribute_only():
    """No key access on a typed config: ``cfg["data"]`` and ``cfg.get("data")`` raise, so a command that still
    read a section by key would fail its tests instead of running on a mapping."""
    from eegfm_bench.runs.cv.cells import load_config

    cfg = load_config(str(REPO / "configs" / "experiment" / "quickstart.yaml"))
    assert cfg.data.batch_size == 64
    with pytest.raises(TypeError):
        cfg["data"]
    with pytest.raises(AttributeError):
        cfg.get("data")


# The calls that resolve a task (``get_task``; ``task_name`` calls it) and where they may stay: each command's loader
# resolves its task once and the typed config carries it (``cfg.resolved_task``); cells, windows, confound, controls
# steps and the paper plan take that object. Each entry says why the file resolves.
GET_TASK_ALLOWED = {
    "eegfm_bench/data/tasks.py": 2,  # task_name (names a task by resolving it); tasks_table (`eegfm-bench tasks`:
    #                                  lists every preset)
    "eegfm_bench/data/windows.py": 3,  # the public window API (load_windows, load_window_sets, resolve_preprocessing)
    #                                    takes a name, a mapping or a resolved task: a no-op on the latter
    "eegfm_bench/runs/cv/cells.py": 1,  # the cv loader (load_config)
    "eegfm_bench/runs/controls/config.py": 1,  # the controls loader (the task and the identity probe's two)
    "eegfm_bench/runs/plan/paper.py": 1,  # a paper's provenance member's loader (load_provenance_config)
    "eegfm_bench/reports/page.py": 1,  # the class names of a run saved before ingest reports kept them (read_saved)
    "eegfm_bench/provenance/data.py": 1,  # the public subject_metadata(task, ...)
    "eegfm_bench/runs/launch/ingest.py": 2,  # `eegfm-bench ingest` and the sharded fill (they take a name too)
}
TASK_NAME_ALLOWED = {  # a window set's meta names its task; these fall back to resolving when it does not
    "eegfm_bench/data/datamodule.py": 1,
    "eegfm_bench/callbacks/attribution.py": 1,
    "eegfm_bench/callbacks/probes.py": 1,
}


def test_a_task_is_resolved_once_by_the_loaders(sc):
    """Issue 36 item 2: the task is resolved once, by each command's loader, and the typed config carries it
    (``CVConfig.resolved_task``, ``ControlsConfig.resolved_task`` / ``resolved_identity``,
    ``ProvenanceRunConfig.resolved_task``). Before: 34 ``get_task`` calls in 13 files (and 10 ``task_name`` calls in
    7) re-resolved it from ``cfg.task`` in cells, confound, controls steps, the paper plan, ...; a new call outside
    :data:`GET_TASK_ALLOWED` (or more than it allows) fails here: take ``cfg.resolved_task`` instead."""
    from collections import Counter

    for fn, allowed in (("get_task", GET_TASK_ALLOWED), ("task_name", TASK_NAME_ALLOWED)):
        calls = sc.task_resolutions(fn)
        per_file = Counter(f for f, _ in calls)
        over = {f: n for f, n in per_file.items() if n > allowed.get(f, 0)}
        assert over == {}, f"{fn} called outside the loaders: {[c for c in calls if c[0] in over]}; fix: read the " \
                           "resolved task the config carries (cfg.resolved_task)"
