"""Per subject of the eyes positive control: how strong the real effect is in the data, beside what each model
scored on that subject (headline and each confound variation).

The effect is the occipital alpha rhythm: power at O1, O2, Oz in 8-12 Hz with the eyes closed (EEGMMIDB run 2)
over the eyes open (run 1), each recording re-referenced to the common average (as the task does) and read with
MNE (Welch PSD, µV²/Hz; the ratio has no unit). A subject whose ratio is near 1 has no alpha reactivity for any
model to find.

Usage (after ``eegfm-bench cv --config configs/experiment/positive_control_eegmmidb_eyes.yaml``)::

    EEGFM_DATA=../shared/data python scripts/eyes_alpha.py results/positive_control_eyes

Prints one markdown table: subject, alpha ratio, then per model / head the balanced accuracy and AUROC of the
fold that held that subject out, for the headline and each variation found under ``<run>/confound/``.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from pathlib import Path

import mne
import pandas as pd

OCCIPITAL = ["O1", "O2", "Oz"]


def alpha_ratio(root: Path, subject: str) -> float:
    """Occipital 8-12 Hz power, eyes closed (run 2) / eyes open (run 1), common average reference."""
    power = []
    for run in (1, 2):
        path = glob.glob(str(root / "**" / subject / f"{subject}R{run:02d}.edf"), recursive=True)[0]
        raw = mne.io.read_raw_edf(path, preload=True, verbose="error")
        mne.datasets.eegbci.standardize(raw)
        raw.set_eeg_reference("average", verbose="error")
        psd = raw.compute_psd(fmin=8.0, fmax=12.0, picks=OCCIPITAL, verbose="error")
        power.append(float(psd.get_data().mean()))
    return power[1] / power[0]


def fold_scores(store: Path, test_subject: dict[int, str]) -> pd.DataFrame:
    """Balanced accuracy and AUROC per (model, head, subject) of one result store's clean rows."""
    df = pd.read_parquet(store)
    df = df[(df.condition == "clean") & df.metric.isin(["balanced_accuracy", "auroc"])]
    df = df.assign(subject=df.fold.astype(str).map({str(k): v for k, v in test_subject.items()}))  # fold: text
    return df.pivot_table(index=["model", "head", "subject"], columns="metric", values="value")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="the eyes control's result folder")
    args = ap.parse_args(argv)
    folds = json.loads((args.run / "splits.json").read_text())["folds"]
    test_subject = {int(f["fold"]): f["test"][0] for f in folds}
    root = Path(os.environ.get("EEGFM_DATA", "../shared/data")) / "eegmmidb"
    stores = {"headline": args.run / "results.parquet"}
    stores |= {p.parent.name: p for p in sorted((args.run / "confound").glob("*/results.parquet"))}
    scores = {name: fold_scores(p, test_subject) for name, p in stores.items()}
    cells = sorted({ix[:2] for s in scores.values() for ix in s.index})
    head = ["subject", "alpha closed/open"] + [f"{m} {h} {n}" for m, h in cells for n in stores]
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")
    for subject in sorted(test_subject.values()):
        row = [subject, f"{alpha_ratio(root, subject):.1f}×"]
        for m, h in cells:
            for name in stores:
                s = scores[name]
                key = (m, h, subject)
                if key in s.index:
                    auroc = s.loc[key].get("auroc")
                    row.append(f"{s.loc[key, 'balanced_accuracy']:.2f}" + (f" ({auroc:.2f})" if pd.notna(auroc) else ""))
                else:
                    row.append("–")
        print("| " + " | ".join(row) + " |")
    print("\nbalanced accuracy (AUROC) of the fold that held the subject out; chance 0.50.")


if __name__ == "__main__":
    main()
