"""extract_state_dict / recover_state_dict / module_clone / module_detach_ / stop_gradient."""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import regression_task, small_mlp

import diffopt


class WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2).double()
        self.register_buffer("running", torch.zeros(2, dtype=torch.float64))

    def forward(self, x):
        self.running = self.running * 0.5 + x.mean(0)
        return self.lin(x) + self.running


@pytest.mark.parametrize("by", ["reference", "copy", "deepcopy"])
def test_extract_modes(by):
    net = small_mlp()
    state = diffopt.extract_state_dict(net, by=by)
    saved = state.params[1]["weight"]
    original = net[0].weight
    assert (saved is original) == (by == "reference")
    assert torch.equal(saved, original)
    if by == "copy":
        assert saved.grad_fn is not None  # connected to the original
    if by == "deepcopy":
        assert saved.grad_fn is None and saved.requires_grad


def test_recover_restores_leaves_after_meta_steps():
    net = small_mlp()
    leaves = list(net.parameters())
    state = diffopt.extract_state_dict(net)
    x_s, y_s, _, _ = regression_task()
    opt = diffopt.MetaAdam(net, lr=0.1)
    for _ in range(3):
        opt.step(F.mse_loss(net(x_s), y_s))
    assert all(not p.is_leaf for p in net.parameters())
    diffopt.recover_state_dict(net, state)
    assert all(a is b for a, b in zip(net.parameters(), leaves))


def test_meta_optimizer_state_save_restore_mid_training():
    """Snapshot a meta-optimizer and module after 2 inner steps; resuming gives the same result."""
    x_s, y_s, x_q, y_q = regression_task()
    net = small_mlp()
    opt = diffopt.MetaAdam(net, lr=0.05)
    for _ in range(2):
        opt.step(F.mse_loss(net(x_s), y_s))
    module_snapshot = diffopt.extract_state_dict(net, by="deepcopy")
    optim_snapshot = diffopt.extract_state_dict(opt, by="deepcopy")
    for _ in range(3):
        opt.step(F.mse_loss(net(x_s), y_s))
    expected = F.mse_loss(net(x_q), y_q).item()

    diffopt.recover_state_dict(net, module_snapshot)
    diffopt.recover_state_dict(opt, optim_snapshot)
    for _ in range(3):
        opt.step(F.mse_loss(net(x_s), y_s))
    assert F.mse_loss(net(x_q), y_q).item() == expected  # the same steps from the same state: exact


def test_buffers_and_detach_buffers():
    net = WithBuffer()
    state = diffopt.extract_state_dict(net, by="deepcopy", detach_buffers=True)
    x = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    net(x)
    assert net.running.grad_fn is not None
    diffopt.recover_state_dict(net, state)
    assert torch.equal(net.running, torch.zeros(2, dtype=torch.float64))
    without = diffopt.extract_state_dict(net, with_buffers=False)
    assert all(len(b) == 0 for b in without.buffers)


def test_recover_rejects_foreign_state():
    net = small_mlp()
    other = small_mlp(sizes=(2, 4, 4, 1))
    with pytest.raises(ValueError, match="submodules"):
        diffopt.recover_state_dict(net, diffopt.extract_state_dict(other))
    with pytest.raises(TypeError):
        diffopt.recover_state_dict(net, {"weight": torch.ones(1)})


@pytest.mark.parametrize("by", ["reference", "copy", "deepcopy"])
def test_module_clone(by):
    net = small_mlp()
    clone = diffopt.module_clone(net, by=by)
    assert clone is not net
    x = torch.randn(3, 2, dtype=torch.float64)
    torch.testing.assert_close(clone(x), net(x))
    shared = clone[0].weight is net[0].weight
    assert shared == (by == "reference")
    loss = clone(x).sum()
    if by == "deepcopy":
        assert torch.autograd.grad(loss, net[0].weight, allow_unused=True)[0] is None
    else:
        assert torch.autograd.grad(loss, net[0].weight)[0] is not None


def _conv_net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(16, 2))


def _tied():
    shared = torch.nn.Linear(2, 2)
    return torch.nn.ModuleDict({"a": shared, "b": torch.nn.ModuleList([shared, torch.nn.Tanh()])})


def _assert_same_copy(fast, slow, source, seen):
    """``fast`` was built as ``slow`` (deepcopy) was: same types and attribute values, fresh
    containers, the source's tensors, and a submodule shared in the source shared in the copy."""
    assert type(fast) is type(slow) and fast is not source
    if id(source) in seen:
        assert fast is seen[id(source)]
        return
    seen[id(source)] = fast
    assert list(vars(fast)) == list(vars(slow))
    for name, value in vars(source).items():
        got, want = vars(fast)[name], vars(slow)[name]
        assert type(got) is type(want), name
        if name == "_modules":
            assert list(got) == list(want) and got is not value
            for key, child in value.items():
                _assert_same_copy(got[key], want[key], child, seen)
        elif name in ("_parameters", "_buffers"):
            assert got is not value and list(got) == list(want)
            assert all(got[k] is t and want[k] is t for k, t in value.items())
        elif isinstance(value, (dict, set, list)):
            assert got == want == value and got is not value, name
        else:
            assert got == want == value, name


@pytest.mark.parametrize("make", [small_mlp, _conv_net, _tied, WithBuffer])
def test_module_clone_fast_structure_copy_is_deepcopys(make):
    # module_clone copies torch's usual modules without copy.deepcopy; the copy must be the one
    # deepcopy would have made (tensors kept through the memo, as module_clone asks).
    from diffopt.utils import _copy_plain_module

    net = make()
    memo = {id(t): t for t in list(net.parameters()) + list(net.buffers())}
    fast = _copy_plain_module(net, dict(memo))
    assert fast is not None
    _assert_same_copy(fast, copy.deepcopy(net, dict(memo)), net, {})


class _Configured(torch.nn.Linear):
    def __init__(self):
        super().__init__(2, 2)
        self.config = {"scale": [1.0]}  # a mutable attribute: the fast copy must not share it


def test_module_clone_falls_back_to_deepcopy():
    from diffopt.utils import _copy_plain_module

    hooked = small_mlp()
    calls = []
    hooked[0].register_forward_hook(lambda *_: calls.append(1))
    nets = [hooked, torch.nn.Sequential(_Configured()), torch.nn.GRU(2, 2)]
    for net in nets:
        memo = {id(t): t for t in list(net.parameters()) + list(net.buffers())}
        assert _copy_plain_module(net, memo) is None
    clone = diffopt.module_clone(hooked, by="reference")
    clone(torch.randn(1, 2, dtype=torch.float64))
    assert calls == [1]  # deepcopy kept the hook
    configured = diffopt.module_clone(nets[1], by="copy")
    assert configured[0].config == {"scale": [1.0]}
    assert configured[0].config is not nets[1][0].config
    assert configured[0].config["scale"] is not nets[1][0].config["scale"]
    x = torch.randn(3, 1, 2)
    torch.testing.assert_close(diffopt.module_clone(nets[2], by="copy")(x)[0], nets[2](x)[0])


def test_module_clone_of_tree():
    tree = {"a": torch.ones(2, requires_grad=True)}
    clone = diffopt.module_clone(tree, by="deepcopy")
    assert clone["a"] is not tree["a"] and clone["a"].requires_grad and clone["a"].is_leaf


def test_module_detach_and_stop_gradient():
    net = small_mlp()
    x_s, y_s, _, _ = regression_task()
    opt = diffopt.MetaSGD(net, lr=0.1, momentum=0.9)
    opt.step(F.mse_loss(net(x_s), y_s))
    diffopt.module_detach_(net)
    assert all(p.is_leaf and p.requires_grad for p in net.parameters())
    diffopt.stop_gradient(opt)
    state = opt.state_dict()[0]
    assert all(t.grad_fn is None for t in diffopt.pytree.tree_leaves(state)
               if isinstance(t, torch.Tensor))
    y = torch.ones(2, requires_grad=True) * 3
    diffopt.stop_gradient(y)
    assert y.grad_fn is None


def test_bad_copy_mode():
    with pytest.raises(ValueError, match="by must be"):
        diffopt.extract_state_dict(small_mlp(), by="shallow")


def test_copy_to_a_device_clones_then_moves():
    # by='copy' with a device: a clone where the tensor lives, then a move (two graph nodes);
    # the gradient still reaches the source.
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = diffopt.module_clone(x, by="copy", device="meta")
    assert y.is_meta
    move = y.grad_fn
    clone = move.next_functions[0][0]
    assert clone.next_functions[0][0].variable is x
    net = torch.nn.Linear(2, 1)
    state = diffopt.extract_state_dict(net, by="copy", device=torch.device("cpu"))
    (state.params[0]["weight"].sum() * 3).backward()
    torch.testing.assert_close(net.weight.grad, torch.full((1, 2), 3.0))


def test_enable_visual_names_the_parameters_for_make_dot():
    net = torch.nn.Linear(2, 1)
    state = diffopt.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")
    assert list(state.visual_contents) == ["step0.weight", "step0.bias"]
    assert state.visual_contents["step0.weight"] is net.weight
    assert diffopt.extract_state_dict(net).visual_contents is None
    source = diffopt.visual.make_dot(net(torch.ones(1, 2)).sum(), params=state).source
    assert "step0.weight" in source and "step0.bias" in source
    with pytest.raises(TypeError, match="visual_prefix"):
        diffopt.extract_state_dict(net, enable_visual=True, visual_prefix=0)
