"""One pooling vocabulary (issue 36 item 4): the heads whose pooling is a function of the tokens alone declare it
once (``PoolingHead.token_pooling``), and the block-wise probes, the feature cache's probe inputs and the negative
controls' embeddings pool by the head's name. A head registered with a ``token_pooling`` reaches all of them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from eegfm_bench.models.heads import HEADS, PoolingHead, check_token_pooling, pool_tokens, token_poolings


def _tokens():
    t = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    t[1, 0, 3] = 50.0
    return t


def test_the_vocabulary_is_the_heads_with_a_parameter_free_pooling():
    assert token_poolings() == ["flatten", "max", "mean"]
    for learned in ("attention", "mlp", "mean_tile"):
        with pytest.raises(ValueError, match=rf"unknown pooling '{learned}'; fix: one of \['flatten', 'max', 'mean'\]"):
            check_token_pooling(learned)


@pytest.mark.parametrize("name,expected", [
    ("mean", [[4, 5, 6, 7], [16, 17, 18, 92 / 3]]),
    ("max", [[8, 9, 10, 11], [20, 21, 22, 50]]),
])
def test_pool_tokens_exact_on_tensors_and_arrays_and_equal_to_the_heads_pool(name, expected):
    t = _tokens()
    np.testing.assert_allclose(pool_tokens(t, name).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(pool_tokens(t.numpy(), name), expected, rtol=1e-6)
    head = HEADS.get(name)(n_tokens=3, d_model=4, n_classes=2)
    torch.testing.assert_close(head.pool(t), pool_tokens(t, name))
    assert head(t).shape == (2, 2) and head.n_parameters == 4 * 2 + 2


def test_flatten_is_token_major_and_tied_to_the_token_count():
    t = _tokens()
    np.testing.assert_array_equal(pool_tokens(t.numpy(), "flatten")[1], t[1].numpy().ravel())
    assert HEADS.get("flatten").tied_to_tokens and not HEADS.get("max").tied_to_tokens


def test_a_registered_head_reaches_probes_and_controls(tmp_path):
    """A new head declared in one place (a ``token_pooling``) is a probe pooling, a controls pooling and a cv head."""
    from eegfm_bench.controls.embeddings import pool_cached_tokens
    from eegfm_bench.interpret.probes import LinearProbe, ProbeConfigError, check_pooling, fit_probe

    @HEADS.register("median_test")
    class MedianHead(PoolingHead):
        name = "median_test"
        token_pooling = staticmethod(lambda t: t.median(1).values if isinstance(t, torch.Tensor)
                                     else np.median(t, axis=1))

    try:
        t = _tokens()
        assert "median_test" in token_poolings() and check_pooling("median_test") == "median_test"
        np.testing.assert_array_equal(pool_cached_tokens(t.numpy(), "median_test"), np.median(t.numpy(), axis=1))
        assert isinstance(LinearProbe(4, 2, "median_test").norm, torch.nn.Identity)
        rng = np.random.default_rng(0)
        X = rng.standard_normal((600, 4)).astype(np.float32)
        y = (X[:, 0] > 0).astype(int)
        fit = fit_probe(X[:400], y[:400], X[400:500], y[400:500], X[500:], y[500:], "median_test", 2,
                        max_epochs=20, lr=0.01, batch_size=32)
        assert fit.test_bacc >= 0.8  # a separable direction: the probe on this pooling learns it
        with pytest.raises(ProbeConfigError, match="unknown probe pooling 'attention'"):
            check_pooling("attention")
    finally:
        del HEADS._items["median_test"]
    assert "median_test" not in token_poolings()


def test_models_lists_every_registered_head_with_its_token_count_answer(monkeypatch):
    """``eegfm-bench models`` prints the one list of heads (the docs and the config help point to it): every
    registered head, a runtime one included, then the closed-form ``ridge`` as its flatten carrier; each says
    whether it takes any token count at its default settings and whether it is a probe / control pooling. A name
    already taken is refused with the taken names."""
    from eegfm_bench.models.catalogue import heads_table

    @HEADS.register("rms_test")
    class RMSHead(PoolingHead):
        """Root mean square over tokens, then linear."""

        name = "rms_test"
        token_pooling = staticmethod(lambda t: (t ** 2).mean(1) ** 0.5)

    try:
        rows = {line.split(" | ")[0].strip("| "): line for line in heads_table().splitlines()[2:]}
        assert list(rows) == sorted(set(HEADS.names())) + ["ridge"]
        assert rows["flatten"].startswith("| flatten | trained | no | yes | All tokens concatenated")
        assert rows["mlp"].startswith("| mlp | trained | yes | no |")  # pooling: mean by default
        assert rows["rms_test"] == "| rms_test | trained | yes | yes | Root mean square over tokens, then linear. |"
        assert rows["ridge"].startswith("| ridge | closed form (head_only), stored as a flatten head | no | no |")
        with pytest.raises(ValueError, match=r"head 'mean' is registered twice; fix: give the new one another name"):
            HEADS.register("mean")(RMSHead)
    finally:
        HEADS._items.pop("rms_test")
