"""``eegfm-bench cv`` and ``eegfm-bench confound``: the cv command (``command``), its loader and cells (``cells``),
the loop (``loop``), progress and running markers (``progress``, ``running``; light, read by ``status``), the one
reader of a finished run (``output``), the confound check (``confound``, ``confound_config``) and depth truncation
(``truncation``). Docstring only: importing ``runs.cv.progress`` loads no other module of the family."""
