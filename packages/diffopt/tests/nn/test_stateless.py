"""diffopt.nn.stateless: swapping tensors into modules by dotted name, and putting them back."""

import pytest
import torch

from diffopt.nn.stateless import reparameterize, reparametrize, swap_state


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))


def _snapshot(net):
    return {name: t for name, t in [*net.named_parameters(), *net.named_buffers()]}


def test_functional_call_matches_closed_form_and_restores():
    net = _net()
    before = _snapshot(net)
    w, b = torch.ones(3, 2, requires_grad=True), torch.zeros(3)
    x = torch.tensor([[1.0, 2.0]])
    with reparametrize(net, {"0.weight": w, "0.bias": b}) as same:
        assert same is net and net[0].weight is w
        out = net[0](x)
    torch.testing.assert_close(out, torch.full((1, 3), 3.0))
    (grad,) = torch.autograd.grad(out.sum(), w)
    torch.testing.assert_close(grad, x.expand(3, 2))
    assert all(t is before[name] for name, t in _snapshot(net).items())
    assert isinstance(net[0].weight, torch.nn.Parameter)


def test_restores_on_exception():
    net = _net()
    before = _snapshot(net)
    with pytest.raises(ZeroDivisionError), \
            reparameterize(net, [("1.running_mean", torch.full((3,), 7.0))]):
        assert torch.equal(net[1].running_mean, torch.full((3,), 7.0))
        assert "running_mean" in dict(net[1].named_buffers())
        raise ZeroDivisionError
    assert all(t is before[name] for name, t in _snapshot(net).items())


def test_failed_swap_leaves_module_untouched():
    net = _net()
    before = _snapshot(net)
    with pytest.raises(AttributeError, match="nope"):
        swap_state(net, {"0.weight": torch.zeros(3, 2), "0.nope": torch.zeros(1)})
    assert all(t is before[name] for name, t in _snapshot(net).items())
    with pytest.raises(AttributeError, match="submodule '5'"), \
            reparametrize(net, {"0.bias": torch.zeros(3), "5.weight": torch.zeros(1)}):
        pass
    assert net[0].bias is before["0.bias"]


def test_swap_state_roundtrip_and_allow_missing():
    net = _net()
    old = swap_state(net, {"0.bias": torch.zeros(3)})
    assert old["0.bias"] is not net[0].bias
    swap_state(net, old)
    assert net[0].bias is old["0.bias"]
    extra = torch.ones(1)
    with reparametrize(net, {"0.extra": extra}, allow_missing=True):
        assert net[0].extra is extra
    assert not hasattr(net[0], "extra")


def test_meta_parameters_are_swapped_in_their_table():
    import diffopt

    class Module(diffopt.nn.MetaGradientModule):
        def __init__(self, meta):
            super().__init__(meta)
            self.meta = meta

    meta = torch.nn.Parameter(torch.ones(1))
    module = Module(meta)
    other = torch.full((1,), 4.0)
    with reparametrize(module, {"meta": other}):
        assert module.meta is other
    assert module.meta is meta
