"""``eegfm-bench probe``: block-wise probes and per-block attention maps on a cv run's fold checkpoints.

Every backbone forward (block outputs, attention) runs in a ``lightning.Trainer`` from the config's ``trainer:``
section, so the command scales to N devices and gives the same rows as on one; only rank 0 writes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from eegfm_bench.distributed import is_global_zero


def run_probes(config, *, args: Sequence[str] = (), progress: bool = True) -> dict[str, Path]:
    """``eegfm-bench probe``: block-wise probes (and attention topomaps) on a cv run's fold checkpoints.

    Parameters
    ----------
    config : path or dict
        Interpret config (see :mod:`eegfm_bench.interpret.config`): ``cv_dir``, ``out_dir``, ``select``,
        ``probe``.

    Returns
    -------
    dict
        Paths of the written table, CSV, curve plot and (when enabled) attention topomaps.
    """
    from tqdm.auto import tqdm

    from eegfm_bench.interpret.config import load_interpret_config
    from eegfm_bench.interpret.probes import run_fold_probes
    from eegfm_bench.reports.probes import write_report
    from eegfm_bench.runs.output import CVRun, load_fold_model, load_initial_model

    cfg = load_interpret_config(config, args)
    run = CVRun(cfg["cv_dir"], cfg["cv_config"])
    zero = is_global_zero()
    sel, pc = cfg["select"], cfg["probe"]
    out = Path(cfg["out_dir"]) / "probes"
    if zero:
        out.mkdir(parents=True, exist_ok=True)
    cks = run.checkpoints(sel["models"], sel["regimes"], sel["heads"], sel["folds"])
    fit_kw = {k: pc[k] for k in ("max_epochs", "patience", "lr", "batch_size", "standardize_mean")}
    done: set = set()  # (model, fold, stage, weights): identical backbones are probed once per fold
    for ck in tqdm(cks, desc="probes", disable=not (progress and zero), unit="fold"):
        ws = run.windows(ck.model)
        tr, va, te = run.fold_indices(ws, ck.fold)
        model = load_fold_model(ck.path)
        frozen = None
        if pc["include_frozen"]:
            init = load_initial_model(ck.path)
            frozen = init.backbone
        run_fold_probes(model, ws, tr, va, te, fold=ck.fold, out_dir=out, experiment=run.experiment, task=run.task,
                        model_name=ck.model, source_head=ck.head, frozen_backbone=frozen, poolings=pc["poolings"],
                        cache_dir=pc["cache_dir"], batch_size=pc["forward_batch_size"], probe_kwargs=fit_kw,
                        checkpoint=str(ck.path), seed=run.seed, trainer=cfg["trainer"], done=done, write=zero)
    ws0 = run.windows(cks[0].model)
    paths = {}
    if zero:
        paths = write_report(out, chance=1.0 / len(ws0.class_names),
                             title=f"{run.experiment} ({run.task}): block-wise linear probes")
    if cfg["attention"]["enabled"]:
        from eegfm_bench.interpret.attention import run_attention

        paths.update(run_attention(cfg, run=run, progress=progress))
    return paths
