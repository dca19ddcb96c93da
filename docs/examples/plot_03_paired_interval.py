"""
A paired subject-cluster interval, the statistic behind every Δ
===============================================================

Paper 001 (§4.2.2, §4.6) compares a model with its comparator on the *same* windows: subjects are resampled with
replacement, both arms are scored on each resample, and the 95 % interval of the difference decides. Windows of one
subject are not independent, so the subject is the unit that is resampled.

Here, on synthetic out-of-fold probabilities with a known answer: arm A carries a real effect, arm B is arm A with
the labels' information removed, and arm C equals arm A. The interval of A − B lies above zero, the one of A − C is
exactly [0, 0] (a gate that compares identical arms must not pass).
"""
import numpy as np

import eegfm_bench as eb

rng = np.random.default_rng(0)
n_subjects, per_subject = 20, 30
subject = np.repeat(np.arange(n_subjects), per_subject)
fold = subject % 5
y = rng.integers(0, 2, subject.size)
proba_a = np.clip(0.5 + 0.25 * (2 * y - 1) + rng.normal(0, 0.2, y.size), 0, 1)  # informative
proba_b = np.clip(0.5 + rng.normal(0, 0.2, y.size), 0, 1)                        # chance
for name, other in (("A - B (real effect)", proba_b), ("A - C (identical arms)", proba_a)):
    ci = eb.paired_cluster_bootstrap(y, proba_a, other, subject, fold, metric="auroc", n_boot=500, seed=0)
    print(f"{name}: Δ AUROC {ci.estimate:+.3f}, 95 % interval [{ci.low:+.3f}, {ci.high:+.3f}]")
