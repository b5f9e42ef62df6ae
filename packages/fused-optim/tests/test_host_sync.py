"""What a step asks of the host: no read of a tensor's value through the dispatcher
(``aten::item``, a device synchronization off the CPU) per parameter, whatever dtype the state
scalars have; and CUDA-graph capture refused without ``capturable=True``, as torch.optim refuses
it (simulated on the CPU)."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import twins
from test_optim import ALL, CONFIGS, RICH, _assert_state_close
from torch.profiler import ProfilerActivity, profile
from twins import twin

import fused_optim

READS = ("aten::item", "aten::_local_scalar_dense")  # a tensor's value read into a host number


def _params(n, dtype):
    gen = torch.Generator().manual_seed(n)
    return [torch.randn(3, 2, generator=gen, dtype=dtype).requires_grad_() for _ in range(n)]


def _reads_in_two_steps(name, n, dtype, reload):
    params = _params(n, dtype)
    opt = getattr(fused_optim, name)(params, **RICH[name])
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    if reload:  # load_state_dict casts the scalar state to the parameters' dtype, as torch.optim does
        opt.load_state_dict(opt.state_dict())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
        opt.step()
    return sum(e.count for e in prof.key_averages() if e.key in READS)


@pytest.mark.parametrize("reload", [False, True], ids=["fresh", "reloaded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ALL)
def test_a_step_reads_no_tensor_value_through_the_dispatcher(name, dtype, reload):
    counts = [_reads_in_two_steps(name, n, dtype, reload) for n in (10, 100)]
    assert counts == [0, 0]


def _adafactor_calls(dtype):
    """The ATen calls of an Adafactor step and of its functional update's forward and backward,
    on matrices and vectors, with the float64 conversions among them counted apart."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(shape, generator=gen, dtype=dtype).requires_grad_() for shape in [(4, 3), (2, 3, 5), (6,)]]
    opt = fused_optim.Adafactor(params, lr=0.05, weight_decay=0.1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=dtype)
    opt.step()
    rows = [opt.state[p]["row_var"] if p.dim() > 1 else None for p in params]
    cols = [opt.state[p]["col_var"] if p.dim() > 1 else None for p in params]
    variances = [opt.state[p]["variance"] if p.dim() <= 1 else None for p in params]
    inputs = [p.detach().clone().requires_grad_() for p in params]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        opt.step()
        new = fused_optim.functional.adafactor_update(inputs, [p.grad for p in params], rows, cols, variances, 2,
                                                      lr=0.05, weight_decay=0.1)
        sum(p.square().sum() for p in new.params).backward()
    names = [e.name for e in prof.events()]
    to_double = [e for e in prof.events() if e.name == "aten::_to_copy" and e.concrete_inputs[1:2] == [7]]
    return names, len(to_double)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adafactor_step_sizes_are_computed_where_the_norms_are(dtype):
    # The parameter and update norms stay on the params' device: the apply kernel reads them there
    # and computes each step size itself, so a CUDA step waits for nothing. What the CPU can show
    # of a read-back: no norm stacked, converted to float64 (ScalarType 7) or read as a number.
    names, to_double = _adafactor_calls(dtype)
    assert "fused_optim::adafactor_step_" in names and "fused_optim::adafactor_update_backward" in names
    assert not {"aten::stack", *READS} & set(names)
    assert to_double == 0


SCALARS = {"ASGD": ("eta", "mu"), "NAdam": ("mu_product",)}


ALL_ON_HOST = 0b111  # a bit per state column (ASGD: eta, mu, step; NAdam: mu_product)


@contextlib.contextmanager
def state_columns_on_host(columns):
    """The step's state columns in the bit mask ``columns`` are treated as off the parameters'
    device: read at launch and advanced on the host, as a CUDA step treats state kept on the CPU
    (NAdam's mu_product; ASGD's step after load_state_dict moved eta and mu to the GPU); the others
    are read and advanced by the kernel."""
    previous = torch.ops.fused_optim._state_scalars_on_host(columns)
    try:
        yield
    finally:
        torch.ops.fused_optim._state_scalars_on_host(previous)


# ASGD's columns on the host: all, the step alone (eta and mu moved to the GPU by load_state_dict),
# eta and mu alone; NAdam's one column.
HOST_COLUMNS = {"ASGD": {"all": ALL_ON_HOST, "step": 0b100, "eta-mu": 0b011}, "NAdam": {"all": ALL_ON_HOST}}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, kwargs, columns", [
    pytest.param(*c.values, columns, id=f"{c.id}-{label}")
    for c in CONFIGS if c.values[0] in SCALARS for label, columns in HOST_COLUMNS[c.values[0]].items()])
def test_state_scalars_advanced_on_the_host_match_the_twin(name, kwargs, columns, dtype):
    with state_columns_on_host(columns):
        ref, ours, ref_params, our_params = twins.run_both(name, kwargs, dtype)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **twins.TOL[dtype])
    _assert_state_close(ref, ours, twins.TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["ASGD", "NAdam"])
@pytest.mark.parametrize("columns", [0, ALL_ON_HOST], ids=["kernel-state", "host-state"])
def test_state_scalars_of_any_dtype_are_rounded_like_the_twin_s(name, dtype, columns):
    # load_state_dict gives eta and mu (ASGD) and mu_product (NAdam) the parameters' dtype; here
    # they get `dtype` beside float64 parameters, which the step then reads and writes in that
    # dtype, rounded as torch.optim's in-place updates round them.
    ref_params = twins.params(torch.float64)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    kwargs = dict(RICH[name], lr=0.02, t0=1) if name == "ASGD" else RICH[name]
    ref, ours = twin(name)(ref_params, **kwargs), getattr(fused_optim, name)(our_params, **kwargs)
    for step in range(6):
        for a, b, g in zip(ref_params, our_params, twins.grads(ref_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        with state_columns_on_host(columns):
            ours.step()
        if step == 1:
            for opt in (ref, ours):
                for state in opt.state.values():
                    state.update((key, state[key].to(dtype)) for key in SCALARS[name])
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **twins.TOL[torch.float64])
        for key in SCALARS[name]:
            assert ours.state[b][key].dtype == dtype
            torch.testing.assert_close(ours.state[b][key], ref.state[a][key], rtol=0, atol=0)


@pytest.fixture
def capturing(monkeypatch):
    """The current CUDA stream is capturing a graph (as far as the step can tell)."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


def _stepped(name, n=3, **options):
    params = _params(n, torch.float64)
    opt = getattr(fused_optim, name)(params, **RICH[name], **options)
    for p in params:
        p.grad = torch.ones_like(p)
    return params, opt


@pytest.mark.parametrize("steps_before", [0, 2])
@pytest.mark.parametrize("name", ALL)
def test_a_step_during_graph_capture_is_refused_without_capturable(name, steps_before, monkeypatch):
    params, opt = _stepped(name)
    for _ in range(steps_before):  # the second one reuses the first one's gathered lists
        opt.step()
    before = [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as the capturing fixture, from here on
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"capturing a graph, but param_groups\[0\] has capturable=False"):
        opt.step(lambda: pytest.fail("the closure ran"))
    for p, b in zip(params, before[0]):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)
    after = opt.state_dict()["state"]
    assert after.keys() == before[1]["state"].keys()
    for key, state in before[1]["state"].items():
        for k, v in state.items():
            torch.testing.assert_close(after[key][k], v, rtol=0, atol=0)


def test_capture_needs_every_group_capturable(capturing):
    _, opt = _stepped("Adam", capturable=True)
    extra = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt.add_param_group(dict(params=[extra], capturable=False))
    with pytest.raises(RuntimeError, match=r"param_groups\[1\] has capturable=False"):
        opt.step()


def test_capturable_cpu_groups_step_during_capture(capturing):
    # As torch.optim's check lets them through; CPU work is not captured.
    params, opt = _stepped("Adam", capturable=True)
    ref_params = [p.detach().clone().requires_grad_() for p in params]
    ref = torch.optim.Adam(ref_params, **RICH["Adam"])
    for p in ref_params:
        p.grad = torch.ones_like(p)
    opt.step()
    ref.step()
    for a, b in zip(ref_params, params):
        torch.testing.assert_close(b, a, **twins.TOL[torch.float64])
    assert float(opt.state[params[0]]["step"]) == 1.0


def test_asgd_eta_as_torch_foreach_step_computes_it_for_cuda_parameters():
    # For CUDA parameters torch.optim.ASGD takes its foreach step, which computes the next eta as
    # tensor arithmetic in the float32 step counter (1 + lambd lr t rounded before the power), where
    # its CPU default computes it in double; fused_optim follows each. A test hook sends CPU calls
    # through the CUDA formula, checked here against torch's foreach step on the CPU (the same
    # formula). Tolerances: eta within one float32 ulp (the power may round either way), the
    # float64 parameters within what such an eta difference moves them over 20 steps.
    gen = torch.Generator().manual_seed(0)
    ref = [torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_() for shape in [(5, 3), (7,), (0,)]]
    ours = [p.detach().clone().requires_grad_() for p in ref]
    kwargs = dict(lr=0.05, lambd=1e-3, alpha=0.75, t0=2.0, weight_decay=0.01)
    opt_ref = torch.optim.ASGD(ref, foreach=True, **kwargs)
    opt = fused_optim.ASGD(ours, **kwargs)
    previous = torch.ops.fused_optim._asgd_foreach_eta(True)
    try:
        for _ in range(20):
            for a, b in zip(ref, ours):
                a.grad = torch.randn(a.shape, dtype=a.dtype, generator=gen)
                b.grad = a.grad.clone()
            opt_ref.step()
            opt.step()
    finally:
        torch.ops.fused_optim._asgd_foreach_eta(previous)
    for a, b in zip(ref, ours):
        for key in ("eta", "mu", "step"):
            torch.testing.assert_close(opt.state[b][key], opt_ref.state[a][key], rtol=2.0**-23, atol=0)
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-7, atol=1e-9)
