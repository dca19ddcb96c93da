"""Jobs and ingestion: ``launcher`` runs a command's units as submitit jobs (local workers or SLURM; the schema is
:mod:`eegfm_bench.config.launch`), ``running`` marks the cells a live process or a queued job holds, ``ingest`` is
``eegfm-bench ingest`` (the ingestion checks and their report). Below every command: nothing here imports
``runs.cv`` or another command's package (``tests/spine/test_structure.py``); a command's own stages over jobs (the
cv's feature stage) live in its package and call :func:`~eegfm_bench.runs.launch.launcher.run_jobs`."""
