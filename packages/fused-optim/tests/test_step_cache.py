"""The step's reuse of its gathered op lists: every change that must make a step gather afresh
(gradients replaced or gone, groups and state replaced or edited, parameters swapped, settings
changed), each checked step by step against torch.optim. Every test runs twice: as built, and with
the reused calls kept on the C++ side (_native.KeptStep), which is what runs without the fast path
(a torch other than the build's)."""

from __future__ import annotations

import copy
import itertools
import weakref

import pytest
import torch

import fused_optim
from fused_optim import _C, _native


@pytest.fixture(autouse=True, params=["as built", "kept"])
def path(request, monkeypatch):
    if request.param == "kept":  # the step reuse then keeps its calls (fused_optim.optim._common._Gathered)
        monkeypatch.setitem(_native.BUILD_INFO, "eager", False)
    return request.param

KWARGS = {"Adam": dict(lr=0.01, amsgrad=True), "SGD": dict(lr=0.05, momentum=0.9), "Adagrad": dict(lr=0.1),
          "RMSprop": dict(lr=0.01, centered=True, momentum=0.5), "NAdam": dict(lr=0.01),
          "Adafactor": dict(lr=0.01)}
NAMES = list(KWARGS)


def _params(seed=0, n=4, matrices=False):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3 + i, 2 + i) if matrices else (3 + i,) for i in range(n)]
    return [torch.randn(shape, generator=gen, dtype=torch.float64).requires_grad_() for shape in shapes]


class _Pair:
    """torch.optim and ours on equal parameters, given the same gradients and the same edits."""

    def __init__(self, name, n=4, matrices=False):
        self.name = name
        self.ref_params = _params(n=n, matrices=matrices)
        self.our_params = [p.detach().clone().requires_grad_() for p in self.ref_params]
        self.ref = getattr(torch.optim, name)(self.ref_params, **KWARGS[name])
        self.ours = getattr(fused_optim, name)(self.our_params, **KWARGS[name])
        self.count = 0

    def both(self, edit):
        edit(self.ref, self.ref_params)
        edit(self.ours, self.our_params)

    def step(self, with_grad=None, fresh=True, state=True):
        """One step; ``with_grad`` lists the parameters given a gradient (all by default);
        ``fresh=False`` accumulates into the existing gradients instead of replacing them."""
        self.count += 1
        gen = torch.Generator().manual_seed(100 + self.count)
        for i, (a, b) in enumerate(zip(self.ref_params, self.our_params)):
            if with_grad is not None and i not in with_grad:
                a.grad = b.grad = None
                continue
            g = torch.randn(a.shape, generator=gen, dtype=a.dtype)
            if fresh or a.grad is None:
                a.grad, b.grad = g.clone(), g.clone()
            else:
                a.grad.add_(g)
                b.grad.add_(g)
        self.ref.step()
        self.ours.step()
        self.check(state)

    def check(self, state=True):
        for a, b in zip(self.ref_params, self.our_params):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
        if not state:
            return
        rs, os_ = self.ref.state_dict(), self.ours.state_dict()
        assert rs["param_groups"] == os_["param_groups"]
        assert rs["state"].keys() == os_["state"].keys()
        for k, state in rs["state"].items():
            assert state.keys() == os_["state"][k].keys()
            for key, value in state.items():
                torch.testing.assert_close(os_["state"][k][key], value, rtol=1e-12, atol=1e-14)

    def reused(self):
        return "_gathered" in self.ours.__dict__


def _warm(name, n=4, matrices=False):
    pair = _Pair(name, n, matrices)
    for _ in range(3):
        pair.step()
    assert pair.reused()  # what the edits below must invalidate is in place
    return pair


@pytest.mark.parametrize("name", NAMES)
def test_fresh_and_accumulated_gradients_reuse_the_gathered_lists(name):
    pair = _warm(name)
    for fresh in (True, False, True):  # zero_grad(set_to_none=True)-style new objects, then in place
        pair.step(fresh=fresh)
    assert pair.reused()


@pytest.mark.parametrize("name", NAMES)
def test_a_gradient_that_goes_none_then_comes_back(name):
    pair = _warm(name)
    pair.step(with_grad={0, 2, 3})
    pair.step(with_grad={0, 2, 3})
    pair.step()
    pair.step(with_grad=set())
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_without_state_gets_its_first_gradient(name):
    pair = _Pair(name)
    for _ in range(3):
        pair.step(with_grad={0, 1})
    pair.step()  # params 2 and 3 get state now
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_zero_grad_set_to_none_then_new_gradients(name):
    pair = _warm(name)
    pair.both(lambda opt, _: opt.zero_grad(set_to_none=True))
    pair.ref.step()
    pair.ours.step()  # no gradients: no update
    pair.check()
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_add_param_group(name):
    pair = _warm(name)
    extra = _params(seed=5, n=2)

    def add(opt, params):
        new = [p.detach().clone().requires_grad_() for p in extra]
        params.extend(new)
        opt.add_param_group({"params": new, "lr": 0.02})

    pair.both(add)
    pair.step()
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_load_state_dict(name):
    pair = _warm(name)
    other = _Pair(name)
    for _ in range(5):
        other.step()
    saved = other.ref.state_dict()
    pair.both(lambda opt, _: opt.load_state_dict(copy.deepcopy(saved)))  # each its own tensors
    pair.step()
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_replaced_in_its_group(name):
    pair = _warm(name)
    new = torch.randn(4, dtype=torch.float64)

    def swap(opt, params):
        p = new.clone().requires_grad_()
        params[1] = p
        opt.param_groups[0]["params"][1] = p

    pair.both(swap)
    pair.step(state=False)  # the old parameter's state stays (torch's state_dict() can't save it)
    pair.step(state=False)
    ours, ref = pair.ours.state[pair.our_params[1]], pair.ref.state[pair.ref_params[1]]
    assert ours.keys() == ref.keys()
    for key in ref:
        torch.testing.assert_close(ours[key], ref[key], rtol=1e-12, atol=1e-14)


GROUP_PASSES = {"_C": _C._grads_if_same, "fast path": _native.grads_if_same}


@pytest.mark.parametrize("which", GROUP_PASSES)
def test_the_per_group_pass_reads_gradients_only_of_the_kept_parameters(which):
    # The reuse's pass over a group (_C's, through Python's .grad getter; the fast path's reads each
    # gradient from the tensor): the gradients, where the group holds exactly the kept parameters
    # (identity, in order), else None.
    grads_if_same = GROUP_PASSES[which]
    a, b = torch.randn(3, requires_grad=True), torch.nn.Parameter(torch.randn(2))
    a.grad, b.grad = torch.ones(3), torch.full((2,), 2.0)
    c = torch.randn(4, requires_grad=True)  # no gradient
    kept = [a, b, c]
    grads = grads_if_same([a, b, c], kept)
    assert len(grads) == 3 and grads[0] is a.grad and grads[1] is b.grad and grads[2] is None
    for other in ([b, a, c], [a, b], [a, b, c, a], [a, b, torch.randn(4)], (a, b, c)):
        assert grads_if_same(other, kept) is None, other
    assert grads_if_same([], []) == []


class _Tagged(torch.Tensor):
    pass


@pytest.mark.parametrize("which", GROUP_PASSES)
def test_the_per_group_pass_asks_the_getter_where_python_could_answer(which):
    # A torch function mode sees every .grad a step reads, and a subclass's gradient comes back as
    # the getter gives it, on either pass.
    grads_if_same = GROUP_PASSES[which]
    seen = []

    class Watch(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    p = torch.randn(3, requires_grad=True)
    p.grad = torch.ones(3)
    with Watch():
        grads = grads_if_same([p], [p])
    assert grads[0] is p.grad and seen == ["__get__"]
    q = torch.randn(2).as_subclass(_Tagged).requires_grad_()
    q.grad = torch.zeros(2).as_subclass(_Tagged)
    grads = grads_if_same([q], [q])
    assert type(grads[0]) is _Tagged and grads[0] is q.grad


@pytest.mark.parametrize("name", NAMES)
def test_lr_and_other_settings_changed_between_steps(name):
    pair = _warm(name)

    def lr(opt, _):
        opt.param_groups[0]["lr"] *= 0.5

    def decay(opt, _):
        opt.param_groups[0]["weight_decay"] = 0.1

    pair.both(lr)
    pair.step()
    assert pair.reused()  # lr goes to the op afresh; it needs no new gathering
    pair.both(decay)
    pair.step()
    pair.step()


def test_a_scheduler_changes_lr_every_step():
    pair = _warm("Adam")
    scheds = [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7) for opt in (pair.ref, pair.ours)]
    for _ in range(4):
        pair.step()
        for s in scheds:
            s.step()


@pytest.mark.parametrize("name", NAMES)
def test_state_entries_replaced_deleted_or_cleared(name):
    pair = _warm(name)
    key = {"Adam": "exp_avg", "SGD": "momentum_buffer", "Adagrad": "sum", "RMSprop": "square_avg",
           "NAdam": "exp_avg_sq", "Adafactor": "variance"}[name]

    def replace(opt, params):
        opt.state[params[2]][key] = opt.state[params[2]][key].clone().fill_(0.25)

    def forget(opt, params):
        del opt.state[params[1]]

    pair.both(replace)
    pair.step()
    if name != "Adagrad":  # torch's Adagrad creates its state in the constructor only
        pair.both(forget)
        pair.step()
        pair.both(lambda opt, _: opt.state.clear())
        pair.step()
    pair.step()


@pytest.mark.parametrize("name", NAMES)
def test_state_swapped_between_parameters(name):
    # The same state values in a different order must not reuse the old rows.
    pair = _warm(name)

    def swap(opt, params):
        a, b = opt.state[params[0]], opt.state[params[3]]
        for key in list(a):
            if a[key].shape == b[key].shape:
                a[key], b[key] = b[key], a[key]

    pair.both(swap)
    pair.step()


def _adam_reusing(*groups):
    """An Adam whose step reuses its gathered lists: groups of parameters of the given sizes, all ones."""
    params = [[torch.nn.Parameter(torch.ones(n)) for n in sizes] for sizes in groups]
    opt = fused_optim.Adam([{"params": ps} for ps in params], lr=0.1)
    for _ in range(3):
        for p in itertools.chain(*params):
            p.grad = torch.ones_like(p)
        opt.step()
    assert "_gathered" in opt.__dict__
    return opt, list(itertools.chain(*params))


def test_adafactors_kept_steps_on_matrices_and_what_ends_them():
    # Adafactor's kept step skips its checks call where its kept tensors (params, averages, counters)
    # are unchanged and the gradients fit: steps still equal torch.optim's, and a replaced average,
    # a moved parameter or a gradient sharing a parameter's memory takes the full path.
    pair = _warm("Adafactor", matrices=True)
    kept = fused_optim._C._kept_table_steps()
    for _ in range(3):
        pair.step()
    assert fused_optim._C._kept_table_steps() - kept >= 2  # the table was kept and used

    def replace(opt, params):
        opt.state[params[1]]["row_var"] = opt.state[params[1]]["row_var"].clone()

    pair.both(replace)
    pair.step()
    pair.step()

    def move(opt, params):
        with torch.no_grad():
            params[2].data = params[2].data.clone()

    pair.both(move)
    pair.step(state=False)  # (the moved parameter's state is keyed by the same object: compared below)
    pair.step()
    pair.ours.step()  # (kept again)
    pair.our_params[0].grad = pair.our_params[0].detach()  # the parameter's own memory, which the step writes
    written = [p.detach().clone() for p in pair.our_params]
    with pytest.raises(ValueError, match="memory"):
        pair.ours.step()
    for p, w in zip(pair.our_params, written):
        assert torch.equal(p, w)  # refused before any write


def test_a_sparse_gradient_after_reuse_is_still_rejected():
    opt, (w,) = _adam_reusing([3])
    before = w.detach().clone()
    w.grad = torch.ones(3).to_sparse()
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        opt.step()
    assert torch.equal(w.detach(), before)


def test_a_bad_lr_after_reuse_leaves_every_group_untouched():
    opt, params = _adam_reusing([3], [2])
    before = [p.detach().clone() for p in params]
    opt.param_groups[1]["lr"] = -1.0
    with pytest.raises(ValueError):
        opt.step()
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)


def test_the_cache_keeps_no_gradient_alive():
    opt, (w,) = _adam_reusing([3])
    ref = weakref.ref(w.grad)
    opt.zero_grad(set_to_none=True)
    assert ref() is None


@pytest.mark.parametrize("name, setting, value", [("SGD", "momentum", 0.0), ("RMSprop", "momentum", 0.0),
                                                  ("RMSprop", "centered", False), ("Adam", "amsgrad", False)])
def test_a_setting_that_decides_the_rows_changed(name, setting, value):
    pair = _warm(name)
    pair.both(lambda opt, _: opt.param_groups[0].__setitem__(setting, value))
    pair.step()
    pair.step()


def test_a_tensor_setting_changed_in_place_after_reuse():
    # The op's keyword arguments are kept only for plain settings: a tensor beta changed in place
    # (the key sees the same object) is read afresh.
    results = []
    for cls in (torch.optim.Adam, fused_optim.Adam):
        p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
        betas = (torch.tensor(0.9, dtype=torch.float64), torch.tensor(0.999, dtype=torch.float64))
        opt = cls([p], lr=0.1, betas=betas)
        for i in range(4):
            p.grad = torch.full_like(p, i + 1.0)
            opt.step()
        betas[0].fill_(0.5)
        p.grad = torch.full_like(p, 7.0)
        opt.step()
        results.append((p.detach().clone(), opt.state[p]["exp_avg"].clone()))
    for ours, ref in zip(results[1], results[0]):
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("group", [0, 1])
def test_a_gradient_gone_in_one_of_two_groups_after_reuse(group):
    # Reused calls are all checked before the first writes: a gradient gone in either group sends
    # the step down the full path, which skips that parameter, with the other group updated once.
    pairs = []
    for cls in (torch.optim.Adam, fused_optim.Adam):
        params = [torch.nn.Parameter(torch.full((n,), float(n), dtype=torch.float64)) for n in (2, 3, 4, 5)]
        opt = cls([{"params": params[:2]}, {"params": params[2:], "lr": 0.05}], lr=0.1)
        for i in range(4):
            for p in params:
                p.grad = torch.full_like(p, i + 1.0) if i < 3 or p is not params[2 * group + 1] else None
            opt.step()
        pairs.append(params)
    for ours, ref in zip(pairs[1], pairs[0]):
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-14)




def test_a_step_plan_declines_only_before_anything_is_written():
    # StepPlan.run is also the reused lists' step (with the unboxed calls, which may decline): a
    # decline in the check pass or by the first call leaves the step to the full path; a decline
    # after an earlier call ran would make that path update twice, so it raises.
    from fused_optim.optim._common import StepPlan

    def declining_at(n):  # an op that declines its n-th invocation, recording each one
        seen = []

        def op(*lists, **kwargs):
            seen.append(list(lists[0]))
            return NotImplemented if len(seen) == n else None
        return op, seen

    def run(op, *lists):
        return StepPlan(torch.optim.SGD([torch.zeros(1, requires_grad=True)]), "X", [(op, [x], {}) for x in lists]).run()

    a, b = [torch.ones(1)], [torch.zeros(1)]
    op, seen = declining_at(1)
    assert run(op, a) is False and seen == [a]
    op, seen = declining_at(2)  # two calls: the check pass's second declines; nothing ran
    assert run(op, a, b) is False and seen == [a, b]
    op, seen = declining_at(3)  # the first real call declines: still nothing written
    assert run(op, a, b) is False and len(seen) == 3
    op, seen = declining_at(0)
    assert run(op, a, b) is True and seen == [a, b, a, b]
    op, seen = declining_at(4)  # accepted by the check pass, declined after the first call ran
    with pytest.raises(RuntimeError, match="declined arguments the step had already checked"):
        run(op, a, b)
