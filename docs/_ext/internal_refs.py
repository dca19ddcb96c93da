"""Cross-references to names without an API page.

The API reference documents the public names (``eegfm_bench.<name>``); docstrings also name internal modules and
functions (``:func:`~eegfm_bench.data.windows.resolve_preprocessing```), which have no page. With ``nitpicky`` each
such reference would be a warning although the name is right. This handler resolves a reference that Sphinx could not:

- to the public page when the object is a public name (``eegfm_bench.runs.cv.run_cv`` → ``eegfm_bench.run_cv``);
- to plain literal text when the name exists (it is imported: the module, the object, or a name of the docstring's
  module or class);
- not at all when the name does not exist: the warning stays, so ``-W`` fails on a misspelt or removed name.
"""
from __future__ import annotations

import importlib
import re

from docutils import nodes


def _lookup(path: str):
    """The object at the dotted ``path`` (a module, then attributes), or raise LookupError."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - not a module: try a shorter prefix
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise LookupError(path)
            obj = getattr(obj, attr)
        return obj
    raise LookupError(path)


def _find(target: str, module: str | None, cls: str | None, source: str = ""):
    candidates = [target]
    if module:
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
        candidates.append(f"{module}.{target}")
    # a docstring shown on a page of another module (``docstring of eegfm_bench.runs.sweep.sweep_main``): its own
    # module and class are the context of its bare names
    owner = re.search(r"docstring of ([\w.]+)", source or "")
    if owner:
        parts = owner.group(1).split(".")
        candidates += [".".join(parts[:i] + [target]) for i in range(len(parts), 0, -1)]
        try:  # a public function is the API's quiet wrapper (``eegfm_bench.<name>``): its names are its home module's
            home = getattr(_lookup(owner.group(1)), "__wrapped__", None)
        except LookupError:
            home = None
        if home is not None:
            candidates.append(f"{home.__module__}.{target}")
    for c in candidates:
        try:
            return _lookup(c)
        except LookupError:
            continue
    raise LookupError(target)


def resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    try:
        obj = _find(target, node.get("py:module"), node.get("py:class"), node.source or "")
    except LookupError:
        return None  # a name that does not exist: Sphinx warns
    import eegfm_bench

    public = [n for n in getattr(eegfm_bench, "__all__", []) if getattr(eegfm_bench, n, None) is obj]
    if public:
        ref = app.env.domains["py"].resolve_xref(env, node["refdoc"], app.builder, "obj",
                                                  f"eegfm_bench.{public[0]}", node, contnode)
        if ref is not None:
            return ref
    return nodes.literal(contnode.astext(), contnode.astext())


def setup(app):
    app.connect("missing-reference", resolve)
    return {"parallel_read_safe": True, "version": "1"}
