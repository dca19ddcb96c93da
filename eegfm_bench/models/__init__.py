"""Model axis: backbone adapters over braindecode (:mod:`~eegfm_bench.models.backbones`, one file per model and
the ``BACKBONES`` registry), pooling heads (:mod:`~eegfm_bench.models.heads`, ``HEADS``), adaptation regimes,
checkpoints and :class:`~eegfm_bench.models.module.FMClassifier`. Each module imports what it uses at its top
(braindecode with the backbones); only peft is imported on first use
(:func:`~eegfm_bench.models.adaptation.import_peft`).
"""
