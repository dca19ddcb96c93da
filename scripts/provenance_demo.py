"""PhysioTRACE demonstration on real EEG: paired reference views of eegmat (paper 000 §4.2, App. B, App. E).

Steps:

1. Load ``eegmat`` windows (rest vs mental arithmetic) under EEGNet's preprocessing (128 Hz, 1–40 Hz, 4 s, µV)
   *without* re-referencing, and build K = 3 paired reference views of every window
   (:func:`eegfm_bench.provenance.data.make_paired_views`: linked ears as recorded, common average, Cz).
2. Split whole subjects into train / val / test (:func:`eegfm_bench.provenance.data.subject_split`).
3. Per seed, train a small EEGNet encoder (braindecode ``EEGNet`` through the ``eegnet`` adapter, ``F2 = 128``,
   mean-pooling head, task-only cross-entropy) on all views of the training subjects with the project's
   :class:`~eegfm_bench.models.module.FMClassifier` and a Lightning ``Trainer``.
4. Extract the 128-d embedding (mean over the adapter's tokens, what the task head reads) of every window in
   every view: ``emb`` of shape (n_windows, K, 128), saved as an npz in the ``eegfm-bench audit`` format.
5. Run the audit (:func:`eegfm_bench.runs.audit.run_audit`, the same call as ``eegfm-bench audit``): the
   exposed head is fitted under the induced view–label association, the control head under independence
   weights, then Recover / Stress / Intervene / Verify.
6. Write ``summary.md`` / ``summary.json``: the per-seed figures next to paper 000 App. B's worked example.

Everything is resumable: embeddings are keyed by a hash of (data, split, encoder settings, seed) and audits by
their own config hash, so a rerun only recomputes what changed.

Usage::

    EEGFM_DATA=/path/to/data python scripts/provenance_demo.py --config configs/experiment/provenance_eegmat.yaml
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

#: Paper 000 App. B worked example (one NMT encoder, task-plus-reconstruction, three reference views).
PAPER_APP_B = {
    "probe_accuracy": 0.933, "chance_accuracy": 1 / 3, "lpi_bits": 1.31, "lpi_low": 1.22, "lpi_high": 1.38,
    "baseline_bits": 1.585, "exposed_aligned": 0.828, "exposed_reversed": 0.599, "control": 0.768, "G": 0.228,
    "energy": 2 / 96, "probe_accuracy_after": 0.378, "G_after": -0.002, "random_G_min": 0.221,
    "random_G_max": 0.231, "utility_change": 0.002, "utility_low": -0.003, "utility_high": 0.008,
    "margin": -0.02, "verdict": "certified", "flip_exposed": 0.445, "flip_control": 0.138,
}

REQUIRED = {"task", "out_dir", "data", "split", "encoder", "audit"}


def load_config(path: str | Path) -> dict:
    """Read the demo YAML and check its sections.

    Raises
    ------
    ValueError
        If a section is missing (names it) or the encoder has no seeds.
    """
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    missing = sorted(REQUIRED - set(cfg))
    if missing:
        raise ValueError(f"{path}: missing sections {missing}; see configs/experiment/provenance_eegmat.yaml")
    if not cfg["encoder"].get("seeds"):
        raise ValueError(f"{path}: encoder.seeds is empty; fix: list at least one seed, e.g. [0, 1, 2]")
    return cfg


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_paired(cfg: dict):
    """Windows of the task under the named backbone's preprocessing, as K paired reference views."""
    from eegfm_bench.data.windows import load_windows
    from eegfm_bench.models.backbones import BACKBONES
    from eegfm_bench.provenance.data import make_paired_views

    d = cfg["data"]
    prep = dataclasses.replace(BACKBONES.get(d.get("preprocessing_of", "eegnet")).preprocessing,
                               reference=d.get("reference", "none"))
    ws = load_windows(cfg["task"], prep, progress=False)
    return make_paired_views(ws, d.get("views", ("original", "average", "Cz")))


def train_encoder(pw, split: np.ndarray, enc: dict, seed: int, threads: int, trainer_cfg: dict | None = None,
                  val: np.ndarray | None = None):
    """Train one task-only encoder on every view of the training windows; return it in eval mode.

    With ``val`` (a mask of validation windows) the encoder is fine-tuned on the task until its validation AUROC
    (every view of the validation subjects) stops improving (``encoder.patience`` epochs) and the best epoch is kept,
    so the audit runs on an encoder that has learned the task (a fixed 10-epoch schedule left two of three
    seeds at chance on held-out subjects, and the audit then "certified" encoders that relied on nothing).

    Parameters
    ----------
    pw : PairedWindows
        ``X`` (n_windows, K, n_chans, n_times) in µV.
    split : ndarray of str, shape (n_windows,)
    enc : dict
        The config's ``encoder`` section.
    seed : int
        Initialisation and shuffling seed.

    Returns
    -------
    FMClassifier
    """
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from eegfm_bench.data.datamodule import WindowDataset
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.trainer import build_trainer

    torch.set_num_threads(threads)
    L.seed_everything(seed, workers=True, verbose=False)
    lw = pw.long_format()
    K = pw.n_views
    tr_rows = np.flatnonzero(np.repeat(split == "train", K))
    class_weights = None
    if enc.get("class_weighted", True):
        counts = np.bincount(lw.y[tr_rows], minlength=2).astype(float)
        class_weights = (counts.sum() / (2 * counts)).tolist()
    model = FMClassifier(backbone=enc["backbone"], head=enc.get("head", "mean"), regime="full",
                         ch_names=list(pw.ch_names), n_times=int(pw.X.shape[-1]), n_classes=2, init_seed=seed,
                         lr=float(enc["lr"]), weight_decay=float(enc["weight_decay"]),
                         warmup_epochs=float(enc.get("warmup_epochs", 1)), class_weights=class_weights,
                         backbone_kwargs=dict(enc.get("backbone_kwargs") or {}))
    g = torch.Generator().manual_seed(seed)
    loader = DataLoader(WindowDataset(lw, tr_rows), batch_size=int(enc["batch_size"]), shuffle=True, generator=g)
    tr_cfg = {**(trainer_cfg or {"accelerator": "cpu", "devices": 1}), "max_epochs": int(enc["max_epochs"]),
              "deterministic": True}
    if val is None or not val.any():
        trainer = build_trainer(tr_cfg, loggers=False)
        trainer.fit(model, loader)
        return model.eval()
    import tempfile

    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    va_rows = np.flatnonzero(np.repeat(val, K))
    vloader = DataLoader(WindowDataset(lw, va_rows), batch_size=int(enc["batch_size"]), shuffle=False)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = ModelCheckpoint(dirpath=tmp, monitor="val/auroc", mode="max", save_top_k=1, save_weights_only=True)
        trainer = build_trainer(tr_cfg, loggers=False, enable_checkpointing=True,
                                callbacks=[EarlyStopping("val/auroc", mode="max", patience=int(enc.get("patience", 5))),
                                           ckpt])
        trainer.fit(model, loader, vloader)
        best = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
        model.load_state_dict(best)
        model.best_val_auroc = float(ckpt.best_model_score) if ckpt.best_model_score is not None else float("nan")
        model.best_epoch = int(Path(ckpt.best_model_path).stem.split("epoch=")[1].split("-")[0]) \
            if "epoch=" in ckpt.best_model_path else -1
    return model.eval()


def embed(model, pw, batch_size: int = 256, trainer_cfg: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings and task logits of every window in every view (one ``Trainer.predict`` pass,
    :func:`eegfm_bench.models.features.pooled_outputs`).

    Returns
    -------
    emb : ndarray, shape (n_windows, K, d)
        Mean over the adapter's tokens (the input of the mean head), float32.
    logit : ndarray, shape (n_windows, K)
        The encoder's own task logit (class 1 minus class 0).
    """
    from eegfm_bench.data.datamodule import WindowDataset
    from eegfm_bench.models.features import pooled_outputs

    lw = pw.long_format()
    out = pooled_outputs(model, WindowDataset(lw, np.arange(len(lw))), trainer=trainer_cfg, batch_size=batch_size)
    n, K = len(pw), pw.n_views
    emb = out["embedding"].astype(np.float32)
    logit = (out["logits"][:, 1] - out["logits"][:, 0]).astype(np.float32)
    return emb.reshape(n, K, -1), logit.reshape(n, K)


def _auroc(y, s) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def seed_summary(rep, enc_auroc: dict) -> dict:
    """Flatten one audit report into the figures of paper 000 App. B, with the verdict's leave-one-subject-out
    stability (``stability_mark``: " — rests on one subject (S → verdict)" when one held-out subject decides it, as
    in the audit's own Markdown; issue 33 item 8)."""
    from eegfm_bench.reports.audit import stability_mark

    rc, st = rep.recover, rep.stress
    reg = {name: {h: float(np.mean([r["auroc"][name][h] for r in st["rotations"]])) for h in ("exposed", "control")}
           for name in ("aligned", "independent", "reversed")}
    out = {
        "verdict": rep.verdict, "reasons": rep.reasons, "notes": rep.notes,
        "stability": rep.stability, "stability_mark": stability_mark(rep.stability),
        "encoder_test_auroc": enc_auroc,
        "probe_accuracy": rc["probe_accuracy"], "chance_accuracy": rc["chance_accuracy"],
        "lpi_bits": rc["lpi_bits"], "lpi_low": rc["low"], "lpi_high": rc["high"],
        "lpi_naive_low": rc["naive_low"], "lpi_naive_high": rc["naive_high"], "baseline_bits": rc["baseline_bits"],
        "regimes": reg, "G": st["G"], "degradation": st["degradation"],
        "flip_exposed": st["paired"]["flip_rate"]["exposed"], "flip_control": st["paired"]["flip_rate"]["control"],
    }
    if rep.verify is not None:
        vf, iv = rep.verify, rep.intervene
        out.update({
            "rank": iv["rank"], "captured": iv["captured"], "energy": iv["energy"],
            "probe_accuracy_after": vf["recover_after"]["probe_accuracy"],
            "G_after": vf["G_after"], "reduction": vf["reduction"], "fraction_removed": vf["fraction_removed"],
            "random_G_min": vf["random"]["G_after_min"], "random_G_max": vf["random"]["G_after_max"],
            "utility_before": vf["utility"]["before"], "utility_after": vf["utility"]["after"],
            "utility_change": vf["utility"]["change"], "margin": vf["utility"]["margin"],
            "regimes_after": {name: {h: float(np.mean([r["auroc"][name][h] for r in vf["stress_after"]["rotations"]]))
                                     for h in ("exposed", "control")} for name in ("aligned", "independent", "reversed")},
            "flip_exposed_after": vf["paired_after"]["flip_rate"]["exposed"],
            "flip_control_after": vf["paired_after"]["flip_rate"]["control"],
        })
    return out


def _ci(c: dict) -> str:
    return f"{c['estimate']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"


def summary_markdown(cfg: dict, rows: dict, info: dict) -> str:
    """Per-seed table next to paper 000 App. B's worked example."""
    seeds = list(rows)
    p = PAPER_APP_B
    head = "| figure | " + " | ".join(f"seed {s}" for s in seeds) + " | paper App. B (NMT) |"
    lines = [f"# PhysioTRACE demonstration: {cfg['task']}, paired reference views {info['views']}", "",
             f"Held-out: {info['n_test_windows']} windows × {len(info['views'])} views from subjects "
             f"{', '.join(info['subjects']['test'])}; training subjects {', '.join(info['subjects']['train'])}; "
             f"validation {', '.join(info['subjects']['val'])}"
             + (f"; encoder trained on other subjects {', '.join(info['subjects']['encoder'])} (split.n_encoder)"
                if info["subjects"].get("encoder") else "; the encoder was trained on the training subjects")
             + f". Recorded reference: {info['recorded_reference']}. "
             f"Intervals: {100 * cfg['audit'].get('level', 0.95):.0f}% subject-cluster bootstrap over "
             f"{len(info['subjects']['test'])} held-out subjects ({cfg['audit'].get('n_boot', 1000)} replicates). "
             f"This invocation: {info['wall_s']:.0f} s wall (resumed steps are not recomputed).", "",
             head, "|---|" + "---:|" * (len(seeds) + 1)]

    def row(name, fn, paper):
        cells = []
        for s in seeds:
            try:
                cells.append(fn(rows[s]))
            except KeyError:
                cells.append("—")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {paper} |")

    row("encoder training + embedding (s)", lambda r: f"{r['train_s']:.0f}", "—")
    row("audit (s)", lambda r: "resumed" if r["audit_s"] is None else f"{r['audit_s']:.0f}", "—")
    row("encoder test AUROC (orig / avg / Cz)",
        lambda r: " / ".join(f"{r['encoder_test_auroc'][v]:.3f}" for v in info["views"]), "—")
    row("encoder AUROC on the heads' training subjects", lambda r: f"{r['encoder_test_auroc']['heads_train']:.3f}",
        "—")
    row("provenance-probe accuracy (chance)", lambda r: f"{100 * r['probe_accuracy']:.1f}% ({100 * r['chance_accuracy']:.1f}%)",
        f"{100 * p['probe_accuracy']:.1f}% (33.3%)")
    row("LPI bits/view, subject CI", lambda r: f"{r['lpi_bits']:.3f} [{r['lpi_low']:.3f}, {r['lpi_high']:.3f}]",
        f"{p['lpi_bits']:.2f} [{p['lpi_low']:.2f}, {p['lpi_high']:.2f}]")
    row("LPI naive view-resampling CI", lambda r: f"[{r['lpi_naive_low']:.3f}, {r['lpi_naive_high']:.3f}]", "—")
    row("baseline bits/view", lambda r: f"{r['baseline_bits']:.3f}", f"{p['baseline_bits']:.3f}")
    for regime in ("aligned", "independent", "reversed"):
        row(f"AUROC {regime}: exposed / control",
            lambda r, g=regime: f"{r['regimes'][g]['exposed']:.3f} / {r['regimes'][g]['control']:.3f}",
            {"aligned": f"{p['exposed_aligned']:.3f} / {p['control']:.3f}", "independent": f"— / {p['control']:.3f}",
             "reversed": f"{p['exposed_reversed']:.3f} / {p['control']:.3f}"}[regime])
    row("G before", lambda r: _ci(r["G"]), f"{p['G']:.3f}")
    row("decision flips: exposed / control", lambda r: f"{100 * r['flip_exposed']:.1f}% / {100 * r['flip_control']:.1f}%",
        f"{100 * p['flip_exposed']:.1f}% / {100 * p['flip_control']:.1f}% (§4.2, 5 seeds)")
    row("removed rank, energy", lambda r: f"{r['rank']}, {100 * r['energy']:.1f}%", f"2, {100 * p['energy']:.1f}%")
    row("probe accuracy after removal", lambda r: f"{100 * r['probe_accuracy_after']:.1f}%",
        f"{100 * p['probe_accuracy_after']:.1f}%")
    for regime in ("aligned", "reversed"):
        row(f"AUROC {regime} after: exposed / control",
            lambda r, g=regime: f"{r['regimes_after'][g]['exposed']:.3f} / {r['regimes_after'][g]['control']:.3f}", "—")
    row("G after", lambda r: _ci(r["G_after"]), f"{p['G_after']:.3f}")
    row("reduction (fraction of G)", lambda r: f"{_ci(r['reduction'])} ({100 * r['fraction_removed']:.0f}%)", "—")
    row("random subspaces: G after (min–max)", lambda r: f"{r['random_G_min']:.3f}–{r['random_G_max']:.3f}",
        f"{p['random_G_min']:.3f}–{p['random_G_max']:.3f}")
    row("utility change (control, independent)", lambda r: _ci(r["utility_change"]),
        f"{p['utility_change']:+.3f} [{p['utility_low']:+.3f}, {p['utility_high']:+.3f}]")
    row("margin", lambda r: f"{r['margin']:+.3f}", f"{p['margin']:+.3f}")
    row("verdict", lambda r: f"**{r['verdict']}{r.get('stability_mark', '')}**", f"**{p['verdict']}**")
    lines += ["", "Reasons per seed:", ""]
    for s in seeds:
        lines.append(f"- seed {s}: " + "; ".join(rows[s]["reasons"]) + ".")
        for note in rows[s]["notes"]:
            lines.append(f"  - note: {note}.")
    lines += ["", "Paper App. B figures are one NMT record/encoder (task-plus-reconstruction); §4.2's flip rates are "
              "over five seeds. This demonstration uses 5 held-out subjects, so its intervals are wide.", ""]
    return "\n".join(lines)


def run(config: str | Path, threads: int = 2) -> dict:
    """Run (or resume) the whole demonstration; return the per-seed summary.

    Raises
    ------
    ValueError
        From the config check, the views (wrong reference), the split, or the audit's own input checks.
    """
    from eegfm_bench.runs.audit import run_audit

    t0 = time.time()
    cfg = load_config(config)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    pw = load_paired(cfg)
    sp = cfg["split"]
    split, enc_mask, subjects = _subject_split(pw, sp)
    (out / "split.json").write_text(json.dumps(subjects, indent=2))
    enc = cfg["encoder"]
    rows = {}
    for seed in enc["seeds"]:
        key = _hash({"cache_key": pw.meta["cache_key"], "views": list(pw.views), "split": subjects,
                     "encoder": {k: v for k, v in enc.items() if k != "seeds"}, "seed": seed})
        npz = out / f"embeddings_seed{seed}_{key}.npz"
        if not npz.exists():
            ts = time.time()
            model = train_encoder(pw, np.where(enc_mask, "train", "other"), enc, seed, threads, cfg.get("trainer"),
                                  val=(split == "val") if enc.get("select_on_val", True) else None)
            emb, logit = embed(model, pw, trainer_cfg=cfg.get("trainer"))
            te, tr = split == "test", split == "train"
            enc_auroc = {v: _auroc(pw.y[te], logit[te, k]) for k, v in enumerate(pw.views)}
            # diagnostic: how separable the task is on the subjects the heads are fitted on (~1 when the encoder
            # was trained on them: the induced view-label association then adds little for the exposed head)
            enc_auroc["heads_train"] = _auroc(np.repeat(pw.y[tr], len(pw.views)), logit[tr].reshape(-1))
            enc_auroc["best_val"] = float(getattr(model, "best_val_auroc", float("nan")))
            enc_auroc["best_epoch"] = int(getattr(model, "best_epoch", -1))
            tmp = npz.with_suffix(".tmp.npz")
            np.savez(tmp, emb=emb.astype(np.float32), y=pw.y, provenance=np.array(pw.views, dtype=str),
                     subject=pw.subject.astype(str), record=pw.recording.astype(str), split=split,
                     encoder_logit=logit, encoder_test_auroc=json.dumps(enc_auroc), train_s=time.time() - ts)
            os.replace(tmp, npz)
            print(f"seed {seed}: encoder trained and embedded in {time.time() - ts:.0f} s "
                  f"(test AUROC per view {', '.join(f'{k}={v:.3f}' for k, v in enc_auroc.items())})", flush=True)
        with np.load(npz) as f:
            enc_auroc = json.loads(str(f["encoder_test_auroc"]))
            train_s = float(f["train_s"])
        audit_cfg = {"embeddings": str(npz), "out_dir": str(out / f"audit_seed{seed}"),
                     **{**cfg["audit"], "name": f"{cfg['audit'].get('name', 'audit')} (seed {seed})"}}
        (out / f"audit_seed{seed}.yaml").write_text(yaml.safe_dump(audit_cfg, sort_keys=False, allow_unicode=True))
        ta = time.time()
        rep = run_audit(audit_cfg)
        print(f"seed {seed}: audit {'resumed' if rep.resumed else f'ran in {time.time() - ta:.0f} s'}: "
              f"{rep.verdict}", flush=True)
        rows[seed] = {**seed_summary(rep, enc_auroc), "train_s": train_s, "audit_s": None if rep.resumed else
                      time.time() - ta}
    info = {"views": list(pw.views), "subjects": subjects, "recorded_reference": pw.meta["recorded_reference"],
            "n_test_windows": int((split == "test").sum()), "wall_s": time.time() - t0}
    summary = {"config": cfg, "info": info, "seeds": {str(k): v for k, v in rows.items()}, "paper_app_b": PAPER_APP_B}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    md = summary_markdown(cfg, rows, info)
    (out / "summary.md").write_text(md)
    print(md)
    return summary


def _subject_split(pw, sp: dict):
    """The audit's split (train / val / test / unused per window), the encoder's training mask and the subjects.

    With ``split.n_encoder`` the encoder is trained on that many of the training subjects and the heads on the
    rest ("unused" for the audit): the heads then see embeddings of subjects the encoder never fitted. Without it
    the encoder and the heads share the training subjects (the paper's single train split)."""
    from eegfm_bench.provenance.data import subject_split

    split, subjects = subject_split(pw.subject, int(sp["n_val"]), int(sp["n_test"]), seed=int(sp.get("seed", 0)),
                                    n_train=sp.get("n_train"))
    n_enc = sp.get("n_encoder")
    if not n_enc:
        return split, split == "train", subjects
    tr = np.asarray(subjects["train"])
    if not 1 <= int(n_enc) < tr.size:
        raise ValueError(f"split.n_encoder = {n_enc} of {tr.size} training subjects; fix: leave at least one "
                         "training subject for the heads")
    enc_subs = sorted(np.random.default_rng(int(sp.get("seed", 0)) + 1).permutation(tr)[:int(n_enc)].tolist())
    enc_mask = np.isin(pw.subject.astype(str), enc_subs)
    split = np.where(enc_mask, "unused", split)
    subjects = {**subjects, "train": sorted(set(tr.tolist()) - set(enc_subs)), "encoder": enc_subs}
    return split, enc_mask, subjects


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/experiment/provenance_eegmat.yaml")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for torch and BLAS (default 1: on a shared 2-core machine, 2 threads made "
                         "EEGNet training ~10x slower through oversubscription)")
    a = ap.parse_args(argv)
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Montage name.*")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(a.threads):
        run(a.config, a.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
