"""The feature stage: a head-only backbone's frozen tokens extracted once, split by window ranges over jobs.

``eegfm-bench features --config <cv config>`` (and ``cv`` under a launcher, after its ingest stage and before its
cells) computes the feature cache entry (:mod:`eegfm_bench.models.features`) of every run whose cells read frozen
tokens (``head_only``, and the probing stage of ``lp_ft`` / ``lp_lora``)::

    eegfm-bench features --config configs/experiment/quickstart.yaml                       # in this process
    eegfm-bench features --config my_cv.yaml --launcher local --workers 2 --shards 2
    eegfm-bench features --config my_cv.yaml --launcher slurm --launcher.slurm.partition gpu --shards 8

With a launcher (``local`` or ``slurm``: :func:`~eegfm_bench.runs.launch.launcher.run_jobs`, the same machinery and options
as ``cv``'s and ``ingest``'s) the entry's windows are cut into ``shards`` contiguous ranges that begin on a batch
boundary (:func:`~eegfm_bench.models.features.window_ranges`); each range is one job (a SLURM array task, or a local
worker process) that rebuilds the run's backbone from the config (its weights hash checked against the entry's),
predicts its range with the cell's trainer settings and ``intra_op_threads`` and writes its own chunk
(``<entry>.partial-stage/shard_NNNNN``, renamed into place once complete). This process then assembles the ordinary
cache entry (:func:`~eegfm_bench.models.features.assemble_stage`): the same files and key as a sequential
extraction, the arrays equal bit for bit. A killed stage resumes only the shards without a finished chunk; a shard
that left its range unfinished is refused by name. Every cell of the backbone then opens the entry instead of
extracting. Without a launcher the entries are extracted here, as the first cell of a sequential cv would.
"""
from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from eegfm_bench.models.features import (FeatureEntry, FeatureShardError, assemble_stage, chunk_done,
                                         extract_features, extract_shard, feature_entry, stage_plan)
from eegfm_bench.models.module import FMClassifier
from eegfm_bench.config.cv import CVConfig
from eegfm_bench.runs.cv.cells import (TOKEN_REGIMES, fixed_batch_size, load_config, model_preprocessing,
                                       run_init_seed, run_trainer, windows_for)
from eegfm_bench.atomic import atomic_write_text
from eegfm_bench.runs.launch.ingest import default_shards, sharded_fill, shards_note
from eegfm_bench.runs.launch.launcher import as_launcher, run_jobs
from eegfm_bench.trainer import fixed_numerics


@dataclass(frozen=True)
class StageBackbone:
    """One entry of a feature stage: the run whose backbone it is, the entry, its weights hash and window ranges."""

    run: int
    model: str
    folder: str
    weights: str
    ranges: list


@dataclass(frozen=True)
class FeatureShards:
    """What the jobs of a feature stage run (pickled into each job).

    Attributes
    ----------
    cv : CVConfig
        The cv config (launcher ``none``): each job rebuilds the runs' windows (from the cache) and backbones.
    backbones : list of StageBackbone
    trainer : dict
        Sizes the jobs (:func:`~eegfm_bench.runs.launch.launcher.run_jobs`): the cv's ``trainer`` section.
    """

    cv: Any
    backbones: list
    trainer: dict


def stage_backbone(cfg: CVConfig, run, ws):
    """The frozen backbone a cell of ``run`` builds (:class:`~eegfm_bench.models.module.FMClassifier` with the run's
    weights, architecture, ``init_seed`` and the windows' channels, length and classes): its weights are those a
    head-only cell extracts with, so the stage's entry is the cell's."""
    return FMClassifier(backbone=run.model, user_model=(cfg.user_models or {}).get(run.model),
                        ch_names=list(ws.ch_names), n_times=ws.n_times, n_classes=len(ws.class_names),
                        pretrained=run.pretrained, init_seed=run_init_seed(cfg, run),
                        backbone_kwargs=run.backbone_kwargs, lora=run.lora,
                        data_reference=(ws.meta.get("reference") or {}).get("reference"), head="mean",
                        regime="head_only").backbone


def _entry(cfg: CVConfig, run_index: int, windows: dict) -> tuple[FeatureEntry, Any, Any]:
    run = cfg.runs[run_index]
    ws = windows_for(cfg, run.model, windows)
    backbone = stage_backbone(cfg, run, ws)
    return feature_entry(backbone, ws, parts=("tokens",), trainer=run_trainer(cfg, run),
                         cache_dir=cfg.data.cache_dir, dtype=cfg.data.feature_dtype), backbone, ws


def feature_shard(cfg: FeatureShards, progress: bool = False, worker_units: Sequence[str] = ()) -> dict:
    """A job of a feature stage: units ``"<backbone>:<shard>"`` (indices into ``cfg.backbones`` and its ranges),
    each one range's chunk (:func:`~eegfm_bench.models.features.extract_shard`) under the cv's
    ``intra_op_threads``.

    Returns
    -------
    dict
        ``{"failures": [...]}``: a failed unit's dict names it and the error.
    """
    failures, windows = [], {}
    for unit in worker_units:
        b, k = (int(x) for x in str(unit).split(":"))
        spec = cfg.backbones[b]
        try:
            entry, backbone, ws = _entry(cfg.cv, spec.run, windows)
            if str(entry.folder) != spec.folder:
                raise FeatureShardError(f"shard {k} would write {entry.folder}, the stage assembles {spec.folder}; "
                                        "fix: the same config and cache for the stage and its jobs")
            a, stop = spec.ranges[k]
            with fixed_numerics(cfg.cv.intra_op_threads):
                extract_shard(backbone, ws, entry, k, a, stop, batch_size=fixed_batch_size(cfg.cv.data))
        except Exception as err:  # noqa: BLE001  (reported by the launching process, with the shard's range)
            failures.append({"cell": str(unit), "condition": "(feature shard)", "error": f"{type(err).__name__}: {err}",
                             "traceback": traceback.format_exc()})
    return {"failures": failures}


def run_feature_stage(cfg: CVConfig, *, runs: Sequence[int] | None = None, shards: int | None = None,
                      out_dir: str | Path | None = None, windows: dict | None = None,
                      progress: bool = True) -> list[Path]:
    """Extract the cached ``tokens`` of every token-reading run of ``cfg`` (:data:`TOKEN_REGIMES`) once: as a
    stage of ``cfg.launcher``'s jobs (``local`` / ``slurm``), else in this process.

    Parameters
    ----------
    cfg : CVConfig
    runs : sequence of int, optional
        Indices into ``cfg.runs`` (default: every run of a token-reading regime); runs sharing a backbone share
        one entry.
    shards : int, optional
        Jobs per entry (default :func:`~eegfm_bench.runs.launch.ingest.default_shards`); a resumed stage keeps its
        earlier ranges.
    out_dir : path, optional
        Where the jobs' pickles and logs go (``<out_dir>/jobs``; default ``<cfg.out_dir>/features``).
    windows : dict, optional
        Window sets already loaded (:func:`~eegfm_bench.runs.cv.cells.windows_for`'s cache).

    Returns
    -------
    list of Path
        The entries' folders (complete).

    Raises
    ------
    FeatureShardError
        A shard that failed or left its range without a finished chunk (named, with its windows and the jobs' logs).
    ConfigError
        An invalid launcher.
    """
    lc, windows = as_launcher(cfg.launcher), {} if windows is None else windows
    runs = [i for i, r in enumerate(cfg.runs) if r.regime in TOKEN_REGIMES] if runs is None else list(runs)
    specs, entries = [], {}
    for i in runs:
        entry, backbone, ws = _entry(cfg, i, windows)
        if str(entry.folder) in entries or (entry.folder / "COMPLETE").is_file():
            entries.setdefault(str(entry.folder), entry)
            continue
        entries[str(entry.folder)] = entry
        if lc.kind == "none":
            with fixed_numerics(cfg.intra_op_threads):
                extract_features(backbone, ws, parts=("tokens",), trainer=entry.trainer,
                                 batch_size=fixed_batch_size(cfg.data), cache_dir=cfg.data.cache_dir,
                                 progress=progress, dtype=cfg.data.feature_dtype)
            continue
        asked, resumed = int(shards or default_shards(lc)), (entry.stage / "plan.json").is_file()
        ranges = stage_plan(entry, asked, fixed_batch_size(cfg.data))
        bs = fixed_batch_size(cfg.data)
        note = (f"--shards {asked} not applied: the earlier stage's {len(ranges)} range(s) are kept" if resumed and
                shards and len(ranges) != asked else "" if resumed else
                shards_note(asked, -(-len(entry.rows) // bs), len(ranges),
                            f"batch(es) of {bs} windows ({len(entry.rows)} windows of {cfg.runs[i].model})",
                            bool(shards)))
        specs.append((StageBackbone(i, cfg.runs[i].model, str(entry.folder), entry.weights, ranges), entry,
                      {"shards_asked": asked, **({"note": note} if note else {})}))
    if specs:
        _run_stage(cfg, lc, specs, out_dir, progress)
    for folder in entries:
        if progress:
            tqdm.write(f"features: {folder} complete")
    return [Path(f) for f in entries]


def _run_stage(cfg: CVConfig, lc, specs: list, out_dir, progress: bool) -> None:
    """Submit the shards without a finished chunk as one job each, wait, and assemble every entry; say (and
    record in each entry's ``meta.json`` and ``<out>/feature_stage.json``) which shards an earlier, killed run had
    finished and were reused, and a ``--shards`` reduced."""
    units = [f"{b}:{k}" for b, (s, e, _) in enumerate(specs) for k, (a, stop) in enumerate(s.ranges)
             if not chunk_done(e, k, a, stop)]
    out = Path(out_dir) if out_dir else Path(cfg.out_dir) / "features"
    for s, e, record in specs:
        reused = [k for k, (a, b) in enumerate(s.ranges) if chunk_done(e, k, a, b)]
        record.update(reused=reused, extracted=[k for k in range(len(s.ranges)) if k not in reused])
        print(f"features: {s.model} tokens of {len(e.rows)} windows in {len(s.ranges)} shard(s) of windows "
              f"{', '.join(f'{a}..{b - 1}' for a, b in s.ranges)} (launcher {lc.kind})", flush=True)
        if record.get("note"):
            print(f"feature stage: {record['note']}", flush=True)
        if reused:
            print(f"feature stage: {len(reused)} of {len(s.ranges)} shards reused (shard(s) "
                  f"{', '.join(map(str, reused))}, finished by an earlier run), {len(record['extracted'])} to extract",
                  flush=True)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "feature_stage.json", json.dumps(
        [{"model": s.model, "entry": s.folder, "shards": len(s.ranges), "ranges": [list(r) for r in s.ranges], **r}
         for s, _, r in specs], indent=1))
    failures = []
    if units:
        job_cfg = FeatureShards(replace(cfg, launcher=replace(cfg.launcher, kind="none")), [s for s, _, _ in specs],
                                dict(cfg.trainer or {}))
        workers = min(int(lc.workers), len(units)) if lc.kind == "local" else len(units)
        failures = run_jobs(replace(lc, workers=workers, cells_per_job=1), job_cfg, units, out, progress=progress,
                            kind="features", stage="feature stage's")
    if failures:
        raise FeatureShardError("; ".join(f"shard {f['cell']} failed: {f['error'].splitlines()[0][:300]}"
                                          for f in failures)
                                + f" (job logs under {lc.folder or out / 'jobs'}); fix: see the error, then rerun "
                                "the same command: it extracts only the shards still missing")
    for s, e, record in specs:
        assemble_stage(e, s.ranges, record=record)


def features_from_config(config, overrides: Sequence[str] = (), progress: bool = True,
                         shards: int | None = None) -> list[Path]:
    """``eegfm-bench features --config <cv config>``: :func:`run_feature_stage` of the config (its ``launcher:``
    section decides where the shards run; the jobs' logs go to ``<out_dir>/features/jobs``). Under ``slurm`` the
    recordings whose entries are missing are read first by the ingest stage's array, as ``cv`` does
    (:func:`~eegfm_bench.runs.launch.ingest.sharded_fill`), so this process reads none."""
    cfg = load_config(config, overrides)
    if cfg.launcher.kind == "slurm":
        d = cfg.data
        preps = list(dict.fromkeys(model_preprocessing(cfg, cfg.runs[i].model) for i, r in enumerate(cfg.runs)
                                   if r.regime in TOKEN_REGIMES))
        sharded_fill(cfg.task, preps, cfg.launcher, data_root=d.data_root, cache_dir=d.cache_dir,
                     subjects=d.subjects, n_jobs=d.n_jobs, out_dir=Path(cfg.out_dir) / "ingest", progress=progress)
    return run_feature_stage(cfg, shards=shards, progress=progress)


__all__ = ["FeatureShards", "StageBackbone", "TOKEN_REGIMES", "feature_shard", "features_from_config",
           "run_feature_stage", "stage_backbone"]
