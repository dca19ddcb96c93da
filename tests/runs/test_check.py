"""``eegfm-bench check`` reads only the recordings one batch needs (issue 26: "check reads only the recordings one
batch needs"), each once for every model's preprocessing, and still runs one batch through every run × head.

Reads are counted on the real EEGMMIDB source class (the real ``read`` runs underneath) with a fresh cache.
"""
from __future__ import annotations

import pytest
import yaml

from eegfm_bench.cli import main
from eegfm_bench.data.tasks import get_task

from eegfm_testutils import requires_data

TINY = [{"model": "eegnet", "regime": "full", "heads": ["flatten"], "backbone_kwargs": {"F1": 4, "D": 1,
                                                                                       "kernel_length": 16}},
        {"model": "labram", "regime": "head_only", "heads": ["mean"],
         "backbone_kwargs": {"num_layers": 2, "num_heads": 2, "conv_out_channels": 4}}]


@requires_data
@pytest.mark.parametrize("task,n_reads", [("eegmmidb_mi", 9), ("eegmmidb_eyes", 6)])
def test_check_reads_three_subjects_once_for_every_model(task, n_reads, tmp_path, monkeypatch, capsys):
    cfg = {"experiment": "chk", "task": task, "out_dir": str(tmp_path / "out"), "confound": False,
           # n_jobs 1: the reads are counted by a reader patched in this process (a pool's workers would not see it)
           "data": {"batch_size": 8, "cache_dir": str(tmp_path / "cache"), "n_jobs": 1},
           "trainer": {"max_epochs": 1, "accelerator": "cpu"}, "runs": TINY}
    path = tmp_path / "chk.yaml"
    path.write_text(yaml.safe_dump(cfg))
    src_cls = type(get_task(task).source(None))
    real, reads = src_cls.read, []

    def read(self, rec):
        reads.append(rec.recording)
        return real(self, rec)

    monkeypatch.setattr(src_cls, "read", read)
    assert main(["check", "--config", str(path), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "%|" not in err and "it/s]" not in err  # --no-progress: no bar, the windows' nor the Trainer's (issue 36)
    total = len(get_task(task).source(None).recordings(None))
    assert len(reads) == n_reads and len(set(reads)) == n_reads  # 3 subjects' runs, each read once for both models
    assert f"check: reading {n_reads} of the task's {total} recordings" in out
    assert out.count("ok  ") == 2 and "eegnet" in out and "labram" in out
