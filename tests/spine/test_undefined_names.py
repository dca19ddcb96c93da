"""No undefined name anywhere in the code (pyflakes, static: no module is imported or run).

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


def undefined_names(paths) -> list[str]:
    """``file:line: message`` for every undefined name pyflakes finds in ``paths`` (files or folders)."""
    rep = _Collect()
    for p in paths:
        api.checkRecursive([str(p)], rep)
    assert not rep.errors, rep.errors
    return [f"{m.filename}:{m.lineno}: {m.message % m.message_args}" for m in rep.found if isinstance(m, UNDEFINED)]


def test_no_name_is_used_without_being_defined():
    found = undefined_names([REPO / f for f in FOLDERS])
    assert found == [], "\n".join(found) + "\nfix: import the name, or use its current name"


def test_the_check_sees_an_undefined_name(tmp_path: Path):
    (tmp_path / "m.py").write_text("def assemble(partial, folder):\n    _publish(partial, folder)\n")
    assert undefined_names([tmp_path]) == [f"{tmp_path / 'm.py'}:2: undefined name '_publish'"]
