"""``eegfm-bench controls``: paper 001's negative-control suite. ``command`` runs the steps in order; ``config`` is the
loader and checks (the schema is :mod:`eegfm_bench.config.controls`); ``steps`` holds the shared context and the
per-arm steps, ``scrambled`` the scrambled-label arm, ``gates`` the claim gates, ``store`` the resumable store."""
