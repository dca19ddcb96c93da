"""Interpretability of paper 003 §4.3–4.5 and App. I: attribution, attention maps, block-wise probes, depth truncation.

Modules
-------
probes       block-output cache (memmap per block, keyed by weights + data hash) and linear probes per block
             (mean / flatten + RMSNorm); ``BlockProbe`` callback; ``eegfm-bench probe``            (App. I.5)
attention    raw softmax attention per block → per-channel attention (LaBraM, CBraMod)          (App. I.4)
attribution  Gradient×Input (captum), AttnLRP (lxt), App. I.1 selection / normalisation, conservation and
             randomisation checks; ``Attribution`` callback; ``eegfm-bench attribute``           (App. I.1, I.2)
lrp          per-backbone AttnLRP patch maps, applied per module instance and reverted
topomap      mne.viz.plot_topomap grids on the 10-05 montage
truncation   keep blocks 0..k (``<backbone>_truncated`` with ``depth``), depth sweep              (App. I.6)
runs         reading a finished ``eegfm-bench cv`` run (fold checkpoints, windows, folds)
config       the YAML schema shared by ``probe`` and ``attribute``

Nothing heavy is imported here; import the submodule you need.

lxt's LRP is patented; lxt is free for personal and scientific use (see its license).
"""
