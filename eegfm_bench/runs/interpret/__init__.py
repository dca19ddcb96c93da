"""``eegfm-bench probe`` and ``eegfm-bench attribute``: the block-wise probes and attention maps (``probe``), the
attribution maps (``attribute``) and their shared loader and checks (``config``; the schema is
:mod:`eegfm_bench.config.interpret`)."""
