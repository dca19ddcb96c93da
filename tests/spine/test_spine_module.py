"""FMClassifier regimes: head-only leaves the backbone untouched (and in eval mode); full fine-tuning changes it."""
import pytest
import torch

from eegfm_bench.models.module import FMClassifier
from eegfm_bench.registry import UnknownNameError

CH = ["C3", "Cz", "C4", "FC3", "FC4", "CP3", "CP4", "Pz"]


def _step(model, batch):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    model.train()
    logits = model._logits(batch)
    loss = torch.nn.functional.cross_entropy(logits, batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.parametrize("regime", ["head_only", "full"])
def test_head_only_freezes_backbone_full_trains_it(regime):
    torch.manual_seed(0)
    m = FMClassifier("eegnet", "flatten", regime, ch_names=CH, n_times=256, n_classes=2,
                     backbone_kwargs={"F1": 4, "D": 1, "kernel_length": 16})
    before = {k: v.detach().clone() for k, v in m.backbone.state_dict().items()}
    head_before = {k: v.detach().clone() for k, v in m.head.state_dict().items()}
    batch = {"x": torch.randn(8, len(CH), 256), "y": torch.tensor([0, 1] * 4)}
    _step(m, batch)
    after = m.backbone.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    head_changed = [k for k, v in m.head.state_dict().items() if not torch.equal(head_before[k], v)]
    assert head_changed, "the head must train in every regime"
    if regime == "head_only":
        assert changed == [], f"head-only changed backbone tensors {changed} (incl. BN running stats)"
        assert not m.backbone.training, "a frozen backbone must stay in eval mode"
        assert m.parameter_counts["trainable_params"] == m.parameter_counts["head_params"]
    else:
        weights = [k for k in before if "weight" in k]
        assert all(k in changed for k in weights), set(weights) - set(changed)


def test_unknown_names_list_valid_ones():
    with pytest.raises(UnknownNameError, match="eegnet"):
        FMClassifier("eegnett", "flatten", "full", ch_names=CH, n_times=256)
    with pytest.raises(UnknownNameError, match="mean_tile"):
        FMClassifier("eegnet", "maxx", "full", ch_names=CH, n_times=256)
    with pytest.raises(ValueError, match="head_only"):
        FMClassifier("eegnet", "flatten", "partial", ch_names=CH, n_times=256)
