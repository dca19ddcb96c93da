"""The package's structure in numbers: function-local imports, config lookups by string, long functions,
import cycles between modules, package-level back-edges, private names imported across modules and the calls that
resolve a task (``get_task``, ``task_name``).

Usage::

    python scripts/structure_counts.py            # the counts
    python scripts/structure_counts.py --list     # ... and every long function, cycle and back-edge

An import is "function-local" when it sits inside a ``def``; a config lookup is ``<name>["key"]`` or
``<name>.get("key")`` on a variable named like a config (``cfg``, ``d``, ``sp``, ``cc``, ``acfg``, ...). The import graph
counts every import of an ``eegfm_bench`` module, module-level and function-local alike (a function-local import
still ties the two modules). Packages are ordered by the package's floors (ground floor first; docs/guide/architecture.md); an edge from
a lower floor to a higher one is a back-edge.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "eegfm_bench"  # --root changes it
LOOKUPS_PER_FILE: dict[str, int] = {}
FLOORS = ["errors", "atomic", "runtime", "quiet", "locks", "interrupt", "config", "registry", "distributed", "stats", "metrics",
          "results", "trainer", "perturb", "data", "models",
          "interpret", "controls", "provenance", "reports", "callbacks", "runs", "api", "light_commands", "commands",
          "cli", "__init__"]
CONFIG_NAMES = {"cfg", "d", "sp", "cc", "acfg", "pc", "idc", "lc", "tr", "spec", "ch", "w", "lab", "opts", "entry", "run"}


def modname(p: Path) -> str:
    rel = p.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def floor(mod: str) -> int:
    parts = mod.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return FLOORS.index(top) if top in FLOORS else len(FLOORS)


def resolve(mod: str, node: ast.ImportFrom, is_pkg: bool = False) -> str | None:
    """The absolute module of an import (a package's ``__init__`` resolves ``from .x`` inside itself)."""
    if node.level:
        parts = mod.split(".")
        base = parts[: len(parts) - node.level + (1 if is_pkg else 0)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module


def scan():
    local_own, local_other, lookups, long_fns = 0, 0, 0, []
    global LOOKUPS_PER_FILE
    LOOKUPS_PER_FILE = {}
    edges: dict[str, set[str]] = {}
    mods = {modname(p): p for p in PKG.rglob("*.py")}
    for mod, p in mods.items():
        tree = ast.parse(p.read_text())
        edges.setdefault(mod, set())
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        in_func = set()
        for fn in funcs:
            n = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if n > 100:
                long_fns.append((n, f"{p.relative_to(PKG.parent)}:{fn.name}"))
            for x in ast.walk(fn):
                if isinstance(x, (ast.Import, ast.ImportFrom)):
                    in_func.add(id(x))
        for x in ast.walk(tree):
            if isinstance(x, (ast.Import, ast.ImportFrom)):
                if isinstance(x, ast.Import):
                    targets = [a.name for a in x.names]
                else:  # `from eegfm_bench import stats` imports the module eegfm_bench.stats
                    base = resolve(mod, x, p.name == "__init__.py") or ""
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in x.names]
                own = [t for t in targets if t.startswith("eegfm_bench")]
                if id(x) in in_func:  # one statement, one import
                    local_own += bool(own)
                    local_other += not own
                for t in own:
                    while t and t not in mods:
                        t = t.rsplit(".", 1)[0] if "." in t else ""
                    if t and t != mod:
                        edges[mod].add(t)
            if isinstance(x, ast.Subscript) and isinstance(x.value, ast.Name) and x.value.id in CONFIG_NAMES \
                    and isinstance(x.slice, ast.Constant) and isinstance(x.slice.value, str):
                lookups += 1
                LOOKUPS_PER_FILE[mod] = LOOKUPS_PER_FILE.get(mod, 0) + 1
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr == "get" \
                    and isinstance(x.func.value, ast.Name) and x.func.value.id in CONFIG_NAMES and x.args \
                    and isinstance(x.args[0], ast.Constant) and isinstance(x.args[0].value, str):
                lookups += 1
                LOOKUPS_PER_FILE[mod] = LOOKUPS_PER_FILE.get(mod, 0) + 1
    return local_own, local_other, lookups, sorted(long_fns, reverse=True), edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def back_edges(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Package-level back-edges: (lower package, higher package) pairs where a module of a lower floor imports one
    of a higher floor (:data:`FLOORS`)."""
    return sorted({(s.split(".")[1] if "." in s else s, t.split(".")[1] if "." in t else t)
                   for s, ts in edges.items() for t in ts if floor(s) < floor(t)
                   and s.split(".")[1:2] != t.split(".")[1:2]})


def local_imports() -> list[tuple[str, int, str]]:
    """Every function-local import statement: (file relative to the package's parent, line, the line's text)."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        text = p.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for x in ast.walk(fn):
                    if isinstance(x, (ast.Import, ast.ImportFrom)):
                        out.append((str(p.relative_to(PKG.parent)), x.lineno, lines[x.lineno - 1].strip()))
    return sorted(set(out))


def private_imports() -> list[tuple[str, int, str]]:
    """Every import of a private name across modules: ``from eegfm_bench.x import _name`` (absolute or relative,
    module-level or function-local) and any import of a module whose dotted name has a private part
    (``eegfm_bench.x._y``): (file relative to the package's parent, line, ``module:name``). A helper two modules
    share is public (no underscore, a docstring) in a module whose name is public."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        mod = modname(p)
        for x in ast.walk(ast.parse(p.read_text())):
            if isinstance(x, ast.ImportFrom):
                base = resolve(mod, x, p.name == "__init__.py") or ""
                if not base.startswith("eegfm_bench"):
                    continue
                private_mod = any(part.startswith("_") for part in base.split("."))
                for a in x.names:
                    if private_mod or (a.name.startswith("_") and not a.name.startswith("__")):
                        out.append((str(p.relative_to(PKG.parent)), x.lineno, f"{base}:{a.name}"))
            elif isinstance(x, ast.Import):
                for a in x.names:
                    if a.name.startswith("eegfm_bench") and any(part.startswith("_") for part in a.name.split(".")):
                        out.append((str(p.relative_to(PKG.parent)), x.lineno, a.name))
    return out


def task_resolutions(name: str = "get_task") -> list[tuple[str, int]]:
    """Every call of ``name`` (``get_task``, or ``task_name``, which calls it) in the package: (file relative to the
    package's parent, line). A command's loader resolves its task once and the typed config carries it
    (``cfg.resolved_task``); code downstream takes that object instead of resolving the task again."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        for x in ast.walk(ast.parse(p.read_text())):
            if isinstance(x, ast.Call) and (getattr(x.func, "id", None) == name or getattr(x.func, "attr", None) == name):
                out.append((str(p.relative_to(PKG.parent)), x.lineno))
    return sorted(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--lookups", action="store_true", help="config lookups by string key per module")
    ap.add_argument("--root", type=Path, help="another checkout's eegfm_bench/ folder (e.g. to compare commits)")
    a = ap.parse_args(argv)
    global PKG
    if a.root:
        PKG = a.root.resolve()
    local_own, local_other, lookups, long_fns, edges = scan()
    cyc = cycles(edges)
    back = back_edges(edges)
    print(f"function-local imports: {local_own + local_other} ({local_own} of eegfm_bench modules)")
    print(f"config lookups by string key: {lookups}")
    print(f"functions over 100 lines: {len(long_fns)}" + (f" (longest: {long_fns[0][1]}, {long_fns[0][0]})"
                                                          if long_fns else ""))
    print(f"import cycles between modules: {len(cyc)}")
    print(f"package-level back-edges: {len(back)}")
    private = private_imports()
    print(f"private names imported across modules: {len(private)}")
    for fn in ("get_task", "task_name"):
        calls = task_resolutions(fn)
        print(f"{fn} calls: {len(calls)} in {len({f for f, _ in calls})} files")
    if a.lookups:
        for m, n in sorted(LOOKUPS_PER_FILE.items(), key=lambda kv: -kv[1]):
            print(f"  lookups {n:4d}  {m}")
    if a.list:
        for n, f in long_fns:
            print(f"  long  {n:4d}  {f}")
        for c in cyc:
            print("  cycle " + " <-> ".join(c))
        for s, t in back:
            print(f"  back  {s} -> {t}")
        for f, line, what in private:
            print(f"  private  {f}:{line}  {what}")
        for fn in ("get_task", "task_name"):
            for f, line in task_resolutions(fn):
                print(f"  {fn}  {f}:{line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
