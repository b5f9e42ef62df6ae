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


def test_tensor_attributes_follow_requires_grad_and_origin():
    # A tensor that requires grad becomes a parameter (even a plain tensor, as a solver's iterate
    # is), unless it came in through the constructor (then a meta-parameter); others stay plain.
    meta = torch.ones(2, requires_grad=True)
    m = diffopt.nn.MetaGradientModule(meta)
    own = torch.zeros(2, requires_grad=True)
    plain = torch.zeros(2)
    m.meta, m.own, m.plain = meta, own, plain
    assert m._meta_parameters["meta"] is meta and m._parameters["own"] is own
    assert m.plain is plain and "plain" not in m._parameters and "plain" not in m._buffers
    (m.own * m.meta).sum().backward()
    torch.testing.assert_close(own.grad, torch.ones(2))
    with pytest.raises(ValueError, match="meta-parameter"):
        diffopt.nn.MetaGradientModule(meta).register_parameter("w", meta)
    with pytest.raises(KeyError, match="already exists"):
        m.register_parameter("meta", own)
    with pytest.raises(TypeError, match="string"):
        m.register_parameter(b"w", own)
    frozen = nn.Parameter(torch.zeros(1), requires_grad=False)  # a frozen Parameter is allowed
    m.frozen = frozen
    assert m._parameters["frozen"] is frozen
    # Reassigning a name moves it between slots: an attribute, then a meta-parameter.
    del m.meta
    object.__setattr__(m, "meta", meta)
    m.meta = meta
    assert m._meta_parameters["meta"] is meta and "meta" not in m.__dict__


def test_add_meta_module_and_register_meta_module_are_one_method():
    m = diffopt.nn.MetaGradientModule()
    encoder = nn.Linear(2, 3)
    m.add_meta_module("encoder", encoder)
    assert m.encoder is encoder and list(m.parameters()) == []
    assert [p is q for p, q in zip(m.meta_parameters(), encoder.parameters())] == [True, True]
    assert diffopt.nn.MetaGradientModule.register_meta_module is (
        diffopt.nn.MetaGradientModule.add_meta_module)
    with pytest.raises(KeyError, match="already exists"):
        m.add_meta_module("training", nn.Linear(1, 1))


def test_assignment_before_super_init_is_refused():
    class NoInit(diffopt.nn.MetaGradientModule):
        def __init__(self, x):
            self.x = x

    with pytest.raises(AttributeError, match="__init__"):
        NoInit(torch.ones(1, requires_grad=True))
    with pytest.raises(AttributeError, match="__init__"):
        NoInit(nn.Linear(1, 1))
