"""
A tiny subject-grouped cross-validation, from Python
====================================================

The quickstart's protocol at tiny size: EEGMMIDB left- vs right-fist imagery, 6 subjects, 3 subject-grouped folds
(one validation subject drawn from each fold's training subjects), a small EEGNet trained for 8 epochs. ``run_cv`` runs the
headline cells and then the task's default confound check (windows from 1 s after the cue, 4-40 Hz), exactly as
``eegfm-bench cv`` does; a rerun of the same config skips the finished cells.

With 15 windows per subject and 8 epochs the numbers say nothing about EEGNet; they show the shape of the result.
"""
import tempfile
import warnings

import matplotlib.pyplot as plt

import eegfm_bench as eb

out = tempfile.mkdtemp(prefix="eegfm_tiny_cv_")
cfg = {
    "experiment": "gallery_tiny_cv", "task": "eegmmidb_mi", "out_dir": out, "seed": 0,
    "data": {"subjects": [1, 2, 3, 4, 5, 6], "max_windows_per_subject": 15, "batch_size": 16},
    "split": {"scheme": "kfold", "k": 3, "seed": 0, "n_val_groups": 1},
    "trainer": {"max_epochs": 8, "patience": 8},
    "runs": [{"model": "eegnet", "regime": "full", "heads": ["flatten"],
              "backbone_kwargs": {"F1": 4, "D": 1, "kernel_length": 16}}],
}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    table = eb.run_cv(cfg, progress=False)
print(table.to_string(index=False))

# %%
# The confound-checked scores, beside the headline (the same folds and seeds, other windows).
print(table.attrs["confound"][["model", "condition", "headline_mean", "variation_mean", "delta", "low", "high", "verdict"]].to_string(index=False))

# %%
# Every result is a long row keyed by its config hash; per test fold, against the chance level of 0.5.
rows = eb.ResultStore(out).load()
ba = rows[(rows.metric == "balanced_accuracy") & (rows.condition == "clean")].sort_values("fold")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(ba.fold, ba.value, "o", label="EEGNet (8 epochs)")
ax.axhline(0.5, color="grey", ls="--", label="chance")
ax.set(xlabel="test fold", ylabel="balanced accuracy", ylim=(0, 1), xticks=sorted(ba.fold.unique()))
ax.legend()
fig.tight_layout()
