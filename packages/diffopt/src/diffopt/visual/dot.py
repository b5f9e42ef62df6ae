"""The autograd graph behind a tensor, as a Graphviz picture with named tensors.

Nodes are the backward functions autograd recorded (``MulBackward0``...), drawn grey; leaf tensors
(blue boxes) and the outputs (green) carry their names when ``params`` names them, and so do named
intermediate tensors (light blue boxes, drawn between the function that made them and the
functions that used them), so the parameters of each inner step of a meta-learning loop
(``step0.weight``, ``step1.weight``...) can be told apart. Every fused-optim update is one orange
node named after its optimizer (``FusedAdam``...) where the op-by-op path draws dozens.

Example:
    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> y = (2 * x).sum()
    >>> graph = make_dot(y, params={'x': x, 'y': y})
    >>> 'x\\n(2)' in graph.source and 'MulBackward0' in graph.source
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from diffopt.visual.render import digraph_class, import_graphviz
from fused_optim.ops import describe_node

__all__ = ["make_dot", "resize_graph"]

_SAVED_PREFIX = "_saved_"

_STYLE = {
    "fn": {"fillcolor": "lightgrey"},
    "fused": {"fillcolor": "orange", "penwidth": "2"},
    "leaf": {"fillcolor": "lightblue"},
    "named": {"fillcolor": "lightcyan", "shape": "box", "style": "filled,rounded"},
    "output": {"fillcolor": "darkolivegreen1"},
    "saved": {"fillcolor": "orange"},
}


def _shape(tensor: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in tensor.shape) + ")"


def _add_names(names: dict[int, tuple[str, torch.Tensor]], name: Any, value: Any,
               where: str) -> None:
    if value is None:
        return
    if isinstance(name, torch.Tensor) and isinstance(value, str):  # a {tensor: name} mapping
        name, value = value, name
    if not isinstance(name, str):
        raise TypeError(f"make_dot: params names must be strings, got {type(name).__name__} "
                        f"in {where}")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"make_dot: params[{name!r}] must be a tensor, got "
                        f"{type(value).__name__}")
    # A tensor named twice keeps its first name (meta-parameters before their aliases).
    names.setdefault(id(value), (name, value))


def _collect_names(params: Any, names: dict[int, tuple[str, torch.Tensor]]) -> None:
    """Fills ``names`` (``id(tensor) -> (name, tensor)``) from every accepted form of ``params``."""
    if params is None:
        return
    visual = getattr(params, "visual_contents", None)
    module_params = getattr(params, "params", None)
    if isinstance(params, tuple) and hasattr(params, "_fields") and module_params is not None:
        # A ModuleState (diffopt/TorchOpt extract_state_dict): its visual_contents when recorded,
        # else each submodule's local names, prefixed by the submodule's index when ambiguous.
        if isinstance(visual, Mapping) and visual:
            for name, value in visual.items():
                _add_names(names, name, value, "visual_contents")
            return
        several = sum(1 for d in module_params if d) > 1
        for index, mapping in enumerate(module_params):
            for name, value in mapping.items():
                _add_names(names, f"{index}.{name}" if several else name, value, "ModuleState")
        return
    if isinstance(params, Mapping):
        for name, value in params.items():
            _add_names(names, name, value, "a dict")
        return
    if isinstance(params, torch.Tensor):
        raise TypeError("make_dot: params must name its tensors: pass a dict {name: tensor}, "
                        "named_parameters(), or a list/tuple of those, not a bare tensor")
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise TypeError(f"make_dot: params must be a dict of named tensors, named_parameters(), "
                        f"or a list/tuple of those, got {type(params).__name__}")
    for item in params:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            _add_names(names, item[0], item[1], "a (name, tensor) sequence")  # named_parameters()
        else:
            _collect_names(item, names)


def _fused_optimizer(fn: Any) -> tuple[str, str] | None:
    """``(label, kind)`` for a fused-optim backward node (``("FusedAdam", "direction")``), ``None``
    for any other node; fused-optim says what its nodes are (``describe_node``)."""
    info = describe_node(fn)
    return None if info is None else ("Fused" + info.optimizer, info.kind)


def _truncate(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max(max_chars - 3, 0)] + "..."


def _format_value(value: Any, max_chars: int) -> str:
    if isinstance(value, torch.Tensor):
        return "[saved tensor]"
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return "[saved tensors]"
    return _truncate(str(value), max_chars)


def _saved_attributes(fn: Any) -> dict[str, Any]:
    """What the node keeps for backward: ``_saved_*`` attributes of built-in nodes; the saved
    tensors and hyper-parameters of ``autograd.Function`` nodes (fused-optim's ``kwargs``)."""
    attrs: dict[str, Any] = {}
    for attr in dir(fn):
        if attr.startswith(_SAVED_PREFIX):
            try:
                attrs[attr[len(_SAVED_PREFIX):]] = getattr(fn, attr)
            except RuntimeError:  # freed by a backward pass without retain_graph
                attrs[attr[len(_SAVED_PREFIX):]] = "[freed]"
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        try:
            saved = fn.saved_tensors
        except RuntimeError:
            saved = ()
        if saved:
            attrs["saved_tensors"] = tuple(saved)
        kwargs = getattr(fn, "kwargs", None)
        if isinstance(kwargs, Mapping):
            attrs.update(kwargs)
    return attrs


def make_dot(var: torch.Tensor | Iterable[torch.Tensor], params: Any = None,
             show_attrs: bool = False, show_saved: bool = False, max_attr_chars: int = 50) -> Any:
    """The autograd graph behind ``var`` as a :class:`graphviz.Digraph`.

    Args:
        var: an output tensor, or a list/tuple of them (drawn green).
        params: names for tensors: a dict ``{name: tensor}``, a module's ``named_parameters()``,
            a :class:`~diffopt.ModuleState`, or a list/tuple of those. A named leaf is labelled
            with its name; a named intermediate tensor (say ``step1.weight``, the parameters
            after one inner step) becomes its own box between the function that computed it
            and the functions that used it.
        show_attrs: write each node's non-tensor saved attributes (and fused-optim's
            hyper-parameters) into its label.
        show_saved: draw the tensors each node saved for backward (orange, dotted edges).
        max_attr_chars: longest attribute value written in full; longer ones are cut with
            ``...``.

    Returns:
        A :class:`graphviz.Digraph` (``.source`` is the DOT text; ``.render(...)`` and
        ``.pipe(format='svg')`` need Graphviz's ``dot`` and say how to install it when it is
        missing).

    Raises:
        TypeError: if ``var`` holds something other than tensors or ``params`` is malformed.
        ValueError: if ``max_attr_chars`` is negative.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(3, 1)
        >>> loss = net(torch.ones(2, 3)).pow(2).mean()
        >>> graph = make_dot(loss, params=(net.named_parameters(), {'loss': loss}))
        >>> all(name in graph.source for name in ('weight\\n(1, 3)', 'bias\\n(1)', 'loss\\n()'))
        True
    """
    import_graphviz()
    outputs = (var,) if isinstance(var, torch.Tensor) else tuple(var)
    if not outputs or not all(isinstance(v, torch.Tensor) for v in outputs):
        raise TypeError("make_dot: var must be a tensor or a non-empty list/tuple of tensors")
    if max_attr_chars < 0:
        raise ValueError(f"make_dot: max_attr_chars must be >= 0, got {max_attr_chars}")
    names: dict[int, tuple[str, torch.Tensor]] = {}
    _collect_names(params, names)

    # Named intermediate tensors, keyed by the (node, output index) that produced them.
    produced_by: dict[tuple[int, int], tuple[str, torch.Tensor]] = {}
    output_ids = {id(v) for v in outputs}
    for name, tensor in names.values():
        if tensor.grad_fn is not None and id(tensor) not in output_ids:
            produced_by.setdefault((id(tensor.grad_fn), tensor.output_nr), (name, tensor))

    graph = digraph_class()(
        node_attr={"style": "filled", "shape": "box", "align": "left", "fontsize": "10",
                   "height": "0.2", "fontname": "monospace"},
        graph_attr={"size": "12,12"},
    )
    keep_alive: list[Any] = []  # ids are node names: hold every object until the graph is built
    seen: set[int] = set()
    drawn_tensors: set[int] = set()
    edges: dict[tuple[str, str], int] = {}  # drawn once, labelled with the multiplicity

    def edge(tail: str, head: str) -> None:
        edges[(tail, head)] = edges.get((tail, head), 0) + 1

    def tensor_node(tensor: torch.Tensor, style: str, fallback: str | None = None) -> str:
        keep_alive.append(tensor)
        node_id = f"tensor{id(tensor)}"
        if id(tensor) not in drawn_tensors:
            drawn_tensors.add(id(tensor))
            name = names.get(id(tensor), (fallback, None))[0]
            label = _shape(tensor) if name is None else f"{name}\n{_shape(tensor)}"
            graph.node(node_id, label, **_STYLE[style])
        return node_id

    def fn_label(fn: Any, fused: tuple[str, str] | None) -> str:
        label = fused[0] if fused else fn.name()
        if fused:
            label += f"\n[fused-optim {fused[1]}]"
        if show_attrs:
            attrs = {k: v for k, v in _saved_attributes(fn).items()
                     if not (show_saved and _is_tensors(v))}
            if attrs:
                width = max(len(k) for k in attrs)
                rows = [f"{k.rjust(width)}: {_format_value(v, max_attr_chars)}"
                        for k, v in attrs.items()]
                label += "\n" + "-" * max(len(r) for r in rows) + "\n" + "\n".join(rows)
        return label

    def source_of(fn: Any, output_nr: int) -> str:
        """The node an edge from ``fn``'s output ``output_nr`` starts at (a named tensor's box
        when that output is one)."""
        named = produced_by.get((id(fn), output_nr))
        if named is None:
            return str(id(fn))
        node_id = f"tensor{id(named[1])}"
        if id(named[1]) not in drawn_tensors:
            tensor_node(named[1], "named")
            edge(str(id(fn)), node_id)
        return node_id

    stack = [v.grad_fn for v in outputs if v.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        keep_alive.append(fn)
        variable = getattr(fn, "variable", None)  # AccumulateGrad: a leaf that requires grad
        if isinstance(variable, torch.Tensor):
            graph.node(str(id(fn)), _leaf_label(variable, names), **_STYLE["leaf"])
        else:
            fused = _fused_optimizer(fn)
            graph.node(str(id(fn)), fn_label(fn, fused), **_STYLE["fused" if fused else "fn"])
            if show_saved:
                for attr, value in _saved_attributes(fn).items():
                    for i, saved in enumerate(_tensors(value)):
                        saved_id = f"saved{id(fn)}_{attr}_{i}"
                        keep_alive.append(saved)
                        graph.node(saved_id, f"{attr}\n{_shape(saved)}", **_STYLE["saved"])
                        graph.edge(saved_id, str(id(fn)), dir="none", style="dotted")
        for next_fn, output_nr in fn.next_functions:
            if next_fn is None:
                continue
            edge(source_of(next_fn, output_nr), str(id(fn)))
            stack.append(next_fn)

    for out in outputs:
        if out.grad_fn is None and not out.requires_grad:
            tensor_node(out, "output", "output")  # a constant: nothing to trace
            continue
        if out.grad_fn is None:  # a leaf: its AccumulateGrad node would be the only node
            tensor_node(out, "output", "output")
            continue
        node_id = f"output{id(out)}"
        if node_id not in drawn_tensors:
            drawn_tensors.add(id(out))
            keep_alive.append(out)
            name = names.get(id(out), ("output", None))[0]
            graph.node(node_id, f"{name}\n{_shape(out)}", **_STYLE["output"])
            edge(source_of(out.grad_fn, out.output_nr), node_id)
    for (tail, head), count in edges.items():
        if count > 1:  # several outputs of one node feed another (a fused update's moments)
            graph.edge(tail, head, label=f"x{count}", fontsize="9")
        else:
            graph.edge(tail, head)
    _resize(graph)
    return graph


def _leaf_label(variable: torch.Tensor, names: dict[int, tuple[str, torch.Tensor]]) -> str:
    name = names.get(id(variable), (None, None))[0]
    return _shape(variable) if name is None else f"{name}\n{_shape(variable)}"


def _is_tensors(value: Any) -> bool:
    return bool(_tensors(value))


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def resize_graph(dot: Any, size_per_element: float = 0.5, min_size: float = 12.0) -> None:
    """Set a Graphviz graph's drawing size from how much it holds, in place.

    The drawing is a square of side ``max(min_size, size_per_element * rows)`` inches, ``rows``
    being the number of statements (nodes, edges) in ``dot.body``, so big graphs stay legible.

    Args:
        dot: a ``graphviz.Digraph`` (or ``Graph``), e.g. from :func:`make_dot`.
        size_per_element: inches per statement.
        min_size: the smallest side, in inches.

    Raises:
        ValueError: if ``size_per_element`` or ``min_size`` is negative or not finite.

    Example:
        >>> import graphviz
        >>> graph = graphviz.Digraph()
        >>> for i in range(30):
        ...     graph.node(str(i))
        >>> resize_graph(graph)
        >>> graph.graph_attr['size']
        '15.0,15.0'
        >>> resize_graph(graph, size_per_element=0.1)
        >>> graph.graph_attr['size']
        '12.0,12.0'
    """
    for name, value in (("size_per_element", size_per_element), ("min_size", min_size)):
        if not (0.0 <= float(value) < float("inf")):
            raise ValueError(f"resize_graph: {name} must be finite and >= 0, got {value!r}")
    side = round(max(float(min_size), len(dot.body) * float(size_per_element)), 6)
    dot.graph_attr.update(size=f"{side},{side}")


def _resize(graph: Any) -> None:
    """Grow the drawing with the graph so that big graphs stay legible."""
    resize_graph(graph, size_per_element=0.15)
