"""The PhysioTRACE provenance audit over cached embeddings: Recover → Stress → Intervene → Verify (paper 000 §3).

:func:`audit_embeddings` takes frozen-encoder embeddings with their target, provenance, subject, record and split,
fits the probes and heads it needs on the training split (selected and calibrated on validation), evaluates on
the identity-disjoint test split, and returns an :class:`AuditReport` ending in one verdict — ``"no reliance"``,
``"certified"`` or ``"refused"`` — written as JSON and Markdown in the shape of the paper's App. B worked
example. ``eegfm-bench audit`` runs it from a config (:func:`eegfm_bench.runs.audit.run_audit`).

Import direction: :meth:`AuditReport.to_markdown` renders through :func:`eegfm_bench.reports.audit.audit_markdown`
(one of the package's two documented back-edges): every report writer lives in ``reports/``, and an audit writes
its Markdown beside its JSON wherever it runs (the command, the demo, a notebook).

Two designs:

* **paired** — ``emb`` of shape ``(n_windows, K, d)``: every window in K provenance views (e.g. reference
  original / average / Cz). The exposed head is fitted under an induced association (``induced_odds``) with
  each view in turn as the shortcut group ("rotations", results averaged); localization uses within-record view
  contrasts (no labels).
* **observational** — ``emb`` of shape ``(n_windows, d)`` with one provenance group per window (device, site).
  The exposed head is fitted under the training data's own association (aligned odds = training odds ratio);
  localization uses target-residualized training embeddings.

Every interval is a subject-cluster percentile bootstrap (:func:`eegfm_bench.stats.cluster_bootstrap`) with the
same seed, so the replicates of different statistics are paired (same resampled subjects).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from sklearn.preprocessing import StandardScaler

from eegfm_bench.atomic import atomic_path, atomic_write_text
from eegfm_bench.reports.audit import audit_markdown
from eegfm_bench.stats import BootstrapCI, cluster_bootstrap, leave_one_cluster_out

from .intervene import observational_localization, paired_localization, project_out, subspace_energy
from .recover import linear_provenance_information
from .stress import (Design, Rotation, StressSet, decision_flip_rate, fit_head, observed_odds,
                     paired_logit_contrast, resolve_odds, stress_weights)
from .verify import EnergyUnreachable, decide_verdict, has_reliance, random_subspaces
from eegfm_bench.config.audit import AuditConfig, jsonable

__all__ = ["AuditReport", "audit_embeddings", "SCHEMA"]

SCHEMA = "physiotrace-audit/1"
_SPLITS = ("train", "val", "test")


def _ci(b: BootstrapCI) -> dict:
    return {"estimate": b.estimate, "low": b.low, "high": b.high, "level": b.level, "n_boot": b.n_boot,
            "n_clusters": b.n_clusters, "n_nan": int(np.isnan(b.samples).sum())}


@dataclass
class AuditReport:
    """Result of one audit (paper 000 App. B shape). All AUROC-based numbers are in AUROC units.

    Attributes
    ----------
    config : dict
    config_hash : str
        sha256 of the config and the input arrays; names the output files.
    design : str
        "paired" or "observational".
    data : dict
        Counts (windows, rows, subjects per split), views/groups, native unit.
    recover : dict
        LPI (bits per native unit) with identity-aware and naive intervals.
    stress : dict
        Regime AUROC tables, ``G`` with interval, degradations, reliance decision; paired: flip rates and
        logit contrasts.
    intervene : dict or None
        Localization summary (None when the audit stops at "no reliance" or "not assessable").
    verify : dict or None
        ``G`` after removal, random controls, utility change, refitted probe.
    verdict : str
        "no reliance", "certified", "refused", or "not assessable" (the encoder's task score is not above chance by
        its interval: nothing to certify).
    reasons : list of str
    notes : list of str
        Caveats that do not change the verdict (e.g. bootstrap replicates dropped for an empty cell, a control
        head whose held-out AUROC interval includes chance: ``stress["control_utility"]``).
    stability : dict or None
        Whether leaving out any one held-out subject changes the verdict (:func:`_stability`): ``verdict`` (on all
        subjects), ``flips`` (subject → verdict without it), ``undecided``, ``n_subjects``.
    schema : str
    resumed : bool
        True when read back from an existing JSON instead of computed (not serialized).
    remedy : dict or None
        The fitted remedy, not in the JSON (saved beside it as ``..._remedy.npz``): ``scaler_mean`` and
        ``scaler_scale`` (d,) of the training standardization and ``basis`` (d, r); apply it as
        ``project_out((emb − scaler_mean) / scaler_scale, basis)``. None after "no reliance", "not assessable" or on
        resume.
    """

    config: dict
    config_hash: str
    design: str
    data: dict
    recover: dict
    stress: dict
    intervene: dict | None
    verify: dict | None
    verdict: str
    reasons: list
    notes: list = field(default_factory=list)
    stability: dict | None = None
    schema: str = SCHEMA
    resumed: bool = field(default=False, compare=False, repr=False)
    remedy: dict | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        """JSON-ready dict (``resumed`` and ``remedy`` excluded)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("resumed", "remedy")}
        return jsonable(out)

    def to_json(self, path) -> Path:
        """Write the report atomically to ``path`` (parent folders created); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=2, allow_nan=False)
        os.replace(tmp, path)
        return path

    @classmethod
    def from_json(cls, path) -> "AuditReport":
        """Read a report written by :meth:`to_json`.

        Raises
        ------
        ValueError
            If the file's schema is not this module's.
        """
        saved = json.loads(Path(path).read_text())
        if saved.get("schema") != SCHEMA:
            raise ValueError(f"{path} has schema {saved.get('schema')!r}, expected {SCHEMA!r}; fix: rerun the audit")
        return cls(**saved)

    def to_markdown(self) -> str:
        """Human-readable report: one section per axis, then the verdict (paper 000 App. B;
        :func:`eegfm_bench.reports.audit.audit_markdown`)."""
        return audit_markdown(self)


# ----------------------------------------------------------------------------------------------------------------
# input checks


def _fingerprint(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        if a.dtype.kind in "OU":
            h.update("\x1f".join(map(str, a.ravel().tolist())).encode())
        else:
            h.update(a.tobytes())
    return h.hexdigest()


def config_hash(config: AuditConfig, arrays: Sequence[np.ndarray]) -> str:
    """sha256 of the report schema, the canonical config JSON and the input arrays."""
    h = hashlib.sha256((SCHEMA + json.dumps(config.to_dict(), sort_keys=True)).encode())
    h.update(_fingerprint(arrays).encode())
    return h.hexdigest()


def _split_masks(split, n: int) -> dict:
    if isinstance(split, Mapping):
        missing = [s for s in _SPLITS if s not in split]
        if missing:
            raise ValueError(f"split masks lack {missing}; fix: pass boolean masks for {list(_SPLITS)}")
        masks = {s: np.asarray(split[s], dtype=bool) for s in _SPLITS}
        for s, m in masks.items():
            if m.shape != (n,):
                raise ValueError(f"split mask {s!r} has shape {m.shape}, expected ({n},)")
        overlap = (masks["train"].astype(int) + masks["val"] + masks["test"]) > 1
        if overlap.any():
            raise ValueError(f"{int(overlap.sum())} windows are in more than one split; fix: make the masks disjoint")
    else:
        arr = np.asarray(split).astype(str)
        if arr.shape != (n,):
            raise ValueError(f"split has shape {arr.shape}, expected ({n},)")
        odd = sorted(set(arr.tolist()) - set(_SPLITS) - {"", "none", "unused"})
        if odd:
            raise ValueError(f"unknown split labels {odd}; fix: label windows 'train', 'val' or 'test'")
        masks = {s: arr == s for s in _SPLITS}
    for s, m in masks.items():
        if not m.any():
            raise ValueError(f"the {s!r} split is empty; fix: LPI and head selection need train, val and test")
    return masks


def _check_inputs(emb, y, provenance, subject, record, masks, cfg: AuditConfig):
    n = emb.shape[0]
    for name, a in (("y", y), ("subject", subject), ("record", record)):
        if a.shape != (n,):
            raise ValueError(f"{name} has shape {a.shape}, expected ({n},) (one per window)")
    if not np.all(np.isfinite(emb)):
        raise ValueError("emb contains NaN or inf; fix: recompute the embeddings")
    vals = set(np.unique(y).tolist())
    if not vals <= {0, 1} or len(vals) < 2:
        raise ValueError(f"the target must be binary 0/1 with both classes, got values {sorted(vals, key=str)}; "
                         "fix: binarize the task (e.g. one class vs rest) before the audit")
    subj_split = {}
    for s, m in masks.items():
        for u in np.unique(subject[m]).tolist():
            subj_split.setdefault(u, set()).add(s)
    shared = sorted((u for u, ss in subj_split.items() if len(ss) > 1), key=str)
    if shared:
        raise ValueError(f"subjects {shared[:5]} occur in more than one split; the audit needs identity-disjoint "
                         "splits; fix: split by subject (eegfm_bench.data.splits)")
    n_test = np.unique(subject[masks["test"]]).size
    if n_test < cfg.min_clusters:
        raise ValueError(f"the held-out split has {n_test} subjects, fewer than the {cfg.min_clusters} the cluster "
                         "bootstrap needs (min_clusters); fix: hold out more subjects (fewer, larger folds) or "
                         "lower min_clusters knowingly")


# ----------------------------------------------------------------------------------------------------------------
# the audit


def audit_embeddings(emb, y, provenance, subject, record, split, config: AuditConfig | Mapping | None = None, *,
              out_dir=None) -> AuditReport:
    """Run Recover, Stress, Intervene and Verify on cached embeddings and return the verdict.

    Parameters
    ----------
    emb : ndarray, shape (n_windows, d) or (n_windows, K, d)
        Frozen-encoder embeddings. 3-D means a paired design: axis 1 holds K provenance views of each window.
    y : array-like, shape (n_windows,)
        Binary target in {0, 1}.
    provenance : array-like
        Observational: group per window, shape (n_windows,). Paired: the K view labels, shape (K,), or
        (n_windows, K) with the same labels in the same order on every row.
    subject : array-like, shape (n_windows,)
        Identity per window: clusters of every interval; splits must be disjoint in it.
    record : array-like, shape (n_windows,)
        Record per window (paired localization weighs records equally).
    split : array-like of str, shape (n_windows,), or mapping
        "train" / "val" / "test" per window (other windows: "" or "unused"), or boolean masks under those keys.
    config : AuditConfig or dict, optional
        Audit settings (defaults: :class:`AuditConfig`).
    out_dir : path, optional
        If given, the report is written to ``out_dir/audit_<hash16>.json`` and ``.md`` (plus the remedy's scaler
        and basis in ``..._remedy.npz``); if that JSON already exists for the same config and data, it is read
        back and returned (``report.resumed`` is True) without recomputation.

    Returns
    -------
    AuditReport

    Raises
    ------
    ValueError
        On bad input, each naming the fix: shapes, non-binary target, a single provenance group, unpaired
        views, overlapping subjects across splits, too few held-out subjects for the bootstrap, impossible
        regimes (:class:`~eegfm_bench.provenance.stress.InfeasibleRegimeError`), unmatched random energy.

    References
    ----------
    Paper 000 (PhysioTRACE) §3.1–3.4, App. A.2–A.4, App. B (report shape), App. E–F (paired design).
    """
    cfg = config if isinstance(config, AuditConfig) else AuditConfig.from_dict(config)
    emb = np.asarray(emb, dtype=float)
    y = np.asarray(y)
    subject = np.asarray(subject)
    record = np.asarray(record)
    prov = np.asarray(provenance)
    if emb.ndim not in (2, 3):
        raise ValueError(f"emb must be (n_windows, d) or (n_windows, K, d), got shape {emb.shape}")
    n = emb.shape[0]
    h = config_hash(cfg, [emb, y, prov, subject, record,
                          np.stack([_split_masks(split, n)[s] for s in _SPLITS])])
    json_path = md_path = None
    if out_dir is not None:
        json_path = Path(out_dir) / f"audit_{h[:16]}.json"
        md_path = json_path.with_suffix(".md")
        if json_path.exists():
            rep = AuditReport.from_json(json_path)
            if rep.config_hash == h:
                rep.resumed = True
                return rep
    masks = _split_masks(split, n)
    _check_inputs(emb, y, prov, subject, record, masks, cfg)
    y = y.astype(int)

    if emb.ndim == 3:
        report = _paired(emb, y, prov, subject, record, masks, cfg, h)
    else:
        report = _observational(emb, y, prov, subject, record, masks, cfg, h)
    report.notes = _notes(report)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        if report.remedy is not None:
            remedy = json_path.with_name(json_path.stem + "_remedy.npz")
            with atomic_path(remedy) as tmp_file, open(tmp_file, "wb") as fh:
                np.savez(fh, **report.remedy)
        report.to_json(json_path)
        atomic_write_text(md_path, report.to_markdown())
    return report


def _not_assessable(cu: dict, stress_finding: str) -> list[str] | None:
    """The reasons of a ``not assessable`` verdict, or None when the encoder shows task utility on held-out subjects.

    The control head's AUROC (independent regime) must be above chance (0.5) by its subject-cluster interval: an
    encoder at chance has learned nothing whose reliance on provenance could be certified or refused — removing a
    direction from it brings G to zero and would "certify" a model that relies on nothing (seen on the eegmat demo's
    chance-level seeds). The audit then stops before Intervene (nothing to remove; the matched random controls of
    Verify may not even exist for such an embedding), keeping Recover and Stress; the stress finding is reported.
    """
    if cu["above_chance"]:
        return None
    return [f"not assessable: the encoder's task score (control-head AUROC, independent regime) is "
            f"{cu['estimate']:.3f} [{cu['low']:.3f}, {cu['high']:.3f}], not above chance (0.5) by its "
            "subject-cluster interval, so there is no working model to certify or refuse; fix: audit an encoder that "
            "has learned the task (e.g. fine-tune it on the task first)",
            f"stress: {stress_finding}", "stopped before Intervene"]


def _notes(r: AuditReport) -> list[str]:
    notes = []
    cis = {"G": r.stress["G"]}
    if r.verify is not None:
        cis.update({k: r.verify[k] for k in ("G_after", "reduction")})
        cis["utility change"] = r.verify["utility"]["change"]
    dropped = {name: c["n_nan"] for name, c in cis.items() if c["n_nan"]}
    if dropped:
        n_boot = r.stress["G"]["n_boot"]
        notes.append(f"bootstrap replicates dropped (of {n_boot}) because a resample held no subject of some "
                     f"target × provenance cell: {dropped}; those intervals are conditional on every cell present")
    if r.verify is not None:
        rd = r.verify["random"]
        if rd.get("match_fallback"):
            notes.append(rd["match_fallback"])
        if rd["match"] == "rank":
            notes.append(f"random controls are rank-matched only: energies {min(rd['energies']):.3f}–"
                         f"{max(rd['energies']):.3f} vs targeted {rd['target_energy']:.3f}")
        elif max(rd["overlaps"]) > 0.05:
            notes.append(f"energy-matched random controls overlap the targeted subspace (max mean squared cosine "
                         f"{max(rd['overlaps']):.2f})")
    return notes


def _views_from(prov: np.ndarray, n: int, K: int) -> list:
    if prov.shape == (K,):
        views = prov.tolist()
    elif prov.shape == (n, K):
        views = prov[0].tolist()
        bad = np.flatnonzero(~np.all(prov == prov[0], axis=1))
        if bad.size:
            raise ValueError(f"views are not paired: windows {bad[:5].tolist()} list their views in another order "
                             f"than {views}; fix: order axis 1 identically for every window (see pair_views)")
    else:
        raise ValueError(f"paired provenance must be the K={K} view labels (shape ({K},) or ({n}, {K})), got "
                         f"shape {prov.shape}")
    if len(set(views)) != K:
        raise ValueError(f"paired view labels must be distinct, got {views}")
    if K < 2:
        raise ValueError(f"provenance has a single group {views}; the audit needs at least two views; fix: add a "
                         "second reference view (make_reference_views)")
    return views


def _rotations(design: Design, shortcuts: list, aligned: dict, cfg: AuditConfig) -> list[Rotation]:
    rots = []
    for g in shortcuts:
        p_s = design.p_prov[g]
        a = aligned[g]
        regimes = {"aligned": a, "independent": 1.0, "reversed": 1.0 / a}
        for e in cfg.intermediate_exponents:
            regimes[f"aligned^{e:g}"] = resolve_odds(a ** e, design.p_y, p_s)
        for name, spec in cfg.extra_regimes.items():
            regimes[name] = resolve_odds(spec, design.p_y, p_s)
        rots.append(Rotation(shortcut=g, regimes=regimes))
    return rots


class _Heads:
    """Exposed heads (one per rotation) and the control head, fitted on training rows only."""

    def __init__(self, z_tr, y_tr, p_tr, z_va, y_va, p_va, design: Design, rotations, cfg: AuditConfig):
        self.exposed, self.C_exposed = [], []
        for rot in rotations:
            w_tr = stress_weights(y_tr, p_tr, design, rot.shortcut, rot.aligned_odds, "training")
            w_va = stress_weights(y_va, p_va, design, rot.shortcut, rot.aligned_odds, "validation")
            head, C = fit_head(z_tr, y_tr, w_tr, z_va, y_va, w_va, cfg.Cs, cfg.seed)
            self.exposed.append(head)
            self.C_exposed.append(C)
        g0 = rotations[0].shortcut
        w_tr = stress_weights(y_tr, p_tr, design, g0, 1.0, "training")
        w_va = stress_weights(y_va, p_va, design, g0, 1.0, "validation")
        self.control, self.C_control = fit_head(z_tr, y_tr, w_tr, z_va, y_va, w_va, cfg.Cs, cfg.seed)

    def logits(self, z):
        return [h.decision_function(z) for h in self.exposed], self.control.decision_function(z)


def _boot(stat, clusters, cfg: AuditConfig) -> BootstrapCI:
    return cluster_bootstrap(stat, clusters, n_boot=cfg.n_boot, level=cfg.level, seed=cfg.seed)


def _stress_summary(ss: StressSet, ex, ct, cfg: AuditConfig) -> dict:
    tables = ss.table(ex, ct)
    gci = _boot(lambda idx: ss.g(ex, ct, idx), ss.clusters, cfg)
    deg_e = np.mean([t["aligned"]["exposed"] - t["reversed"]["exposed"] for t in tables])
    deg_c = np.mean([t["aligned"]["control"] - t["reversed"]["control"] for t in tables])
    return {
        "rotations": [{"shortcut": rot.shortcut, "aligned_odds": rot.aligned_odds, "auroc": t,
                       "G": ss.g_rotation(ex[i], ct, i)} for i, (rot, t) in enumerate(zip(ss.rotations, tables))],
        "G": _ci(gci), "degradation": {"exposed": float(deg_e), "control": float(deg_c)},
        "utility": ss.utility(ct),
    }, gci


def _core(*, design_name, z_rows, y_rows, p_rows, subj_rows, masks_rows, design, rotations, cfg, h, unit, data,
          localize, paired_extra) -> AuditReport:
    """Shared Recover/Stress/Intervene/Verify on row-level arrays (rows = views or windows)."""
    tr, va, te = (masks_rows[s] for s in _SPLITS)
    scaler = StandardScaler().fit(z_rows[tr])
    z = scaler.transform(z_rows)

    # Recover
    lpi = linear_provenance_information(z[tr], p_rows[tr], z[va], p_rows[va], z[te], p_rows[te], subj_rows[te],
                                        Cs=cfg.Cs, n_boot=cfg.n_boot, level=cfg.level, seed=cfg.seed, unit=unit)
    # Stress
    heads = _Heads(z[tr], y_rows[tr], p_rows[tr], z[va], y_rows[va], p_rows[va], design, rotations, cfg)
    ss = StressSet(y_rows[te], p_rows[te], subj_rows[te], design, rotations)
    for i, rot in enumerate(rotations):
        cells = ss.cell_clusters(i)
        if cells.min() < cfg.min_cell_subjects:
            raise ValueError(
                f"the held-out target × shortcut table for group {rot.shortcut!r} has cells with "
                f"{cells.tolist()} subjects ([y][s], s = in group), fewer than min_cell_subjects="
                f"{cfg.min_cell_subjects}: the cluster bootstrap cannot reweight most replicates; fix: hold out more "
                "subjects of the rare target × provenance combinations (stratified subject split)")
    ex, ct = heads.logits(z[te])
    stress, gci = _stress_summary(ss, ex, ct, cfg)
    stress.update({"C_exposed": heads.C_exposed, "C_control": heads.C_control, "epsilon": cfg.epsilon,
                   "design_marginals": {"p_y": design.p_y, "p_prov": design.p_prov}})
    if paired_extra is not None:
        stress["paired"] = paired_extra(ex, ct)
    reliance, why = has_reliance(gci.estimate, gci.low, gci.high, cfg.epsilon)
    stress["reliance"] = reliance
    level = _boot(lambda idx: ss.utility(ct, idx), ss.clusters, cfg)
    stress["control_utility"] = {**_ci(level), "metric": "control-head AUROC, independent regime", "chance": 0.5,
                                 "above_chance": bool(level.low > 0.5)}
    recover = lpi.to_dict()
    unusable = _not_assessable(stress["control_utility"], why)
    if unusable is not None:
        return AuditReport(config=cfg.to_dict(), config_hash=h, design=design_name, data=data, recover=recover,
                           stress=stress, intervene=None, verify=None, verdict="not assessable", reasons=unusable,
                           stability=_stability(ss, ex, ct, None, [], cfg))
    if not reliance:
        return AuditReport(config=cfg.to_dict(), config_hash=h, design=design_name, data=data, recover=recover,
                           stress=stress, intervene=None, verify=None, verdict="no reliance",
                           reasons=[why, "stopped before Intervene"], stability=_stability(ss, ex, ct, None, [], cfg))

    # Intervene (training rows only)
    loc = localize(z, tr)
    U = loc.basis
    cov = np.cov(z[tr], rowvar=False)
    energy = subspace_energy(U, cov)
    intervene = {"method": loc.method, "rank": loc.rank, "captured": loc.captured, "energy": energy,
                 "n_units": loc.n_units, "singular_values": loc.singular_values[: loc.rank + 3]}
    remedy = {"scaler_mean": scaler.mean_, "scaler_scale": scaler.scale_, "basis": U}
    zp = project_out(z, U)

    # Verify
    ex_p, ct_p = heads.logits(zp[te])
    after, gci_after = _stress_summary(ss, ex_p, ct_p, cfg)
    red = _boot(lambda idx: ss.g(ex, ct, idx) - ss.g(ex_p, ct_p, idx), ss.clusters, cfg)
    util = _boot(lambda idx: ss.utility(ct_p, idx) - ss.utility(ct, idx), ss.clusters, cfg)
    rs, match_fallback = _matched_controls(cov, U, cfg)
    g_rand, u_rand, rand_logits = [], [], []
    for B in rs.bases:
        ex_r, ct_r = heads.logits(project_out(z[te], B))
        rand_logits.append((ex_r, ct_r))
        g_rand.append(ss.g(ex_r, ct_r))
        u_rand.append(ss.utility(ct_r) - ss.utility(ct))
    g_rand = np.array(g_rand)
    red_rand = gci.estimate - g_rand
    verdict, reasons = decide_verdict(red.estimate, red_rand, util.low, cfg.utility_margin)
    lpi_after = linear_provenance_information(zp[tr], p_rows[tr], zp[va], p_rows[va], zp[te], p_rows[te],
                                              subj_rows[te], Cs=cfg.Cs, n_boot=cfg.n_boot, level=cfg.level,
                                              seed=cfg.seed, unit=unit)
    verify = {
        "G_before": _ci(gci), "G_after": _ci(gci_after), "reduction": _ci(red),
        "fraction_removed": red.estimate / gci.estimate,
        "stress_after": after,
        "random": {"n": len(rs.bases), "match": rs.match, "requested_match": cfg.random_match,
                   "match_fallback": match_fallback, "target_energy": rs.target_energy,
                   "energies": rs.energies, "overlaps": rs.overlaps, "G_after": g_rand, "reduction": red_rand,
                   "utility_change": np.array(u_rand), "G_after_min": float(g_rand.min()),
                   "G_after_max": float(g_rand.max())},
        "utility": {"metric": "control-head AUROC, independent regime", "before": ss.utility(ct),
                    "after": ss.utility(ct_p), "change": _ci(util), "margin": cfg.utility_margin,
                    "passes": bool(util.low >= cfg.utility_margin)},
        "specificity": {"passes": bool(np.all(red.estimate > red_rand))},
        "recover_after": {"lpi_bits": lpi_after.lpi_bits, "low": lpi_after.low, "high": lpi_after.high,
                          "probe_accuracy": lpi_after.probe_accuracy},
    }
    if paired_extra is not None:
        verify["paired_after"] = paired_extra(ex_p, ct_p)
    return AuditReport(config=cfg.to_dict(), config_hash=h, design=design_name, data=data, recover=recover,
                       stress=stress, intervene=intervene, verify=verify, verdict=verdict,
                       reasons=[why] + reasons, remedy=remedy,
                       stability=_stability(ss, ex, ct, (ex_p, ct_p), rand_logits, cfg))


def _matched_controls(cov: np.ndarray, U: np.ndarray, cfg: AuditConfig):
    """Verify's random controls in the configured mode; in mode ``"energy"``, when no rank-r subspace of the targeted
    subspace's complement can carry its energy (a target that holds the embedding's top variance, as an encoder whose
    views differ in amplitude gives), the controls are drawn in the whole space (``"energy_any"``) and the reason is
    returned, so the report says which controls were used and why instead of stopping the audit.

    Returns
    -------
    (RandomSubspaces, str or None)
        The controls and the fallback's reason (``None`` when the configured mode was used).

    Raises
    ------
    EnergyUnreachable
        In modes other than ``"energy"`` (their message names the fix).

    References
    ----------
    Paper 000 §3.4, App. A.4. The paper matches energy without saying what to do when the complement cannot; we
    keep energy matching (the property the comparison rests on) and give up disjointness, reporting the overlap.
    """
    try:
        return random_subspaces(cov, U, cfg.n_random, match=cfg.random_match, seed=cfg.seed), None
    except EnergyUnreachable as err:
        if cfg.random_match != "energy":
            raise
        lo, hi = err.reachable
        why = (f"random_match 'energy': no rank-{U.shape[1]} subspace outside the targeted one carries its "
               f"{err.target_energy:.4f} of the standardized variance (reachable there: [{lo:.4f}, {hi:.4f}]), so "
               "the controls were drawn in the whole embedding ('energy_any'; their overlap with the target is "
               "reported)")
        return random_subspaces(cov, U, cfg.n_random, match="energy_any", seed=cfg.seed), why


def _stability(ss: StressSet, ex, ct, after, rand_logits: list, cfg: AuditConfig) -> dict:
    """The verdict recomputed without each held-out subject in turn, from the same heads, removal and logits (no
    refitting: heads and the removed subspace come from the training rows): control utility above chance
    (else ``not assessable``), then the Stress decision (``no reliance``), then, where the audit went on, Verify's
    decision on the reduction, the random controls and the utility change. Where the full audit stopped at Stress,
    a subject whose removal finds reliance reads ``reliance (Intervene not run)``."""
    def verdict(rows: np.ndarray) -> str:
        def boot(f):
            return cluster_bootstrap(lambda i: f(rows[i]), ss.clusters[rows], n_boot=cfg.n_boot, level=cfg.level,
                                     seed=cfg.seed)
        if not boot(lambda i: ss.utility(ct, i)).low > 0.5:
            return "not assessable"
        g = boot(lambda i: ss.g(ex, ct, i))
        if not has_reliance(g.estimate, g.low, g.high, cfg.epsilon)[0]:
            return "no reliance"
        if after is None:
            return "reliance (Intervene not run)"
        ex_p, ct_p = after
        red = boot(lambda i: ss.g(ex, ct, i) - ss.g(ex_p, ct_p, i))
        util = boot(lambda i: ss.utility(ct_p, i) - ss.utility(ct, i))
        red_rand = g.estimate - np.array([ss.g(e, c, rows) for e, c in rand_logits])
        return decide_verdict(red.estimate, red_rand, util.low, cfg.utility_margin)[0]

    st = leave_one_cluster_out(verdict, ss.clusters)
    return {"verdict": st.verdict, "flips": st.flips, "undecided": sorted(st.undecided), "n_subjects": st.n_clusters}


def _paired(emb, y, prov, subject, record, masks, cfg, h) -> AuditReport:
    n, K, d = emb.shape
    views = _views_from(prov, n, K)
    rows = lambda a: np.repeat(a, K)  # noqa: E731  (row = window * K + view)
    z_rows = emb.reshape(n * K, d)
    p_rows = np.tile(np.array(views, dtype=object), n)
    y_rows, subj_rows = rows(y), rows(subject)
    masks_rows = {s: rows(m) for s, m in masks.items()}
    design = Design.from_rows(y_rows[masks_rows["train"]], p_rows[masks_rows["train"]])
    shortcuts = cfg.shortcut_groups if cfg.shortcut_groups is not None else views
    bad = [g for g in shortcuts if g not in views]
    if bad:
        raise ValueError(f"shortcut_groups {bad} are not views {views}")
    aligned = {g: resolve_odds(cfg.induced_odds, design.p_y, design.p_prov[g]) for g in shortcuts}
    rotations = _rotations(design, shortcuts, aligned, cfg)
    te = masks["test"]
    y_te = y[te]

    def localize(z, tr_rows):
        zt = z[tr_rows].reshape(-1, K, d)
        return paired_localization(zt, record[masks["train"]], cfg.rank)

    def paired_extra(ex, ct):
        # per rotation: the exposed head of that rotation and the (single) control head; a mean of signed
        # contrasts over all rotations of one head is identically 0, so the summary is the mean magnitude
        ct_w = ct.reshape(-1, K)
        c_ex = [paired_logit_contrast(e.reshape(-1, K), y_te, views.index(g)) for e, g in zip(ex, shortcuts)]
        c_ct = [paired_logit_contrast(ct_w, y_te, views.index(g)) for g in shortcuts]
        return {"flip_rate": {"exposed": float(np.mean([decision_flip_rate(e.reshape(-1, K)) for e in ex])),
                              "control": decision_flip_rate(ct_w)},
                "logit_contrast": {"exposed": c_ex, "control": c_ct,
                                   "exposed_mean_abs": float(np.mean(np.abs(c_ex))),
                                   "control_mean_abs": float(np.mean(np.abs(c_ct)))}}

    data = {"n_windows": {s: int(m.sum()) for s, m in masks.items()},
            "n_rows": {s: int(m.sum()) * K for s, m in masks.items()},
            "n_subjects": {s: int(np.unique(subject[m]).size) for s, m in masks.items()},
            "n_records": {s: int(np.unique(record[m]).size) for s, m in masks.items()},
            "views": views, "unit": "view", "d": d}
    return _core(design_name="paired", z_rows=z_rows, y_rows=y_rows, p_rows=p_rows, subj_rows=subj_rows,
                 masks_rows=masks_rows, design=design, rotations=rotations, cfg=cfg, h=h, unit="view", data=data,
                 localize=localize, paired_extra=paired_extra)


def _observational(emb, y, prov, subject, record, masks, cfg, h) -> AuditReport:
    n, d = emb.shape
    if prov.shape != (n,):
        raise ValueError(f"observational provenance must have shape ({n},), got {prov.shape}; for paired views "
                         "pass emb as (n_windows, K, d)")
    tr = masks["train"]
    groups = np.unique(prov[tr]).tolist()
    if len(groups) < 2:
        raise ValueError(f"provenance has a single group {groups} in training; the audit needs at least two; fix: "
                         "pool recordings from at least two devices/sites/references")
    design = Design.from_rows(y[tr], prov[tr])
    if cfg.shortcut_groups is not None:
        shortcuts = cfg.shortcut_groups
        bad = [g for g in shortcuts if g not in groups]
        if bad:
            raise ValueError(f"shortcut_groups {bad} are not training provenance groups {groups}")
    elif len(groups) == 2:
        g1 = groups[1]
        shortcuts = [g1 if observed_odds(y[tr], prov[tr], g1) >= 1 else groups[0]]
    else:
        ors = {g: round(observed_odds(y[tr], prov[tr], g), 3) for g in groups}
        raise ValueError(f"{len(groups)} provenance groups: declare which is the shortcut; training odds ratios "
                         f"(group vs rest) are {ors}; fix: set shortcut_groups=[...] in the audit config")
    aligned = {g: observed_odds(y[tr], prov[tr], g) for g in shortcuts}
    rotations = _rotations(design, shortcuts, aligned, cfg)

    def localize(z, tr_rows):
        return observational_localization(z[tr_rows], y[tr_rows], prov[tr_rows], cfg.rank)

    data = {"n_windows": {s: int(m.sum()) for s, m in masks.items()},
            "n_subjects": {s: int(np.unique(subject[m]).size) for s, m in masks.items()},
            "n_records": {s: int(np.unique(record[m]).size) for s, m in masks.items()},
            "groups": groups, "unit": "window", "d": d}
    return _core(design_name="observational", z_rows=emb, y_rows=y, p_rows=prov, subj_rows=subject,
                 masks_rows=masks, design=design, rotations=rotations, cfg=cfg, h=h, unit="window", data=data,
                 localize=localize, paired_extra=None)


# ----------------------------------------------------------------------------------------------------------------
# entry point for `eegfm-bench audit`
