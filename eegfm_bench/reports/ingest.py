"""A command's ingest report: the report of every window set it read, each headed by the models that read it
(:func:`write_ingest_reports`; each window set's own report lives in its cache folder, written by
:mod:`eegfm_bench.data.windows`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.data.windows import WindowSet


def write_ingest_reports(out_dir: str | os.PathLike, window_sets: list[tuple[list[str], WindowSet]],
                         notes: Sequence[str] = ()) -> Path | None:
    """``ingest_report.md`` / ``.json`` in ``out_dir``: the ingest report of every window set a command used
    (one per preprocessing), each headed by the models that read it; each JSON entry adds ``models``, ``cache``
    (the window set's folder) and ``class_names`` (label order, read by :mod:`eegfm_bench.reports.page`).
    ``notes`` (how the reading ran, e.g. ``--shards 8 reduced to 3: only 3 recordings lack their entry``) head
    the markdown as a list and are each JSON entry's ``launcher_notes``.

    Returns
    -------
    Path or None
        The markdown report (None when no window set carries a report).
    """
    out = Path(out_dir)
    md, js = [], {}
    for models, ws in window_sets:
        p = Path(ws.meta.get("ingest_report", ""))
        if not p.is_file():
            continue
        rep = json.loads(p.with_suffix(".json").read_text())
        rep["models"] = list(models)
        rep["class_names"] = list(ws.class_names)  # label order: the page reads it without resolving the task
        rep["cache"] = str(p.parent)
        if notes:
            rep["launcher_notes"] = list(notes)
        js[ws.meta["cache_key"]] = rep
        pp = ws.meta.get("preprocessing", {})
        md.append(f"<!-- windows {ws.meta['cache_key']} -->\n_Windows for {', '.join(models)}: "
                  f"{pp.get('sfreq')} Hz, {pp.get('l_freq')}–{pp.get('h_freq')} Hz, reference {pp.get('reference')}, "
                  f"{pp.get('window_s')} s windows; cache {p.parent}_\n\n" + p.read_text())
    if not md:
        return None
    out.mkdir(parents=True, exist_ok=True)
    head = ["_How the recordings were read:_\n\n" + "\n".join(f"- {n}" for n in notes)] if notes else []
    atomic_write_text(out / "ingest_report.md", "\n\n".join(head + md))
    atomic_write_text(out / "ingest_report.json", json.dumps(js, indent=1, default=str))
    return out / "ingest_report.md"


__all__ = ["write_ingest_reports"]
