"""Negative-control reports (paper 001 §3.6, §5.5): the four-gate table (``gates.json`` / ``gates.md``) and the
full ``controls_report.md`` of ``eegfm-bench controls``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.controls.gates import GATES, GateReport

_MARK = {"pass": "✓", "fail": "✗", "inconclusive": "≈", "missing": "?", "not_reached": "–"}


def _fmt(v, nd=4):
    return "—" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{nd}f}"


def _score(rep, metric: str, level: str = "window") -> float:
    return rep.result.mean_fold(metric, level)


def gates_markdown(reports: Sequence[GateReport]) -> str:
    """Markdown table, one row per claim: each gate's mark (✓ pass, ✗ fail, ? missing, – not reached),
    where the claim stopped and why."""
    head = "| model | task | " + " | ".join(f"({g}) {n}" for g, n in GATES) + " | stopped at | reason |"
    sep = "|" + "---|" * (len(GATES) + 4)
    lines = [head, sep]
    for r in reports:
        marks = " | ".join(_MARK[x.status] for x in r.gates)
        if r.stopped_at is None:
            stop, why = "—", "all four conditions hold"
        else:
            stop = f"({r.stopped_at})"
            why = next(x.detail for x in r.gates if x.gate == r.stopped_at).replace("|", "/")
        lines.append(f"| {r.model} | {r.task} | {marks} | {stop} | {why} |")
    lines += ["", "Legend: ✓ pass, ✗ fail, ≈ inconclusive (the paired interval straddles zero: the folds cannot "
              "decide), ? evidence missing, – not reached (an earlier gate ended the claim). The framework is "
              "descriptive (paper 001 §3.6).", "", "How each gate was decided:", ""]
    seen: dict[str, str] = {}
    for r in reports:
        for x in r.gates:
            if x.decided_by and x.status != "not_reached":
                seen.setdefault(f"({x.gate}) {x.name}", x.decided_by)
    lines += [f"- {k}: {v}" for k, v in seen.items()] or ["- (no gate was reached)"]
    return "\n".join(lines) + "\n"


def write_gate_report(reports: Sequence[GateReport], json_path: str | Path, md_path: str | Path) -> None:
    """Write the reports as JSON (a list of :meth:`GateReport.to_dict`) and as a Markdown table.

    Files are written to a temporary name and renamed, so a crash never leaves a half-written report.
    """
    for path, text in ((Path(json_path), json.dumps([r.to_dict() for r in reports], indent=2, ensure_ascii=False)),
                       (Path(md_path), gates_markdown(reports))):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


# ------------------------------------------------------------------------ hooks for the model-layer controls
def controls_markdown(ctx, hand, frozen, cv_reps, perms, paired, scrambled, identity, gate_reports, gate_context,
            seconds) -> str:
    """The full ``controls_report.md`` of ``eegfm-bench controls``: the run's settings, then one section per
    control in the paper's order (scores, random init, paired uncertainty, permutation, scrambled labels, dataset
    identity, the four gates) and the run's notes."""
    metric = ctx.cfg.metric
    L = _settings_lines(ctx, metric, seconds)
    L += _scores_section(ctx, metric, hand, frozen, cv_reps, scrambled)
    L += _random_init_section(metric, frozen)
    L += _paired_section(ctx, paired)
    L += _permutation_section(ctx, perms)
    L += _scrambled_section(ctx, scrambled)
    L += _identity_section(identity)
    L += _gates_section(gate_reports, gate_context)
    L += ["", "## Notes", ""] + [f"- {n}" for n in ctx.log if not n.startswith(("permutation ", "paired "))]
    return "\n".join(L) + "\n"


def _settings_lines(ctx, metric: str, seconds: float) -> list[str]:
    """The title and what was run: windows, folds, probe, unit level, permutation scheme, preprocessing, time."""
    return [f"# Negative controls (paper 001): {ctx.cfg.experiment} — task {ctx.cfg.task} "
            f"({ctx.task.dataset}: {' vs '.join(ctx.classes.astype(str)) if False else ' vs '.join(ctx.task.class_names)})",
            "",
            f"- windows: {len(ctx.keys)} from {np.unique(ctx.subjects).size} subjects; folds {ctx.fold_ids} of a "
            f"{ctx.split.spec.scheme} split (k={ctx.split.spec.k}, {ctx.split.spec.group_by}-grouped"
            f"{', from the cv run ' + str(ctx.cfg.cv_out_dir) if ctx.cfg.cv_out_dir else ''}); probes train on "
            "each fold's train + validation subjects and test on its test subjects",
            f"- probe: {ctx.spec}; metric for the gates: {metric} (mean over folds, window level)",
            "- unit-level estimates: "
            + (f"{ctx.agg_level} (mean probability per {ctx.agg_level}), reported separately" if ctx.agg_level else
               "none — every subject and every recording holds both classes, so no unit-level outcome is defined "
               "(§3.5)"),
            f"- label permutation scheme: {ctx.scheme}; N = {ctx.cfg.permutation.n}",
            f"- feature preprocessing: {ctx.cfg.features.preprocessing}",
            f"- wall time of this invocation: {seconds:.0f} s (units already in out_dir are loaded, not recomputed)",
            ""]


def _scores_section(ctx, metric: str, hand, frozen, cv_reps, scrambled) -> list[str]:
    """(a–c): every representation's mean ± SD over folds, window level and unit level."""
    L = ["## (a–c) Scores", "", f"| representation | source | init | {metric} window | balanced acc. window"
         + (f" | {metric} {ctx.agg_level} | balanced acc. {ctx.agg_level}" if ctx.agg_level else "") + " |",
         "|---|---|---|---|---|" + ("---|---|" if ctx.agg_level else "")]
    allreps = list(hand.values()) + [r for d in frozen.values() for r in d.values()] + cv_reps + \
        [s["rep"] for s in scrambled] + [s["rep_scrambled"] for s in scrambled]
    for r in allreps:
        cells = []
        for lv in ["window"] + ([ctx.agg_level] if ctx.agg_level else []):
            for m in (metric, "balanced_accuracy" if metric != "balanced_accuracy" else "auroc"):
                v = r.result.fold_values(m, lv)
                cells.append(f"{np.nanmean(v):.4f} ± {np.nanstd(v, ddof=1):.4f}" if v.size > 1 else _fmt(np.nanmean(v)))
        L.append(f"| {r.name} | {r.source} | {r.init} | " + " | ".join(cells) + " |")
    return L + ["", "mean ± SD over folds.", ""]


def _random_init_section(metric: str, frozen) -> list[str]:
    """(b): each model's configured checkpoint beside its matched random inits (Control 2)."""
    L = ["## (b) Matched fully random initialisation (Control 2)", ""]
    for model, by_init in frozen.items():
        parts = [f"{lab}: {_score(r, metric):.4f}" for lab, r in by_init.items()]
        L.append(f"- {model}: " + "; ".join(parts) + (" (no pretrained checkpoint configured)"
                                                       if "pretrained" not in by_init else ""))
    return L + [""]


def _paired_section(ctx, paired) -> list[str]:
    """(g): each claim minus the stronger handcrafted family, per level, with its interval and tests."""
    L = ["## (g) Paired uncertainty: model − stronger handcrafted family", "",
         "| model | comparator | level | diff | 95 % CI | Wilcoxon p (folds) | sign-flip p | bootstrap mode |",
         "|---|---|---|---|---|---|---|---|"]
    for name, pr in paired.items():
        for lv, level_out in pr["levels"].items():
            bs = level_out["bootstrap"]
            wil, flip = level_out["wilcoxon"], level_out["sign_flip"]
            L.append(f"| {name} | {pr['comparator']} | {lv} | {bs['estimate']:+.4f} | [{bs['low']:+.4f}, "
                     f"{bs['high']:+.4f}] | {_fmt(wil['p_value'] if wil else None)} | "
                     f"{_fmt(flip['p_value'] if flip else None)} | {bs['mode']} |")
    return L + ["", "Intervals resample subjects within the fixed test folds (conditional on the fitted predictions; "
                "no refitting, no comparator-selection or seed variance, §4.6). With "
                f"{len(ctx.fold_ids)} folds the smallest two-sided Wilcoxon p is {2.0 ** (1 - len(ctx.fold_ids)):.4g} "
                "(every fold the same sign).", ""]


def _permutation_section(ctx, perms) -> list[str]:
    """(d): each permuted representation's observed score against its null (Control 3)."""
    L = ["## (d) Label permutation (Control 3)", "", "| representation | observed | null mean ± SD | null max | p | N |",
         "|---|---|---|---|---|---|"]
    for name, perm in perms.items():
        L.append(f"| {name} | {perm['observed']:.4f} | {perm['null_mean']:.4f} ± {perm['null_sd']:.4f} | "
                 f"{max(perm['null']):.4f} | {perm['p_value']:.4f} | {perm['n_permutations']} |")
    return L + ["", f"Scheme {ctx.scheme}; the whole probe is refitted in every fixed fold; p = (1 + #null ≥ obs)/(N + 1).",
                ""]


def _scrambled_section(ctx, scrambled) -> list[str]:
    """(e): correct- vs scrambled-label adaptation of each entry (Control 4), with the paired interval."""
    L = ["## (e) Scrambled-label adaptation (Control 4)", ""]
    if not scrambled:
        L += ["(not configured)", ""]
    for s in scrambled:
        c = s["contrast"]
        L += [f"- {s['model']} {s['regime']} / {s['head']} (schedule from {s['schedule_from']}; {s.get('schedule', '')}; "
              f"seeds {s['seeds']}): scored by the {s.get('scored_by', 'adapted head')}: correct labels "
              f"{c['correct_mean']:.4f}, scrambled labels {c['scrambled_mean']:.4f}, Δ = {c['delta_pp']:+.1f} pp"
              + (f", paired subject-cluster {ctx.cfg.bootstrap.level:.0%} interval [{s['paired_ci'][0]:+.4f}, "
                 f"{s['paired_ci'][1]:+.4f}] (decides gate iv; not an equivalence test)" if s.get("paired_ci")
                 else " (no paired interval could be computed: gate iv reads inconclusive)")]
        h = s.get("runs_head") or {}
        if h.get("correct") and h.get("scrambled"):
            hc = sum(v["score"] for v in h["correct"].values()) / len(h["correct"])
            hs = sum(v["score"] for v in h["scrambled"].values()) / len(h["scrambled"])
            L += [f"  - for reference, the adapted heads' own test scores: correct {hc:.4f}, scrambled {hs:.4f} (the "
                  "scrambled head sits near chance by construction, which is why it is not the control's score)"]
    return L + [""]


def _identity_section(identity) -> list[str]:
    """(f): the dataset-identity probe on the handcrafted family and on each encoder (Table 7)."""
    L = ["## (f) Dataset-identity probe (§4.4)", ""]
    if identity is None:
        return L + ["(not configured)", ""]
    i = identity
    L += [f"| datasets | units (recordings) | shared channels | features | AUROC full | AUROC PCA-{i['pca_k']} | "
          f"permuted null (mean, max; N={len(i['null_aurocs'])}) | balanced {min(i['n_units'])} vs "
          f"{min(i['n_units'])} (mean, min; N={len(i['balanced_aurocs'])}) |",
          "|---|---|---|---|---|---|---|---|",
          f"| {i['names'][0]} vs {i['names'][1]} | {i['n_units'][0]} vs {i['n_units'][1]} | "
          f"{len(i['shared_channels'])} | {i['family']} ({i['n_features']}) | {i['auroc_full']:.4f} | "
          f"{i['auroc_pca']:.4f} | {i['null_mean']:.4f}, {max(i['null_aurocs']):.4f} | "
          f"{i['balanced_mean']:.4f}, {min(i['balanced_aurocs']):.4f} |"]
    for e in i.get("encoders", []):
        L.append(f"| {i['names'][0]} vs {i['names'][1]} | {e['n_units'][0]} vs {e['n_units'][1]} | "
                 f"{len(i['shared_channels'])} | {e['model']} {e['init']}, {e['pooling']}-pooled ({e['n_features']}) "
                 f"| {e['auroc_full']:.4f} | {e['auroc_pca']:.4f} | {e['null_mean']:.4f}, {max(e['null_aurocs']):.4f} "
                 f"| {e['balanced_mean']:.4f}, {min(e['balanced_aurocs']):.4f} |")
    return L + ["", i["note"] + (" Encoder rows (Table 7): each encoder built on the shared channels, frozen, under its "
                                 "own preprocessing." if i.get("encoders") else ""), ""]


def _gates_section(gate_reports, gate_context) -> list[str]:
    """(h): the four-gate table and, per claim, where its provenance and permutation evidence came from."""
    L = ["## (h) Four-gate attribution report (§3.6, §5.5)", "", gates_markdown(gate_reports), ""]
    for c in gate_context:
        L.append(f"- **{c['claim']}** — provenance: {c['provenance']}; permutation evidence: "
                 f"{c['permutation_source'] or 'none'}; random init: {c.get('random_init') or 'see gate (iv)'}")
    return L
