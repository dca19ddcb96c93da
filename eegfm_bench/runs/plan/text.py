"""The text of ``eegfm-bench plan`` (:func:`plan_markdown`) and the throughput lines a paper plan shares with it.

Light (docs/guide/architecture.md, house rules): it formats a plan dict and imports no deep-learning stack, so the
plan of a finished run (:mod:`eegfm_bench.runs.plan.finished`) prints without loading torch or Lightning.
"""
from __future__ import annotations

import os

from eegfm_bench.runs.plan.stages import stages_markdown


THROUGHPUT_FIELDS = ("fwd_per_s", "fwd_bwd_per_s", "source", "batch", "fwd_batches", "fwd_bwd_batches", "fwd_spread",
                     "fwd_bwd_spread", "save_s", "n_chans", "n_times")


def throughput_summary(table: dict, used: dict | None = None) -> dict:
    """The throughput entries a plan used (label → rate, spread, sample size, source), for its JSON and text."""
    if used is None:
        used = {k[0]: v for k, v in table.items() if len(k) == 1}
    return {m: {k: v for k, v in t.items() if k in THROUGHPUT_FIELDS} for m, t in used.items()}


def throughput_line(label: str, t: dict) -> str:
    """One model's throughput as a line: rates, the sample (timed batches of N after 2 warm-up steps), the
    quartile spread and where the figures come from."""
    line = f"- {label}: {t['fwd_per_s']:.2f} windows/s forward, {t['fwd_bwd_per_s']:.2f} forward + backward"
    if "fwd_batches" in t:
        line += (f" (median of {t['fwd_batches']} / {t['fwd_bwd_batches']} timed batches of {t['batch']} after 2 "
                 f"warm-up; quartiles {t['fwd_spread'][0]:.2f}–{t['fwd_spread'][1]:.2f} / "
                 f"{t['fwd_bwd_spread'][0]:.2f}–{t['fwd_bwd_spread'][1]:.2f}; {t['source']})")
    else:
        line += f" ({t['source']})"
    return line


def plan_markdown(p: dict) -> str:
    """The ``eegfm-bench plan`` text of a :func:`run_plan` dict: summary line, per-cell table (windows, backbone
    passes), cached passes, throughput per model (windows/s) and the device-hour estimate."""
    lines = [f"# plan: {p['config']} → {p['out_dir']}", "",
             f"{p['n_cells']} cells ({p['n_done']} already have rows of their config hash, {len(p['todo'])} to run); "
             f"launcher {p['launcher']}: {p['n_jobs']} job(s)", ""]
    if p["todo"]:
        lines += ["| cell | epochs | train / val / test windows | backbone forward | forward + backward |",
                  "|---|---:|---|---:|---:|"]
        for r in p["todo"]:
            wins, b = r["windows"], r["backbone_passes"]
            lines.append(f"| {r['cell']} | {r['epochs']} | {wins['train']} / {wins['val']} / {wins['test']} | "
                         f"{b['forward']:,} | {b['forward_backward']:,} |")
        lines.append("")
    lines.append(f"backbone passes saved by the feature cache (head-only runs share one extraction): "
                 f"{p['backbone_passes_saved_by_cache']:,}")
    for m, t in p["throughput"].items():
        lines.append(throughput_line(m, t))
    if p.get("overhead_s"):
        o = p["overhead_s"]
        lines.append(f"- Lightning outside the model (Trainer, callbacks, checkpoints, test loop; measured on a toy "
                     f"model): {o['per_cell']:.2f} s per cell + {o['per_epoch']:.2f} s per epoch")
    for c in p.get("confound") or []:
        e = c["estimate_device_hours"]
        lines.append(f"confound check {c['condition']} (run after the headline; `confound: off` skips it): "
                     f"{c['n_cells']} cells ({c['n_todo']} to run), {c['n_jobs']} job(s)"
                     + ("" if e is None else f", {e:.3f} device-hours"))
    d = p.get("detectable") or {}
    lines.append(f"{d.get('n_subjects')} held-out subjects: smallest paired Δ the subject-cluster bootstrap detects "
                 f"(95 % interval, 80 % power, per-subject SD {d.get('sd_subject')} assumed): "
                 + (f"{d['delta']:.3f}" if d.get("delta") is not None else "none (fewer than 2 subjects)"))
    est = p["estimate_device_hours"]
    if p.get("finished"):
        lines.append(f"nothing to run: every cell has rows of its config hash (read from {p['out_dir']}'s "
                     f"cells.json, as `eegfm-bench status {p['out_dir']}` reads them); a rerun of the cv only "
                     "writes its summary and page again")
    elif est is None:
        lines.append("estimate: no throughput (pass --bench FILE or drop --no-measure)")
    else:
        lo, hi = p["estimate_device_hours_range"]
        extra = f"; headline {p['estimate_headline_device_hours'] * 60:.1f} min + confound check" \
            if p.get("confound") else ""
        lines.append(f"estimate: {est:.3f} device-hours ({est * 60:.1f} min; {lo * 60:.1f}–{hi * 60:.1f} min at the "
                     f"quartile steps) if every cell runs max_epochs (early stopping only shortens it){extra}")
        if p["launcher"] != "none":
            wall = p["estimate_wall_hours"]
            lines.append(f"wall clock with launcher {p['launcher']}: {p['n_jobs']} job(s), {p['parallel']} at once: "
                         f"about {wall * 60:.1f} min if each concurrent job has its own device"
                         + (" (local workers on one CPU share its cores: expect the device estimate)"
                            if p["launcher"] == "local" else ""))
    if p.get("stages"):
        lines += ["", "## the whole command, stage by stage", ""]
        lines += stages_markdown(p["stages"], _stage_notes(p))
        lines.append("")
        tot = p["estimate_command_wall_s"]
        lines.append(f"whole command: about {tot / 60:.1f} min of wall clock on this machine at its present load "
                     f"(load average {os.getloadavg()[0]:.1f}; every rate was measured now, under that load)")
        for b in p.get("ingested_by_plan") or []:
            lines.append(f"ingest ({b['part']}): the window cache was absent; this plan built it in {b['seconds']:.1f} "
                         f"s, so the command only reads it")
    return "\n".join(lines)


def _stage_notes(p: dict) -> dict[str, str]:
    """Where each stage's figure comes from, for the per-stage table."""
    par = p["parallel"]
    cells = f"{len(p['todo'])} cells at the measured throughput" + (f", {par} jobs at once" if par > 1 else "")
    return {"start-up": p["startup"]["source"],
            "windows": "window cache read, timed by this plan",
            "features": "head-only backbones: one frozen forward pass per window (feature cache read if present)",
            "job start-up": "a new process per job: start-up + window read"
                            + ("; SLURM's queue wait not included" if p["launcher"] == "slurm" else ""),
            "training": cells + "; max_epochs each, sanity check, checkpoints, Lightning's cost (toy model), "
                                "model build and first steps",
            "testing": "test windows forward + the test loop's cost",
            "confound check": "its cells as the headline's, plus the paired bootstrap comparison",
            "report": "summary and experiment page (REFRESH_S per page)"}


__all__ = ["plan_markdown", "throughput_line", "throughput_summary"]
