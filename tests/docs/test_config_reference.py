"""The config reference (docs/reference/config.rst) is generated from the schemas: every config class a user writes
in YAML has a section, every field a row with its dotted key, type, default and documentation, and a class or a
field without documentation is reported (the docs build warns on it, so ``-W`` fails)."""
from __future__ import annotations

import dataclasses
import sys

import pytest

from eegfm_testutils import REPO

sys.path.insert(0, str(REPO / "docs" / "_ext"))
import config_reference as ref  # noqa: E402  (the Sphinx extension that writes the page)


def test_every_config_field_is_documented():
    assert ref.missing_docs() == []


def test_every_config_class_and_field_has_a_row_with_its_key_type_default_and_doc():
    from eegfm_bench.config import ConfigRecord

    classes = ref.config_classes()
    by_name = {c.__name__: c for c in classes}  # found wherever the schemas live
    CVConfig, SplitConfig = by_name["CVConfig"], by_name["SplitConfig"]
    page = ref.render()
    # every ConfigRecord subclass of the schema modules is there, including the cv's sections
    found = {c for c in classes}
    for mod in ref.schema_modules():
        m = __import__(mod, fromlist=["_"])
        for c in vars(m).values():
            if isinstance(c, type) and issubclass(c, ConfigRecord) and c is not ConfigRecord and c.__module__ == mod:
                assert c in found, c
    for name in ("CVConfig", "RunConfig", "DataConfig", "SplitConfig", "OptimConfig", "TaskSpec", "SweepConfig",
                 "InterpretConfig", "ControlsConfig", "AuditConfig", "PaperConfig", "LauncherConfig"):
        assert f".. _config-{name}:" in page, name
    paths = ref.key_paths(classes)
    for cls in classes:
        prefix = next((p + "." for p in paths[cls] if p), "")
        docs = ref.field_docs(cls)
        for f in dataclasses.fields(cls):
            assert f"   * - ``{prefix}{f.name}``" in page, (cls.__name__, f.name)
            assert docs[f.name]
    # split.folds: its key, type, default and its text
    row = page.split(".. _config-SplitConfig:", 1)[1].split("   * - ``split.folds``", 1)[1].split("   * -", 1)[0]
    assert "``Optional[list[int]]``" in row and "``null``" in row and "subset of folds to run" in row
    assert paths[SplitConfig] == ["split"] and "" in paths[CVConfig]
    assert "``runs[].heads``" in page and "``task.windows.balance.ratios``" in page
    # the trainer section's own keys (not Lightning's): type, default and text, as --help gives them
    for key, tp, default, text in (("patience", "int", "5", "early-stopping patience in epochs"),
                                   ("loggers", "str | list[str | dict]", "['csv']", "experiment trackers")):
        row = page.split(f"   * - ``trainer.{key}``", 1)[1].split("   * -", 1)[0]
        assert f"``{tp}``" in row and f"``{default}``" in row and text in row, row


def test_an_undocumented_field_is_reported():
    from eegfm_bench.config import ConfigRecord

    @dataclasses.dataclass(frozen=True)
    class Partly(ConfigRecord):
        """A section.

        Args:
            a: documented.
        """

        a: int = 0
        b: int = 1

    @dataclasses.dataclass(frozen=True)
    class Bare(ConfigRecord):
        c: int = 0

    assert ref.missing_docs([Partly, Bare]) == ["Partly.b", "Bare", "Bare.c"]


@pytest.mark.parametrize("text,expected", [
    (":func:`~eegfm_bench.data.windows.load_windows`", "``load_windows``"),
    (":mod:`eegfm_bench.runs.confound`", "``eegfm_bench.runs.confound``"),
    (":attr:`Source.options <eegfm_bench.data.sources.Source.options>`", "``Source.options``"),
])
def test_python_roles_become_literals_on_the_page(text, expected):
    assert ref.plain(text) == expected
