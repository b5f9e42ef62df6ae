"""``capturable=True``: the fused kernels read each step counter where it lives, compute the step's
bias corrections from it and advance it, as torch.optim keeps ``state["step"]`` with that option.
Checked on the CPU, whose kernels take the same path (and through the emulated CUDA launch, which
the noxfile runs this file under too): the results of torch.optim's same optimizer, no value read
on the host, and a faked CUDA-graph capture that such a step passes and a plain one fails."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import twins
from torch.profiler import ProfilerActivity, profile

import fused_optim
from fused_optim import _C
from fused_optim.optim import _common

READS = ("aten::item", "aten::_local_scalar_dense")  # a tensor's value read into a host number
CHUNK = 2048  # elements per emulated CUDA block (csrc/cuda/launch_plan.h)

# Every drop-in class with a capturable option (torch.optim's, and Lion, Adan and Adafactor), with
# options that reach each one's step-dependent terms (bias corrections, schedules, averaging,
# Adafactor's decay t^c and relative step size min(lr, 1/sqrt(t))).
KWARGS = {
    "Adam": dict(lr=0.01, amsgrad=True, weight_decay=0.1),
    "AdamW": dict(lr=0.01, weight_decay=0.1),
    "Adamax": dict(lr=0.02, weight_decay=0.1),
    "NAdam": dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
    "RAdam": dict(lr=0.01, weight_decay=0.1),
    "ASGD": dict(lr=0.05, t0=3, lambd=1e-3, weight_decay=0.1),
    "Adadelta": dict(lr=0.5, weight_decay=0.1),
    "RMSprop": dict(lr=0.01, centered=True, momentum=0.5),
    "Rprop": dict(lr=0.01),
    "Lion": dict(lr=0.01, weight_decay=0.1),
    "Adan": dict(lr=0.01, weight_decay=0.02),
    "Adafactor": dict(lr=0.4, weight_decay=0.1, d=1.5),  # rho = lr up to t = 6, 1/sqrt(t) after
}
NAMES = list(KWARGS)
STEPS = 10


def _lockstep(name, dtype, our_kwargs, steps=STEPS, make_params=twins.params):
    """``steps`` steps of the twin (capturable=False) and of ours (``our_kwargs`` added) from the same
    parameters and gradients; parameter 1 has no gradient every third step, so that its counter
    lags the others' (each tensor's terms come from its own count)."""
    ref_params = make_params(dtype)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    ref = twins.twin(name)(ref_params, **KWARGS[name])
    ours = getattr(fused_optim, name)(our_params, **KWARGS[name], **our_kwargs)
    for step in range(steps):
        for i, (a, b, g) in enumerate(zip(ref_params, our_params, twins.grads(ref_params, step))):
            skip = i == 1 and step % 3 == 2
            a.grad, b.grad = (None, None) if skip else (g.clone(), g.clone())
        ref.step()
        ours.step()
    return ref, ours, ref_params, our_params


def _assert_states_close(ref, ours, ref_params, our_params, tol):
    for a, b in zip(ref_params, our_params, strict=True):
        torch.testing.assert_close(b, a, **tol)
        assert list(ours.state[b]) == list(ref.state[a])  # torch's keys, in torch's order
        for key, x in ref.state[a].items():
            torch.testing.assert_close(ours.state[b][key], x, **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", NAMES)
def test_ten_capturable_steps_match_torch(name, dtype):
    ref, ours, ref_params, our_params = _lockstep(name, dtype, dict(capturable=True))
    _assert_states_close(ref, ours, ref_params, our_params, twins.TOL[dtype])
    for i, p in enumerate(our_params):
        step = ours.state[p]["step"]
        assert step.device == p.device and step.dtype == torch.float32 and step.dim() == 0
        assert float(step) == (STEPS - 3 if i == 1 else STEPS)


@pytest.mark.parametrize("name", NAMES)
def test_the_kernels_counters_give_the_host_counters_bits(name):
    # The same formula (math/<algo>.h's StepRow) run by the kernel from the counter or by the host
    # from the count it read: bit for bit the same step.
    _, host, _, host_params = _lockstep(name, torch.float64, {})
    _, kernel, _, kernel_params = _lockstep(name, torch.float64, dict(capturable=True))
    _assert_states_close(host, kernel, host_params, kernel_params, dict(rtol=0, atol=0))


@pytest.mark.parametrize("name", NAMES)
def test_the_group_s_capturable_reaches_the_op(name, monkeypatch):
    # On the CPU both paths give the same bits (above), so the flag's way to the kernel is checked
    # here: each group's own setting, on every step (the second reuses the first one's lists).
    seen = []
    fused = getattr(fused_optim, name)
    op = getattr(fused_optim.ops, fused._op)
    monkeypatch.setattr(fused_optim.ops, fused._op, lambda *a, **kw: (seen.append(kw["capturable"]), op(*a, **kw))[1])
    params = twins.params(torch.float32)
    opt = fused([{"params": params[:2]}, {"params": params[2:], "capturable": False}], **KWARGS[name],
                capturable=True)
    for _ in range(2):
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
    assert seen[-2:] == [True, False] and len(seen) >= 4


def test_only_a_device_tensor_hyper_parameter_sends_a_capturable_group_to_torch():
    # The fused kernels take hyper-parameters as numbers: one that is a tensor on a device would be
    # read on the host, so torch.optim runs such a group; parameters on a device do not matter ("meta"
    # stands in for a GPU here).
    def needed(**group):
        return _common.torch_path_needed(SimpleNamespace(param_groups=[dict(params=[torch.ones(2, device="meta")],
                                                                            capturable=True, **group)]))
    assert not needed(lr=0.1, betas=(0.9, 0.999))
    assert not needed(lr=torch.tensor(0.1), betas=(torch.tensor(0.9), 0.999))  # on the CPU: read without a sync
    assert needed(lr=torch.tensor(0.1, device="meta"))
    assert needed(lr=0.1, betas=(torch.tensor(0.9, device="meta"), 0.999))
    assert not _common.torch_path_needed(SimpleNamespace(param_groups=[dict(
        params=[torch.ones(2, device="meta")], capturable=False, lr=torch.tensor(0.1, device="meta"))]))


def _reloaded_run(name, first, second):
    """Five steps of ``first`` ("ours", capturable, or "torch"), its state_dict loaded into a new
    ``second``, five more steps there: the parameters and the optimizer. torch.optim's eager steps
    refuse capturable CPU parameters, so its group is switched back to capturable=False after the
    load, and ours to True."""
    params = twins.params(torch.float64)
    make = {"ours": lambda: getattr(fused_optim, name)(params, **KWARGS[name], capturable=True),
            "torch": lambda: twins.twin(name)(params, **KWARGS[name])}
    opt = make[first]()
    for step in range(STEPS):
        if step == STEPS // 2:
            saved = opt.state_dict()
            opt = make[second]()
            opt.load_state_dict(saved)
            opt.param_groups[0]["capturable"] = second == "ours"
        for i, (p, g) in enumerate(zip(params, twins.grads(params, step))):
            p.grad = None if i == 1 and step % 3 == 2 else g
        opt.step()
    return params, opt


@pytest.mark.parametrize("name", ["Adam", "NAdam", "ASGD"])
def test_state_dicts_interchange_with_torch(name):
    # As torch.optim saved and reloaded by itself (its load casts the scalar state but the step to
    # the parameters' dtype: NAdam's mu_product, ASGD's eta and mu).
    ref_params, ref = _reloaded_run(name, "torch", "torch")
    for first, second in (("ours", "torch"), ("torch", "ours")):
        params, opt = _reloaded_run(name, first, second)
        _assert_states_close(ref, opt, ref_params, params, twins.TOL[torch.float64])
        for a, b in zip(ref_params, params):
            assert opt.state[b]["step"].dtype == ref.state[a]["step"].dtype


def _host_reads(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key in READS)


@pytest.mark.parametrize("name", NAMES)
def test_a_capturable_step_reads_no_value_on_the_host(name):
    for n in (10, 100):
        gen = torch.Generator().manual_seed(n)
        params = [torch.randn(3, 2, generator=gen).requires_grad_() for _ in range(n)]
        opt = getattr(fused_optim, name)(params, **KWARGS[name], capturable=True)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        assert _host_reads(lambda opt=opt: (opt.step(), opt.step())) == 0


@pytest.fixture
def capturing(monkeypatch):
    """The current CUDA stream is capturing a graph (as far as the step can tell)."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


@pytest.mark.parametrize("name", NAMES)
def test_under_a_faked_capture_a_capturable_step_runs_and_a_plain_one_refuses(name, capturing):
    params = twins.params(torch.float32)
    for p in params:
        p.grad = torch.ones_like(p)
    plain = getattr(fused_optim, name)(params, **KWARGS[name])
    with pytest.raises(RuntimeError, match=r"capturing a graph, but param_groups\[0\] has capturable=False"):
        plain.step()
    opt = getattr(fused_optim, name)(params, **KWARGS[name], capturable=True)
    opt.step()  # creates the state
    before = [p.detach().clone() for p in params]
    assert _host_reads(opt.step) == 0
    assert any(not torch.equal(p, b) for p, b in zip(params, before))
    assert all(float(opt.state[p]["step"]) == 2 for p in params)


def test_found_inf_leaves_the_counters_and_everything_else_alone():
    p, m, v, step = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.tensor(4.0)
    kwargs = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
                  decoupled_weight_decay=False, capturable=True)
    fused_optim.ops.adam_step_([p], [torch.ones(3)], [m], [v], [], [step], found_inf=torch.tensor(1.0), **kwargs)
    assert torch.equal(p, torch.ones(3)) and torch.equal(m, torch.zeros(3)) and float(step) == 4.0
    fused_optim.ops.adam_step_([p], [torch.ones(3)], [m], [v], [], [step], found_inf=torch.tensor(0.0), **kwargs)
    assert float(step) == 5.0 and not torch.equal(p, torch.ones(3))


def test_the_eager_call_and_the_dispatcher_default_capturable_to_false():
    # The op's schema defaults capturable to False: a call without it increments on the host.
    p, m, v, step = torch.ones(2), torch.zeros(2), torch.zeros(2), torch.tensor(0.0)
    torch.ops.fused_optim.adam_step_([p], [torch.ones(2)], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.999,
                                     weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
                                     decoupled_weight_decay=False)
    torch.testing.assert_close(p, torch.full((2,), 0.9))
    assert float(step) == 1.0


@pytest.fixture
def small_emulated_grids() -> Iterator[None]:
    """Every call through the emulated CUDA launch, with grids of 3 blocks: a tensor of several
    chunks spans launches, and each launch's last slot may end a tensor or not."""
    previous = _C._emulate_cuda(True), _C._emulated_grid_limit(3)
    try:
        yield
    finally:
        _C._emulate_cuda(previous[0])
        _C._emulated_grid_limit(previous[1])


def _spanning_params(dtype: torch.dtype) -> list[torch.Tensor]:
    # 7 chunks over three launches, an empty tensor (a slot of no blocks that still advances its
    # counter), and more tensors than one launch holds.
    gen = torch.Generator().manual_seed(3)
    shapes = [(7 * CHUNK + 5,), (0,), (2, CHUNK + 1)] + [(9,)] * 33
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("name", ["Adam", "NAdam", "RAdam", "Adan"])
def test_capturable_steps_through_the_cuda_plan_match_torch(name, small_emulated_grids):
    # Each counter is read by every block of its tensor and advanced once, after the last one.
    before = _C._emulated_launches()
    ref, ours, ref_params, our_params = _lockstep(name, torch.float64, dict(capturable=True), steps=4,
                                                  make_params=_spanning_params)
    assert _C._emulated_launches() - before >= 4 * 3
    _assert_states_close(ref, ours, ref_params, our_params, twins.TOL[torch.float64])
    assert [float(ours.state[p]["step"]) for p in our_params] == [4.0, 3.0] + [4.0] * 34


def _adafactor_lists(factored: bool):
    gen = torch.Generator().manual_seed(7)
    shape = (4, 6) if factored else (9,)
    p, g = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    rows = [torch.rand(4, 1, generator=gen)] if factored else []
    cols = [torch.rand(1, 6, generator=gen)] if factored else []
    variances = [] if factored else [torch.rand(9, generator=gen)]
    return [p], [g], rows, cols, variances, [torch.tensor(3.0)]


@pytest.mark.parametrize("factored", [True, False])
def test_a_capturable_adafactor_step_leaves_found_inf_to_its_kernels(factored):
    # Each of Adafactor's passes reads found_inf itself: set, nothing is written and the counter
    # stays, while the gradients are unscaled all the same (the host, which never reads the flag,
    # runs its unscaling pass); a plain step reads the flag first and leaves even the gradients.
    kwargs = dict(lr=0.4, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0, weight_decay=0.1, maximize=False,
                  factored=factored)
    for capturable in (True, False):
        lists = _adafactor_lists(factored)
        before = [[x.clone() for x in lst] for lst in lists]
        fused_optim.ops.adafactor_step_(*lists, grad_scale=torch.tensor(4.0), found_inf=torch.tensor(1.0),
                                        capturable=capturable, **kwargs)
        for i, (now, was) in enumerate(zip(lists, before, strict=True)):
            expected = [x / 4 for x in was] if i == 1 and capturable else was
            assert all(torch.equal(x, y) for x, y in zip(now, expected, strict=True)), (capturable, i)
    lists = _adafactor_lists(factored)
    twin = [[x.clone() for x in lst] for lst in lists]
    fused_optim.ops.adafactor_step_(*lists, grad_scale=torch.tensor(4.0), found_inf=torch.tensor(0.0),
                                    capturable=True, **kwargs)
    twin[1][0] /= 4
    fused_optim.ops.adafactor_step_(*twin, **kwargs)
    assert float(lists[5][0]) == float(twin[5][0]) == 4.0
    for now, ref in zip(lists, twin, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(now, ref, strict=True))  # the same formulas, read where they are


def _adafactor_spanning_params(dtype: torch.dtype) -> list[torch.Tensor]:
    # A vector of 7 chunks and a matrix of 2 (over three-block launches), a batch of matrices, and
    # more small tensors (no empty one: torch.optim.Adafactor divides by its size).
    gen = torch.Generator().manual_seed(5)
    shapes = [(7 * CHUNK + 5,), (3, CHUNK // 2 + 1), (2, 3, 5)] + [(9,)] * 20 + [(4, 3)] * 20
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


def test_capturable_adafactor_through_the_cuda_plan_matches_torch(small_emulated_grids):
    # Each pass reads every tensor's counter from each of its blocks; only the last (the apply
    # pass) advances it, once, after the tensor's last block.
    ref, ours, ref_params, our_params = _lockstep("Adafactor", torch.float64, dict(capturable=True), steps=4,
                                                  make_params=_adafactor_spanning_params)
    _assert_states_close(ref, ours, ref_params, our_params, twins.TOL[torch.float64])
    assert [float(ours.state[p]["step"]) for p in our_params] == [4.0, 3.0] + [4.0] * 41


def test_a_compiled_capturable_adafactor_step_equals_the_eager_one():
    # Dynamo traces the op with its capturable flag (the schema's default is False): the compiled
    # step runs the same kernels, so both give the same bits and advance the counters alike.
    params = twins.params(torch.float32)
    eager_params = [p.detach().clone().requires_grad_() for p in params]
    compiled, eager = (fused_optim.Adafactor(ps, **KWARGS["Adafactor"], capturable=True) for ps in (params, eager_params))
    step = torch.compile(compiled.step)
    for k in range(3):
        for p, q, g in zip(params, eager_params, twins.grads(params, k)):
            p.grad, q.grad = g.clone(), g.clone()
        step()
        eager.step()
    for p, q in zip(params, eager_params, strict=True):
        assert torch.equal(p, q)
        assert float(compiled.state[p]["step"]) == float(eager.state[q]["step"]) == 3.0
