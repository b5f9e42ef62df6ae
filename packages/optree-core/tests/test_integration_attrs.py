"""optree_core.integrations.attrs: attrs classes that are pytree nodes in a namespace."""

from __future__ import annotations

import pytest
from helpers import fresh_namespace

import optree_core

attrs = pytest.importorskip("attrs")
oattrs = pytest.importorskip("optree_core.integrations.attrs")


def test_define_splits_children_and_metadata_and_round_trips():
    ns = fresh_namespace()

    @oattrs.define(namespace=ns)
    class Layer:
        w: float
        b: list
        name: str = oattrs.field(default="fc", pytree_node=False)

    layer = Layer(1.0, [2.0, 3.0], "head")
    leaves, spec = optree_core.tree_flatten(layer, namespace=ns)
    assert leaves == [1.0, 2.0, 3.0]
    assert optree_core.tree_unflatten(spec, [4.0, 5.0, 6.0]) == Layer(4.0, [5.0, 6.0], "head")
    assert optree_core.tree_leaves(layer) == [layer]  # a leaf outside its namespace
    paths = [a.codify("m") for a in optree_core.tree_accessors(layer, namespace=ns)]
    assert paths == ["m.w", "m.b[0]", "m.b[1]"]


def test_private_fields_are_rebuilt_through_their_alias_and_converters_rerun():
    ns = fresh_namespace()

    @oattrs.define(namespace=ns)
    class Scaled:
        _x: float = attrs.field(converter=float)

    spec = optree_core.tree_structure(Scaled(x=1), namespace=ns)
    rebuilt = optree_core.tree_unflatten(spec, ["2.5"])
    assert rebuilt._x == 2.5  # passed as x=, converted again by __init__


def test_frozen_mutable_and_make_class():
    ns = fresh_namespace()

    @oattrs.frozen(namespace=ns)
    class Const:
        v: int

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Const(1).v = 2
    assert optree_core.tree_map(lambda v: v + 1, Const(1), namespace=ns) == Const(2)
    assert oattrs.mutable is oattrs.define
    Point = oattrs.make_class("Point", {"x": oattrs.field(), "tag": oattrs.field(pytree_node=False)},
                              namespace=ns)
    assert optree_core.tree_leaves(Point(1, "t"), namespace=ns) == [1]


def test_register_node_forms_errors_and_warning():
    @attrs.define
    class Plain:
        a: int

    ns = fresh_namespace()
    assert oattrs.register_node(ns)(Plain) is Plain
    assert optree_core.tree_leaves(Plain(3), namespace=ns) == [3]
    with pytest.raises(TypeError, match="already registered"):
        oattrs.register_node(Plain, namespace=fresh_namespace())
    with pytest.raises(TypeError, match="not an attrs class"):
        oattrs.register_node(int, namespace=ns)
    with pytest.raises(ValueError, match="namespace is required"):
        oattrs.register_node(Plain)
    with pytest.raises(TypeError, match="decorates classes"):
        oattrs.define(3, namespace=ns)

    @attrs.define(init=False)
    class Manual:
        a: int

        def __init__(self, a):
            self.a = a

    with pytest.warns(UserWarning, match="init=False"):
        oattrs.register_node(Manual, namespace=fresh_namespace())


def test_non_init_child_is_refused():
    with pytest.raises(TypeError, match="init=False"):
        oattrs.field(init=False)

    @attrs.define
    class Hidden:
        a: int
        cache: int = attrs.field(default=0, init=False)

    with pytest.raises(TypeError, match="'cache'"):
        oattrs.register_node(Hidden, namespace=fresh_namespace())
    assert "__optree_attrs_fields__" not in Hidden.__dict__


def test_attrs_entry_integers_count_registered_children():
    ns = fresh_namespace()

    @oattrs.define(namespace=ns)
    class Mixed:
        meta: str = oattrs.field(default="m", pytree_node=False)
        a: int = 1

    entry = oattrs.AttrsEntry(0, Mixed, optree_core.PyTreeKind.CUSTOM)
    assert entry.field == "a" and entry.fields == ("meta", "a") and entry.children_fields == ("a",)
    assert entry(Mixed()) == 1 and repr(entry).startswith("AttrsEntry(field='a'")
