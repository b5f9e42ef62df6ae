"""Every fused_optim op and drop-in class on DTensors (2 gloo ranks): equal to the plain tensors' call.

One spawn runs ``dtensor_scenario`` (``_distributed.py``); its checks compare each op on DTensors
placed Shard(0), Shard(1) and Replicate (uneven shards included) with the same op on the whole
plain tensors, check the outputs keep the inputs' placements and count the op's kernel runs. The
argument errors are checked in this process, on a world of 1.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _distributed import Checks, check, error_of, requires_gloo, run_scenario, single_process_group
from helpers import FUNCTIONAL_CASES, op, step_args, tolerances

import fused_optim
from fused_optim.ops import FUNCTIONAL_OPS, STEP_OPS

pytestmark = requires_gloo

SHAPES = ((4, 6), (5, 3))  # 5 rows and 3 columns shard unevenly over 2 ranks
PLACEMENTS = ("S0", "S1", "R")
# The first case of each functional op, and Adafactor's factored one (row and column factors).
CASES = {c.op: c for c in reversed(FUNCTIONAL_CASES)}
CASES["adafactor_update_factored"] = next(
    c for c in FUNCTIONAL_CASES if c.op == "adafactor_update" and c.matrices
)
OPTIMIZERS = {
    "SGD": dict(lr=0.1, momentum=0.9, nesterov=True),
    "Adam": dict(lr=0.05, amsgrad=True),
    "AdamW": dict(lr=0.05),
    "Adagrad": dict(lr=0.1),
    "Adadelta": dict(lr=1.0),
    "Adamax": dict(lr=0.05),
    "RAdam": dict(lr=0.05),
    "NAdam": dict(lr=0.05),
    "RMSprop": dict(lr=0.01, centered=True, momentum=0.5),
    "Rprop": dict(lr=0.05),
    "ASGD": dict(lr=0.05, t0=1.0),
    "Adafactor": dict(lr=0.05),
    "Lion": dict(lr=0.05),
    "Adan": dict(lr=0.05),
    # Newton-Schulz needs whole matrices: sharded ones are gathered (ops._newton_schulz_sharded)
    "Muon": dict(lr=0.05, weight_decay=0.1, nesterov=True),
}


# --- the scenario: runs on every rank -----------------------------------------------------------


def _placement(name: str) -> Any:
    from torch.distributed.tensor import Replicate, Shard

    return Replicate() if name == "R" else Shard(int(name[1]))


def _distribute(t: torch.Tensor | None, mesh: Any, placement: str) -> Any:
    from torch.distributed.tensor import distribute_tensor

    return None if t is None else distribute_tensor(t.clone(), mesh, [_placement(placement)])


def _diff(ours: Any, ref: torch.Tensor) -> float:
    from torch.distributed.tensor import DTensor

    whole = ours.full_tensor() if isinstance(ours, DTensor) else ours
    return float((whole - ref).abs().max()) if ref.numel() else 0.0


def _step_check(
    mesh: Any, name: str, placement: str, factored: bool = False, amp: bool = False
) -> dict:
    """A step op on DTensors against the same op on the whole tensors."""
    from torch.distributed.tensor import DTensor

    from fused_optim._dtensor import SCALAR_LISTS

    args, kwargs = step_args(name, shapes=SHAPES)
    if factored:  # Adafactor's row and column factors instead of a full variance
        args = (
            args[0],
            args[1],
            [t[:, :1].abs() + 0.5 for t in args[1]],
            [t[:1].abs() + 0.5 for t in args[1]],
            [],
            args[5],
        )
        kwargs = dict(kwargs, factored=True)
    if amp:
        kwargs = dict(kwargs, grad_scale=torch.tensor([4.0]), found_inf=torch.tensor([0.0]))
    names = [a.name for a in op(name)._schema.arguments if not a.kwarg_only]
    ref = [[t.clone() for t in lst] for lst in args]
    op(name)(*ref, **kwargs)
    ours = [
        [t.clone() if n in SCALAR_LISTS else _distribute(t, mesh, placement) for t in lst]
        for n, lst in zip(names, args)
    ]
    op(name)(*ours, **kwargs)
    per_element = [
        (o, r)
        for n, lo, lr in zip(names, ours, ref)
        if n not in SCALAR_LISTS
        for o, r in zip(lo, lr)
    ]
    scalars = [
        (o, r) for n, lo, lr in zip(names, ours, ref) if n in SCALAR_LISTS for o, r in zip(lo, lr)
    ]
    return dict(
        diff=max(_diff(o, r) for o, r in per_element + scalars),
        changed=max(
            float((r - t).abs().max()) for lr, la in zip(ref, args) for r, t in zip(lr, la)
        ),
        placed=all(
            isinstance(o, DTensor) and o.placements == (_placement(placement),)
            for o, _ in per_element
        ),
        scalars_plain=all(type(o) is torch.Tensor for o, _ in scalars),
    )


def _functional_check(mesh: Any, case_name: str, placement: str, backward: bool) -> dict:
    """A functional op (or its backward op) on DTensors against the whole tensors; outputs placed as
    the input each is shaped like."""
    from torch.distributed.tensor import DTensor

    case = CASES[case_name]
    spec = FUNCTIONAL_OPS[case.op]
    lists = case.make(torch.float32, shapes=list(SHAPES))
    outputs = op(case.op)(*lists, **case.kwargs)
    if backward:
        gen = torch.Generator().manual_seed(1)
        grads = [[torch.randn(t.shape, generator=gen) for t in out] for out in outputs]
        inputs = [lists[i] for i in (range(len(lists)) if spec.like else spec.saved)]
        args, call = [*grads, *inputs], op(case.op + "_backward")
    else:
        args, call = lists, op(case.op)
    ref = call(*args, **case.kwargs)
    ours = call(*[[_distribute(t, mesh, placement) for t in lst] for lst in args], **case.kwargs)
    diff, placed, count = 0.0, True, 0
    for out_ours, out_ref in zip(ours, ref):  # every input placed alike: so is every output
        for o, r in zip(out_ours, out_ref):
            diff = max(diff, _diff(o, r))
            placed = placed and isinstance(o, DTensor) and o.placements == (_placement(placement),)
            count += 1
    return dict(
        diff=diff,
        placed=placed,
        outputs=count,
        norm=max(float(r.abs().max()) for o in ref for r in o),
    )


def _autograd_check(mesh: Any, name: str, placement: str) -> dict:
    """``fused_optim.functional``'s update on DTensors that require grad (its autograd node, whose
    backward is the fused backward op): the new params and the gradient of a loss on them with
    respect to every input, against the same on the whole tensors."""
    from torch.distributed.tensor import DTensor

    from fused_optim import functional as F

    gen = torch.Generator().manual_seed(5)
    p, g = (torch.randn(SHAPES[0], generator=gen) for _ in range(2))
    if name == "adam_update":
        state = [torch.randn(SHAPES[0], generator=gen), torch.rand(SHAPES[0], generator=gen) + 0.5]
    else:  # Adafactor's factored matrix: row and column averages
        state = [
            torch.rand(SHAPES[0][0], 1, generator=gen) + 0.5,
            torch.rand(1, SHAPES[0][1], generator=gen) + 0.5,
        ]

    def run(place: Any) -> tuple[torch.Tensor, list[torch.Tensor], str]:
        inputs = [place(t).requires_grad_() for t in (p, g, *state)]
        if name == "adam_update":
            new = F.adam_update(
                [inputs[0]], [inputs[1]], [inputs[2]], [inputs[3]], 3, lr=0.05, weight_decay=0.1
            )
        else:
            new = F.adafactor_update(
                [inputs[0]], [inputs[1]], [inputs[2]], [inputs[3]], [None], 3, lr=0.05
            )
        out = new.params[0]
        loss = (out * out).sum() + sum(
            (s * s).sum() for lst in new[1:3] for s in lst if s is not None
        )
        grads = torch.autograd.grad(loss, inputs)
        whole = [t.full_tensor() if isinstance(t, DTensor) else t for t in (out, *grads)]
        return whole[0].detach(), whole[1:], type(out).__name__

    ref_out, ref_grads, _ = run(lambda t: t.clone())
    out, grads, kind = run(lambda t: _distribute(t, mesh, placement))
    return dict(
        kind=kind,
        diff=_diff(out, ref_out),
        grad_diff=max(_diff(a, b) for a, b in zip(grads, ref_grads)),
        grad_norm=min(float(b.abs().max()) for b in ref_grads),
    )


def _launches(mesh: Any) -> dict:
    """How often the step op's kernel runs for one call with two DTensor parameters: the profiler
    records the call as dispatched (DTensors) and each kernel run (local tensors)."""
    from torch.profiler import ProfilerActivity, profile

    args, kwargs = step_args("adam_step_", shapes=SHAPES)
    ours = [[_distribute(t, mesh, "S0") for t in lst] for lst in args[:5]] + [args[5]]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        op("adam_step_")(*ours, **kwargs)
    events = [e for e in prof.events() if e.name == "fused_optim::adam_step_"]
    return dict(
        calls=len(events), parents=[e.cpu_parent.name if e.cpu_parent else None for e in events]
    )


def _optimizer_check(mesh: Any, name: str, placement: str) -> dict:
    """Four steps of a drop-in class on DTensor parameters against the same class on plain ones;
    its state as torch.optim keeps it (DTensor buffers, plain scalars)."""
    gen = torch.Generator().manual_seed(3)
    whole = [torch.randn(s, generator=gen) for s in SHAPES]
    plain = [torch.nn.Parameter(t.clone()) for t in whole]
    ours = [torch.nn.Parameter(_distribute(t, mesh, placement)) for t in whole]
    cls = getattr(fused_optim, name)
    opt_plain, opt_ours = cls(plain, **OPTIMIZERS[name]), cls(ours, **OPTIMIZERS[name])
    for step in range(4):  # the third step reuses the second's lists; the fourth lacks a gradient
        for i, (p, q) in enumerate(zip(plain, ours)):
            g = None if step == 3 and i == 1 else torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g, _distribute(g, mesh, placement)
        opt_plain.step()
        opt_ours.step()

    def layout(state: dict) -> dict:
        return {
            k: [type(v).__name__, str(getattr(v, "placements", None)), v.dtype, tuple(v.shape)]
            for k, v in state.items()
        }

    # torch.optim's own class on the same DTensor parameters, where it runs (its Adafactor and
    # Rprop refuse sharded DTensors): the state layout a checkpoint of either one holds.
    twin = getattr(torch.optim, name, None)
    twin_layout = None
    if twin is not None:
        twin_params = [torch.nn.Parameter(_distribute(t, mesh, placement)) for t in whole]
        for q in twin_params:
            q.grad = _distribute(torch.ones(q.shape), mesh, placement)
        twin_opt = twin(twin_params, **OPTIMIZERS[name])
        if error_of(twin_opt.step) is None:
            twin_layout = {
                k: [*v[:2], str(v[2]), v[3]]
                for k, v in layout(twin_opt.state[twin_params[0]]).items()
            }
    ours_layout = layout(opt_ours.state[ours[0]])
    return dict(
        diff=max(_diff(q, p.detach()) for p, q in zip(plain, ours)),
        moved=max(float((p.detach() - t).abs().max()) for p, t in zip(plain, whole)),
        state={k: v[0] for k, v in ours_layout.items()},
        layout={k: [*v[:2], str(v[2]), v[3]] for k, v in ours_layout.items()},
        twin_layout=twin_layout,
        torch_state={k: type(v).__name__ for k, v in opt_plain.state[plain[0]].items()},
    )


def _torch_adafactor(mesh: Any, placement: str) -> dict:
    """What torch.optim.Adafactor does on the same DTensors: its result, or its error."""
    gen = torch.Generator().manual_seed(4)
    whole = torch.randn(SHAPES[0], generator=gen)
    grad = torch.randn(SHAPES[0], generator=gen)
    plain = torch.nn.Parameter(whole.clone())
    ours = torch.nn.Parameter(_distribute(whole, mesh, placement))
    plain.grad, ours.grad = grad.clone(), _distribute(grad, mesh, placement)
    torch.optim.Adafactor([plain], lr=0.05).step()
    error = error_of(torch.optim.Adafactor([ours], lr=0.05).step)
    return dict(error=error, diff=None if error else _diff(ours, plain.detach()))


def dtensor_scenario() -> dict:
    import torch.distributed as dist
    from torch.distributed.tensor import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    checks = Checks()
    for placement in PLACEMENTS:
        for name in STEP_OPS:
            checks.run(f"step/{name}/{placement}", _step_check, mesh, name, placement)
        checks.run(
            f"step/adafactor_step_factored/{placement}",
            _step_check,
            mesh,
            "adafactor_step_",
            placement,
            factored=True,
        )
        checks.run(
            f"step/adam_step_amp/{placement}", _step_check, mesh, "adam_step_", placement, amp=True
        )
        for case_name in CASES:
            for backward in (False, True):
                checks.run(
                    f"functional/{case_name}/{backward}/{placement}",
                    _functional_check,
                    mesh,
                    case_name,
                    placement,
                    backward,
                )
        for name in OPTIMIZERS:
            checks.run(f"optim/{name}/{placement}", _optimizer_check, mesh, name, placement)
        for name in ("adam_update", "adafactor_update"):
            checks.run(f"autograd/{name}/{placement}", _autograd_check, mesh, name, placement)
        checks.run(f"torch_adafactor/{placement}", _torch_adafactor, mesh, placement)
    checks.run("launches", _launches, mesh)
    return checks.results


# --- the tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks(once_per_run) -> list[dict]:
    return once_per_run(__name__, lambda: run_scenario(dtensor_scenario, 2))


TOL = tolerances(torch.float32)["atol"] * 10  # float32, the same arithmetic per element


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", [*STEP_OPS, "adafactor_step_factored", "adam_step_amp"])
def test_step_op_on_dtensors_equals_the_whole_tensors(ranks, name, placement):
    for rank in ranks:
        result = check(rank, f"step/{name}/{placement}")
        assert result["changed"] > 1e-4  # the step did something
        assert result["diff"] <= TOL
        assert result["placed"]  # still DTensors, placed as before
        assert result["scalars_plain"]  # step counters (and ASGD's, NAdam's scalars) stay plain


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("case_name", list(CASES))
def test_functional_op_on_dtensors_equals_the_whole_tensors(ranks, case_name, backward, placement):
    for rank in ranks:
        result = check(rank, f"functional/{case_name}/{backward}/{placement}")
        assert result["outputs"] >= 2 and result["norm"] > 1e-3
        assert result["diff"] <= TOL * max(1.0, result["norm"])
        assert result["placed"]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", ["adam_update", "adafactor_update"])
def test_functional_update_differentiates_through_dtensors(ranks, name, placement):
    for rank in ranks:
        result = check(rank, f"autograd/{name}/{placement}")
        assert result["kind"] == "DTensor"
        assert result["grad_norm"] > 1e-3  # every input gets a gradient
        assert result["diff"] <= TOL
        assert result["grad_diff"] <= TOL * 10  # float32 sums of a few terms per element


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_drop_in_class_steps_dtensor_parameters(ranks, name, placement):
    for rank in ranks:
        result = check(rank, f"optim/{name}/{placement}")
        assert result["moved"] > 1e-3
        assert result["diff"] <= TOL
        assert result["state"] == result["torch_state"] | {
            k: "DTensor"
            for k, v in result["torch_state"].items()
            if v == "Tensor" and k in _BUFFERS[name]
        }
        if result["twin_layout"] is not None:  # torch.optim's state on the same DTensors: the same
            # keys, kinds, placements, dtypes and shapes (DCP checkpoints interchange)
            assert result["layout"] == result["twin_layout"]


# The per-element state entries (DTensors like the parameter); the rest are plain 0-d tensors.
_BUFFERS = {
    "SGD": {"momentum_buffer"},
    "Adam": {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
    "AdamW": {"exp_avg", "exp_avg_sq"},
    "Adagrad": {"sum"},
    "Adadelta": {"square_avg", "acc_delta"},
    "Adamax": {"exp_avg", "exp_inf"},
    "RAdam": {"exp_avg", "exp_avg_sq"},
    "NAdam": {"exp_avg", "exp_avg_sq"},
    "RMSprop": {"square_avg", "grad_avg", "momentum_buffer"},
    "Rprop": {"prev", "step_size"},
    "ASGD": {"ax"},
    "Adafactor": {"row_var", "col_var", "variance"},
    "Lion": {"exp_avg"},
    "Adan": {"exp_avg", "exp_avg_diff", "exp_avg_sq", "prev_grad"},
    "Muon": {"momentum_buffer"},
}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_torch_adafactor_on_the_same_dtensors_fails_or_agrees(ranks, placement):
    # torch.optim.Adafactor (torch 2.13) refuses sharded DTensors (an in-place pow_ on the partial
    # norm of its column or row factor); fused_optim's Adafactor gathers and steps them exactly
    # (test_drop_in_class_steps_dtensor_parameters). Where torch's runs, the two agree.
    for rank in ranks:
        result = check(rank, f"torch_adafactor/{placement}")
        assert result["error"] is not None or result["diff"] <= TOL, result
        if placement == "R":
            assert result["error"] is None


def test_one_kernel_run_per_call(ranks):
    for rank in ranks:
        # The call as dispatched with DTensors, then inside DTensor's layer (PythonSubclass) ONE run
        # on both parameters' local shards, not one per tensor (the results: the tests above).
        assert check(rank, "launches") == dict(calls=2, parents=[None, "PythonSubclass"])


# --- argument errors, on a world of 1 in this process ---------------------------------------------


@pytest.fixture(scope="module")
def mesh():
    from torch.distributed.tensor import init_device_mesh

    with single_process_group():
        yield init_device_mesh("cpu", (1,))


def _adam_call(mesh, **placed):
    """adam_step_'s lists with two DTensor params (Shard(0)); ``placed`` replaces entries by
    ``list=(index, tensor)``."""
    from torch.distributed.tensor import Shard, distribute_tensor

    args, kwargs = step_args("adam_step_", shapes=SHAPES)
    names = [a.name for a in op("adam_step_")._schema.arguments if not a.kwarg_only]
    lists = {
        n: [distribute_tensor(t, mesh, [Shard(0)]) for t in lst] if n != "state_steps" else lst
        for n, lst in zip(names, args)
    }
    for name, (i, t) in placed.items():
        lists[name][i] = t
    return lists, kwargs


def _error_and_untouched(mesh, **placed):
    lists, kwargs = _adam_call(mesh, **placed)
    before = [
        [t.full_tensor().clone() if hasattr(t, "full_tensor") else t.clone() for t in lst]
        for lst in lists.values()
    ]
    error = error_of(op("adam_step_"), *lists.values(), **kwargs)
    after = [
        [t.full_tensor() if hasattr(t, "full_tensor") else t for t in lst] for lst in lists.values()
    ]
    assert all(
        torch.equal(a, b) for la, lb in zip(after, before) for a, b in zip(la, lb)
    )  # nothing written
    return error


def test_mismatched_placements_name_the_list_and_index(mesh):
    from torch.distributed.tensor import Replicate, distribute_tensor

    exp_avg = distribute_tensor(torch.zeros(SHAPES[1]), mesh, [Replicate()])
    error = _error_and_untouched(mesh, exp_avgs=(1, exp_avg))
    assert error.startswith(
        "ValueError: fused_optim::adam_step_: exp_avgs[1] has placements (Replicate(),) but "
        "params[1] has (Shard(dim=0),)"
    )


def test_a_plain_tensor_among_dtensors_is_refused(mesh):
    error = _error_and_untouched(mesh, exp_avg_sqs=(0, torch.ones(SHAPES[0])))
    assert error.startswith(
        "TypeError: fused_optim::adam_step_: exp_avg_sqs[0] is a plain Tensor but the call has "
        "DTensor arguments"
    )


def test_partial_and_mismatched_shapes_are_refused(mesh):
    from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor

    partial = DTensor.from_local(torch.ones(SHAPES[0]), mesh, [Partial()])
    assert (
        "params[0] has a Partial placement (Partial(sum),); reduce it first"
        in _error_and_untouched(mesh, params=(0, partial))
    )
    assert (
        "grads[0] has placements (Partial(sum),) but params[0] has (Shard(dim=0),)"
        in _error_and_untouched(mesh, grads=(0, partial))
    )
    other = distribute_tensor(torch.zeros(6, 4), mesh, [Shard(0)])
    assert _error_and_untouched(mesh, exp_avgs=(0, other)).startswith(
        "ValueError: fused_optim::adam_step_: exp_avgs[0] has shape (6, 4) but params[0] has (4, 6)"
    )


def test_a_sharded_scalar_argument_is_refused(mesh):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    lists, kwargs = _adam_call(mesh)
    scale = distribute_tensor(torch.ones(2), mesh, [Shard(0)])
    assert "grad_scale is a DTensor with placements (Shard(dim=0),)" in error_of(
        op("adam_step_"), *lists.values(), **kwargs, grad_scale=scale
    )
    # A replicated one is read as the plain scalar it holds: found_inf set, nothing written.
    found = distribute_tensor(torch.ones(1), mesh, [Replicate()])
    lists, kwargs = _adam_call(mesh)
    before = lists["params"][0].full_tensor().clone()
    op("adam_step_")(*lists.values(), **kwargs, found_inf=found)
    assert torch.equal(lists["params"][0].full_tensor(), before)


def test_every_op_is_registered_with_dtensor():
    from torch.distributed.tensor import DTensor

    from fused_optim import _native

    handlers = DTensor._op_dispatcher._custom_op_handlers
    assert all(op(name) in handlers for name in _native.EAGER)


def test_a_failed_registration_warns_and_leaves_torch_importable(monkeypatch):
    from fused_optim import _dtensor, ops

    def broken() -> None:
        raise AttributeError("'OpDispatcher' object has no attribute '_custom_op_handlers'")

    monkeypatch.setattr(_dtensor, "register", broken)
    with pytest.warns(
        RuntimeWarning, match="DTensor support is unavailable with torch .*AttributeError"
    ):
        ops._register_dtensor()
