"""MetaGradientModule separates inner parameters from meta-parameters."""

import pytest
import torch
from torch import nn

import diffopt


class Inner(diffopt.nn.MetaGradientModule):
    def __init__(self, meta_prior, encoder, *, scale):
        super().__init__()
        self.meta_prior = meta_prior
        self.encoder = encoder
        self.scale = scale
        self.head = nn.Linear(2, 1)
        self.x = nn.Parameter(torch.zeros(2))

    def forward(self, inputs):
        return self.head(self.encoder(inputs)) + ((self.x - self.meta_prior) ** 2).sum()


def test_meta_and_inner_parameters_are_separate():
    prior = torch.ones(2, requires_grad=True)
    encoder = nn.Linear(3, 2)
    model = Inner(prior, encoder, scale=torch.tensor(1.0))  # scale does not require grad
    inner = dict(model.named_parameters())
    meta = dict(model.named_meta_parameters())
    assert set(inner) == {"head.weight", "head.bias", "x"}
    assert set(meta) == {"meta_prior", "encoder.weight", "encoder.bias"}
    assert model.meta_prior is prior and model.encoder is encoder
    assert list(model.meta_children()) == [encoder]
    assert [n for n, _ in model.named_meta_modules()] == ["encoder"]
    assert isinstance(model.scale, torch.Tensor)


def test_inner_optimizer_only_moves_inner_parameters_and_meta_gradient_flows():
    prior = torch.ones(2, requires_grad=True)
    model = Inner(prior, nn.Linear(3, 2), scale=1.0)
    opt = diffopt.MetaSGD(model, lr=0.1)
    x = torch.randn(4, 3)
    for _ in range(2):
        opt.step(model(x).mean())
    assert model.meta_prior is prior
    model(x).mean().backward()
    assert prior.grad is not None and torch.isfinite(prior.grad).all()


def test_register_and_delete():
    m = diffopt.nn.MetaGradientModule()
    lr = torch.tensor(0.1, requires_grad=True)
    m.register_meta_parameter("lr", lr)
    assert list(m.meta_parameters()) == [lr]
    with pytest.raises(KeyError, match="already exists"):
        m.register_meta_parameter("training", lr)
    with pytest.raises(ValueError, match="require grad"):
        m.register_meta_parameter("other", torch.tensor(1.0))
    with pytest.raises(TypeError, match="tensor"):
        m.lr = "fast"
    del m.lr
    assert list(m.meta_parameters()) == []
    m.register_meta_module("enc", nn.Linear(1, 1))
    assert len(list(m.meta_parameters())) == 2
    with pytest.raises(TypeError):
        m.register_meta_module("bad", 3)


def test_nested_meta_modules_are_collected():
    prior = torch.zeros(2, requires_grad=True)

    class Outer(diffopt.nn.MetaGradientModule):
        def __init__(self, prior):
            super().__init__()
            self.inner = Inner(prior, nn.Linear(3, 2), scale=1.0)

    outer = Outer(prior)
    names = {n for n, _ in outer.named_meta_parameters()}
    assert "inner.meta_prior" in names or "meta_prior" in names
