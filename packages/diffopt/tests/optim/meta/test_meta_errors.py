"""Misuse of the meta-optimizers raises clear errors and leaves the module intact."""

import pytest
import torch
import torch.nn.functional as F
from helpers import regression_task, small_mlp

import diffopt


def test_loss_that_does_not_depend_on_params():
    net = small_mlp()
    opt = diffopt.MetaSGD(net, lr=0.1)
    before = list(net.parameters())
    with pytest.raises(RuntimeError, match="does not depend"):
        opt.step(torch.tensor(1.0, requires_grad=True) * 2)
    with pytest.raises(RuntimeError, match="does not depend"):
        opt.step(torch.tensor(3.0))
    assert all(a is b for a, b in zip(net.parameters(), before))


def test_loss_of_another_module():
    net, other = small_mlp(seed=0), small_mlp(seed=1)
    x_s, y_s, _, _ = regression_task()
    opt = diffopt.MetaSGD(net, lr=0.1)
    with pytest.raises(RuntimeError, match="does not depend on any"):
        opt.step(F.mse_loss(other(x_s), y_s))


def test_non_scalar_and_non_tensor_loss():
    net = small_mlp()
    opt = diffopt.MetaAdam(net)
    with pytest.raises(ValueError, match="scalar"):
        opt.step(net(torch.ones(3, 2, dtype=torch.float64)))
    with pytest.raises(TypeError, match="tensor"):
        opt.step(1.0)


def test_wrong_dtype_after_conversion():
    net = small_mlp(dtype=torch.float32)
    opt = diffopt.MetaAdam(net)
    net.double()
    with pytest.raises(TypeError, match="dtype"):
        opt.step(net(torch.ones(3, 2, dtype=torch.float64)).sum())


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match=r"nn\.Module"):
        diffopt.MetaSGD([torch.ones(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="no parameter"):
        diffopt.MetaSGD(torch.nn.ReLU(), lr=0.1)
    with pytest.raises(TypeError, match="GradientTransformation"):
        diffopt.MetaOptimizer(small_mlp(), impl=lambda x: x)
    with pytest.raises(ValueError, match="b1"):
        diffopt.MetaAdam(small_mlp(), betas=(1.5, 0.9))


def test_load_state_dict_checks_structure():
    opt = diffopt.MetaAdam(small_mlp())
    other = diffopt.MetaSGD(small_mlp(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="does not match"):
        opt.load_state_dict(other.state_dict())


def test_tied_parameters_are_updated_everywhere():
    lin = torch.nn.Linear(2, 2, bias=False).double()
    net = torch.nn.Sequential(lin, torch.nn.Tanh(), lin)
    opt = diffopt.MetaSGD(net, lr=0.1)
    opt.step(net(torch.ones(1, 2, dtype=torch.float64)).sum())
    assert net[0].weight is net[2].weight
    assert not net[0].weight.is_leaf


def test_frozen_parameters_are_not_optimized():
    net = small_mlp()
    net[0].weight.requires_grad_(False)
    frozen = net[0].weight
    opt = diffopt.MetaSGD(net, lr=0.1)
    opt.step(net(torch.ones(1, 2, dtype=torch.float64)).sum())
    assert net[0].weight is frozen


def test_parameters_are_taken_in_module_order_once():
    # A submodule reached twice (and a tensor tied across modules) is one parameter, and the
    # optimizer's state follows module.parameters()' order.
    shared = torch.nn.Linear(4, 4)
    head = torch.nn.Linear(4, 5)
    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 4), shared), shared, head,
                              torch.nn.Sequential(torch.nn.Linear(5, 5)))
    net[3][0].bias = head.bias  # tied into another module
    opt = diffopt.MetaSGD(net, lr=0.1, momentum=0.9)
    (state,) = opt.state_dict()
    buffers = next(leaf for leaf in state[0] if isinstance(leaf, tuple))
    assert [b.shape for b in buffers] == [p.shape for p in net.parameters()]
    opt.step(net(torch.ones(1, 2)).sum())
    assert net[0][1].weight is net[1].weight and net[3][0].bias is net[2].bias
    assert not net[3][0].bias.is_leaf
