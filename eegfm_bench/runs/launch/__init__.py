"""Jobs and ingestion: ``launcher`` runs a command's cells as submitit jobs (local workers or SLURM; the schema is
:mod:`eegfm_bench.config.launch`), ``ingest`` is ``eegfm-bench ingest`` (the ingestion checks and their report)."""
