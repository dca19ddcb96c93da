"""``eegfm-bench sweep``: the command (``command``: ``run_sweep``) and its loader and checks (``config``; the schema is
:mod:`eegfm_bench.config.sweep`)."""
