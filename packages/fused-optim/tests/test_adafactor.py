"""Adafactor's op beyond the shared batteries: both kinds of parameters in one step, the factored
state's checks, and batches of matrices."""

from __future__ import annotations

import copy

import pytest
import torch

import fused_optim
from fused_optim.ops import adafactor_step_


def _pair(shapes, dtype=torch.float64, **kwargs):
    gen = torch.Generator().manual_seed(0)
    ref = [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]
    ours = [p.detach().clone().requires_grad_() for p in ref]
    return ref, ours, torch.optim.Adafactor(ref, **kwargs), fused_optim.Adafactor(ours, **kwargs)


def test_batches_of_matrices_and_vectors_in_one_group_match_torch():
    shapes = [(4, 3, 5), (2, 2, 3, 1), (6,), (), (1, 7)]
    ref, ours, r, o = _pair(shapes, lr=0.02, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(15):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen, dtype=a.dtype)
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for p_ref, p_ours in zip(ref, ours):
        assert r.state[p_ref].keys() == o.state[p_ours].keys()
        for key, value in r.state[p_ref].items():
            torch.testing.assert_close(o.state[p_ours][key], value, rtol=1e-12, atol=1e-14)


def test_a_factored_state_of_the_wrong_shape_is_rejected_before_any_write():
    _, ours, _, opt = _pair([(3, 4), (5,)], lr=0.01)
    for p in ours:
        p.grad = torch.ones_like(p)
    opt.step()
    opt.state[ours[0]]["row_var"] = torch.zeros(4, 1, dtype=torch.float64)
    before = copy.deepcopy(opt.state_dict()), [p.detach().clone() for p in ours]
    with pytest.raises(ValueError, match="row_vars\\[0\\] has shape"):
        opt.step()
    assert all(torch.equal(p.detach(), q) for p, q in zip(ours, before[1]))
    assert opt.state[ours[1]]["step"].item() == 1.0  # the other call did not run either


def test_the_op_checks_its_lists_against_the_variant():
    p, g, step = torch.ones(3, 2), torch.ones(3, 2), torch.tensor(0.0)
    kwargs = dict(lr=0.01, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0, weight_decay=0.0, maximize=False)
    with pytest.raises(ValueError, match="empty"):
        adafactor_step_([p], [g], [torch.zeros(3, 1)], [torch.zeros(1, 2)], [torch.zeros(3, 2)], [step],
                        factored=True, **kwargs)
    with pytest.raises(ValueError, match="two or more"):
        adafactor_step_([torch.ones(3)], [torch.ones(3)], [torch.zeros(3)], [torch.zeros(3)], [], [step],
                        factored=True, **kwargs)
    with pytest.raises(ValueError, match="beta2_decay"):
        adafactor_step_([p], [g], [torch.zeros(3, 1)], [torch.zeros(1, 2)], [], [step], factored=True,
                        **dict(kwargs, beta2_decay=0.5))
    assert step.item() == 0.0 and torch.equal(p, torch.ones(3, 2))


@pytest.mark.parametrize("overlaps", ["grads", "params", "col_vars"])
def test_a_factor_sharing_memory_with_another_list_is_refused_before_any_write(overlaps):
    # The row and column averages are updated in place but shaped unlike the params, so they join
    # the step's one overlap check by themselves (CheckOverlapOf), which the passes after it do not
    # repeat. A row average that is a view into another list's memory would otherwise be written
    # while that list is read or written.
    kwargs = dict(lr=0.01, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0, weight_decay=0.0, maximize=False)
    p, g = torch.ones(3, 2), torch.full((3, 2), 0.5)
    row_var, col_var = torch.zeros(3, 1), torch.zeros(1, 2)
    if overlaps == "grads":
        row_var = g[:, 1:]  # (not g's first element, which the same-tensor check would see)
    elif overlaps == "params":
        row_var = p.view(-1)[1:4].view(3, 1)
    else:
        buffer = torch.zeros(6)
        col_var, row_var = buffer[:2].view(1, 2), buffer[1:4].view(3, 1)
    before = [x.clone() for x in (p, g, row_var, col_var)]
    step = torch.tensor(0.0)
    with pytest.raises(ValueError, match="shares memory"):
        adafactor_step_([p], [g], [row_var], [col_var], [], [step], factored=True, **kwargs)
    assert all(torch.equal(x, y) for x, y in zip((p, g, row_var, col_var), before)) and step.item() == 0.0


def test_float32_matches_torch():
    ref, ours, r, o = _pair([(8, 16), (16,)], dtype=torch.float32, lr=0.01)
    gen = torch.Generator().manual_seed(2)
    for _ in range(20):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen)
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_a_nan_parameter_norm_loses_to_eps2_as_in_torch():
    # The kernel computes the step size from the norms where they are; a NaN in a parameter makes
    # its RMS NaN, and max(eps2, NaN) keeps eps2 as Python's max in torch.optim does, so only the
    # NaN entry itself stays NaN; an inf gradient entry clips the update to zero and NaN alike.
    ref, ours, r, o = _pair([(3, 4), (5,)], dtype=torch.float32, lr=0.01)
    with torch.no_grad():
        for p in (ref[0], ours[0]):
            p[1, 2] = float("nan")
    gen = torch.Generator().manual_seed(3)
    for step in range(3):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen)
            if step == 2 and a.dim() == 1:
                g[0] = float("inf")
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
    assert torch.isnan(ours[0]).sum() == 1 and torch.isnan(ours[1]).any()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("scale", [1e-4, 1.0])
def test_the_estimate_s_floor_and_a_nan_gradient_match_torch(scale):
    # A 2-D matrix's estimate is divided by max(mean(r), eps1) in the direction kernel, a batch of
    # matrices' by ATen: with small gradients (scale 1e-4) eps1 = 0.01 holds the divisor of every
    # matrix; a NaN gradient entry makes its matrix's mean NaN, which the floor passes, as torch's
    # clamp_min does, and the vector beside it is untouched.
    ref, ours, r, o = _pair([(4, 3), (2, 3, 5), (6,)], lr=0.02, eps=(1e-2, 1e-3))
    gen = torch.Generator().manual_seed(4)
    for step in range(4):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen, dtype=a.dtype) * scale
            if step == 3 and a.dim() == 2:
                g[2, 1] = float("nan")
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
        if step == 2:
            for a, b in zip(ref, ours):
                torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert torch.isnan(ours[0]).all() and not torch.isnan(ours[2]).any()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14, equal_nan=True)


# --- the differentiable functional update (fused_optim.functional.adafactor_update) -----------------

_SHAPES = [(4, 3), (2, 3, 5), (6,), (), (1, 7)]
_OPTIONS = [dict(), dict(weight_decay=0.1, maximize=True), dict(lr=1.0, d=10.0, eps=(1e-3, 5.0), beta2_decay=-0.5)]


def _functional_state(params):
    rows = [torch.zeros((*p.shape[:-1], 1), dtype=p.dtype) if p.dim() > 1 else None for p in params]
    cols = [torch.zeros((*p.shape[:-2], 1, p.shape[-1]), dtype=p.dtype) if p.dim() > 1 else None for p in params]
    variances = [torch.zeros_like(p) if p.dim() <= 1 else None for p in params]
    return rows, cols, variances


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("options", _OPTIONS, ids=["default", "wd-maximize", "eps-d-lr"])
def test_functional_update_equals_torch_and_the_in_place_step_over_steps(options, dtype):
    ref, ours, r, o = _pair(_SHAPES, dtype=dtype, **options)
    params = [p.detach().clone() for p in ref]
    rows, cols, variances = _functional_state(params)
    gen = torch.Generator().manual_seed(1)
    for step in range(1, 9):
        grads = [torch.randn(p.shape, generator=gen, dtype=dtype) for p in params]
        for a, b, g in zip(ref, ours, grads):
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
        params, rows, cols, variances = fused_optim.functional.adafactor_update(
            params, grads, rows, cols, variances, step, **options)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    for p_ref, p_ours, p_new, row, col, v in zip(ref, ours, params, rows, cols, variances):
        torch.testing.assert_close(p_new, p_ref.detach(), **tol)
        assert torch.equal(p_new, p_ours.detach())  # the same passes and kernels as the in-place step
        state = o.state[p_ours]
        if p_new.dim() > 1:
            assert torch.equal(row, state["row_var"]) and torch.equal(col, state["col_var"])
        else:
            assert torch.equal(v, state["variance"])


def _unrolled(shapes, steps, options):
    """A function of (initial params, gradient weights, initial state) through `steps` updates."""
    def run(*xs):
        n = len(shapes)
        params, weights = list(xs[:n]), xs[n]
        state = list(xs[n + 1:])
        rows = [state.pop(0) if len(s) > 1 else None for s in shapes]
        cols = [state.pop(0) if len(s) > 1 else None for s in shapes]
        variances = [state.pop(0) if len(s) <= 1 else None for s in shapes]
        for t in range(steps):
            # The gradients depend on the params (a meta-gradient flows through them too).
            grads = [torch.sin(p) * weights[t] + 0.3 * p * p for p in params]
            params, rows, cols, variances = fused_optim.functional.adafactor_update(
                params, grads, rows, cols, variances, t + 1, **options)
        return (*params, *[x for x in rows + cols + variances if x is not None])
    return run


@pytest.mark.parametrize("options", [
    dict(lr=0.05), dict(lr=0.5, weight_decay=0.1, maximize=True), dict(lr=1.0, d=10.0, eps=(0.7, 0.8), beta2_decay=-0.5),
], ids=["clipped", "wd-maximize", "eps-d"])
def test_gradcheck_through_params_grads_and_state_over_steps(options):
    shapes = [(3, 2), (2, 2, 3), (4,), ()]
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]
    weights = (torch.rand(3, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    rows = [torch.rand((*s[:-1], 1), generator=gen, dtype=torch.float64) + 0.5 for s in shapes if len(s) > 1]
    cols = [torch.rand((*s[:-2], 1, s[-1]), generator=gen, dtype=torch.float64) + 0.5 for s in shapes if len(s) > 1]
    variances = [torch.rand(s, generator=gen, dtype=torch.float64) + 0.5 for s in shapes if len(s) <= 1]
    state = [x.requires_grad_() for x in rows + cols + variances]
    assert torch.autograd.gradcheck(_unrolled(shapes, 3, options), (*params, weights, *state), eps=1e-6, atol=1e-6,
                                    rtol=1e-5)


def test_gradcheck_where_the_floors_hold():
    # eps1 = 2 holds every estimate (and the factored row mean), eps2 = 10 the parameters' RMS: the
    # gradient through those branches is zero, as torch's clamp makes it, and gradcheck agrees.
    shapes = [(3, 2), (4,)]
    gen = torch.Generator().manual_seed(2)
    params = [torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]
    weights = (torch.rand(2, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    state = [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5).requires_grad_() for s in [(3, 1), (1, 2), (4,)]]
    options = dict(lr=0.1, eps=(2.0, 10.0))
    assert torch.autograd.gradcheck(_unrolled(shapes, 2, options), (*params, weights, *state), eps=1e-6, atol=1e-6,
                                    rtol=1e-5)


def test_backward_of_the_backward_raises():
    p = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    out = fused_optim.functional.adafactor_update([p], [g], [torch.ones(3, 1, dtype=torch.float64)], [torch.ones(1, 2, dtype=torch.float64)], [None], 1)
    (dp,) = torch.autograd.grad(out.params[0].sum(), [p], create_graph=True)
    with pytest.raises(RuntimeError, match="not itself differentiable"):
        dp.sum().backward()
    with pytest.raises(RuntimeError, match="not itself differentiable"):
        torch.autograd.gradgradcheck(lambda p: fused_optim.functional.adafactor_update(
            [p], [g.detach()], [torch.ones(3, 1, dtype=torch.float64)], [torch.ones(1, 2, dtype=torch.float64)], [None], 1).params[0], (p,))


def test_node_name_and_description():
    p = torch.randn(3, 2, requires_grad=True)
    out = fused_optim.functional.adafactor_update([p], [torch.randn(3, 2)], [torch.ones(3, 1)], [torch.ones(1, 2)],
                                                  [None], 1)
    assert type(out.params[0].grad_fn).__name__ == "FusedAdafactorBackward"
    assert fused_optim.ops.describe_node(out.params[0].grad_fn) == (
        "FusedAdafactor", "Adafactor", "adafactor_update", "update")


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a: a.update(rows=[torch.ones(3, 2), None]), ValueError, r"row_vars\[0\] has shape \[3, 2\], expected \[3, 1\]"),
    (lambda a: a.update(cols=[None, None]), ValueError, r"col_vars\[0\] is None but params\[0\] has 2 dimensions"),
    (lambda a: a.update(variances=[None, None]), ValueError, r"variances\[1\] is None but params\[1\] has 1 dim"),
    (lambda a: a.update(grads=[torch.ones(3, 2)]), ValueError, "grads has 1 tensors but params has 2"),
    (lambda a: a.update(grads=[torch.ones(2, 3), torch.ones(4)]), ValueError,
     r"grads\[0\] has shape \[2, 3\] but params\[0\] has shape \[3, 2\]"),
    (lambda a: a.update(kw=dict(lr=-1.0)), ValueError, "learning rate"),
    (lambda a: a.update(kw=dict(beta2_decay=0.5)), ValueError, "beta2_decay must be <= 0"),
    (lambda a: a.update(kw=dict(d=0.5)), ValueError, "clipping threshold d must be >= 1"),
    (lambda a: a.update(kw=dict(eps=(-1.0, 1e-3))), ValueError, "eps1"),
    (lambda a: a.update(kw=dict(eps=1e-3)), TypeError, "eps must be a pair"),
    (lambda a: a.update(step=0), ValueError, "step must be >= 1"),
    (lambda a: a.update(rows=[torch.ones(3, 1, dtype=torch.float64), None]), TypeError, "dtype"),
])
def test_bad_input_raises_a_clear_error_and_modifies_nothing(mutate, error, match):
    params = [torch.randn(3, 2, requires_grad=True), torch.randn(4, requires_grad=True)]
    args = dict(grads=[torch.randn(3, 2), torch.randn(4)], rows=[torch.ones(3, 1), None], cols=[torch.ones(1, 2), None],
                variances=[None, torch.ones(4)], step=2, kw={})
    mutate(args)
    everything = [t for t in params + args["grads"] + args["rows"] + args["cols"] + args["variances"] if t is not None]
    before = [t.detach().clone() for t in everything]
    with pytest.raises(error, match=match):
        fused_optim.functional.adafactor_update(params, args["grads"], args["rows"], args["cols"], args["variances"],
                                                args["step"], **args["kw"])
    for t, b in zip(everything, before):
        assert torch.equal(t.detach(), b)


def test_backward_op_checks_the_incoming_gradients_of_the_factored_state():
    p, g = [torch.randn(3, 2)], [torch.randn(3, 2)]
    kw = dict(step=1, lr=0.01, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0, weight_decay=0.0, maximize=False,
              factored=True)
    with pytest.raises(ValueError, match=r"grad_new_row_vars\[0\] has shape \[3, 2\], expected \[3, 1\]"):
        torch.ops.fused_optim.adafactor_update_backward([], [torch.ones(3, 2)], [], [], p, g, [torch.ones(3, 1)],
                                                        [torch.ones(1, 2)], [], **kw)


def test_vmap_runs_each_batch_entry_with_its_own_norms():
    # The RMS of each parameter is per sample: a batch is not more elements of one tensor.
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(3, 4, 2, generator=gen, dtype=torch.float64)
    p[1] *= 100.0
    g = torch.randn(3, 4, 2, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    gv = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    rows, cols = torch.ones(4, 1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)

    def one(p, g, v, gv):
        out = fused_optim.functional.adafactor_update([p, v], [g, gv], [rows, None], [cols, None],
                                                      [None, torch.zeros(5, dtype=torch.float64)], 2, lr=0.5)
        return out.params[0], out.params[1], out.row_vars[0]

    got = torch.vmap(one)(p, g, v, gv)
    for b in range(3):
        for x, y in zip(got, one(p[b], g[b], v[b], gv[b])):
            torch.testing.assert_close(x[b], y, rtol=1e-12, atol=1e-14)


def test_compiled_update_keeps_the_fused_ops_and_equals_eager():
    # Matrices and vectors in one call (two op calls); the meta-gradient through the compiled
    # update (aot_eager: the fused backward op in the backward graph) equals eager's, step by step.
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    def meta_loss(p, v, g, gv, step):
        out = fused_optim.functional.adafactor_update(
            [p, v], [g, gv], [torch.ones(3, 1, dtype=p.dtype), None], [torch.ones(1, 2, dtype=p.dtype), None],
            [None, torch.ones(4, dtype=p.dtype)], step, lr=0.1, weight_decay=0.1)
        return (out.params[0] ** 2).sum() + out.params[1].sum() + out.row_vars[0].sum()

    compiled = torch.compile(meta_loss, backend=backend, fullgraph=True)
    gen = torch.Generator().manual_seed(4)
    for step in (1, 2, 3):
        inputs = [torch.randn(s, generator=gen, dtype=torch.float64) for s in [(3, 2), (4,), (3, 2), (4,)]]
        results = []
        for fn in (meta_loss, compiled):
            leaves = [t.clone().requires_grad_() for t in inputs]
            loss = fn(*leaves, step)
            results.append([loss, *torch.autograd.grad(loss, leaves)])
        for a, b in zip(*results):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert graphs
    for gm in graphs:  # the node's forward and backward bodies are submodules of the graph
        targets = [n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
        assert targets.count(torch.ops.fused_optim.adafactor_update.default) == 2
        assert targets.count(torch.ops.fused_optim.adafactor_update_backward.default) == 2
    torch._dynamo.reset()


def _aten_calls(fn) -> dict[str, int]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}


def _adafactor_calls(vectors: int, matrices: int) -> tuple[dict[str, int], dict[str, int], int]:
    """The ATen calls of an in-place Adafactor step over ``vectors`` vectors and ``matrices`` 2-D
    matrices, of a functional update's backward over the vectors, and the emulated CUDA launches
    of the step (0 on the CPU loops)."""
    params = [torch.randn(50, requires_grad=True) for _ in range(vectors)]
    params += [torch.randn(4, 6, requires_grad=True) for _ in range(matrices)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = fused_optim.Adafactor(params, lr=0.01)
    launches = fused_optim._C._emulated_launches()
    step = _aten_calls(opt.step)
    launches = fused_optim._C._emulated_launches() - launches
    new = fused_optim.functional.adafactor_update(
        params[:vectors], [p.grad for p in params[:vectors]], [None] * vectors, [None] * vectors,
        [torch.zeros(50) for _ in range(vectors)], 1)
    ones = [torch.ones_like(x) for x in new.params]
    backward = _aten_calls(lambda: torch.autograd.backward(new.params, ones))
    assert all(torch.isfinite(p).all() for p in params)
    return step, backward, launches


@pytest.mark.parametrize("emulate_cuda", [False, True], ids=["cpu-loops", "cuda-path"])
def test_the_reductions_are_no_aten_call_per_tensor(emulate_cuda):
    # Where the CPU loops run the passes, the norms of p and u (and the backward's sum(gp' u)) are
    # reduced on the host from the pass's own table, and the matrices' row and column norms of g
    # from one host pass over each g: no norm is an ATen call (nor the sum of a 2-D matrix's row
    # averages, nor the product r c of its averages). On the CUDA path (emulated here) each of them
    # is a few passes on the device for the whole list, so a step of ten times the tensors makes
    # the same launches.
    previous = fused_optim._C._emulate_cuda(emulate_cuda)
    try:
        step, backward, launches = _adafactor_calls(12, 3)
        _, _, launches_of_ten_times = _adafactor_calls(120, 30)
    finally:
        fused_optim._C._emulate_cuda(previous)
    for name in ("aten::linalg_vector_norm", "aten::sum", "aten::matmul", "aten::mean", "aten::div_"):
        assert name not in step, (name, step[name])
    assert "aten::linalg_vector_norm" not in backward and "aten::sum" not in backward
    if emulate_cuda:
        assert launches > 0 and launches_of_ten_times == launches
    else:
        assert launches == launches_of_ten_times == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_host_norms_are_float64_sums_whatever_the_thread_count(dtype):
    # Three chunks and a tail, summed in double (each chunk's partials in a fixed order, then the
    # chunks in order): the norm of a parameter of n equal entries x (0.7 in the dtype, whose square
    # a float32 running sum would round at every step) is x sqrt(n) rounded once, and the step is the
    # same bits on one thread and on two.
    n = 3 * 16384 + 5
    grad = (torch.arange(n) % 7 + 1) / 8.0 * (1 - 2 * (torch.arange(n) % 2))  # +-1/8 .. +-7/8
    results = []
    emulating = fused_optim._C._emulate_cuda(False)  # the CPU loops' reduction (test_cuda_plan: the CUDA path's)
    try:
        for threads in (1, 2):
            previous = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                p = torch.full((n,), 0.7, dtype=dtype, requires_grad=True)
                p.grad = grad.to(dtype)
                opt = fused_optim.Adafactor([p], lr=0.5, eps=(None, 1e-3))
                opt.step()
                results.append(p.detach().clone())
            finally:
                torch.set_num_threads(previous)
    finally:
        fused_optim._C._emulate_cuda(emulating)
    assert torch.equal(results[0], results[1])
    # On the first step v = g^2, so u = sign(g): p + coef sign(g), coef = -RMS(p) min(lr, 1/sqrt(1))
    # / max(1, RMS(u)), from the norms x sqrt(n) and sqrt(n) rounded to the dtype, as torch's
    # norms of that dtype are, then in float32, as the kernel works.
    def rounded(norm: float) -> float:
        return torch.tensor(norm, dtype=torch.float64).to(dtype).item()

    x = torch.tensor(0.7, dtype=dtype).item()
    coef = torch.tensor(-rounded(x * n**0.5) / n**0.5 * 0.5 / max(1.0, rounded(n**0.5) / n**0.5)).float()
    expected = (torch.tensor(x).float() + coef * torch.sign(grad).float()).to(dtype)
    torch.testing.assert_close(results[0], expected, rtol=0, atol=0)


def _first_step_factors(grad: torch.Tensor, threads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """row_var and col_var after one step from zero on the CPU loops (the weight 1^c is 1, so
    each is its row's or column's mean of g^2: g's norm along it rounded to the dtype, squared and
    divided by the length)."""
    previous, emulating = torch.get_num_threads(), fused_optim._C._emulate_cuda(False)
    torch.set_num_threads(threads)
    try:
        p = torch.zeros(grad.shape, dtype=grad.dtype, requires_grad=True)
        p.grad = grad.clone()
        opt = fused_optim.Adafactor([p], lr=0.01)
        opt.step()
        return opt.state[p]["row_var"].clone(), opt.state[p]["col_var"].clone()
    finally:
        torch.set_num_threads(previous)
        fused_optim._C._emulate_cuda(emulating)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_host_row_and_column_norms_are_the_float64_ones_whatever_the_thread_count(dtype):
    # A batch of two 290 x 1100 matrices: rows longer than one widened block (1024), many blocks of
    # rows per matrix (the columns' partial sums added in order) and enough elements for two
    # threads; and a 3 x 5 one beside it, under the serial threshold.
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(2, 290, 1100, generator=gen).to(dtype), torch.randn(3, 5, generator=gen).to(dtype)]
    for g in grads:
        one, two = _first_step_factors(g, 1), _first_step_factors(g, 2)
        assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
        wide = g.double()
        eps = torch.finfo(dtype).eps
        for got, dim in zip(one, (-1, -2), strict=True):
            norm = wide.square().sum(dim, keepdim=True).sqrt()
            # The norm rounded once to the dtype (half an ulp), squared and divided in the dtype's
            # math (float32 for the 16-bit ones) and stored: a few ulps of the dtype. (In float64
            # the sums of 1100 squares themselves differ from torch's by a few ulps: other orders.)
            expected = norm.square() / g.shape[dim]
            rtol = 1e-13 if dtype == torch.float64 else 3 * eps
            torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_host_estimates_match_torch_whatever_the_thread_count(dtype):
    # The estimates r c made on the host (the CPU loops): a 2-D 300 x 1100 matrix (the kernel
    # divides its product), a batch of two 70 x 1100 ones (ATen divides), both with rows wider than
    # a widened piece (1024) and in several blocks of rows on two threads, and a 3 x 5 one under
    # the serial threshold. From zero parameters the first step is -eps2 lr u / max(1, RMS(u)) (here
    # eps2 = lr = 1: no subnormal float16), so the update itself is compared with torch's
    # Adafactor: to a few ulps of the dtype (torch
    # rounds a 16-bit average's square and its division apart, and its norms in the dtype), and
    # the same bits on one thread and on two.
    gen = torch.Generator().manual_seed(11)
    shapes = [(300, 1100), (2, 70, 1100), (3, 5)]
    grads = [torch.randn(shape, generator=gen).to(dtype) for shape in shapes]

    def first_step(make, threads=None):
        params = [torch.zeros(g.shape, dtype=dtype, requires_grad=True) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        previous = torch.get_num_threads()
        torch.set_num_threads(threads or previous)
        try:
            make(params).step()
        finally:
            torch.set_num_threads(previous)
        return [p.detach() for p in params]

    emulating = fused_optim._C._emulate_cuda(False)
    try:
        one = first_step(lambda ps: fused_optim.Adafactor(ps, lr=1.0, eps=(None, 1.0)), threads=1)
        two = first_step(lambda ps: fused_optim.Adafactor(ps, lr=1.0, eps=(None, 1.0)), threads=2)
    finally:
        fused_optim._C._emulate_cuda(emulating)
    expected = first_step(lambda ps: torch.optim.Adafactor(ps, lr=1.0, eps=(None, 1.0), foreach=False))
    rtol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 4 * torch.finfo(dtype).eps)
    for a, b, want in zip(one, two, expected, strict=True):
        assert torch.equal(a, b)
        assert want.abs().max() > 0
        torch.testing.assert_close(a.double(), want.double(), rtol=rtol, atol=0)


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (2, 0, 5), (2, 3, 0)])
def test_an_empty_matrix_steps_beside_the_others(shape):
    # Empty tensors share no memory even where both data pointers are null: their factors are no
    # alias of the parameter (that check once refused them). The others step as torch's Adafactor
    # steps them alone (torch's own step divides by the empty parameter's numel and raises).
    empty = torch.zeros(shape, requires_grad=True)
    empty.grad = torch.zeros(shape)
    gen = torch.Generator().manual_seed(5)
    full = torch.randn(4, 5, generator=gen, requires_grad=True)
    full.grad = torch.randn(4, 5, generator=gen)
    twin = full.detach().clone().requires_grad_()
    twin.grad = full.grad.clone()
    fused_optim.Adafactor([empty, full], lr=0.01).step()
    torch.optim.Adafactor([twin], lr=0.01).step()
    torch.testing.assert_close(full, twin, rtol=1e-6, atol=1e-7)
    assert empty.shape == shape


def test_non_contiguous_averages_step_as_contiguous_ones():
    # Row and column averages that are strided views (a state loaded so, or a user's) take ATen's
    # product per matrix, written into the step's scratch for the updates (a batch of matrices then
    # divided through a view of it): the same steps as from contiguous averages of the same values.
    gen = torch.Generator().manual_seed(11)
    shapes = [(6, 5), (2, 4, 3), (7,)]
    start = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(3)]
    runs = []
    for strided in (False, True):
        params = [x.clone().requires_grad_() for x in start]
        opt = fused_optim.Adafactor(params, lr=0.05, weight_decay=0.1)
        for k, step_grads in enumerate(grads):
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            opt.step()
            if k == 0 and strided:  # the state's values, in every other element of a wider buffer
                for p in params[:2]:
                    state = opt.state[p]
                    for key in ("row_var", "col_var"):
                        wide = torch.zeros(*state[key].shape[:-1], 2 * state[key].shape[-1], dtype=torch.float64)
                        view = wide[..., ::2]
                        view.copy_(state[key])
                        assert not view.is_contiguous()
                        state[key] = view
        runs.append([p.detach() for p in params] + [opt.state[p][k] for p in params[:2] for k in ("row_var", "col_var")])
    for x, y in zip(*runs, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-13, atol=1e-15)
