"""Data axis: task registry, MNE preprocessing, montages, on-disk window cache, subject-grouped folds."""
