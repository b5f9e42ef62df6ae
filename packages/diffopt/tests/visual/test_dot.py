"""diffopt.visual.make_dot: real MAML graphs rendered by dot, parsed back from SVG."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter

import pytest
import torch

import diffopt
from diffopt import visual
from diffopt.visual import make_dot

graphviz = pytest.importorskip("graphviz")
needs_dot = pytest.mark.skipif(not visual.dot_available(), reason="Graphviz's dot is not installed")
SVG = "{http://www.w3.org/2000/svg}"


def maml_graph(accelerated: bool, inner_steps: int = 2):
    """Outer loss of MAML with ``inner_steps`` MetaAdam steps and the names of every step's
    parameters (``step0.*`` are the meta-parameters)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    inner = diffopt.MetaAdam(net, lr=0.1, use_accelerated_op=accelerated)
    x, y = torch.randn(6, 3), torch.randn(6, 1)
    names = [dict((f"step0.{n}", p) for n, p in net.named_parameters())]
    for step in range(inner_steps):
        inner.step(torch.nn.functional.mse_loss(net(x), y))
        names.append({f"step{step + 1}.{n}": p for n, p in net.named_parameters()})
    loss = torch.nn.functional.mse_loss(net(x), y)
    return loss, names


def parse_svg(graph):
    """``{node id: label lines}`` and the list of ``(tail, head)`` edges of the rendered SVG."""
    root = ET.fromstring(graph.pipe(format="svg"))
    nodes, edges = {}, []
    for group in root.iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        if group.get("class") == "node":
            nodes[title.text] = [t.text or "" for t in group.iter(f"{SVG}text")]
        elif group.get("class") == "edge":
            tail, head = title.text.split("->")
            edges.append((tail.split(":")[0], head.split(":")[0]))
    return nodes, edges


def reachable_names(nodes, edges):
    """For each named node, the names of the named nodes it is computed from."""
    parents: dict[str, set[str]] = {}
    for tail, head in edges:
        parents.setdefault(head, set()).add(tail)
    name_of = {node: lines[0] for node, lines in nodes.items() if "." in lines[0]}

    def ancestors(node, seen):
        for parent in parents.get(node, ()):
            if parent not in seen:
                seen.add(parent)
                ancestors(parent, seen)
        return seen

    return {name: {name_of[a] for a in ancestors(node, set()) if a in name_of}
            for node, name in name_of.items()}


def autograd_nodes(tensor):
    seen, stack = {}, [tensor.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        stack.extend(f for f, _ in fn.next_functions)
    return seen


@needs_dot
@pytest.mark.parametrize("accelerated", [False, True])
def test_maml_graph_names_every_step(accelerated):
    loss, names = maml_graph(accelerated)
    nodes, edges = parse_svg(make_dot(loss, params=(*names, {"loss": loss})))
    labels = Counter(lines[0] for lines in nodes.values())
    for step in range(3):
        for param in ("0.weight", "0.bias", "2.weight", "2.bias"):
            assert labels[f"step{step}.{param}"] == 1, (step, param)
    assert labels["loss"] == 1
    # Shapes are written under the names.
    by_label = {lines[0]: lines for lines in nodes.values()}
    assert by_label["step1.0.weight"][1] == "(4, 3)"
    assert by_label["loss"][1] == "()"
    # An adapted parameter sits between the update that made it and the layer that uses it.
    box = next(n for n, lines in nodes.items() if lines[0] == "step2.0.weight")
    into = [nodes[t][0] for t, h in edges if h == box]
    out_of = [nodes[h][0] for t, h in edges if t == box]
    assert into == ["ForeachAddBackward0List"]  # one addition for all leaves of the step
    assert out_of == ["TBackward0"]


@needs_dot
def test_fused_updates_are_one_node_each_and_the_graph_is_smaller():
    plain_loss, plain_names = maml_graph(accelerated=False)
    fused_loss, fused_names = maml_graph(accelerated=True)
    plain_nodes, plain_edges = parse_svg(make_dot(plain_loss, params=plain_names))
    fused_nodes, fused_edges = parse_svg(make_dot(fused_loss, params=fused_names))

    fused_labels = [lines[0] for lines in fused_nodes.values()]
    assert fused_labels.count("FusedAdam") == 2  # one per inner step, whatever the leaf count
    assert not any(label.startswith("Fused") for lines in plain_nodes.values()
                   for label in lines[:1])
    assert not any("Sqrt" in label or "Where" in label for label in fused_labels)
    assert len(fused_nodes) < len(plain_nodes)
    assert len(fused_edges) < len(plain_edges)
    # The fused node stands for the element-wise Adam arithmetic, which the plain path computes
    # with eight multi-tensor nodes per step (lerp, mul, lerp, clamp_min, sqrt, add, div, add).
    assert len(plain_nodes) - len(fused_nodes) >= 2 * 6

    # Same dependency structure between the named tensors in both pictures.
    plain_deps = reachable_names(plain_nodes, plain_edges)
    assert plain_deps == reachable_names(fused_nodes, fused_edges)
    assert plain_deps["step2.0.weight"] >= {"step1.2.bias", "step0.0.weight"}
    assert not plain_deps["step0.0.weight"]


@pytest.mark.parametrize("accelerated", [False, True])
def test_every_autograd_node_is_drawn_once(accelerated):
    loss, _ = maml_graph(accelerated)
    # Collected first and held: node ids are the ids of autograd's Python wrappers, which some
    # torch versions (2.11) recreate once nothing holds them.
    functions = autograd_nodes(loss)
    graph = make_dot(loss)
    drawn = [line for line in graph.body if re.match(r"\t\S+ \[label=", line)]
    assert len(drawn) == len(functions) + 1  # + the output box
    for fn_id in functions:
        assert sum(line.lstrip().startswith(f"{fn_id} [label=") for line in drawn) == 1


def test_params_forms_name_the_same_tensors():
    net = torch.nn.Linear(3, 2)
    x = torch.ones(1, 3, requires_grad=True)
    loss = net(x).sum()
    expected = ["weight\n(2, 3)", "bias\n(2)", "x\n(1, 3)", "loss\n()"]
    forms = [
        (net.named_parameters(), {"x": x, "loss": loss}),
        [dict(net.named_parameters()), {"x": x}, {"loss": loss}],
        ({net.weight: "weight", net.bias: "bias", x: "x", loss: "loss"},),
    ]
    for params in forms:
        source = make_dot(loss, params=params).source
        for label in expected:
            assert label in source, (params, label)
    # A single dict and a bare generator work too.
    assert "weight\n(2, 3)" in make_dot(loss, params=net.named_parameters()).source
    assert "bias\n(2)" in make_dot(loss, params={"bias": net.bias}).source


def test_module_state_names():
    net = torch.nn.Linear(3, 2)
    state = diffopt.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")
    source = make_dot(net(torch.ones(1, 3)).sum(), params=state).source
    if state.visual_contents:  # named by the prefix when extract_state_dict records them
        assert "step0.weight\n(2, 3)" in source
    else:
        assert "weight\n(2, 3)" in source and "bias\n(2)" in source


def test_bad_input_is_rejected():
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="var must be a tensor"):
        make_dot([1.0])
    with pytest.raises(TypeError, match="var must be a tensor"):
        make_dot([])
    with pytest.raises(TypeError, match="bare tensor"):
        make_dot(x * 2, params=x)
    with pytest.raises(TypeError, match="must be a tensor"):
        make_dot(x * 2, params={"x": 1.0})
    with pytest.raises(TypeError, match="names must be strings"):
        make_dot(x * 2, params={1: x})
    with pytest.raises(TypeError, match="params must be"):
        make_dot(x * 2, params=3)
    with pytest.raises(ValueError, match="max_attr_chars"):
        make_dot(x * 2, max_attr_chars=-1)


def test_constants_leaves_and_several_outputs():
    x = torch.ones(2, requires_grad=True)
    assert "x\n(2)" in make_dot(x, params={"x": x}).source  # a leaf alone
    assert "output\n(3)" in make_dot(torch.zeros(3)).source  # no graph at all
    a, b = x * 2, x.exp()
    source = make_dot((a, b), params={"a": a, "b": b, "x": x}).source
    assert source.count("darkolivegreen1") == 2
    assert "a\n(2)" in source and "b\n(2)" in source
    assert source.count("AccumulateGrad") == 0 and source.count("x\n(2)") == 1


def test_show_attrs_and_saved_tensors():
    x = torch.ones(3, requires_grad=True)
    y = (x * torch.full((3,), 2.0)).pow(3).sum()
    plain = make_dot(y).source
    assert "exponent" not in plain
    attrs = make_dot(y, show_attrs=True).source
    assert "exponent: 3" in attrs and "[saved tensor]" in attrs
    saved = make_dot(y, show_saved=True).source
    assert "style=dotted" in saved and "self\n(3)" in saved
    # Long attribute values are cut at max_attr_chars.
    z = x.reshape(3, 1).expand(3, 1000).sum()
    cut = make_dot(z, show_attrs=True, max_attr_chars=8).source
    assert "self_sym_sizes: (3, 1..." in cut.replace("'", "")
    assert "(3, 1000)" not in make_dot(z, show_attrs=True, max_attr_chars=8).source


@pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")
def test_fused_node_shows_its_hyper_parameters():
    loss, _ = maml_graph(accelerated=True, inner_steps=1)
    source = make_dot(loss, show_attrs=True).source
    assert source.count("FusedAdam\n[fused-optim direction]") == 1
    assert "beta1: 0.9" in source and "beta2: 0.999" in source and "step: 1" in source


@pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")
def test_raw_fused_op_call_is_one_named_node():
    import fused_optim  # noqa: F401 (registers torch.ops.fused_optim)

    g = torch.randn(3, requires_grad=True)
    directions, m, v = torch.ops.fused_optim.adam_direction.default(
        [g], [torch.zeros(3)], [torch.zeros(3)], step=1, beta1=0.9, beta2=0.999, eps=1e-8,
        eps_root=0.0)
    source = make_dot((directions[0] + m[0] + v[0]).sum(), params={"g": g}).source
    assert source.count("FusedAdam\n[fused-optim direction]") == 1
    assert "GeneratedBackwardFor" not in source


@needs_dot
@pytest.mark.parametrize(("fmt", "magic"), [("svg", b"<?xml"), ("png", b"\x89PNG"),
                                            ("pdf", b"%PDF")])
def test_render_writes_files(tmp_path, fmt, magic):
    loss, names = maml_graph(accelerated=True, inner_steps=1)
    path = make_dot(loss, params=names).render(tmp_path / "maml", format=fmt, cleanup=True)
    with open(path, "rb") as file:
        data = file.read()
    assert path.endswith(f".{fmt}") and data.startswith(magic) and len(data) > 1000


def test_missing_dot_builds_but_does_not_render(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot anywhere on PATH
    assert not visual.dot_available()
    x = torch.ones(2, requires_grad=True)
    graph = make_dot((x * 2).sum(), params={"x": x})
    assert isinstance(graph, graphviz.Digraph)
    assert "x\n(2)" in graph.source
    for call in (lambda: graph.render(tmp_path / "g", format="svg"),
                 lambda: graph.pipe(format="svg")):
        with pytest.raises(visual.GraphvizNotFoundError, match="apt-get install graphviz") as info:
            call()
        assert isinstance(info.value, graphviz.ExecutableNotFound)
        assert isinstance(info.value, RuntimeError)
    assert not (tmp_path / "g.svg").exists()


def test_resize_graph_scales_with_the_body():
    graph = graphviz.Digraph()
    for i in range(40):
        graph.node(str(i))
    visual.resize_graph(graph)  # 40 rows * 0.5 inch
    assert graph.graph_attr["size"] == "20.0,20.0"
    visual.resize_graph(graph, size_per_element=0.1, min_size=5.0)
    assert graph.graph_attr["size"] == "5.0,5.0"
    with pytest.raises(ValueError, match="min_size"):
        visual.resize_graph(graph, min_size=float("nan"))
