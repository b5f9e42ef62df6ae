"""The CUDA kernels against the CPU kernels (same math headers, so these check indexing and
launch: chunking across blocks, several launches per call, dtypes). Skipped without a GPU."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import FUNCTIONAL_CASES, gradcheck_one_step, op, two_adafactor_steps
from test_optim import CONFIGS
from twins import STEPS, TOL, grads, params, twin

import fused_optim
from fused_optim.ops import FUNCTIONAL_OPS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not fused_optim.BUILD_INFO["cuda"], reason="fused_optim built without CUDA"),
]

# More tensors than any kernel's launch holds (csrc/cuda/launch_plan.h's kSlotsPerLaunch, a few
# hundred), so every call spans launches; 3M elements span many blocks.
MOST_SLOTS = max(fused_optim._C.CUDA_LAUNCH["slots_per_launch"].values())
SHAPES = [(), (7,), (3, 5)] + [(257,)] * (MOST_SLOTS - 2) + [(3_000_000,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES])
def test_functional_and_backward_ops_match_cpu(case, dtype):
    lists = case.make(dtype, shapes=SHAPES)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    # Adafactor scales each update by norms over a tensor's 3M elements. torch's CPU float32 norm is
    # off by 6e-5 to 2e-4 relative at that size (measured: torch.linalg.norm against float64), so
    # the CPU runs in float64 on the same inputs, and float64's own summation-order noise over 3M
    # terms reaches ~1e-14 (seen on an H100). Gradients are kept 0.1 away from zero: where g is
    # ~1e-7 the unfloored estimate (eps1^2 underflows in float32) makes the backward 1/|g|^3-large.
    # At step 1 without factoring every |u| is 1, so RMS(u) = d = 1 exactly: the clip's kink, whose
    # backward branch rounding picks; only the forward is compared there.
    adafactor = case.op == "adafactor_update"
    kink = adafactor and case.kwargs["step"] == 1 and not case.kwargs["factored"]
    if adafactor:
        lists[1] = [g + 0.1 * torch.where(g < 0, -1.0, 1.0) for g in lists[1]]
        tol = dict(rtol=1e-12, atol=1e-13) if dtype == torch.float64 else tol
    cpu_lists = [[t.double() for t in lst] for lst in lists] if adafactor else lists
    cpu = op(case.op)(*cpu_lists, **case.kwargs)
    gpu = op(case.op)(*[[t.cuda() for t in lst] for lst in lists], **case.kwargs)
    for a, b in zip(cpu, gpu):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x.to(dtype), **tol)
    if kink:
        return
    spec = FUNCTIONAL_OPS[case.op]
    grads = [[torch.randn(t.shape, dtype=dtype) for t in out] for out in cpu]
    saved = [cpu_lists[i] for i in spec.saved]
    cpu_b = op(case.op + "_backward")(*[[t.to(x.dtype) for t, x in zip(g, out)] for g, out in zip(grads, cpu)],
                                      *saved, **case.kwargs)
    gpu_b = op(case.op + "_backward")(*[[t.cuda() for t in g] for g in grads],
                                      *[[t.cuda() for t in lists[i]] for i in spec.saved], **case.kwargs)
    for a, b in zip(cpu_b, gpu_b):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x.to(dtype), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "RAdam", "NAdam",
                                  "Rprop", "ASGD", "Adafactor"])
def test_drop_in_optimizers_on_cuda_match_cpu(name, dtype):
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in SHAPES[:6]]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    opt_cpu, opt_gpu = getattr(fused_optim, name)(cpu), getattr(fused_optim, name)(gpu)
    for step in range(5):
        for a, b in zip(cpu, gpu):
            g = torch.randn(a.shape, generator=torch.Generator().manual_seed(step)).to(dtype)
            a.grad, b.grad = g, g.cuda()
        opt_cpu.step()
        opt_gpu.step()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **tol)


def test_mixed_devices_in_one_call_are_rejected():
    p = [torch.ones(3), torch.ones(3, device="cuda")]
    with pytest.raises((ValueError, RuntimeError)):
        op("sgd_update")(p, [torch.ones(3), torch.ones(3, device="cuda")], [], lr=0.1, momentum=0.0,
                         dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, first_step=False)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_every_option_matches_the_twin_on_cuda(name, kwargs, dtype):
    # The same option sweep as test_optim, with both optimizers on the GPU (0-d, non-contiguous
    # and 3-d parameters included).
    ref_params = [p.detach().cuda().requires_grad_() for p in params(dtype)]
    ours_params = [p.detach().clone().requires_grad_() for p in ref_params]
    ref, ours = twin(name)(ref_params, **kwargs), getattr(fused_optim, name)(ours_params, **kwargs)
    for step in range(STEPS):
        for a, b, g in zip(ref_params, ours_params, grads(ref_params, step)):
            a.grad, b.grad = g.cuda(), g.cuda()
        ref.step()
        ours.step()
    tol = dict(TOL[dtype], atol=5e-6) if dtype == torch.float32 else TOL[dtype]
    for a, b in zip(ref_params, ours_params):
        assert b.device.type == "cuda"
        torch.testing.assert_close(b, a, **tol)
    for ref_state, our_state in zip(ref.state.values(), ours.state.values()):
        for key, value in ref_state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                torch.testing.assert_close(our_state[key], value, **tol)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES])
def test_gradcheck_on_cuda(case):
    assert gradcheck_one_step(case, "cuda")


def test_many_tensors_and_a_large_one_in_one_step():
    # More parameters than a launch holds; the 3M-element one spans many blocks.
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen).requires_grad_() for s in SHAPES]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    opt_cpu, opt_gpu = fused_optim.Adam(cpu, lr=1e-2, amsgrad=True), fused_optim.Adam(gpu, lr=1e-2, amsgrad=True)
    for _ in range(3):
        for a, b in zip(cpu, gpu):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.cuda()
        opt_cpu.step()
        opt_gpu.step()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_adafactor_norms_over_more_tensors_than_a_sums_launch_holds_match_cpu():
    # Adafactor's norms of p and u on CUDA: two multi-tensor passes over the whole list
    # (ForEachSumsLaunch in csrc/cuda/launch_plan.h; a launch holds max_slots_per_launch tensors),
    # here over more tensors than that, beside a 3M-element one of ~1500 chunks, an empty and a 0-d
    # one; the CPU loops reduce on the host (float64: only summation order differs, ~1e-14).
    n = fused_optim._C.CUDA_LAUNCH["max_slots_per_launch"] + 40
    shapes = [(), (0,), (3_000_000,)] + [(1 + i % 300,) for i in range(n)] + [(64, 48)]
    gen = torch.Generator().manual_seed(2)
    start = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    step_grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(2)]

    got = two_adafactor_steps(start, step_grads, "cuda")
    for x, y in zip(two_adafactor_steps(start, step_grads), got, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_adafactor_matrix_passes_match_cpu(dtype):
    # Adafactor's factored statistics on CUDA: the norms of g's rows and columns and the products
    # r c are passes over every matrix (csrc/cuda/matrix_passes.h), and the sums of the row
    # averages a sums pass: matrices past a block's columns and a partial's rows, a batch, a 4-D
    # weight, no rows or no columns, and more matrices than a launch holds (float64: only the
    # summation order differs from the CPU loops').
    n = fused_optim._C.CUDA_LAUNCH["matrix_slots_per_launch"] + 20
    shapes = [(4096, 1000), (2, 33, 5), (3, 2, 4, 3), (0, 4), (4, 0), (3000, 1), (1, 3000), (7,), (60, 2, 3),
              (2, 300, 5)]
    shapes += [(2 + i % 5, 1 + i % 7) for i in range(n)]
    gen = torch.Generator().manual_seed(3)
    start = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes]
    step_grads = [[torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes] for _ in range(2)]

    tol = dict(rtol=1e-12, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-6, atol=1e-7)
    got = two_adafactor_steps(start, step_grads, "cuda")
    for x, y in zip(two_adafactor_steps(start, step_grads), got, strict=True):
        torch.testing.assert_close(y, x, equal_nan=True, **tol)  # (a (4, 0) matrix's row means are 0 / 0)


def test_kernels_run_on_the_current_stream():
    p = torch.zeros(1 << 20, device="cuda", requires_grad=True)
    opt = fused_optim.SGD([p], lr=1.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        p.grad = torch.ones_like(p)
        opt.step()
        result = p.detach() * 1  # ordered after the step on the same stream
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(result, torch.full_like(result, -1.0))


def test_state_dict_moves_between_cpu_and_cuda():
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(5, 3, generator=gen).requires_grad_()]
    gpu = [cpu[0].detach().cuda().requires_grad_()]
    opt_gpu = fused_optim.Adam(gpu, lr=1e-2)
    gpu[0].grad = torch.randn(5, 3, generator=gen).cuda()
    opt_gpu.step()
    cpu[0].data.copy_(gpu[0].detach().cpu())
    opt_cpu = fused_optim.Adam(cpu, lr=1e-2)
    # Deep copy: like torch.optim, loading keeps tensors it need not move (the CPU step counter).
    opt_cpu.load_state_dict(copy.deepcopy(opt_gpu.state_dict()))
    assert opt_cpu.state[cpu[0]]["exp_avg"].device.type == "cpu"
    g = torch.randn(5, 3, generator=gen)
    cpu[0].grad, gpu[0].grad = g, g.cuda()
    opt_cpu.step()
    opt_gpu.step()
    torch.testing.assert_close(gpu[0].detach().cpu(), cpu[0].detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_adafactor_steps_and_its_differentiable_update_do_not_sync(dtype):
    # Its norms stay on the device, where the apply kernels read them: a step, the functional
    # update and its backward never wait for the GPU (sync debug mode raises on a synchronization),
    # and they match the CPU's.
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (2, 4, 6), (7,), (), (64, 33)]
    cpu = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    opts = [fused_optim.Adafactor(ps, lr=0.05, weight_decay=0.1) for ps in (cpu, gpu)]
    for _ in range(3):
        for a, b in zip(cpu, gpu):
            a.grad = torch.randn(a.shape, generator=gen, dtype=torch.float64).to(dtype)
            b.grad = a.grad.cuda()
        opts[0].step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            opts[1].step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    tol = TOL[dtype] if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **tol)
    results = []
    for ps, opt in zip((cpu, gpu), opts):
        state = [opt.state[p] for p in ps]
        inputs = [p.detach().clone().requires_grad_() for p in ps]
        if ps is gpu:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        try:
            new = fused_optim.functional.adafactor_update(
                inputs, [p.grad for p in ps], [s.get("row_var") for s in state], [s.get("col_var") for s in state],
                [s.get("variance") for s in state], 4, lr=0.05, weight_decay=0.1)
            grads = torch.autograd.grad(sum(p.float().square().sum() for p in new.params), inputs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        results.append([*new.params, *grads])
    for a, b in zip(*results):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **tol)


@pytest.mark.parametrize("name", ["ASGD", "NAdam"])
def test_state_scalars_on_the_device_match_cpu_without_a_sync(name):
    # ASGD keeps eta, mu and step on the parameters' device; NAdam's mu_product gets there through
    # load_state_dict (in the parameters' dtype). The kernels read and advance them where they
    # live: the step never waits for the device (sync debug mode raises on a synchronization).
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen).requires_grad_() for s in [*SHAPES[:-1], (0,)]]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    kwargs = dict(lr=0.02, t0=1) if name == "ASGD" else dict(lr=0.01, weight_decay=0.1)
    opt_cpu, opt_gpu = getattr(fused_optim, name)(cpu, **kwargs), getattr(fused_optim, name)(gpu, **kwargs)
    for step in range(4):
        for a, b in zip(cpu, gpu):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.cuda()
        if step < 2:
            opt_cpu.step()
            opt_gpu.step()
        else:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                opt_cpu.step()
                opt_gpu.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        if step == 0:
            opt_gpu.load_state_dict(opt_gpu.state_dict())
            key = "eta" if name == "ASGD" else "mu_product"
            assert opt_gpu.state[gpu[0]][key].is_cuda
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(cpu, gpu):
        for key, value in opt_cpu.state[a].items():
            # (atol: ASGD's average ax nears zero in places, where float32 rounding, FMA or not, leaves
            # ~1e-9 of cancellation: seen on an H100.)
            torch.testing.assert_close(opt_gpu.state[b][key].cpu(), value, rtol=1e-6, atol=1e-8)


def test_graph_capture_of_a_non_capturable_step_is_refused():
    p = torch.zeros(8, device="cuda", requires_grad=True)
    p.grad = torch.ones_like(p)
    opt = fused_optim.Adam([p], lr=0.1)
    opt.step()  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="capturable=False"), torch.cuda.graph(graph):
        opt.step()


@pytest.mark.parametrize("name, kwargs", [("Adam", dict(lr=0.01)), ("AdamW", dict(lr=0.01, weight_decay=0.1)),
                                          ("NAdam", dict(lr=0.01)), ("RAdam", dict(lr=0.01)),
                                          ("ASGD", dict(lr=0.05, t0=3)), ("Adan", dict(lr=0.01)),
                                          ("Adafactor", dict(lr=0.5, weight_decay=0.1))])
def test_a_captured_capturable_step_replays_like_eager_steps(name, kwargs):
    # Ten replays of one captured step, fed new gradients in place: each a step of its own (the
    # counters advance on the device, the bias corrections follow), as twelve eager steps of the
    # twin (torch.optim, or for Adan the reference) in float64 on the CPU. Not torch's own
    # capturable=True on the GPU: it forms RAdam's rho_t on the device in float32, where rho_t - 4
    # nearly cancels at the first rectified steps (ours differed from it by 5e-5 relative on an
    # H100, while on the CPU our capturable step equals the float64 result to 7e-7). Adafactor's
    # capture holds its per-matrix ATen reductions too (norms, r c), all on the device.
    shapes = [(7,), (3, 5), (5000,)]
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=gen) for s in shapes]
    gs = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(12)]
    ref_params = [t.double().requires_grad_() for t in start]
    ours_params = [t.cuda().requires_grad_() for t in start]
    ref = twin(name)(ref_params, **kwargs)
    ours = getattr(fused_optim, name)(ours_params, **kwargs, capturable=True)
    for p, g in zip(ours_params, gs[0]):
        p.grad = g.cuda()
    ours.step()  # creates the state outside the capture
    for p, g in zip(ours_params, gs[1]):
        p.grad.copy_(g.cuda())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ours.step()  # the warm-up torch.cuda.graph asks for, also a real step
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ours.step()
    for step in range(12):
        for p, g in zip(ref_params, gs[step]):
            p.grad = g.double()
        ref.step()
    for step in range(2, 12):
        for p, g in zip(ours_params, gs[step]):
            p.grad.copy_(g.cuda())
        graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(ref_params, ours_params):
        torch.testing.assert_close(b.detach().cpu(), a.detach().float(), rtol=1e-5, atol=1e-6)
        assert float(ours.state[b]["step"]) == 12.0 and ours.state[b]["step"].is_cuda


@pytest.mark.parametrize("name", ["SGD", "Adam", "Adagrad", "NAdam", "ASGD", "Adafactor", "Lion"])
def test_amp_steps_match_cpu(name):
    # GradScaler's arguments on the device: the CUDA kernels unscale the gradients (left unscaled)
    # and skip the step (found_inf = 1 on the second one) as the CPU loops do. Adafactor's CPU side
    # runs in float64 (torch's CPU float32 norm over 3M elements is off by ~1e-4 relative).
    kwargs = dict(lr=0.05, momentum=0.9) if name == "SGD" else dict(lr=0.05)
    results = []
    for device in ["cpu", "cuda"]:
        dtype = torch.float64 if device == "cpu" and name == "Adafactor" else torch.float32
        gen = torch.Generator().manual_seed(0)
        ps = [torch.randn(s, generator=gen).to(device, dtype).requires_grad_() for s in SHAPES]
        opt = getattr(fused_optim, name)(ps, **kwargs)
        for step, found_inf in enumerate([0.0, 1.0, 0.0]):
            for p, g in zip(ps, grads([p.detach().float() for p in ps], step)):
                p.grad = (g * 8.0).to(device, dtype)
            opt.step(grad_scale=torch.tensor(8.0, device=device), found_inf=torch.tensor(found_inf, device=device))
        results.append(([p.detach().cpu().float() for p in ps], [p.grad.cpu().float() for p in ps],
                        [{k: v.cpu().float() if v.is_floating_point() else v.cpu() for k, v in s.items()}
                         for s in opt.state.values()]))
    (cpu_params, cpu_grads, cpu_state), (cuda_params, cuda_grads, cuda_state) = results
    torch.testing.assert_close(cuda_params, cpu_params, **TOL[torch.float32])
    torch.testing.assert_close(cuda_grads, cpu_grads, **TOL[torch.float32])
    torch.testing.assert_close(cuda_state, cpu_state, **TOL[torch.float32])
