"""The stages of a whole ``eegfm-bench cv`` command, as ``eegfm-bench plan`` estimates them.

A cv command is more than its training: on a tiny cv the training was an eighth of the wall time. The plan
estimates, in the order the command runs them:

* **start-up** — the interpreter and the imports of the command (Lightning, torch, MNE, the benchmark): the plan
  measures its own start-up (the process's age when planning starts: ``eegfm-bench plan`` loads the same modules
  as ``cv``), else :data:`STARTUP_S`;
* **windows** — the window cache read, or its ingestion when absent: the plan loads the same windows (it needs
  their number) and times it; when the cache was absent the plan built it, so the command only reads it (the
  ingestion the plan paid is said on its own line);
* **features** — a head-only backbone's frozen forward pass over every window, once per backbone (shared by its
  heads and folds; a feature cache already there is read instead), before the cells that use it;
* **job start-up** — under a launcher, every job is a new process: start-up plus the window read again;
* **training** and **testing** — the cells: window passes at the measured throughput, Lightning's per-epoch and
  per-cell cost (toy model), two checkpoint saves per epoch, the model's construction and its first steps'
  extra cost; divided by the jobs that run at once (the launcher's workers or array parallelism; local workers
  on a CPU share its cores: at most ``cores // intra_op_threads`` at once);
* **confound check** — one row per variation (``runs/cv/confound.py``: each variation is the cv again on other
  windows): its windows, features, job start-ups and cells as above, plus the paired bootstrap comparison
  (timed here on one bootstrap of the same size, times the leave-one-subject-out repeats);
* **report** — the summary and the experiment's page (:data:`REFRESH_S` per page: one after the headline, one
  per variation, one at the end).

The stages before the cells and the report run once, in the launching process; only the cells' stages shrink
with parallel jobs. Every figure is measured on the planning machine at planning time (under its load), except
the documented constants below.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from eegfm_bench.data.cache import default_cache_dir

STARTUP_S = 8.0
"""Seconds of a cv process's start-up (``python -c "import eegfm_bench.commands"``: 7.7 s user + 0.9 s sys on this
project's 2-core machine, 20.9 s wall under a load of 5), used when the plan cannot measure its own (not on Linux,
or the command modules not loaded by the planning process)."""

REFRESH_S = 1.0
"""Seconds to write one experiment page and summary (:func:`eegfm_bench.reports.page.refresh` on a finished tiny
cv: 0.95 s at a load of 9 on the 2-core machine; ``scripts/bench_plan.py`` measures it again)."""

CELL_STAGES = ("training", "testing")
"""The stages that run inside the cells (divided by the jobs at once)."""


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where it cannot be read."""
    try:
        start_ticks = float(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def startup_seconds() -> tuple[float, str]:
    """The start-up of a cv command: this process's age when the command modules are loaded (the plan has paid
    the same imports) and the process is young (not a notebook or a test session), else :data:`STARTUP_S`; with
    where the figure comes from."""
    age = process_age()
    if age is not None and age < 300 and "eegfm_bench.runs.cv.command" in sys.modules:  # not a long-lived session
        return age, "this plan's own start-up (imports), measured"
    return STARTUP_S, "constant STARTUP_S (runs/plan/stages.py), measured on the 2-core machine"


def complete_entries(cache_dir) -> set[str]:
    """The window-cache entries present (those with a ``COMPLETE`` marker) under ``cache_dir``."""
    root = Path(cache_dir).expanduser()
    return {p.parent.name for p in root.glob("*/COMPLETE")} if root.is_dir() else set()


def timed_windows(cfg, windows: dict) -> dict:
    """Load every window set ``cfg``'s runs read into ``windows`` (as the cv does) and time it.

    Returns
    -------
    dict
        ``read_s`` (seconds to open the cache, what the command pays), ``ingest_s`` (seconds this plan spent
        building entries that were absent, else None), ``built`` (the entries built) and ``n_windows``.
    """
    from eegfm_bench.runs.cv.cells import windows_for_models  # reason: the cv's stack (torch, MNE), loaded to measure

    cdir = Path(cfg.data.cache_dir).expanduser() if cfg.data.cache_dir else default_cache_dir()
    before = complete_entries(cdir)
    models = list(dict.fromkeys(r.model for r in cfg.runs))
    t0 = time.perf_counter()
    windows_for_models(cfg, models, windows)
    first = time.perf_counter() - t0
    built = sorted(complete_entries(cdir) - before)
    if built:  # the plan ingested: time the read the command will do
        t0 = time.perf_counter()
        windows_for_models(cfg, models, {})
        read = time.perf_counter() - t0
    else:
        read = first
    return {"read_s": read, "ingest_s": first if built else None, "built": built,
            "n_windows": int(sum(len(w) for w in windows.values()))}


def features_cached(cfg, model: str, kwargs: dict | None, ws) -> bool:
    """Whether the feature cache holds a complete ``tokens`` entry of ``model`` (with these architecture
    overrides) on these windows (all rows). The weights are not compared (that needs the cell's model built)."""
    root = (Path(cfg.data.cache_dir).expanduser() if cfg.data.cache_dir else default_cache_dir()) / "features"
    key = ws.meta.get("cache_key")
    for done in root.glob("*/COMPLETE") if root.is_dir() else []:
        try:
            meta = json.loads((done.parent / "meta.json").read_text())
            n = len(np.load(done.parent / "rows.npy", mmap_mode="r"))
        except (OSError, ValueError):
            continue
        if (meta.get("backbone") == model and meta.get("ws_cache_key") == key and meta.get("parts") == ["tokens"]
                and (meta.get("arch") or {}) == (kwargs or {}) and n == len(ws)):
            return True
    return False


def cell_stage_seconds(regime: str, epochs: int, n_train: int, n_val: int, n_test: int, batch: int,
                       tput: dict | None, over: dict | None) -> dict[str, np.ndarray]:
    """Seconds of one cell's training and testing at the median, slow-quartile and fast-quartile steps.

    Training: ``epochs`` × (train windows forward + backward, validation windows forward), Lightning's sanity
    check (two validation batches), Lightning's per-epoch cost and two checkpoint saves per epoch, the fit's
    fixed cost, the model's construction and its first steps' extra cost (``*_warmup_excess_s``: a fresh model per
    cell). Testing: the test windows forward and the test loop's fixed cost. A head-only cell trains its head on
    cached tokens: no backbone pass (its extraction is the features stage). Zeros without a throughput.
    """
    zero = {"training": np.zeros(3), "testing": np.zeros(3)}
    if tput is None:
        return zero
    fwd = [tput["fwd_per_s"], *tput.get("fwd_spread", [tput["fwd_per_s"]] * 2)]
    bwd = [tput["fwd_bwd_per_s"], *tput.get("fwd_bwd_spread", [tput["fwd_bwd_per_s"]] * 2)]
    over = over or {}
    test_fixed = float(over.get("test", 0.0))
    fit_fixed = max(0.0, float(over.get("per_cell", 0.0)) - test_fixed)
    per_epoch = float(over.get("per_epoch", 0.0)) + 2 * float(tput.get("save_s", 0.0))
    fixed = fit_fixed + epochs * per_epoch + float(tput.get("build_s", 0.0))
    if regime == "head_only":
        return {"training": np.full(3, fixed), "testing": np.full(3, test_fixed)}
    sanity = min(n_val, 2 * max(1, batch))
    warm = float(tput.get("fwd_bwd_warmup_excess_s", 0.0)) + float(tput.get("fwd_warmup_excess_s", 0.0))
    train = np.array([epochs * (n_train / b + n_val / f) + sanity / f for f, b in zip(fwd, bwd)]) + fixed + warm
    test = np.array([n_test / f for f in fwd]) + test_fixed
    return {"training": train, "testing": test}


def features_seconds(n_windows: int, tput: dict | None) -> np.ndarray:
    """Seconds of one frozen-feature extraction (every window forward once) at the three rates."""
    if tput is None:
        return np.zeros(3)
    fwd = [tput["fwd_per_s"], *tput.get("fwd_spread", [tput["fwd_per_s"]] * 2)]
    return np.array([n_windows / f for f in fwd]) + float(tput.get("fwd_warmup_excess_s", 0.0))


def bootstrap_seconds(n_windows: int, n_subjects: int, n_folds: int, n_classes: int, n_boot: int) -> float:
    """Seconds of one paired subject-cluster bootstrap of balanced accuracy at this size, timed here on synthetic
    predictions (:func:`eegfm_bench.stats.paired_cluster_bootstrap`, as the confound comparison calls it)."""
    from eegfm_bench.stats import paired_cluster_bootstrap  # reason: scipy and statsmodels, only when timing

    if n_windows < 2 or n_subjects < 2:
        return 0.0
    rng = np.random.default_rng(0)
    subj = np.arange(n_windows) % n_subjects
    fold = subj % max(1, n_folds)
    y = rng.integers(0, n_classes, n_windows)
    pa, pb = rng.dirichlet(np.ones(n_classes), n_windows), rng.dirichlet(np.ones(n_classes), n_windows)
    t0 = time.perf_counter()
    try:
        paired_cluster_bootstrap(y, pa, pb, subj, fold, metric="balanced_accuracy", target="mean_fold", stratify=False,
                                 n_boot=int(n_boot), seed=0, min_clusters=1)
    except ValueError:
        return 0.0
    return time.perf_counter() - t0


def compare_seconds(n_groups: int, n_subjects: int, boot_s: float) -> float:
    """The confound comparison of one variation: per model × regime × head, the paired interval and the checked
    score's (two bootstraps), again without each subject in turn (leave-one-subject-out stability)."""
    return n_groups * 2 * (n_subjects + 1) * boot_s


def effective_parallel(kind: str, parallel: int, intra_op_threads: int, accelerator: str = "cpu",
                       cores: int | None = None) -> int:
    """Jobs that run at once and do not share cores: local workers on a CPU share this machine's cores (at most
    ``cores // intra_op_threads`` at once); SLURM jobs and GPU workers get their own."""
    if kind == "local" and str(accelerator) in ("cpu", "auto"):
        cores = cores or os.cpu_count() or 1
        return max(1, min(int(parallel), cores // max(1, int(intra_op_threads))))
    return max(1, int(parallel))


def part_rows(name: str, part: dict, *, job_start_s: float) -> list[dict]:
    """The stage rows of one cv part (the headline, or a variation when ``name`` is set): windows, features,
    job start-ups, training, testing. ``part``: ``windows_s``, ``features_s``, ``training_s``, ``testing_s``
    (seconds, summed over cells), ``n_jobs``, ``parallel`` (jobs at once), ``launched``."""
    par = max(1, int(part["parallel"]))
    rows = [{"stage": "windows", "seconds": part["windows_s"], "wall_s": part["windows_s"]},
            {"stage": "features", "seconds": part["features_s"], "wall_s": part["features_s"]}]
    if part["launched"] and part["n_jobs"]:
        rows.append({"stage": "job start-up", "seconds": part["n_jobs"] * job_start_s,
                     "wall_s": math.ceil(part["n_jobs"] / par) * job_start_s})
    for s in CELL_STAGES:
        rows.append({"stage": s, "seconds": part[f"{s}_s"], "wall_s": part[f"{s}_s"] / par})
    return [{**r, "part": name} for r in rows]


def command_stages(startup_s: float, head: dict, variations: list[dict], *, refresh_s: float = REFRESH_S) -> list[dict]:
    """Every stage of a cv command with its seconds (summed over jobs) and its wall seconds (the jobs that run at
    once dividing the cells' stages), in the order the command runs them.

    Parameters
    ----------
    startup_s : float
        One process's start-up.
    head : dict
        The headline part (:func:`part_rows`'s ``part``), plus ``job_start_s``.
    variations : list of dict
        One part per confound variation (empty: ``confound: off``), plus ``condition``, ``compare_s`` and
        ``job_start_s``.
    refresh_s : float
        Seconds per page written.

    Returns
    -------
    list of dict
        ``stage``, ``seconds``, ``wall_s``; the headline's stages, then one ``confound check <condition>`` row per
        variation (its windows, features, job start-ups, cells, comparison and page), then ``report``.
    """
    rows = [{"stage": "start-up", "seconds": startup_s, "wall_s": startup_s}]
    for r in part_rows("", head, job_start_s=head["job_start_s"]):
        rows.append({k: v for k, v in r.items() if k != "part"})
    for v in variations:
        sub = part_rows(v["condition"], v, job_start_s=v["job_start_s"])
        rows.append({"stage": f"confound check {v['condition']}",
                     "seconds": sum(r["seconds"] for r in sub) + v["compare_s"] + refresh_s,
                     "wall_s": sum(r["wall_s"] for r in sub) + v["compare_s"] + refresh_s,
                     "parts": {r["stage"]: r["wall_s"] for r in sub} | {"comparison": v["compare_s"],
                                                                        "page": refresh_s}})
    n_pages = 1 + (1 if variations else 0)  # after the headline, and again after the check
    rows.append({"stage": "report", "seconds": n_pages * refresh_s, "wall_s": n_pages * refresh_s})
    return rows


def stages_markdown(rows: list[dict], notes: dict[str, str]) -> list[str]:
    """The per-stage table (wall seconds, seconds summed over jobs, where the figure comes from) and its total."""
    out = ["| stage | wall | summed over jobs | from |", "|---|---:|---:|---|"]
    for r in rows:
        key = "confound check" if r["stage"].startswith("confound check") else r["stage"]
        note = notes.get(key, "")
        if "parts" in r:
            note = ", ".join(f"{k} {_fmt(v)}" for k, v in r["parts"].items() if v) + (f"; {note}" if note else "")
        out.append(f"| {r['stage']} | {_fmt(r['wall_s'])} | {_fmt(r['seconds'])} | {note} |")
    wall = sum(r["wall_s"] for r in rows)
    out.append(f"| **total** | **{_fmt(wall)}** | {_fmt(sum(r['seconds'] for r in rows))} | |")
    return out


def _fmt(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


__all__ = ["command_stages", "cell_stage_seconds", "features_seconds", "timed_windows", "startup_seconds",
           "effective_parallel", "bootstrap_seconds", "compare_seconds", "features_cached", "stages_markdown",
           "STARTUP_S", "REFRESH_S"]
