"""Benchmark: probes on the quickstart's LaBraM tokens (fold 0): wall time and peak memory of the ridge probe, the
linear (flatten) head on cached tokens and the MLP head (issue 15; the ridge probe must stay under 1 GB peak).

The tokens come from the feature cache the quickstart cv filled (``eegfm-bench cv --config
configs/experiment/quickstart.yaml``; filled here first when missing): random-init LaBraM, 720 windows × 256 tokens
× 200 dims, ``(720, 51,200)`` flattened (float32 memmap, 147 MB). Each method runs in its own process, so every peak
is its own: ``peak RSS`` (``ru_maxrss``) and ``peak − baseline`` (the RSS after the imports and before the method).

* ``ridge``  — :func:`eegfm_bench.models.ridge.ridge_probe` (dual form streamed over 4,096-column chunks, 9 alphas
  chosen on the validation subjects, refit on train + validation);
* ``linear`` — the ``flatten`` head (one ``nn.Linear`` on the 51,200 features) trained by the quickstart's
  Lightning loop (AdamW, 15 epochs, early stopping on validation balanced accuracy, patience 5);
* ``mlp``    — the ``mlp`` head (mean pooling, one hidden layer of 256), same loop.

Printed: a Markdown table (wall s, peak RSS MB, peak − baseline MB, test balanced accuracy).

Usage::

    EEGFM_DATA=../shared/data python scripts/bench_probes.py
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _one(method: str, fold: int) -> dict:
    warnings.filterwarnings("ignore")
    import lightning as L

    from eegfm_bench.data.datamodule import EEGDataModule
    from eegfm_bench.data.splits import SplitSpec, make_split
    from eegfm_bench.models.features import extract_features
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.results import classification_metrics
    from eegfm_bench.runs.cv import load_config, windows_for
    from eegfm_bench.runs.trainer import build_trainer, quiet_lightning
    from lightning.pytorch.callbacks import EarlyStopping

    quiet_lightning()
    cfg = load_config(REPO / "configs" / "experiment" / "quickstart.yaml")
    ws = windows_for(cfg, "labram", {}, False)
    sp = cfg["split"]
    split = make_split(ws.y, ws.subject, SplitSpec(sp["scheme"], sp["k"], sp["seed"], sp["n_val_groups"], "subject"),
                       "eegmmidb_mi")
    run = next(r for r in cfg["runs"] if r["model"] == "labram")
    base = FMClassifier(backbone="labram", head="flatten", regime="head_only", ch_names=list(ws.ch_names),
                        n_times=ws.n_times, n_classes=len(ws.class_names), init_seed=cfg["seed"], **cfg["optim"],
                        **(run.get("optim") or {}))
    feats = extract_features(base.backbone, ws, parts=("tokens",), trainer=cfg["trainer"], batch_size=64,
                             cache_dir=cfg["data"]["cache_dir"], progress=False)
    tokens = feats.array("tokens")
    dm = EEGDataModule(task=cfg["task"], backbone="labram", fold=fold, batch_size=64, ws=ws, split=split)
    baseline = _rss_mb()
    t0 = time.perf_counter()
    if method == "ridge":
        from eegfm_bench.models.ridge import ridge_probe

        r = ridge_probe(tokens, ws.y, dm.train_idx, dm.val_idx, dm.test_idx)
        bacc = classification_metrics(ws.y[dm.test_idx], r["proba"])["balanced_accuracy"]
        extra = {"alpha": r["alpha"], "n_features": r["n_features"]}
    else:
        L.seed_everything(cfg["seed"] + fold, workers=True, verbose=False)
        dm.use_tokens(tokens)
        head = "flatten" if method == "linear" else "mlp"
        model = FMClassifier(backbone="labram", head=head, regime="head_only", ch_names=list(ws.ch_names),
                             n_times=ws.n_times, n_classes=len(ws.class_names), init_seed=cfg["seed"],
                             class_weights=dm.class_weights, **cfg["optim"], **(run.get("optim") or {}))
        tr = {**cfg["trainer"], "loggers": [], "enable_progress_bar": False}
        trainer = build_trainer(tr, loggers=False, callbacks=[EarlyStopping("val/bacc", mode="max",
                                                                            patience=tr["patience"])])
        trainer.fit(model, dm)
        trainer.test(model, dm, verbose=False)
        p = model.test_predictions
        bacc = classification_metrics(p["y"].to_numpy(), p[["p0", "p1"]].to_numpy())["balanced_accuracy"]
        extra = {"epochs": trainer.current_epoch, "head_params": model.parameter_counts["head_params"]}
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"method": method, "wall_s": wall, "peak_rss_mb": peak, "baseline_rss_mb": baseline,
            "test_bacc": float(bacc), "n_train": int(len(dm.train_idx)), "n_val": int(len(dm.val_idx)),
            "n_test": int(len(dm.test_idx)), "tokens_shape": list(tokens.shape), **extra}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--method", choices=["ridge", "linear", "mlp"], help="run one method here (internal)")
    args = p.parse_args(argv)
    if args.method:
        print("RESULT " + json.dumps(_one(args.method, args.fold)))
        return 0
    rows = []
    for m in ("ridge", "linear", "mlp"):
        out = subprocess.run([sys.executable, __file__, "--method", m, "--fold", str(args.fold)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode or not line:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(line[0][7:]))
    r0 = rows[0]
    print(f"LaBraM (init=random) tokens of the quickstart, fold {args.fold}: {r0['tokens_shape']} "
          f"({r0['n_train']} train / {r0['n_val']} validation / {r0['n_test']} test windows); one process per method\n")
    print("| method | wall (s) | peak RSS (MB) | peak − baseline (MB) | test balanced accuracy | notes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        note = (f"alpha {r['alpha']:g}, {r['n_features']:,} features" if r["method"] == "ridge" else
                f"{r['epochs']} epochs, {r['head_params']:,} head parameters")
        print(f"| {r['method']} | {r['wall_s']:.2f} | {r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] - r['baseline_rss_mb']:.0f} "
              f"| {r['test_bacc']:.3f} | {note} |")
    ok = rows[0]["peak_rss_mb"] < 1024
    print(f"\nridge probe peak RSS {rows[0]['peak_rss_mb']:.0f} MB: {'under' if ok else 'OVER'} the 1 GB target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
