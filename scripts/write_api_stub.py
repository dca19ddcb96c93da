"""Write ``eegfm_bench/__init__.pyi``, the static view of the public API, from ``eegfm_bench._API``.

Run after adding, renaming or moving a public name (``_API`` in ``eegfm_bench/__init__.py`` is the one list);
``tests/api/test_python_api.py`` fails, naming this script, while the stub and the list differ::

    python scripts/write_api_stub.py
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEADER = '''"""Static view of :mod:`eegfm_bench`'s public API for IDEs and type checkers (the package imports these names
lazily at run time, through ``_API`` in ``__init__.py``). Written by ``python scripts/write_api_stub.py``; do not
edit by hand."""
'''


def stub_text() -> str:
    """The stub's text for the current ``_API``: one ``from module import name as name`` per name (the explicit
    re-export form type checkers honour), grouped by module, then ``__all__``."""
    from eegfm_bench import _API

    by_module: dict[str, list[str]] = defaultdict(list)
    for name, module in _API.items():
        by_module[module].append(name)
    lines = [HEADER]
    for module in sorted(by_module):
        names = ", ".join(f"{n} as {n}" for n in sorted(by_module[module]))
        lines.append(f"from {module} import {names}")
    lines.append("")
    lines.append("__all__ = [")
    lines += [f'    "{n}",' for n in sorted(_API)]
    lines.append("]")
    return "\n".join(lines) + "\n"


def main() -> None:
    path = REPO / "eegfm_bench" / "__init__.pyi"
    path.write_text(stub_text())
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
