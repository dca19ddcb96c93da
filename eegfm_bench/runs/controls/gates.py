"""The four gates of ``eegfm-bench controls`` (paper 001 §3.6, §5.5): each claim's evidence gathered from the steps'
results and judged by :func:`eegfm_bench.controls.gates.evaluate_gates`.

:func:`claim_gates` makes one claim per frozen model (its configured checkpoint, else its first random init), per cv claim
and per scrambled-label entry not already claimed by the cv run; :func:`_provenance` reads gate (iii)'s pretraining
corpora from the model catalogue (or a user model's declaration); :func:`scrambled_interval` is gate (iv)'s paired
correct- minus scrambled-label interval.
"""
from __future__ import annotations

import numpy as np

from eegfm_bench.controls.gates import ClaimEvidence, evaluate_gates
from eegfm_bench.models.catalogue import RELATED_SOURCES
from eegfm_bench.models.user import user_spec
from eegfm_bench.runs.controls.steps import Rep, arm_interval, ControlsContext, score

try:  # gate (iii)'s inventory; without it a checkpoint claim cannot be judged (_provenance says so)
    from eegfm_bench.models import catalogue as cat
    _CATALOGUE_ERROR = None
except ImportError as _err:
    cat, _CATALOGUE_ERROR = None, _err


def _provenance(model: str, init: str, task) -> tuple[list | None, str]:
    """Pretraining corpora for gate (iii) (paper 001 §3.6) from :mod:`eegfm_bench.models.catalogue`.

    A random initialisation has no pretraining exposure (``[]``); the note then says what the model's *published*
    checkpoint would show for this dataset. For a checkpoint, the catalogue's
    :func:`~eegfm_bench.models.catalogue.pretraining_overlap` against the task's dataset and its
    ``pretraining_aliases`` decides: its hits are passed as the corpora (gate iii fails on them); with no hit the
    full listed inventory is passed (gate iii passes); an incomplete inventory without a hit gives ``None``
    (gate iii ``missing``: absence of evidence is not certified).

    Returns
    -------
    corpora : list of str or None
    note : str
        One line for the report.

    Raises
    ------
    RuntimeError
        For a checkpoint claim when ``eegfm_bench.models.catalogue`` cannot be imported (the fix is named).
    """
    aliases = (task.dataset, *task.pretraining_aliases)
    spec = user_spec(model)
    if spec is not None:  # a user model: its declaration says what its weights saw
        if not init.startswith("pretrained"):
            return [], "random initialisation: no pretraining exposure (user model)"
        corpora = spec.pretraining_corpora  # the registered declaration, typed (UserModelConfig)
        if corpora is None:
            return None, (f"user model {model}: no pretraining_corpora declared for its weights; fix: "
                          f"user_models.{model}.pretraining_corpora: [...] (the datasets they were pretrained on)")
        low = {a.lower() for a in aliases}
        hits = [c for c in corpora if c.lower() in low]
        if hits:
            return hits, f"declared: {model} pretraining corpora overlap {task.dataset} via {hits}"
        return list(corpora), f"declared: no {model} pretraining corpus ({list(corpora)}) overlaps {task.dataset} ({aliases})"
    if cat is None:
        if init.startswith("pretrained"):
            raise RuntimeError(f"gate (iii) for {model} ({init}) needs eegfm_bench.models.catalogue, which cannot be "
                               f"imported ({_CATALOGUE_ERROR}); fix: restore models/catalogue.py and catalogue.yaml"
                               ) from _CATALOGUE_ERROR
        return [], "random initialisation: no pretraining exposure (model catalogue unavailable)"
    checkpoint = init.split(":", 1)[1].split("@")[0] if init.startswith("pretrained") else None
    hub_ids = cat.load_catalogue(check_registry=False).get(model, {}).get("hub_ids") or []
    ck = checkpoint if checkpoint in hub_ids else None
    try:
        hits = cat.pretraining_overlap(model, aliases, checkpoint=ck)
        complete = True
    except cat.IncompleteInventoryError as err:
        hits, complete = [], False
        why = str(err)
    if not init.startswith("pretrained"):
        pub = (f"the published {model} inventory overlaps {task.dataset}: {hits}" if hits else
               f"no overlap listed for the published {model} inventory" + ("" if complete else " (incomplete)"))
        return [], f"random initialisation: no pretraining exposure ({pub})"
    if hits:
        return list(hits), f"catalogue: {model} pretraining overlaps {task.dataset} via {hits}"
    if not complete:
        return None, f"catalogue inventory incomplete: {why}"
    corpora = cat.pretraining_corpora(model, ck)
    return list(corpora or []), f"catalogue: no listed {model} corpus overlaps {task.dataset} ({aliases})"


def claim_gates(ctx: ControlsContext, hand: dict, frozen: dict, cv_reps: list, perms: dict, paired: dict, scrambled: list) -> list:
    """The claims' gate reports and, per claim, where its evidence came from (provenance, permutation, random
    init): ``(reports, context)``."""
    metric = ctx.cfg.metric
    alpha = float(ctx.cfg.gates.alpha)
    comp_scores = {f: score(r, metric) for f, r in hand.items()}
    related = dict(RELATED_SOURCES)
    related[ctx.task.dataset] = tuple(ctx.task.pretraining_aliases)
    reports, context = [], []

    def claim(rep: Rep, *, random_scores, perm_p, perm_src, adaptation=False, scrambled_score=None,
              scrambled_correct=None, extra=None, random_ci=None, scrambled_ci=None):
        corpora, prov_note = _provenance(rep.model, rep.init, ctx.task)
        pr = paired.get(rep.name)
        ci = None if pr is None else (pr["levels"]["window"]["bootstrap"]["low"],
                                      pr["levels"]["window"]["bootstrap"]["high"])
        loso = None if pr is None else pr["levels"]["window"].get("loso")  # absent in results saved before it
        ev = ClaimEvidence(model=rep.name, task=ctx.task.name, evaluation_dataset=ctx.task.dataset,
                           model_score=score(rep, metric), comparator_scores=comp_scores, paired_ci=ci,
                           pretraining_corpora=corpora, random_init_scores=random_scores, permutation_p=perm_p,
                           adaptation=adaptation, scrambled_label_score=scrambled_score,
                           scrambled_correct_score=scrambled_correct, alpha=alpha, metric=metric,
                           random_init_ci=random_ci, scrambled_ci=scrambled_ci,
                           ci_level=float(ctx.cfg.bootstrap.level),
                           paired_ci_flips=(loso or {}).get("flips"),
                           random_init_flips=ctx.arm_flips.get(tuple(random_ci) if random_ci else None),
                           scrambled_flips=ctx.arm_flips.get(tuple(scrambled_ci) if scrambled_ci else None))
        r = evaluate_gates(ev, related=related)
        reports.append(r)
        context.append({"claim": rep.name, "source": rep.source, "init": rep.init, "provenance": prov_note,
                        "permutation_source": perm_src, **(extra or {})})

    first_random = {}
    for model, by_init in frozen.items():
        m_cfg = next(m for m in ctx.cfg.models if m.model == model)
        rnd = {lab: r for lab, r in by_init.items() if lab.startswith("random")}
        first_random[model] = rnd[f"random#seed{m_cfg.init_seeds[0]}"]
        rci = None
        if "pretrained" in by_init:
            rep = by_init["pretrained"]
            rs = [score(r, metric) for r in rnd.values()]
            rci = arm_interval(ctx, [(rep.result.proba, r.result.proba) for r in rnd.values()],
                                f"gate (iv) {rep.name} − matched random init")
        else:
            rep = first_random[model]
            rs = None
        pp = perms.get(rep.name)
        claim(rep, random_scores=rs, random_ci=rci, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {rep.name}",
              extra={"random_init": None if rs is not None else "no pretrained checkpoint configured: the claim is "
                     "the random-init representation itself, so 'pretrained > matched random init' has no evidence"})
    scr_by = {(s["model"], s["regime"], s["head"]): s for s in scrambled}
    used_scr = set()
    for rep in cv_reps:
        key = (rep.model, rep.regime, rep.head)
        frozen_rep = None
        if rep.model in frozen:
            frozen_rep = frozen[rep.model].get("pretrained") if rep.init.startswith("pretrained") \
                else first_random.get(rep.model)
        pp = perms.get(frozen_rep.name) if frozen_rep is not None else None
        adaptation = rep.regime in ("full", "lora")
        scr = scr_by.get(key) if adaptation else None
        if scr is not None:
            used_scr.add(key)
        claim(rep, random_scores=None, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {frozen_rep.name} (same backbone)",
              adaptation=adaptation, scrambled_ci=None if scr is None else scrambled_interval(ctx, scr),
              scrambled_score=None if scr is None else float(np.mean([v["score"] for v in scr["runs"]["scrambled"].values()])),
              scrambled_correct=None if scr is None else float(np.mean([v["score"] for v in scr["runs"]["correct"].values()])),
              extra={"random_init": "cv claims carry no matched random-init contrast here" if not rep.init.startswith(
                  "pretrained") else "add a random-init cv run of the same model for this contrast"})
    for key, scr in scr_by.items():
        if key in used_scr:
            continue
        rep = scr["rep"]
        frozen_rep = first_random.get(rep.model)
        pp = perms.get(frozen_rep.name) if frozen_rep is not None else None
        claim(rep, random_scores=None, perm_p=None if pp is None else pp["p_value"],
              perm_src=None if pp is None else f"frozen {ctx.spec_for('frozen').kind} probe of {frozen_rep.name} (same backbone)",
              adaptation=True, scrambled_ci=scrambled_interval(ctx, scr),
              scrambled_score=float(np.mean([v["score"] for v in scr["runs"]["scrambled"].values()])),
              scrambled_correct=float(np.mean([v["score"] for v in scr["runs"]["correct"].values()])),
              extra={"random_init": "adaptation from random init: no pretrained checkpoint to contrast"})
    return reports, context


def scrambled_interval(ctx: ControlsContext, scr: dict) -> tuple | None:
    """Gate (iv)'s correct- minus scrambled-label interval: the probe predictions of each seed, paired."""
    runs = scr["runs"]
    if "paired_ci" in scr:
        return scr["paired_ci"]
    seeds = [s for s in runs["correct"] if s in runs["scrambled"] and "proba" in runs["correct"][s]
             and "proba" in runs["scrambled"][s]]
    if not seeds:
        return None
    if "paired_ci" not in scr:  # once per entry (a cv claim and the entry's own claim share it)
        scr["paired_ci"] = arm_interval(ctx, [(runs["correct"][s]["proba"], runs["scrambled"][s]["proba"])
                                               for s in seeds],
                                         f"gate (iv) {scr['model']} {scr['regime']}: correct − scrambled labels")
    return scr["paired_ci"]
