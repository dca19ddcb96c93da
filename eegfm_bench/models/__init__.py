"""Model axis: backbone adapters over braindecode (:mod:`~eegfm_bench.models.backbones`, one file per model and
the ``BACKBONES`` registry), pooling heads (:mod:`~eegfm_bench.models.heads`, ``HEADS``), adaptation regimes,
checkpoints and :class:`~eegfm_bench.models.module.FMClassifier`. braindecode itself is imported only when an
adapter is built.
"""
