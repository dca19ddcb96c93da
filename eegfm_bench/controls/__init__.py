"""Negative-control suite of paper 001 (numpy / scikit-learn over features and cached embeddings).

* :mod:`.features` — handcrafted comparators, simple (9·N_ch+2) and enhanced (15·N_ch+6) families (§3.4).
* :mod:`.probes` — fold-local frozen probes: logistic, shrinkage LDA, SVM-RBF (§3.5).
* :mod:`.permutation` — label permutation with the pipeline refitted in fixed folds (§4.2.3).
* :mod:`.identity` — dataset-identity probe (§4.4).
* :mod:`.gates` — the four-gate attribution report (§3.6, §5.5).

Paired uncertainty (cluster bootstrap, Wilcoxon, sign-flip) lives in :mod:`eegfm_bench.stats`; the command
``eegfm-bench controls`` in :mod:`eegfm_bench.runs.controls.command`, its reports in :mod:`eegfm_bench.reports.controls`.
"""
