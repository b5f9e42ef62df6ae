"""TorchOpt README/tutorial-style code runs unchanged with ``import diffopt as torchopt``."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import diffopt as torchopt


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.fc(x)


def _data(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(16, 4, generator=generator), torch.randint(0, 3, (16,),
                                                                  generator=generator)


def test_functional_api_snippet():
    torch.manual_seed(0)
    net = Net()
    params = dict(net.named_parameters())
    optimizer = torchopt.adam(lr=0.05)
    opt_state = optimizer.init(params)
    xs, ys = _data()
    first = None
    for _ in range(20):
        loss = F.cross_entropy(functional_call(net, params, (xs,)), ys)
        first = first if first is not None else loss.item()
        grads = torch.autograd.grad(loss, tuple(params.values()))
        grads = dict(zip(params, grads))
        updates, opt_state = optimizer.update(grads, opt_state, params=params)
        params = torchopt.apply_updates(params, updates)
    assert loss.item() < first


def test_pytorch_style_snippet():
    torch.manual_seed(0)
    net = Net()
    optimizer = torchopt.Adam(net.parameters(), lr=0.05)
    xs, ys = _data()
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(xs), ys)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_meta_learning_snippet_with_stop_gradient():
    """TorchOpt's README example: meta-learn through MetaAdam, truncate with stop_gradient."""
    torch.manual_seed(0)
    net = Net()
    meta_parameter = torch.tensor(1.0, requires_grad=True)
    meta_optimizer = torchopt.SGD([meta_parameter], lr=0.1)
    inner_optimizer = torchopt.MetaAdam(net, lr=0.1)
    xs, ys = _data()
    net_state = torchopt.extract_state_dict(net, by="deepcopy")
    optim_state = torchopt.extract_state_dict(inner_optimizer, by="deepcopy")
    for _ in range(3):
        for _ in range(2):
            inner_loss = F.cross_entropy(net(xs) * meta_parameter, ys)
            inner_optimizer.step(inner_loss)
        outer_loss = F.cross_entropy(net(xs), ys)
        meta_optimizer.zero_grad()
        outer_loss.backward()
        assert meta_parameter.grad is not None and torch.isfinite(meta_parameter.grad)
        meta_optimizer.step()
        torchopt.stop_gradient(net)
        torchopt.stop_gradient(inner_optimizer)
    torchopt.recover_state_dict(net, net_state)
    torchopt.recover_state_dict(inner_optimizer, optim_state)
    assert all(p.is_leaf for p in net.parameters())
