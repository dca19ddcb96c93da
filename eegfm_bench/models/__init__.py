"""Model axis: backbone adapters over braindecode, pooling heads, adaptation regimes, checkpoints, FMClassifier."""
