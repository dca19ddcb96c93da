"""Interpretability of paper 003 §4.3–4.5 and App. I: attribution, attention maps, block-wise probes, depth truncation.

Modules
-------
probes       linear probes per block on the feature cache's block outputs (mean / flatten + RMSNorm), fitted by
             a CPU Trainer                                                                       (App. I.5)
attention    raw softmax attention per block → per-channel attention (LaBraM, CBraMod)          (App. I.4)
attribution  Gradient×Input (captum), AttnLRP (lxt), App. I.1 selection / normalisation, conservation and
             randomisation checks, as Trainer.predict passes                                     (App. I.1, I.2)
lrp          per-backbone AttnLRP patch maps, applied per module instance and reverted
topomap      mne.viz.plot_topomap grids on the 10-05 montage
config       the typed schema shared by ``probe`` and ``attribute``

The commands are in :mod:`eegfm_bench.runs` (``probe``, ``attribute``, ``truncation``: the depth sweep of App. I.6
over the ``<backbone>_truncated`` backbones of :mod:`eegfm_bench.models.backbones.truncated`), the callbacks in
:mod:`eegfm_bench.callbacks` and the reports in :mod:`eegfm_bench.reports`.

Nothing heavy is imported here; import the submodule you need.

lxt's LRP is patented; lxt is free for personal and scientific use (see its license).
"""
