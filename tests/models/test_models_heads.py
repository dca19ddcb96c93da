"""Pooling heads: shapes, parameter counts (mean_tile == flatten), exact pooled values."""
from __future__ import annotations

import pytest
import torch

from eegfm_bench.models.heads import HEADS, AttentionHead, FlattenHead, MeanHead, MeanTileHead

N, D, K, B = 6, 5, 3, 4


def test_registry_names():
    assert set(HEADS.names()) == {"mean", "attention", "flatten", "mean_tile", "mlp", "max"}
    assert HEADS.get("mean_tile") is MeanTileHead


@pytest.mark.parametrize("name", ["mean", "attention", "flatten", "mean_tile"])
def test_output_shape_and_gradients(name):
    head = HEADS.get(name)(N, D, K)
    tokens = torch.randn(B, N, D, requires_grad=True)
    out = head(tokens)
    assert out.shape == (B, K)
    out.sum().backward()
    assert tokens.grad is not None and all(p.grad is not None for p in head.parameters())


def test_parameter_counts():
    assert MeanHead(N, D, K).n_parameters == D * K + K == 18
    assert AttentionHead(N, D, K).n_parameters == D * K + K + D == 23
    assert FlattenHead(N, D, K).n_parameters == N * D * K + K == 93
    assert MeanTileHead(N, D, K).n_parameters == FlattenHead(N, D, K).n_parameters


def _same_classifier(a, b):
    b.classifier.load_state_dict(a.classifier.state_dict())


def test_mean_head_value():
    head = MeanHead(N, D, K)
    tokens = torch.randn(B, N, D)
    expected = tokens.mean(1) @ head.classifier.weight.T + head.classifier.bias
    torch.testing.assert_close(head(tokens), expected)


def test_attention_head_starts_as_mean_and_weights_sum_to_one():
    att, mean = AttentionHead(N, D, K), MeanHead(N, D, K)
    _same_classifier(att, mean)
    tokens = torch.randn(B, N, D)
    torch.testing.assert_close(att(tokens), mean(tokens))
    with torch.no_grad():
        att.query.copy_(torch.randn(D))
    w = att.attention_weights(tokens)
    torch.testing.assert_close(w.sum(1), torch.ones(B))
    expected = (w.unsqueeze(-1) * tokens).sum(1) @ att.classifier.weight.T + att.classifier.bias
    torch.testing.assert_close(att(tokens), expected)


def test_flatten_is_token_major_concatenation():
    head = FlattenHead(N, D, K)
    tokens = torch.arange(B * N * D, dtype=torch.float32).reshape(B, N, D)
    torch.testing.assert_close(head.pool(tokens)[0, D:2 * D], tokens[0, 1])


def test_mean_tile_equals_flatten_when_all_tokens_are_equal_and_differs_otherwise():
    flat, tile = FlattenHead(N, D, K), MeanTileHead(N, D, K)
    _same_classifier(flat, tile)
    same = torch.randn(B, 1, D).expand(B, N, D)
    torch.testing.assert_close(tile(same), flat(same))
    varied = torch.randn(B, N, D)
    assert not torch.allclose(tile(varied), flat(varied))
    torch.testing.assert_close(tile.pool(varied), varied.mean(1).repeat(1, N))


def test_flatten_rejects_a_different_token_count_but_mean_accepts_it():
    with pytest.raises(ValueError, match="built for 6 tokens, got 4"):
        FlattenHead(N, D, K)(torch.randn(B, 4, D))
    assert MeanHead(N, D, K)(torch.randn(B, 4, D)).shape == (B, K)
    assert MeanTileHead(N, D, K)(torch.randn(B, 4, D)).shape == (B, K)


def test_wrong_token_dimension_raises():
    with pytest.raises(ValueError, match=r"\(batch, n_tokens, 5\)"):
        MeanHead(N, D, K)(torch.randn(B, N, D + 1))


def test_dropout_default_zero_and_active_in_training():
    tokens = torch.randn(B, N, D)
    head = FlattenHead(N, D, K).train()
    torch.testing.assert_close(head(tokens), head(tokens))
    drop = FlattenHead(N, D, K, dropout=0.5).train()
    assert not torch.allclose(drop(tokens), drop(tokens))
    drop.eval()
    torch.testing.assert_close(drop(tokens), drop(tokens))
    with pytest.raises(ValueError, match="dropout"):
        MeanHead(N, D, K, dropout=1.0)


def test_mlp_head_parameter_count_and_pooling():
    """mlp: Σ (in·h + h) + h_L·K + K parameters; mean pooling accepts any token count, flatten is tied to N."""
    import pytest
    import torch

    from eegfm_bench.models.heads import HEADS

    h = HEADS.get("mlp")(10, 16, 3)
    assert h.n_parameters == 16 * 256 + 256 + 256 * 3 + 3
    assert h(torch.randn(4, 7, 16)).shape == (4, 3)  # any number of tokens under mean pooling
    f = HEADS.get("mlp")(10, 16, 3, hidden=[32, 8], pooling="flatten")
    assert f.n_parameters == 160 * 32 + 32 + 32 * 8 + 8 + 8 * 3 + 3
    with pytest.raises(ValueError, match="built for 10 tokens"):
        f(torch.randn(4, 7, 16))
    # permuting the tokens changes a flatten-pooled MLP's output, not a mean-pooled one's
    x = torch.randn(2, 10, 16)
    h.eval(), f.eval()
    perm = x[:, torch.randperm(10)]
    assert torch.allclose(h(x), h(perm), atol=1e-6) and not torch.allclose(f(x), f(perm), atol=1e-6)
    with pytest.raises(ValueError, match="pooling must be"):
        HEADS.get("mlp")(10, 16, 3, pooling="max")
