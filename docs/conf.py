"""Sphinx configuration of the eegfm_bench documentation (numpydoc + sphinx-gallery + MyST, as MNE / braindecode do).

Build it from the repository root (the gallery runs its examples on the staged data at tiny size)::

    EEGFM_DATA=../shared/data python -m sphinx -W -b html docs docs/_build/html

The fast build (every page, the gallery's pages without running their examples: no data needed) is the same
command with sphinx-gallery's own switch ``-D plot_gallery=0``::

    python -m sphinx -W -D plot_gallery=0 -b html docs docs/_build/html

Both builds are nitpicky: a cross-reference that does not resolve is a warning, so ``-W`` fails on it. The config
reference (``reference/config.rst``) is written from the schemas when the build starts (``_ext/config_reference.py``).

A relative ``EEGFM_DATA`` is taken from the repository root (Sphinx reads this file from ``docs/`` and
sphinx-gallery runs each example from its own folder, so the working directory cannot tell).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))  # this folder's extensions
if os.environ.get("EEGFM_DATA"):
    os.environ["EEGFM_DATA"] = str((ROOT / os.environ["EEGFM_DATA"]).resolve())
os.environ.setdefault("EEGFM_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("MPLBACKEND", "Agg")

project = "eegfm_bench"
author = "eegfm_bench developers"
copyright = "2026, eegfm_bench developers"
try:
    from importlib.metadata import version as _version

    release = _version("eegfm_bench")
except Exception:  # not installed: the source tree's version
    release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "config_reference",
    "internal_refs",
]
nitpicky = True  # every unresolved cross-reference is a warning (-W: an error)
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip",
                    "auto_examples/*.json", "auto_examples/*.md5", "**.codeobj.json"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autosummary_generate = True
templates_path = ["_templates"]  # a class page is its docstring (no member tables of undocumented inherited methods)
autodoc_preserve_defaults = True  # a dataclass default_factory shows as written, not as <function <lambda>>
autodoc_default_options = {"members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping = {}  # no network on the build machines: no inventories fetched

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "FileNameSortKey",
}

html_theme = "pydata_sphinx_theme"
html_title = f"eegfm_bench {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path = []
