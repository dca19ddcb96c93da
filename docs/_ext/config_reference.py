"""The config reference, generated from the schemas: every frozen config dataclass a user writes in YAML
(every :class:`~eegfm_bench.config.ConfigRecord` subclass in the package) with every field's YAML key, type,
default and documentation.

The documentation of a field is its entry in the class docstring's ``Args:`` (Google) or ``Parameters`` (numpydoc)
block — the same text jsonargparse shows in ``--help``. :func:`missing_docs` lists the classes and fields without
one; the Sphinx build warns on each (so ``-W`` fails) and ``tests/docs/test_config_reference.py`` asserts the list is
empty. The page is written to ``docs/reference/config.rst`` when the build starts (not committed).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import typing
from pathlib import Path

import docstring_parser

from eegfm_bench.config import TRAINER_EXTRA_DOCS, TRAINER_EXTRAS

PACKAGE = "eegfm_bench"
PAGE = Path("reference") / "config.rst"


def schema_modules() -> list[str]:
    """Modules of the package defining a config dataclass (found by their source text, so a schema module that
    moves is still found)."""
    package = Path(importlib.import_module(PACKAGE).__file__).parent  # the one imported (a docs copy builds too)
    root = package.parent
    mods = []
    for path in sorted(package.rglob("*.py")):
        if re.search(r"^class \w+\((?:\w+, )*ConfigRecord\b", path.read_text(encoding="utf-8"), re.M):
            rel = path.relative_to(root).with_suffix("")
            mods.append(".".join(p for p in rel.parts if p != "__init__"))
    return mods


def config_classes() -> list[type]:
    """Every ``ConfigRecord`` subclass defined in the package, in module then source order."""
    from eegfm_bench.config import ConfigRecord

    out = []
    for name in schema_modules():
        mod = importlib.import_module(name)
        classes = [c for c in vars(mod).values() if inspect.isclass(c) and issubclass(c, ConfigRecord)
                   and c is not ConfigRecord and c.__module__ == name]
        out += sorted(classes, key=lambda c: inspect.getsourcelines(c)[1])
    return out


def _docstring(cls: type) -> str:
    """The class's own docstring ('' for none: not a base class's, nor the signature dataclass writes for none)."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    return "" if doc.startswith(f"{cls.__name__}(") else doc


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its documentation in the class docstring (``Args:`` or ``Parameters``)."""
    doc = docstring_parser.parse(_docstring(cls))
    return {p.arg_name.split(":")[0].strip(): " ".join((p.description or "").split()) for p in doc.params}


def summary(cls: type) -> str:
    """The class docstring's text before its ``Args:`` / ``Parameters`` block."""
    doc = docstring_parser.parse(_docstring(cls))
    parts = [p.strip() for p in (doc.short_description or "", doc.long_description or "") if p and p.strip()]
    joint = "\n\n" if doc.blank_after_short_description else " "  # a first sentence over two lines stays one
    return joint.join(parts)


def _nested(tp) -> list[tuple[type, bool]]:
    """Config classes inside a type hint, with whether they are list items."""
    from eegfm_bench.config import ConfigRecord

    if inspect.isclass(tp) and issubclass(tp, ConfigRecord):
        return [(tp, False)]
    out = []
    for arg in typing.get_args(tp):
        listed = typing.get_origin(tp) in (list, tuple)
        out += [(c, listed or item) for c, item in _nested(arg)]
    return out


ROOT_KEYS = {"TaskSpec": "task", "UserModelConfig": "user_models.<name>"}
"""Schemas read from a section of another file (a cv's ``task:`` and each ``user_models:`` entry; the cv schema types
them as mappings) or from a file of their own (a task YAML, a user-model declaration)."""


ALSO_TOP_LEVEL = {"AuditConfig"}
"""Sections that are also the top level of a command's own file (``eegfm-bench audit`` reads the audit's settings
from its top-level keys; a paper's provenance run nests them under ``audit:``)."""

ORDER = ["cv", "task", "user_model", "launch", "confound", "sweep", "interpret", "controls", "audit", "paper"]
"""Page order of the schema modules (by their last name; a module not listed comes after, by name)."""

FIELD_SCHEMAS = {"task": "TaskSpec", "user_models": "UserModelConfig"}
"""Fields typed as a mapping whose keys another schema declares: their row links to it."""


def key_paths(classes: list[type]) -> dict[type, list[str]]:
    """Class -> the YAML keys it is written under (``split``, ``runs[]``, ``task.labels``; ``""``: a file's top)."""
    children: dict[type, list[tuple[str, type]]] = {}
    referenced = set()
    for cls in classes:
        hints = typing.get_type_hints(cls)
        kids = []
        for f in dataclasses.fields(cls):
            for sub, listed in _nested(hints[f.name]):
                kids.append((f.name + ("[]" if listed else ""), sub))
                referenced.add(sub)
        # a source's own options: the TaskSpec section named after the source (``task.files``, ``task.bids``)
        for source, schema in getattr(inspect.getmodule(cls), "SOURCE_OPTIONS", {}).items():
            if any(f.name == source for f in dataclasses.fields(cls)):
                kids.append((source, schema))
                referenced.add(schema)
        children[cls] = kids
    paths: dict[type, list[str]] = {}

    def walk(cls, prefix):
        if prefix in paths.setdefault(cls, []):
            return
        paths[cls].append(prefix)
        for key, sub in children.get(cls, []):
            walk(sub, f"{prefix}.{key}" if prefix else key)

    for cls in classes:
        if cls not in referenced or cls.__name__ in ALSO_TOP_LEVEL:
            walk(cls, ROOT_KEYS.get(cls.__name__, ""))
    return paths


def default_text(f: dataclasses.Field) -> str:
    """The field's default as YAML would write it (``required`` when there is none)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(the section's defaults)"
    try:
        return json.dumps(value).replace("null", "null")
    except TypeError:
        return repr(value)


def type_text(f: dataclasses.Field) -> str:
    """The field's annotation as written in the schema, without ``typing.``."""
    return re.sub(r"\btyping\.", "", f.type if isinstance(f.type, str) else repr(f.type))


def missing_docs(classes: list[type] | None = None) -> list[str]:
    """``Class`` (no summary) and ``Class.field`` (no documentation) for every gap in the schemas."""
    out = []
    for cls in classes if classes is not None else config_classes():
        if not summary(cls):
            out.append(cls.__name__)
        docs = field_docs(cls)
        out += [f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls) if not docs.get(f.name)]
    return out


_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc):`([^`]+)`")


def _literal(match: re.Match) -> str:
    """A Python cross-reference as a literal: the page names internal modules the API reference does not carry."""
    target = match.group(1)
    title = re.match(r"(.*?)\s*<(.+)>$", target)
    if title:
        return f"``{title.group(1)}``"
    return f"``{target.lstrip('~').rsplit('.', 1)[-1] if target.startswith('~') else target}``"


def plain(text: str) -> str:
    """Docstring text with its Python roles written as literals."""
    return _ROLE.sub(_literal, text)


def _cell(text: str) -> str:
    return plain(" ".join(text.split())) or " "


def render() -> str:
    """The reST page: one section per schema module, one subsection and one table per config class."""
    classes = config_classes()
    paths = key_paths(classes)
    lines = [".. This page is generated by docs/_ext/config_reference.py from the config schemas; do not edit.", "",
             ".. _config-reference:", "", "Config reference", "================", "",
             "Every section a config file may hold, generated from the schemas the commands parse (the same text "
             "``eegfm-bench <command> --help`` prints). A key is written as its dotted path: ``split.folds`` is "
             "``folds:`` inside the ``split:`` section; ``runs[].heads`` is ``heads:`` in each item of the "
             "``runs:`` list. Every key can also be given on the command line (``--split.folds '[0]'``). The "
             "``trainer:`` section of a command takes every ``lightning.Trainer`` argument "
             "(:doc:`../guide/scaling`), and these keys of eegfm_bench's own:", "",
             ".. list-table::", "   :header-rows: 1", "   :widths: 22 22 16 40", "",
             "   * - key", "     - type", "     - default", "     - what it does"]
    for k, default in TRAINER_EXTRAS.items():
        tp, text = TRAINER_EXTRA_DOCS[k]
        lines += [f"   * - ``trainer.{k}``", f"     - ``{tp}``", f"     - ``{default}``", f"     - {text}"]
    lines.append("")
    by_module: dict[str, list[type]] = {}
    for cls in classes:
        by_module.setdefault(cls.__module__, []).append(cls)

    def order(module: str) -> tuple:  # the cv and what it reads first, then the other commands
        last = module.rsplit(".", 1)[-1]
        return (ORDER.index(last) if last in ORDER else len(ORDER), module)

    for module, members in sorted(by_module.items(), key=lambda kv: order(kv[0])):
        mod = importlib.import_module(module)
        title = f"``{module}``"
        lines += [title, "-" * len(title), ""]
        head = (inspect.getdoc(mod) or "").split("\n\n")[0]
        if head:
            lines += [_cell(head), ""]
        for cls in members:
            lines += [f".. _config-{cls.__name__}:", "", cls.__name__, "~" * len(cls.__name__), ""]
            lines += [plain(summary(cls)), ""]
            where = [p for p in paths.get(cls, []) if p]
            if where:
                top = "the top level of its command's file, or " if "" in paths.get(cls, []) else ""
                lines += ["Written as: " + top + ", ".join(f"``{p}:``" for p in where) + ".", ""]
            else:
                lines += ["The top level of its config file.", ""]
            prefix = where[0] + "." if where else ""
            docs = field_docs(cls)
            lines += [".. list-table::", "   :header-rows: 1", "   :widths: 22 22 16 40", "",
                      "   * - key", "     - type", "     - default", "     - what it does"]
            names = {c.__name__ for c in classes}
            for f in dataclasses.fields(cls):
                text = _cell(docs.get(f.name, ""))
                schema = FIELD_SCHEMAS.get(f.name)
                if schema in names and schema != cls.__name__ and not _nested(typing.get_type_hints(cls)[f.name]):
                    text += f" Its keys: :ref:`{schema} <config-{schema}>`."
                lines += [f"   * - ``{prefix}{f.name}``", f"     - ``{type_text(f)}``",
                          f"     - ``{default_text(f)}``", f"     - {text}"]
            lines.append("")
    return "\n".join(lines) + "\n"


def _write(app) -> None:
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    target = Path(app.srcdir) / PAGE
    target.parent.mkdir(parents=True, exist_ok=True)
    text = render()
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    for gap in missing_docs():
        log.warning(f"config reference: {gap} has no documentation (add it to the class docstring's Args: block)",
                    type="config_reference")


def setup(app):
    app.connect("builder-inited", _write)
    return {"parallel_read_safe": True, "version": "1"}
