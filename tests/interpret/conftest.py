"""Fixtures of the interpretability tests; the synthetic task and helpers live in ``interpret_synth.py``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interpret_synth import _one_thread, data, trained_cbramod, trained_eegnet  # noqa: E402,F401
