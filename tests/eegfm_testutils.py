"""Shared test constants (imported by test modules; conftest.py files are not importable reliably)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_default = REPO.parent / "shared" / "data"
if not os.environ.get("EEGFM_DATA") and _default.is_dir():
    os.environ["EEGFM_DATA"] = str(_default)
DATA = Path(os.environ.get("EEGFM_DATA", _default))
HAVE_DATA = (DATA / "eegmmidb").is_dir()

requires_data = pytest.mark.skipif(not HAVE_DATA, reason=f"staged EEG not found at {DATA} (set EEGFM_DATA)")
