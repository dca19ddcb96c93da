"""PhysioTRACE audit report (paper 000 App. B): the Markdown of an :class:`~eegfm_bench.provenance.audit.AuditReport`."""
from __future__ import annotations



def _fmt_ci(c: dict, nd: int = 3) -> str:
    return f"{c['estimate']:.{nd}f} [{c['low']:.{nd}f}, {c['high']:.{nd}f}]"


def stability_mark(stability) -> str:
    """`` — rests on one subject (S07 → no reliance)`` when leaving out one held-out subject changes the audit's
    verdict (an :class:`~eegfm_bench.provenance.audit.AuditReport`'s ``stability``), else ``""``."""
    flips = (stability or {}).get("flips") or {}
    if not flips:
        return ""
    return " — rests on one subject (" + "; ".join(f"{k} → {v}" for k, v in flips.items()) + ")"


def audit_markdown(r) -> str:
    """The audit's Markdown report: Recover / Stress / Intervene / Verify, then the verdict (paper 000 App. B)."""
    unit = r.data["unit"]
    rc = r.recover
    n_te = rc["n_test"]
    lines = [f"# PhysioTRACE audit: {r.config.get('name', 'audit')}", "",
             f"Design: **{r.design}** ({'views' if r.design == 'paired' else 'groups'}: "
             f"{', '.join(map(str, r.data.get('views', r.data.get('groups', []))))}); "
             f"held-out: {r.data['n_windows']['test']} windows from {r.data['n_subjects']['test']} subjects. "
             f"Config hash `{r.config_hash[:16]}`.", "",
             f"**Verdict: {r.verdict}{stability_mark(r.stability)}.** " + "; ".join(r.reasons) + "."]
    for note in r.notes:
        lines += ["", f"> Note: {note}."]
    lines += ["", "## Recover", ""]
    ratio = rc.get("width_ratio")
    lines.append(
        f"{100 * rc['probe_accuracy']:.1f}% provenance-probe accuracy on {n_te} held-out {unit}s (chance "
        f"{100 * rc['chance_accuracy']:.1f}%) and LPI = {rc['lpi_bits']:.3f} [{rc['low']:.3f}, {rc['high']:.3f}] "
        f"bits per {unit} ({100 * rc['level']:.0f}% subject-cluster interval; naive {unit}-resampling "
        f"[{rc['naive_low']:.3f}, {rc['naive_high']:.3f}]"
        + (f", {ratio:.1f}× narrower" if ratio else "") + "). "
        f"The training-prevalence baseline is {rc['baseline_bits']:.3f} bits per {unit}. "
        "This shows accessibility, not decision reliance.")
    st = r.stress
    lines += ["", "## Stress", "",
              "Weighted held-out AUROC at fixed training marginals (same records, fixed heads):", ""]
    for rot in st["rotations"]:
        lines += [f"Shortcut group `{rot['shortcut']}` (aligned odds {rot['aligned_odds']:.3g}):", "",
                  "| regime | odds | exposed | control |", "|---|---:|---:|---:|"]
        for name, v in rot["auroc"].items():
            lines.append(f"| {name} | {v['odds']:.3g} | {v['exposed']:.3f} | {v['control']:.3f} |")
        lines.append("")
    lines.append(
        f"The exposed head degrades by {st['degradation']['exposed']:.3f} AUROC from aligned to reversed, the control "
        f"head by {st['degradation']['control']:.3f}: excess vulnerability G = {_fmt_ci(st['G'])} "
        f"(epsilon {st['epsilon']:g}).")
    if "paired" in st:
        p = st["paired"]
        lines.append(
            f"Decisions flip across views for {100 * p['flip_rate']['exposed']:.1f}% of held-out windows (exposed) vs "
            f"{100 * p['flip_rate']['control']:.1f}% (control); class-balanced same-record logit contrast "
            f"(shortcut view minus the others, mean magnitude over rotations) "
            f"{p['logit_contrast']['exposed_mean_abs']:.3f} (exposed) vs {p['logit_contrast']['control_mean_abs']:.3f} "
            "(control).")
    if r.intervene is None:
        lines += ["", "## Intervene / Verify", "", "Not run: no reliance to remove."]
        return "\n".join(lines) + "\n"
    iv, vf = r.intervene, r.verify
    ra = vf["recover_after"]
    lines += ["", "## Intervene", "",
              f"A rank-{iv['rank']} {iv['method']} basis localized on {iv['n_units']} training "
              f"{'records' if iv['method'] == 'paired' else 'windows'} (no validation or test embeddings, no head "
              f"weights) holds {100 * iv['captured']:.1f}% of the localization energy and "
              f"{100 * iv['energy']:.1f}% of the standardized embedding variance. After removing it, a refitted "
              f"provenance probe reaches {100 * ra['probe_accuracy']:.1f}% (LPI {ra['lpi_bits']:.3f} "
              f"[{ra['low']:.3f}, {ra['high']:.3f}] bits per {unit}); decodability does not enter the verdict.",
              "", "## Verify", ""]
    rd = vf["random"]
    ut = vf["utility"]
    lines.append(
        f"G falls from {_fmt_ci(vf['G_before'])} to {_fmt_ci(vf['G_after'])} (reduction {_fmt_ci(vf['reduction'])}, "
        f"{100 * vf['fraction_removed']:.0f}% of G); {rd['n']} {rd['match']}-matched random rank-{iv['rank']} "
        f"subspaces leave it between {rd['G_after_min']:.3f} and {rd['G_after_max']:.3f}. "
        f"Utility ({ut['metric']}) changes from {ut['before']:.3f} to {ut['after']:.3f}: "
        f"{ut['change']['estimate']:+.3f} [{ut['change']['low']:+.3f}, {ut['change']['high']:+.3f}], "
        + ("within" if ut["passes"] else "beyond") + f" the {ut['margin']:+.3f} margin.")
    if "paired_after" in vf:
        p = vf["paired_after"]
        lines.append(f"After removal, decisions flip for {100 * p['flip_rate']['exposed']:.1f}% (exposed) vs "
                     f"{100 * p['flip_rate']['control']:.1f}% (control); logit contrast "
                     f"{p['logit_contrast']['exposed_mean_abs']:.3f} vs {p['logit_contrast']['control_mean_abs']:.3f}.")
    lines += ["", f"**{r.verdict}{stability_mark(r.stability)}**: " + "; ".join(r.reasons[1:]) + "."]
    return "\n".join(lines) + "\n"
