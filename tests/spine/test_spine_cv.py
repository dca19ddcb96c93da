"""Real-data integration: `eegfm-bench cv` for 2 folds x 1 epoch on eegmmidb_mi with a tiny EEGNet."""
import json
from pathlib import Path

import pandas as pd
import yaml

from eegfm_bench.cli import main
from eegfm_bench.results import ROW_COLUMNS

from eegfm_testutils import requires_data

REPO = Path(__file__).resolve().parents[2]


@requires_data
def test_cv_tiny_eegnet_real_data(tmp_path, capsys):
    cfg = yaml.safe_load((REPO / "configs" / "experiment" / "tiny_ci.yaml").read_text())
    cfg["out_dir"] = str(tmp_path / "out")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["cv", "--config", str(path), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "balanced_accuracy" in printed and "eegnet" in printed and "±" in printed
    out = tmp_path / "out"
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns[:len(ROW_COLUMNS)]) == ROW_COLUMNS
    assert (out / "results.parquet").is_file() and (out / "config.yaml").is_file()
    clean = df[df.condition == "clean"]
    # one row per fold x metric
    for metric in ("balanced_accuracy", "auroc", "cohen_kappa"):
        rows = clean[clean.metric == metric]
        assert sorted(rows.fold.tolist()) == [0, 1]
    bacc = clean[clean.metric == "balanced_accuracy"].value
    assert ((bacc >= 0) & (bacc <= 1)).all()
    auroc = clean[clean.metric == "auroc"].value
    assert ((auroc >= 0) & (auroc <= 1)).all()
    kappa = clean[clean.metric == "cohen_kappa"].value
    assert ((kappa >= -1) & (kappa <= 1)).all()
    assert set(df.init) == {"random"} and set(df.fold_unit) == {"subject"}
    # 6 subjects, k=3: each test fold holds 2 subjects x (4 + 4) windows
    assert set(clean.n_subjects) == {2} and set(clean.n_windows) == {16}
    # subjects disjoint between train/val/test in the saved split and in the predictions
    split = json.loads((out / "splits.json").read_text())
    for f in split["folds"]:
        assert not set(f["train"]) & set(f["test"]) and not set(f["val"]) & set(f["test"])
        assert not set(f["train"]) & set(f["val"])
    p0 = pd.read_csv(out / clean[(clean.fold == 0) & (clean.metric == "balanced_accuracy")].predictions.iloc[0])
    assert set(p0.subject) == set(split["folds"][0]["test"])
    assert len(p0) == 16 and p0["index"].is_unique
    # rerun: every cell is skipped, rows unchanged
    before = pd.read_csv(out / "results.csv")
    assert main(["cv", "--config", str(path), "--no-progress"]) == 0
    pd.testing.assert_frame_equal(before, pd.read_csv(out / "results.csv"))
