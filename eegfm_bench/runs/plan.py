"""``eegfm-bench plan --config X``: what a cv config will run, before it runs (project issue 13, item 4).

Prints, without training anything:

* the **cells** (model × regime × head × fold) with their config hashes, and how many already have rows of that
  hash (a rerun skips them);
* the **jobs** the configured launcher makes of the cells still to run;
* the **backbone passes saved** by the feature cache: a head-only run extracts its frozen backbone's tokens once
  for every window, shared by all its heads and folds, instead of a backbone pass per window, epoch, head and fold;
* an **estimate of device-hours**: window-passes × seconds per window. Seconds per window come from a throughput
  table (``scripts/bench_backbones.py --out FILE``'s ``.json``: ``fwd_per_s`` / ``fwd_bwd_per_s`` per model and
  device) when given, else from a short measurement here (``--measure``: 3 batches of the config's input through
  each model, forward and forward + backward). An estimate assumes every cell runs ``max_epochs`` (early stopping
  only shortens it) and counts the backbone, which dominates; validation and test passes are forward-only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence


def _measure(model: str, ch_names: list[str], n_times: int, run: dict, batch: int = 8, n: int = 3) -> dict:
    """windows/s forward (eval, no grad) and forward + backward (train) of one backbone on this machine's CPU
    (:func:`~eegfm_bench.models.throughput.token_throughput`)."""
    import torch

    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.models.throughput import token_throughput

    torch.manual_seed(0)
    ad = BACKBONES.get(model)(ch_names, n_times, n_outputs=2, **(run.get("backbone_kwargs") or {}))
    x = torch.randn(batch, len(ch_names), n_times)
    return {"fwd_per_s": token_throughput(ad, ch_names, x, n=n, train=False),
            "fwd_bwd_per_s": token_throughput(ad, ch_names, x, n=n, train=True), "source": "measured (CPU)"}


def plan_cv(config, args: Sequence[str] = (), *, bench: str | None = None, measure: bool = True) -> dict:
    """The plan of a cv config as a dict (cells, jobs, passes, estimate); see the module docstring.

    The confound check the cv runs after its headline cells (on by default for event-locked tasks) is planned too:
    each variation's cells, jobs and estimate under ``confound``, and in the total estimate.

    Raises
    ------
    ConfigError
        From the config, as ``eegfm-bench cv`` would.
    """
    from eegfm_bench.runs.confound import derive, label
    from eegfm_bench.runs.cells import load_config

    cfg = load_config(config, args)
    table: dict = {}
    if bench:
        for r in json.loads(Path(bench).read_text()):
            if "error" not in r:
                table.setdefault(r["model"], {**r, "source": f"{bench} ({r['device']})"})
    head = _plan_part(cfg, table, measure)
    conf = []
    cc = cfg.get("confound") or {}
    if cc.get("enabled"):
        for v in cc["variations"]:
            part = _plan_part(load_config(derive(cfg, v)), table, measure)
            conf.append({"condition": label(v, cc), "out_dir": part["out_dir"], "n_cells": part["n_cells"],
                         "n_todo": len(part["todo"]), "n_jobs": part["n_jobs"], "seconds": part["seconds"]})
    est = None
    if table or not head["todo"]:
        est = (head["seconds"] + sum(c["seconds"] for c in conf)) / 3600.0
    return {"config": cfg["experiment"], "out_dir": head["out_dir"], "n_cells": head["n_cells"],
            "n_done": head["n_cells"] - len(head["todo"]), "todo": head["todo"], "launcher": head["launcher"],
            "n_jobs": head["n_jobs"], "backbone_passes_saved_by_cache": head["passes_saved"],
            "throughput": {m: {k: v for k, v in t.items() if k in ("fwd_per_s", "fwd_bwd_per_s", "source")}
                           for m, t in table.items()},
            "estimate_device_hours": est,
            "estimate_headline_device_hours": head["seconds"] / 3600.0 if est is not None else None,
            "confound": [{**c, "estimate_device_hours": c.pop("seconds") / 3600.0 if est is not None else None}
                         for c in conf],
            "heads": {f"{m}/{r}/{h}": c for (m, r, h), c in head["current"].items()}}


def _plan_part(cfg: dict, table: dict, measure: bool) -> dict:
    """Cells, jobs, backbone passes and seconds of one resolved cv config (the headline or a confound variation)."""
    from eegfm_bench.results import ResultStore
    from eegfm_bench.results import cell_id, cell_key, done_cells
    from eegfm_bench.runs.cells import enumerate_cells, run_trainer, windows_for
    from eegfm_bench.runs.launch import chunks

    out = Path(cfg["out_dir"])
    windows: dict = {}
    cells, current, split = enumerate_cells(cfg, windows, progress=False)
    done = done_cells(ResultStore(out, write=False), cfg["experiment"])
    todo = [c for c in cells if cell_key(c) not in done]
    lc = cfg.get("launcher") or {"kind": "none"}
    jobs = chunks([cell_id(c.run["model"], c.run["regime"], c.head, c.fold, c.chash) for c in todo], lc) \
        if lc["kind"] != "none" else ([[None] * len(todo)] if todo else [])
    rows, passes_saved, seconds = [], 0, 0.0
    extracted = set()
    for c in todo:
        run, fold = c.run, c.fold
        ws = windows_for(cfg, run["model"], windows)
        tr = run_trainer(cfg, run)
        epochs = int(tr.get("max_epochs") or 1)
        groups = ws.subject if cfg["split"]["group_by"] == "subject" else ws.recording
        n_train, n_val, n_test = (len(i) for i in split.indices(groups, fold))
        tput = table.get(run["model"])
        if tput is None and measure:
            tput = table[run["model"]] = _measure(run["model"], list(ws.ch_names), int(ws.n_times), run)
        if run["regime"] == "head_only":
            key = (run["model"], json.dumps(run.get("backbone_kwargs"), sort_keys=True), run.get("pretrained"))
            would = epochs * (n_train + n_val) + n_test  # backbone passes without the cache (per head and fold)
            once = 0 if key in extracted else len(ws)
            extracted.add(key)
            passes_saved += would - once
            fwd, bwd = once, 0
        else:
            fwd, bwd = epochs * n_val + n_test, epochs * n_train
        if tput is not None:
            seconds += fwd / tput["fwd_per_s"] + bwd / tput["fwd_bwd_per_s"]
        rows.append({"cell": cell_id(run["model"], run["regime"], c.head, fold, c.chash), "epochs": epochs,
                     "windows": {"train": n_train, "val": n_val, "test": n_test},
                     "backbone_passes": {"forward": fwd, "forward_backward": bwd}})
    return {"out_dir": str(out), "n_cells": len(cells), "todo": rows, "launcher": lc["kind"], "n_jobs": len(jobs),
            "passes_saved": int(passes_saved), "seconds": seconds, "current": current}


def plan_markdown(p: dict) -> str:
    """The ``eegfm-bench plan`` text of a :func:`plan_cv` dict: summary line, per-cell table (windows, backbone
    passes), cached passes, throughput per model (windows/s) and the device-hour estimate."""
    lines = [f"# plan: {p['config']} → {p['out_dir']}", "",
             f"{p['n_cells']} cells ({p['n_done']} already have rows of their config hash, {len(p['todo'])} to run); "
             f"launcher {p['launcher']}: {p['n_jobs']} job(s)", ""]
    if p["todo"]:
        lines += ["| cell | epochs | train / val / test windows | backbone forward | forward + backward |",
                  "|---|---:|---|---:|---:|"]
        for r in p["todo"]:
            w, b = r["windows"], r["backbone_passes"]
            lines.append(f"| {r['cell']} | {r['epochs']} | {w['train']} / {w['val']} / {w['test']} | {b['forward']:,} "
                         f"| {b['forward_backward']:,} |")
        lines.append("")
    lines.append(f"backbone passes saved by the feature cache (head-only runs share one extraction): "
                 f"{p['backbone_passes_saved_by_cache']:,}")
    for m, t in p["throughput"].items():
        lines.append(f"- {m}: {t['fwd_per_s']:.1f} windows/s forward, {t['fwd_bwd_per_s']:.1f} forward + backward "
                     f"({t['source']})")
    for c in p.get("confound") or []:
        e = c["estimate_device_hours"]
        lines.append(f"confound check {c['condition']} (run after the headline; `confound: off` skips it): "
                     f"{c['n_cells']} cells ({c['n_todo']} to run), {c['n_jobs']} job(s)"
                     + ("" if e is None else f", {e:.3f} device-hours"))
    est = p["estimate_device_hours"]
    extra = f" (headline {p['estimate_headline_device_hours']:.3f} + confound check)" if p.get("confound") and \
        est is not None else ""
    lines.append("estimate: " + ("no throughput (pass --bench FILE or drop --no-measure)" if est is None else
                                 f"{est:.3f} device-hours at max_epochs ({est * 60:.1f} min){extra}"))
    return "\n".join(lines)


__all__ = ["plan_cv", "plan_markdown"]
