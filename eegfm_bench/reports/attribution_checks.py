"""The table of attribution sanity checks (paper 003 App. I.2): conservation and randomisation per model, mean ±
SD over folds, with their verdicts (Adebayo et al. 2018).

Numpy and pandas only, so that ``eegfm-bench report`` shows the checks without loading torch or MNE; the
topomaps are drawn by :mod:`eegfm_bench.reports.attribution` when ``attribute`` runs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from eegfm_bench.interpret.sanity import CONSERVATION_TOLERANCE, RANDOMISATION_THRESHOLD, sanity_verdict

def checks_table(df):
    """Mean ± std over folds of the sanity-check metrics per (model, regime, head, condition, metric)."""
    m = df["metric"].astype(str)
    df = df[m.str.contains("conservation|randomisation|n_selected")]
    if df.empty:
        return pd.DataFrame()
    g = df.groupby(["model", "regime", "head", "condition", "metric"])["value"]
    return pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "min": g.min(), "max": g.max(),
                         "n_folds": g.count()}).reset_index()


def checks_markdown(table) -> str:
    if table.empty:
        return "(no attribution rows)\n"
    lines = ["# Attribution sanity checks (per model; mean ± std over folds)", "",
             "conservation_ratio: sum of input R / logit with biases zeroed (configured attention rule); "
             "conservation_softmax_share: relevance / logit absorbed inside the attention products (AttnLRP's softmax "
             "Taylor rule); conservation_closure: (input R + absorbed) / logit (must be 1: checks every rule of the "
             "patch map); conservation_ratio_cp: input R / logit with the CP rule (nothing absorbed: must be 1). "
             f"Warning threshold |ratio − 1| > {CONSERVATION_TOLERANCE:.0%}. randomisation_spearman: Spearman rank "
             "correlation of |R| maps (channels × times) of the trained vs a weight-randomised model, _signed: of the signed "
             "maps, _channel: of the topomap values (low = passes; |R| keeps a floor from the shared |x| factor). "
             f"A method **fails the sanity check** when randomisation_spearman >= {RANDOMISATION_THRESHOLD} (Adebayo et "
             "al. 2018; 0.7 = a strong correlation, Schober et al. 2018): its maps barely change when the weights "
             "(model randomisation) or the training labels (data randomisation) are randomised, so they say nothing "
             "about what the model learned.", "",
             "| model | regime | head | condition | metric | mean ± std | min | max | folds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        std = 0.0 if np.isnan(r.std) else r.std
        flag = ""
        if r.metric.endswith(("conservation_ratio", "conservation_ratio_cp", "conservation_closure")):
            flag = " ⚠" if abs(r.mean - 1) > CONSERVATION_TOLERANCE else ""
        elif r.metric.endswith(SANITY_METRICS):
            flag = " ⚠ fails sanity check" if sanity_verdict(r.mean) == "fails sanity check" else ""
        mean_sd = f"{r.mean:.3f}" if np.isnan(r.std) else f"{r.mean:.3f} ± {std:.3f}"  # one fold: a plain mean
        lines.append(f"| {r.model} | {r.regime} | {r.head} | {r.condition} | {r.metric} | {mean_sd}"
                     f"{flag} | {r.min:.3f} | {r.max:.3f} | {r.n_folds} |")
    verdicts = sanity_table(table)
    if verdicts:
        lines += ["", "## Sanity-check verdicts", "", "A method fails when its map (channels × times) or its topomap "
                  "(channels, what the figures show) keeps a Spearman correlation of "
                  f"{RANDOMISATION_THRESHOLD} or more with the randomised model's.", "",
                  "| model | regime | head | condition | method | check | Spearman map | Spearman topomap | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for v in verdicts:
            shown = f"**{v['verdict']}**" if v["verdict"] == "fails sanity check" else v["verdict"]
            lines.append(f"| {v['model']} | {v['regime']} | {v['head']} | {v['condition']} | {v['method']} | "
                         f"{v['check']} | {v['spearman']:.3f} | {v['spearman_topomap']:.3f} | {shown} |")
    return "\n".join(lines) + "\n"


SANITY_METRICS = (":randomisation_spearman", ":data_randomisation_spearman", ":randomisation_spearman_channel",
                  ":data_randomisation_spearman_channel")
"""The rows a sanity verdict is read from: model and data randomisation, on the |R| maps and on the topomaps."""


def sanity_table(table) -> list[dict]:
    """One verdict per model / regime / head / condition / method and check (model or data randomisation), from
    :func:`checks_table`'s means over folds of the map-level and topomap-level Spearman correlations: ``fails
    sanity check`` when either reaches :data:`~eegfm_bench.interpret.sanity.RANDOMISATION_THRESHOLD`
    (:func:`~eegfm_bench.interpret.sanity.sanity_verdict`)."""
    out: dict = {}
    if table is None or table.empty:
        return []
    for r in table.itertuples():
        m = str(r.metric)
        if not m.endswith(SANITY_METRICS):
            continue
        method, check = m.split(":", 1)
        kind = "data randomisation" if check.startswith("data_") else "model randomisation"
        key = (r.model, r.regime, r.head, r.condition, method, kind)
        v = out.setdefault(key, {"model": r.model, "regime": r.regime, "head": r.head, "condition": r.condition,
                                 "method": method, "check": kind, "spearman": float("nan"),
                                 "spearman_topomap": float("nan")})
        v["spearman_topomap" if check.endswith("_channel") else "spearman"] = float(r.mean)
    for v in out.values():
        worst = np.nanmax([v["spearman"], v["spearman_topomap"]])
        v["verdict"] = sanity_verdict(float(worst))
    return list(out.values())


__all__ = ["checks_table", "checks_markdown", "sanity_table", "SANITY_METRICS"]
