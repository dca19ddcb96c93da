"""The ``eegfm-bench status`` text (:func:`status_markdown`) from the states of a cv's cells
(:class:`~eegfm_bench.runs.cv.progress.CellProgress`)."""
from __future__ import annotations

from collections import Counter


def status_markdown(rows: list[dict], cmd: str, unmerged: bool = False) -> str:
    """The ``eegfm-bench status`` text: counts per state, one table row per cell, the resume (or wait) line.

    ``rows`` and ``cmd`` are :func:`~eegfm_bench.runs.cv.progress.cv_status`'s; ``unmerged``: :meth:`ResultStore.unmerged` of the folder.
    """
    n = Counter(r["state"] for r in rows)
    lines = [f"{len(rows)} cells: " + ", ".join(f"{n[s]} {s}" for s in ("done", "running", "pending", "failed",
                                                                      "missing") if s != "pending" or n[s])
             + ("; results.csv is older than the newest rows (a rerun merges them)" if unmerged else ""), "",
             "| cell | state | detail |", "|---|---|---|"]
    lines += [f"| {r['cell']} | {r['state']} | {r['detail'].splitlines()[0][:120] if r['detail'] else ''} |"
              for r in rows]
    lines += ["", (cmd if cmd.startswith("wait") else f"resume: {cmd}") if cmd else "nothing to resume"]
    return "\n".join(lines)


__all__ = ["status_markdown"]
