"""No undefined name anywhere in the code, and no import left unused (pyflakes, static: no module is imported or
run).

A name that is used but never defined or imported fails only when its line runs, and some lines run only under a
launcher or on a rare path. This check caught the case it is here for: two branches met, one renamed
``data.windows._publish`` to ``publish_entry`` and the other called ``_publish`` in the feature stage's assembly,
so every sharded feature stage raised ``NameError`` while the sequential path stayed green.
"""
from __future__ import annotations

from pathlib import Path

from pyflakes import api, messages, reporter

from eegfm_testutils import REPO

FOLDERS = ("eegfm_bench", "tests", "scripts", "docs/_ext", "docs/extending")
UNDEFINED = (messages.UndefinedName, messages.UndefinedExport, messages.UndefinedLocal)


class _Collect(reporter.Reporter):
    """Keeps pyflakes' messages instead of printing them."""

    def __init__(self):
        super().__init__(None, None)
        self.found: list = []
        self.errors: list[str] = []

    def flake(self, message):
        self.found.append(message)

    def syntaxError(self, filename, msg, lineno, offset, text):  # noqa: N802 - pyflakes' interface
        self.errors.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):  # noqa: N802 - pyflakes' interface
        self.errors.append(f"{filename}: {msg}")


def _flakes(paths, kinds) -> list[str]:
    rep = _Collect()
    for p in paths:
        api.checkRecursive([str(p)], rep)
    assert not rep.errors, rep.errors
    return [f"{m.filename}:{m.lineno}: {m.message % m.message_args}" for m in rep.found if isinstance(m, kinds)]


def undefined_names(paths) -> list[str]:
    """``file:line: message`` for every undefined name pyflakes finds in ``paths`` (files or folders)."""
    return _flakes(paths, UNDEFINED)


def unused_imports(paths) -> list[str]:
    """``file:line: message`` for every unused import in ``paths`` outside a package's ``__init__.py`` (where an
    import hands a name on) and outside lines marked ``# noqa`` (an import for its side effect: a pytest fixture,
    a registration)."""
    found = []
    for f in _flakes(paths, (messages.UnusedImport,)):
        name, line = f.split(":")[:2]
        if Path(name).name != "__init__.py" and "noqa" not in _line(name, int(line)):
            found.append(f)
    return found


def _line(path: str, lineno: int) -> str:
    """The import statement starting at ``lineno`` (up to its closing parenthesis: a ``# noqa`` may end any line)."""
    lines = Path(path).read_text().splitlines()[lineno - 1:]
    out = []
    for ln in lines:
        out.append(ln)
        if "(" not in out[0] or ")" in ln:
            break
    return "\n".join(out)


def test_no_name_is_used_without_being_defined():
    found = undefined_names([REPO / f for f in FOLDERS])
    assert found == [], "\n".join(found) + "\nfix: import the name, or use its current name"


def test_the_check_sees_an_undefined_name(tmp_path: Path):
    (tmp_path / "m.py").write_text("def assemble(partial, folder):\n    _publish(partial, folder)\n")
    assert undefined_names([tmp_path]) == [f"{tmp_path / 'm.py'}:2: undefined name '_publish'"]


def test_no_import_is_left_unused():
    """A module's imports are what it uses: a name left behind by a move (a schema that went to ``config/``) reads
    to a contributor as a dependency that is not there, and another module importing it from there is a hidden
    re-export."""
    found = unused_imports([REPO / f for f in FOLDERS])
    assert found == [], "\n".join(found) + "\nfix: remove the import (or import the name from its home where it is used)"


def test_the_check_sees_an_unused_import(tmp_path: Path):
    (tmp_path / "m.py").write_text("from typing import Optional, Sequence\nimport os  # noqa: F401 - side effect\n"
                                   "def f(x: Sequence):\n    return x\n")
    (tmp_path / "__init__.py").write_text("from typing import Any\n")
    assert unused_imports([tmp_path]) == [f"{tmp_path / 'm.py'}:1: 'typing.Optional' imported but unused"]
