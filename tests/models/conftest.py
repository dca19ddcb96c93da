"""Model tests run isolated: no network, a private checkpoints folder, a fixed seed."""
import socket

import pytest
import torch


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No network (any socket connection fails the test), an empty private checkpoints folder, seed 0."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EEGFM_CHECKPOINTS", str(tmp_path / "checkpoints"))

    def refuse(*args, **kwargs):
        raise AssertionError("tests must not touch the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    torch.manual_seed(0)
