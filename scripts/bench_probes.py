"""Benchmark: probes on the quickstart's LaBraM tokens (fold 0): wall time and peak memory of the ridge probe, the
linear (flatten) head on cached tokens and the MLP head (the ridge probe must stay under 1 GB peak).

The tokens come from the feature cache the quickstart cv filled (``eegfm-bench cv --config
configs/experiment/quickstart.yaml``; filled here first when missing): random-init LaBraM, 720 windows × 256 tokens
× 200 dims, ``(720, 51,200)`` flattened (float32 memmap, 147 MB). Each method runs in its own process, so every peak
is its own: ``peak RSS`` (``VmHWM``, file-backed pages of the memory map included) and ``peak − baseline`` (the RSS after the imports and before the method).
The ridge process imports numpy and the probe only (the tokens as a read-only memory map); the head processes
train the head on the cached tokens as ``eegfm-bench cv`` does (FMClassifier + EEGDataModule.use_tokens; the
windows and the frozen backbone are in their baseline).

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
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), MB. ``ru_maxrss`` is not used: on Linux a
    child started by fork + exec inherits the parent's high-water mark (the setup's GB of windows and torch)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _quickstart():
    """The quickstart config, LaBraM's windows (from the window cache), the split and LaBraM's optimiser settings."""
    from eegfm_bench.data.splits import SplitSpec, make_split
    from eegfm_bench.runs.cv.cells import load_config, run_optim, windows_for

    cfg = load_config(REPO / "configs" / "experiment" / "quickstart.yaml")
    ws = windows_for(cfg, "labram", {}, False)
    sp = cfg["split"]
    split = make_split(ws.y, ws.subject, SplitSpec(sp["scheme"], sp["k"], sp["seed"], sp["n_val_groups"], "subject"),
                       "eegmmidb_mi")
    return cfg, ws, split, run_optim(cfg, next(r for r in cfg["runs"] if r["model"] == "labram"))


def _setup(fold: int, path: Path) -> None:
    """Fill (or find) the token cache and write what the methods need: the tokens' .npy path, labels, fold rows."""
    warnings.filterwarnings("ignore")
    import numpy as np

    from eegfm_bench.models.features import extract_features
    from eegfm_bench.models.module import FMClassifier
    from eegfm_bench.trainer import quiet_lightning

    quiet_lightning()
    cfg, ws, split, optim = _quickstart()
    base = FMClassifier(backbone="labram", head="flatten", regime="head_only", ch_names=list(ws.ch_names),
                        n_times=ws.n_times, n_classes=len(ws.class_names), init_seed=cfg["seed"], **optim)
    feats = extract_features(base.backbone, ws, parts=("tokens",), trainer=cfg["trainer"], batch_size=64,
                             cache_dir=cfg["data"]["cache_dir"], progress=False)
    tok = feats.array("tokens")
    tr, va, te = split.indices(np.asarray(ws.subject), fold)
    np.savez(path, tokens=str(tok.filename), y=np.asarray(ws.y), train=tr, val=va, test=te, fold=fold)


def _one(method: str, setup: Path) -> dict:
    """One method in this process: the ridge probe imports numpy and the probe only; the heads need Lightning."""
    import numpy as np

    z = np.load(setup)
    tokens = np.load(str(z["tokens"]), mmap_mode="r")
    y, tr, va, te = z["y"], z["train"], z["val"], z["test"]
    baseline = _rss_mb()
    t0 = time.perf_counter()
    if method == "ridge":
        from eegfm_bench.models.ridge import ridge_probe

        baseline = _rss_mb()
        t0 = time.perf_counter()
        r = ridge_probe(tokens, y, tr, va, te)
        pred = r["pred"]
        extra = {"alpha": r["alpha"], "n_features": r["n_features"]}
    else:  # the cv's own path: FMClassifier + EEGDataModule on the cached tokens, trained by the Trainer
        warnings.filterwarnings("ignore")
        import lightning as L
        from lightning.pytorch.callbacks import EarlyStopping

        from eegfm_bench.data.datamodule import EEGDataModule
        from eegfm_bench.models.module import FMClassifier
        from eegfm_bench.trainer import build_trainer, quiet_lightning

        quiet_lightning()
        cfg, ws, split, optim = _quickstart()
        dm = EEGDataModule(task=cfg["task"], backbone="labram", fold=int(z["fold"]), batch_size=64, ws=ws, split=split)
        dm.use_tokens(tokens)
        L.seed_everything(cfg["seed"], workers=True, verbose=False)
        model = FMClassifier(backbone="labram", head="flatten" if method == "linear" else "mlp", regime="head_only",
                             ch_names=list(ws.ch_names), n_times=ws.n_times, n_classes=len(ws.class_names),
                             init_seed=cfg["seed"], class_weights=dm.class_weights, **optim)
        baseline = _rss_mb()  # after the imports, the windows and the model: what the fit adds
        t0 = time.perf_counter()
        tr_cfg = {**cfg["trainer"], "loggers": [], "enable_progress_bar": False}
        trainer = build_trainer(tr_cfg, loggers=False, callbacks=[EarlyStopping("val/bacc", mode="max",
                                                                                patience=tr_cfg["patience"])])
        trainer.fit(model, dm)
        trainer.test(model, dm, verbose=False)
        p = model.test_predictions.sort_values("index")
        pred, te = p["pred"].to_numpy(), p["index"].to_numpy()
        extra = {"epochs": trainer.current_epoch, "head_params": model.parameter_counts["head_params"]}
    wall = time.perf_counter() - t0
    peak = _rss_mb("VmHWM")
    yt = y[te]
    bacc = float(np.mean([np.mean(pred[yt == k] == k) for k in np.unique(yt)]))
    return {"method": method, "wall_s": wall, "peak_rss_mb": peak, "baseline_rss_mb": baseline, "test_bacc": bacc,
            "n_train": int(len(tr)), "n_val": int(len(va)), "n_test": int(len(te)), "tokens_shape": list(tokens.shape),
            **extra}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--method", choices=["ridge", "linear", "mlp"], help="run one method here (internal)")
    p.add_argument("--setup", help="(internal) the setup file")
    args = p.parse_args(argv)
    if args.method:
        print("RESULT " + json.dumps(_one(args.method, Path(args.setup))))
        return 0
    import tempfile

    setup = Path(tempfile.mkdtemp()) / "setup.npz"
    _setup(args.fold, setup)
    rows = []
    for m in ("ridge", "linear", "mlp"):
        out = subprocess.run([sys.executable, __file__, "--method", m, "--setup", str(setup)], capture_output=True,
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
