"""The experiment page's entry points for the commands and the package API: :func:`write_page` and
:func:`refresh` of :mod:`eegfm_bench.reports.page`, which reads every saved config through its command's parser
(:data:`~eegfm_bench.reports.page.SAVED_CONFIGS`; the parsers and schemas live in :mod:`eegfm_bench.config`).
"""
from __future__ import annotations

from eegfm_bench.reports.page import SAVED_CONFIGS, refresh, report_root, write_page  # noqa: F401

__all__ = ["write_page", "refresh", "report_root", "SAVED_CONFIGS"]
