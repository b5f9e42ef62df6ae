"""torch.compile and diffopt: what traces into one graph, and that compiled results equal eager ones.

diffopt's pytree calls go through optree-core, whose nanobind functions Dynamo cannot trace;
``diffopt._dynamo`` registers Python twins of them that it can. Each test compiles with
``fullgraph=True`` (a graph break raises) through a backend that counts the graphs it receives, or
counts the breaks with ``torch._dynamo.explain`` where there is no compiled run to count (one trace
per test, not two), and compares the compiled function with the eager one (float64). The
backends are ``eager``/``aot_eager`` (Dynamo's tracing, plus AOTAutograd's for the latter): what
is tested is the trace, not inductor's code generation, which the benchmark
(``benchmarks/maml/bench_compile.py``) exercises.
"""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict, defaultdict, deque, namedtuple

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend
from torch.func import functional_call, grad

import diffopt
import optree_core
from diffopt import _dynamo
from diffopt.accelerated_op import adam_direction

fused = pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")

Pair = namedtuple("Pair", "first second")


class Box:
    """A custom pytree node registered in a namespace, whose metadata is its label."""

    def __init__(self, label, items):
        self.label, self.items = label, items


optree_core.register_pytree_node(
    Box, lambda box: (box.items, box.label), lambda label, items: Box(label, list(items)),
    namespace="test-compile")


def _explain(fn, *args):
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return explanation


def _assert_one_graph(fn, *args):
    explanation = _explain(fn, *args)
    reasons = [reason.reason.splitlines()[0] for reason in explanation.break_reasons]
    assert (explanation.graph_count, explanation.graph_break_count, reasons) == (1, 0, [])


def _assert_trees_close(actual, expected, **tolerances):
    actual_leaves, actual_spec = optree_core.tree_flatten(actual)
    expected_leaves, expected_spec = optree_core.tree_flatten(expected)
    assert actual_spec == expected_spec
    for a, e in zip(actual_leaves, expected_leaves):
        torch.testing.assert_close(a, e, **tolerances)


# --- the Python twins of optree-core's functions, eager: same answers as the C++ --------------

TREES = [
    {"b": 1, "a": [2, None], "c": (3,)},
    Pair(first={"z": 1, "y": 2}, second=[None, 3]),
    OrderedDict([("z", 1), ("a", 2)]),
    defaultdict(list, {"q": 1, "p": (2, 3)}),
    deque([1, [2, 3]], maxlen=4),
    [None, (), {}, 4],
    5,
    None,
]


@pytest.mark.parametrize("tree", TREES, ids=lambda tree: type(tree).__name__)
@pytest.mark.parametrize("none_is_leaf", [False, True])
def test_twins_flatten_like_optree_core(tree, none_is_leaf):
    leaves, spec = _dynamo._tree_flatten(tree, none_is_leaf=none_is_leaf)
    expected_leaves, expected_spec = optree_core.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert leaves == expected_leaves
    assert (spec.num_leaves, spec.num_nodes, spec.num_children, spec.kind, spec.type) == (
        expected_spec.num_leaves, expected_spec.num_nodes, expected_spec.num_children,
        expected_spec.kind, expected_spec.type)
    rebuilt = spec.unflatten([f"leaf{i}" for i in range(len(leaves))])
    expected = expected_spec.unflatten([f"leaf{i}" for i in range(len(leaves))])
    assert rebuilt == expected and type(rebuilt) is type(expected)
    if isinstance(expected, dict):
        assert list(rebuilt) == list(expected)  # the dict's own key order comes back
    if isinstance(expected, deque):
        assert rebuilt.maxlen == expected.maxlen
    assert repr(spec) == repr(expected_spec)


def test_twins_structures_compare_like_optree_core():
    trees = [{"a": 1, "b": 2}, {"b": 0, "a": 0}, {"a": 1, "c": 2}, {"a": (1,), "b": 2},
             OrderedDict(a=1, b=2), [1, 2], (1, 2), Pair(1, 2), [1, None], [1, 3]]
    for x in trees:
        for y in trees:
            expected = optree_core.tree_structure(x) == optree_core.tree_structure(y)
            assert (_dynamo._tree_structure(x) == _dynamo._tree_structure(y)) is expected, (x, y)
            assert (_dynamo._tree_structure(x) != _dynamo._tree_structure(y)) is not expected


def test_twins_follow_namespace_predicate_and_custom_nodes():
    tree = {"box": Box("tag", [1, (2, 3)]), "leafy": [4, 5]}
    is_leaf = lambda node: isinstance(node, list) and len(node) == 2 and node[0] == 4  # noqa: E731
    for kwargs in ({}, {"namespace": "test-compile"}, {"namespace": "test-compile", "is_leaf": is_leaf}):
        leaves, spec = _dynamo._tree_flatten(tree, **kwargs)
        assert leaves == optree_core.tree_leaves(tree, **kwargs)
        rebuilt = spec.unflatten(leaves)
        assert optree_core.tree_leaves(rebuilt, **kwargs) == leaves
    mapped = _dynamo._tree_map(lambda x, y: x + y, {"a": 1, "b": (2, 3)}, {"a": 10, "b": (20, 30)})
    assert mapped == {"a": 11, "b": (22, 33)}
    assert _dynamo._tree_map(lambda x, y: x + len(y), {"a": 1}, {"a": [1, 2]}) == {"a": 3}  # a prefix


def test_twins_refuse_mismatched_trees():
    with pytest.raises(ValueError, match="keys"):
        _dynamo._tree_map(lambda x, y: x, {"a": 1}, {"b": 1})
    with pytest.raises(ValueError, match="expected a"):
        _dynamo._tree_map(lambda x, y: x, [1], (1,))
    with pytest.raises(ValueError, match="children"):
        _dynamo._tree_map(lambda x, y: x, [1], [1, 2])
    with pytest.raises(ValueError, match="expected 2 leaves"):
        _dynamo._tree_structure([1, 2]).unflatten([1])


def test_optree_core_functions_compile_in_one_graph():
    def f(tree):
        leaves, spec = optree_core.tree_flatten(tree, namespace="test-compile")
        doubled = optree_core.tree_unflatten(spec, [2 * leaf for leaf in leaves])
        summed = optree_core.tree_map(torch.add, tree, doubled, namespace="test-compile")
        same = optree_core.tree_structure(summed, namespace="test-compile") == spec
        return summed, optree_core.tree_leaves(summed, namespace="test-compile"), same

    tree = {"box": Box("tag", [torch.ones(2), torch.zeros(1)]), "t": (torch.full((1,), 3.0), None)}
    counter = CompileCounter()  # runs the graph as the eager backend does
    compiled = torch.compile(f, backend=counter, fullgraph=True)(tree)
    assert counter.frame_count == 1
    eager = f(tree)
    assert compiled[2] is True and isinstance(compiled[0]["box"], Box)
    assert compiled[0]["box"].label == "tag"
    torch.testing.assert_close(compiled[1], eager[1])


def test_registration_waits_for_dynamo_and_happens_once():
    code = (
        "import sys, diffopt\n"
        "from diffopt import _dynamo\n"
        "assert 'torch._dynamo' not in sys.modules and not _dynamo._registered\n"
        "import torch._dynamo\n"
        "assert _dynamo._registered and _dynamo._hook not in sys.meta_path\n"
        "assert _dynamo.register_dynamo_polyfills() is False\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    code_dynamo_first = "import torch._dynamo, diffopt\nassert diffopt._dynamo._registered\n"
    subprocess.run([sys.executable, "-c", code_dynamo_first], check=True)


def test_a_twin_registered_elsewhere_first_leaves_the_others_registered():
    code = (
        "import warnings, torch, torch._dynamo, optree_core\n"
        "from torch.compiler import substitute_in_graph\n"
        "def leaves(tree, /, is_leaf=None, *, none_is_leaf=False, namespace=''):\n"
        "    return [tree]\n"
        "substitute_in_graph(optree_core.tree_leaves)(leaves)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import diffopt\n"
        "assert any('tree_leaves' in str(w.message) for w in caught), caught\n"
        "f = torch.compile(lambda t: optree_core.tree_flatten(t)[0], backend='eager', fullgraph=True)\n"
        "assert f({'a': torch.ones(1)})[0].shape == (1,)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- diffopt's functional optimizers ---------------------------------------------------------

def _params():
    gen = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 2, generator=gen, dtype=torch.float64),
            "b": (torch.randn(2, generator=gen, dtype=torch.float64), None)}


def _grads(step):
    gen = torch.Generator().manual_seed(step)
    return {"w": torch.randn(3, 2, generator=gen, dtype=torch.float64),
            "b": (torch.randn(2, generator=gen, dtype=torch.float64), None)}


OPTIMIZERS = {
    "sgd": lambda: diffopt.sgd(0.1),
    "sgd-nesterov-wd": lambda: diffopt.sgd(0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: diffopt.adam(0.01),
    "adam-accelerated": lambda: diffopt.adam(0.01, use_accelerated_op=True),
    "adamw": lambda: diffopt.adamw(0.01),
    "rmsprop": lambda: diffopt.rmsprop(0.01),
    "rmsprop-centered-momentum": lambda: diffopt.rmsprop(0.01, centered=True, momentum=0.9),
    "chain-clip-linear-schedule-adam": lambda: diffopt.chain(
        diffopt.clip_grad_norm(1.0),
        diffopt.adam(diffopt.schedule.linear_schedule(0.1, 0.01, transition_steps=4))),
    "sgd-exponential-decay": lambda: diffopt.sgd(
        diffopt.schedule.exponential_decay(0.1, 0.5, transition_steps=2), momentum=0.9),
    "nadamw": lambda: diffopt.nadam(0.01, weight_decay=0.1, decoupled_weight_decay=True),
    "nadam-accelerated": lambda: diffopt.nadam(0.01, use_accelerated_op=True),
    "rprop": lambda: diffopt.rprop(0.01, maximize=True),
    "rprop-accelerated": lambda: diffopt.rprop(0.01, use_accelerated_op=True),
    "asgd": lambda: diffopt.asgd(0.01, t0=2, weight_decay=0.01),
    "asgd-accelerated": lambda: diffopt.asgd(0.01, t0=2, use_accelerated_op=True),
    "adafactor": lambda: diffopt.adafactor(0.01, weight_decay=0.1),
    "adafactor-accelerated": lambda: diffopt.adafactor(0.01, weight_decay=0.1, use_accelerated_op=True),
    "lion": lambda: diffopt.lion(0.01, weight_decay=0.1),
    "adan": lambda: diffopt.adan(0.01, weight_decay=0.05),
    "adan-accelerated": lambda: diffopt.adan(0.01, weight_decay=0.05, use_accelerated_op=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_functional_update_compiles_to_one_graph_equal_to_eager(name):
    if name.endswith("-accelerated") and not diffopt.accelerated_op_available("cpu"):
        pytest.skip("fused-optim missing")
    opt = OPTIMIZERS[name]()

    def step(params, grads, state):
        updates, state = opt.update(grads, state, params=params, inplace=False)
        return diffopt.apply_updates(params, updates, inplace=False), state

    params = _params()
    init = _explain(opt.init, params)  # a stateless init builds no graph at all
    assert init.graph_count <= 1 and not init.break_reasons
    counter = CompileCounter()
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    eager_params, eager_state = params, opt.init(params)
    compiled_params, compiled_state = params, opt.init(params)
    for i in range(4):
        eager_params, eager_state = step(eager_params, _grads(i), eager_state)
        compiled_params, compiled_state = compiled(compiled_params, _grads(i), compiled_state)
    assert counter.frame_count == 1  # the step count is a tensor: no recompile per step
    _assert_trees_close(compiled_params, eager_params, rtol=1e-12, atol=1e-14)
    _assert_trees_close(compiled_state, eager_state, rtol=1e-12, atol=1e-14)
    assert not torch.equal(compiled_params["w"], params["w"])
    torch._dynamo.reset()


@fused
def test_accelerated_adam_compiled_matches_its_eager_fused_op():
    # Eager runs fused-optim's op; compiled runs the unfused math (the count has no Python value).
    opt = diffopt.adam(0.01, use_accelerated_op=True)

    def step(grads, state):
        return opt.update(grads, state, inplace=False)

    state = opt.init(_params())
    eager = step(_grads(1), state)
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)(_grads(1), state)
    _assert_trees_close(compiled, eager, rtol=1e-12, atol=1e-14)
    torch._dynamo.reset()


# --- Meta* optimizers -------------------------------------------------------------------------

def _meta_problem():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    return net, x, torch.randn(8, 1, generator=gen, dtype=torch.float64)


META_OPTIMIZERS = {
    "MetaSGD-momentum": lambda net: diffopt.MetaSGD(net, lr=0.1, momentum=0.9),
    "MetaAdam": lambda net: diffopt.MetaAdam(net, lr=0.1),
    "MetaAdam-accelerated": lambda net: diffopt.MetaAdam(net, lr=0.1, use_accelerated_op=True),
    "MetaRMSProp": lambda net: diffopt.MetaRMSProp(net, lr=0.01),
}


def _meta_param(name):
    marks = [fused] if name.endswith("accelerated") else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_meta_param(name) for name in META_OPTIMIZERS])
def test_meta_optimizer_step_breaks_only_at_torch_autograd_grad(name):
    net, x, y = _meta_problem()
    opt = META_OPTIMIZERS[name](net)

    def step(x, y):
        opt.step(F.mse_loss(net(x), y))

    explanation = _explain(step, x, y)
    # torch's own break (Dynamo does not trace torch.autograd.grad by default); diffopt adds none.
    assert explanation.graph_break_count == 1
    assert "torch.autograd.grad" in explanation.break_reasons[0].reason


@pytest.mark.parametrize("name", [_meta_param(name) for name in META_OPTIMIZERS])
def test_meta_optimizer_compiled_steps_and_meta_gradient_equal_eager(name):
    def run(compile_step):
        net, x, y = _meta_problem()
        start = list(net.parameters())
        opt = META_OPTIMIZERS[name](net)

        def step(x, y):
            opt.step(F.mse_loss(net(x), y))

        # backend="eager": AOTAutograd cannot double-backward, which the outer gradient needs.
        run_step = torch.compile(step, backend="eager") if compile_step else step
        for _ in range(3):
            run_step(x, y)
        outer = F.mse_loss(net(x), y)
        return outer, torch.autograd.grad(outer, start)

    torch._dynamo.reset()
    eager_loss, eager_grads = run(False)
    compiled_loss, compiled_grads = run(True)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-12, atol=1e-14)
    for c, e in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(c, e, rtol=1e-10, atol=1e-13)
    assert max(g.abs().max() for g in eager_grads) > 1e-3


DROP_IN = {
    "SGD-momentum": lambda params: diffopt.SGD(params, lr=0.1, momentum=0.9),
    "Adam": lambda params: diffopt.Adam(params, lr=0.1),
    "Adam-accelerated": lambda params: diffopt.Adam(params, lr=0.1, use_accelerated_op=True),
    "RMSProp": lambda params: diffopt.RMSProp(params, lr=0.01, centered=True),
}


@pytest.mark.parametrize("name", [_meta_param(name) for name in DROP_IN])
def test_drop_in_step_compiles_to_one_graph_equal_to_eager(name):
    def run(compile_step):
        net, x, y = _meta_problem()
        opt = DROP_IN[name](net.parameters())
        step = torch.compile(opt.step, backend="aot_eager", fullgraph=True) if compile_step else opt.step
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(net(x), y).backward()
            step()
        return [p.detach().clone() for p in net.parameters()], opt

    torch._dynamo.reset()
    eager_params, opt = run(False)
    compiled_params, _ = run(True)
    _assert_one_graph(opt.step)
    for c, e in zip(compiled_params, eager_params):
        torch.testing.assert_close(c, e, rtol=1e-12, atol=1e-14)


# --- a whole MAML outer step ------------------------------------------------------------------

def _maml_problem():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    gen = torch.Generator().manual_seed(2)
    x = 4 * torch.rand(2, 10, 1, generator=gen, dtype=torch.float64) - 2
    return net, x, torch.sin(3 * x)


def _maml_outer_loss(net, tx):
    def outer_loss(params, x, y):
        total = 0.0
        for xt, yt in zip(x, y):
            p, state = params, tx.init(params)
            for _ in range(3):
                g = grad(lambda q, xt=xt, yt=yt: F.mse_loss(functional_call(net, q, (xt[:5],)), yt[:5]))(p)
                updates, state = tx.update(g, state, params=p, inplace=False)
                p = diffopt.apply_updates(p, updates, inplace=False)
            total = total + F.mse_loss(functional_call(net, p, (xt[5:],)), yt[5:])
        return total / x.shape[0]

    return outer_loss


@fused
def test_maml_outer_step_with_accelerated_adam_compiles_to_one_graph_equal_to_eager():
    net, x, y = _maml_problem()
    outer_loss = _maml_outer_loss(net, diffopt.adam(0.05, use_accelerated_op=True))
    params = {n: p.detach().clone().requires_grad_() for n, p in net.named_parameters()}
    eager_loss = outer_loss(params, x, y)
    eager_grads = torch.autograd.grad(eager_loss, list(params.values()))  # the outer backward
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled_loss = torch.compile(outer_loss, backend=counter, fullgraph=True)(params, x, y)
    assert counter.frame_count == 1
    compiled_grads = torch.autograd.grad(compiled_loss, list(params.values()))
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-12, atol=1e-14)
    for c, e in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(c, e, rtol=1e-10, atol=1e-13)
    assert max(g.abs().max() for g in eager_grads) > 1e-3


@fused
def test_maml_meta_gradient_by_torch_func_grad_compiles_to_one_graph():
    net, x, y = _maml_problem()
    meta_grad = grad(_maml_outer_loss(net, diffopt.adam(0.05, use_accelerated_op=True)))
    params = {n: p.detach() for n, p in net.named_parameters()}
    _assert_one_graph(meta_grad, params, x, y)


# --- fused-optim's op itself inside a compiled torch.func loop ---------------------------------

def _inner_loop(w, x, y):
    """Three Adam steps on a least-squares problem with the fused direction, then a query loss."""
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for step in range(1, 4):
        g = torch.func.grad(lambda w: F.mse_loss(x[:6] @ w, y[:6]))(w)
        (d,), (m,), (v,) = adam_direction([g], [m], [v], step, beta1=0.9, beta2=0.999, eps=1e-8)
        w = w - 0.1 * d
    return F.mse_loss(x[6:] @ w, y[6:])


@fused
def test_fused_inner_loop_meta_gradient_compiles_without_graph_breaks():
    gen = torch.Generator().manual_seed(0)
    w, x, y = torch.randn(3, generator=gen), torch.randn(12, 3, generator=gen), torch.randn(12, generator=gen)
    meta_grad = torch.func.grad(_inner_loop)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(meta_grad, backend=counter, fullgraph=True)(w, x, y)
    assert counter.frame_count == 1
    eager = meta_grad(w, x, y)
    torch._dynamo.reset()
    assert eager.abs().max() > 1e-3
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
