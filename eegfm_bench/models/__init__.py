"""Model axis: backbone adapters over braindecode, pooling heads, adaptation regimes, checkpoints, FMClassifier.

Importing the package registers the backbone adapters (``BACKBONES``) and the pooling heads (``HEADS``);
braindecode itself is imported only when an adapter is built.
"""
from eegfm_bench.models import backbones as _backbones  # noqa: F401  (registers eegnet, labram, cbramod, biot)
from eegfm_bench.models import heads as _heads  # noqa: F401  (registers mean, attention, flatten, mean_tile)
