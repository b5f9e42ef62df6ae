"""scale_by_accelerated_adafactor: fused-optim's Adafactor op (one FusedAdafactor node per dtype,
matrices and vectors apart) against the plain transform, values and meta-gradients, and where it
hands over to the plain math."""

from __future__ import annotations

import pytest
import torch

import diffopt
from diffopt.transform import scale_by_accelerated_adafactor, scale_by_adafactor

pytestmark = pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")

SHAPES = {"w": (4, 3), "batch": (2, 3, 2), "b": (3,), "s": (), "none": (2,)}
OPTIONS = [dict(), dict(lr=0.5, weight_decay=0.1, d=10.0), dict(lr=1.0, beta2_decay=-0.5, eps=(0.3, 0.5))]


def _tree(seed, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_(requires_grad)
            for k, s in SHAPES.items()}


def _run(tx, params, steps, seed=1):
    """`steps` updates with gradients depending on the params; returns the params and the state."""
    state = tx.init(params)
    for t in range(steps):
        grads = {k: torch.sin(p) * (t + 1) + p * p for k, p in params.items()}
        grads["none"] = None  # no gradient: param and state carried over
        updates, state = tx.update(grads, state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    return params, state


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "wd-d", "eps-lr"])
def test_values_and_meta_gradients_equal_the_plain_transform(options):
    results = []
    for make in (scale_by_adafactor, scale_by_accelerated_adafactor):
        p0 = _tree(0, requires_grad=True)
        params, state = _run(make(**options), p0, 4)
        loss = sum((p ** 2).sum() for p in params.values()) + sum(
            (r * 1.5).sum() for r in diffopt.pytree.tree_leaves(state.row_var))
        results.append((params, state, torch.autograd.grad(loss, list(p0.values()), allow_unused=True)))
    (p_plain, s_plain, g_plain), (p_fused, s_fused, g_fused) = results
    for k in SHAPES:
        torch.testing.assert_close(p_fused[k], p_plain[k], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(s_fused.row_var[k], s_plain.row_var[k], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(s_fused.col_var[k], s_plain.col_var[k], rtol=1e-12, atol=1e-14)
    for a, b in zip(g_fused, g_plain):
        if a is None or b is None:
            assert (a is None and b is None) or torch.count_nonzero(a if a is not None else b) == 0
            continue
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert torch.equal(s_fused.count, s_plain.count)


def _node_names(tensor):
    names, todo, seen = set(), [tensor.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(n for n, _ in node.next_functions)
    return names


def test_the_fused_node_computes_the_update():
    p0 = _tree(0, requires_grad=True)
    params, _ = _run(scale_by_accelerated_adafactor(), p0, 1)
    assert "FusedAdafactorBackward" in _node_names(params["w"])
    assert "FusedAdafactorBackward" in _node_names(params["b"])
    assert params["none"] is p0["none"]
    plain, _ = _run(scale_by_adafactor(), p0, 1)
    assert "FusedAdafactorBackward" not in _node_names(plain["w"])


def test_a_tensor_lr_that_requires_grad_runs_the_plain_math():
    lr = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    p0 = _tree(0)
    fused, _ = _run(scale_by_accelerated_adafactor(lr=lr), p0, 2)
    plain, _ = _run(scale_by_adafactor(lr=lr), p0, 2)
    for k in SHAPES:
        torch.testing.assert_close(fused[k], plain[k], rtol=0, atol=0)  # the same plain ops: bit for bit
    (g,) = torch.autograd.grad(sum(p.sum() for p in fused.values()), [lr])
    assert torch.isfinite(g)


def test_mixed_dtypes_take_one_call_each_with_their_own_eps1():
    params = {"a": torch.randn(3, 2, dtype=torch.float64), "b": torch.randn(4, dtype=torch.float32)}
    grads = {"a": torch.randn(3, 2, dtype=torch.float64), "b": torch.randn(4, dtype=torch.float32)}
    outs = []
    for make in (scale_by_adafactor, scale_by_accelerated_adafactor):
        tx = make(lr=0.1)
        outs.append(tx.update(grads, tx.init(params), params=params)[0])
    for k in params:
        torch.testing.assert_close(outs[1][k], outs[0][k])


def test_under_vmap_each_model_uses_its_own_rms():
    tx = scale_by_accelerated_adafactor(lr=0.5)
    gen = torch.Generator().manual_seed(3)
    params = {"w": torch.randn(3, 4, 2, generator=gen, dtype=torch.float64), "b": torch.randn(3, 5, dtype=torch.float64)}
    params["w"][1] *= 50.0
    grads = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    plain = scale_by_adafactor(lr=0.5)

    def step(t, p, g):
        return t.update(g, t.init(p), params=p)[0]

    got = torch.vmap(lambda p, g: step(tx, p, g))(params, grads)
    for i in range(3):
        want = step(plain, {k: v[i] for k, v in params.items()}, {k: v[i] for k, v in grads.items()})
        for k in params:
            torch.testing.assert_close(got[k][i], want[k], rtol=1e-12, atol=1e-14)
