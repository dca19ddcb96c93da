"""``eegfm-bench plan`` and ``eegfm-bench paper``: a cv's plan before it runs (``command``), every command's stages
(``stages``), a paper file's members checked and run in order (``paper``) and a paper's plan (``paper_plan``)."""
