"""The commands, one sub-package per command family; each command module is a sequence of named steps.

* :mod:`~eegfm_bench.runs.cv` — ``eegfm-bench cv`` and ``confound``: ``command`` (``run_cv``), ``cells`` (the cv's
  loader ``load_config``, its checks, the cells and their hashes), ``loop`` (the cells as a Lightning-style loop),
  ``progress`` / ``running`` (what ``status`` and ``plan`` read: standard library and the result store only),
  ``output`` (the one reader of a cv run), ``confound`` + ``confound_config``, ``truncation`` (depth sweeps).
* :mod:`~eegfm_bench.runs.sweep` — ``eegfm-bench sweep``: ``command`` and ``config`` (its loader and checks).
* :mod:`~eegfm_bench.runs.interpret` — ``eegfm-bench probe`` and ``attribute``: ``probe``, ``attribute`` and
  ``config`` (their loader and checks).
* :mod:`~eegfm_bench.runs.controls` — ``eegfm-bench controls``: ``command`` (the steps in order), ``config``,
  ``steps``, ``scrambled``, ``gates``, ``store``.
* :mod:`~eegfm_bench.runs.plan` — ``eegfm-bench plan`` and ``paper``: ``command`` (a cv's plan), ``stages`` (every
  stage of a command), ``paper`` (a paper file's members, checked and run), ``paper_plan`` (a paper's plan).
* :mod:`~eegfm_bench.runs.launch` — ``launcher`` (cells as submitit jobs, local or SLURM) and ``ingest``.
* :mod:`~eegfm_bench.runs.audit` — ``eegfm-bench audit`` (one module).

A command's typed schema lives in :mod:`eegfm_bench.config` (``config/<command>.py``, light: no deep-learning stack,
so ``--help``, ``status`` and the docs read it); its loader and checks, which need the registries, live in the
family's ``config`` module (``cells`` for the cv). Callers import each name from its one home: no module re-exports
another's names. The package ``__init__`` files hold docstrings only, so importing one light module (``status``
reads ``runs.cv.progress``) loads nothing else.
"""
