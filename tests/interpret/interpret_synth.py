"""Synthetic task for the interpretability tests: the label lives only on chosen channels.

Six channels (C3, Cz, C4, Pz, O1, O2), 400 samples. Class 1 adds ``+A·sin(2π·10 Hz·t)`` and class 0
``−A·sin(...)`` (A = 1.5) to C3 and C4 only; every channel carries unit white noise. Tiny models are trained
once per session with a plain torch loop (a few seconds on one core).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

CHS = ["C3", "Cz", "C4", "Pz", "O1", "O2"]
SIGNAL = [0, 2]  # C3, C4
N_TIMES = 400
TINY_CBRAMOD = dict(n_layer=2, nhead=4, dim_feedforward=32, drop_prob=0.0,
                    channels_kernel_stride_padding_norm=((5, 49, 25, 24, (5, 5)), (5, 3, 1, 1, (5, 5)),
                                                         (5, 3, 1, 1, (5, 5))))
TINY_LABRAM = dict(num_layers=2, num_heads=2, conv_out_channels=4)
TINY_EEGNET = dict(F1=4, D=2, kernel_length=32, drop_prob=0.0)


def synthetic(n_per_class: int = 80, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``X`` ``(2·n, 6, 400)`` float32 and ``y`` ``(2·n,)``; the label is carried by C3 and C4 only."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n_per_class)
    X = rng.standard_normal((len(y), len(CHS), N_TIMES)).astype(np.float32)
    t = np.arange(N_TIMES) / 200.0
    wave = 1.5 * np.sin(2 * np.pi * 10 * t + rng.uniform(-0.3, 0.3, (len(y), 1)))
    for c in SIGNAL:
        X[:, c] += (np.where(y == 1, 1.0, -1.0)[:, None] * wave).astype(np.float32)
    perm = rng.permutation(len(y))
    return X[perm], y[perm].astype(np.int64)


def build(backbone: str, kwargs: dict, seed: int = 0):
    from eegfm_bench.models.module import FMClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FMClassifier(backbone=backbone, head="flatten", regime="full", ch_names=CHS, n_times=N_TIMES,
                            n_classes=2, init_seed=seed, backbone_kwargs=kwargs)


def train(model, X, y, epochs: int = 6, lr: float = 3e-3, seed: int = 0):
    """Adam on mini-batches of 32, one intra-op thread whatever the caller's (the session fixtures below are built
    before the function-scoped ``_one_thread`` applies, and their weights must not depend on the process's thread
    count or on which test asked for them first: the randomisation check's Spearman sits near its threshold)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(model, X, y, epochs, lr, seed)
    finally:
        torch.set_num_threads(n)


def _train(model, X, y, epochs: int, lr: float, seed: int):
    torch.manual_seed(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for s in range(0, len(xt), 32):
            b = perm[s:s + 32]
            opt.zero_grad()
            F.cross_entropy(model(xt[b]), yt[b]).backward()
            opt.step()
    return model.eval()


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads; on a shared 2-core machine a second thread makes the
    CBraMod fixture ~8× slower (oversubscription). Restores the session's setting afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def data():
    return synthetic()


@pytest.fixture(scope="session")
def trained_cbramod(data):
    X, y = data
    return train(build("cbramod", TINY_CBRAMOD), X, y, epochs=6)


@pytest.fixture(scope="session")
def trained_eegnet(data):
    X, y = data
    return train(build("eegnet", TINY_EEGNET), X, y, epochs=8, lr=1e-2)
