"""optree_core.dataclasses: dataclasses that are pytree nodes in a namespace."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import fresh_namespace

import optree_core
from optree_core import dataclasses as odc


def make_point_class(ns):
    @odc.dataclass(namespace=ns)
    class Pt:
        x: float
        y: list
        z: int = odc.field(default=0, pytree_node=False)

    return Pt


def test_fields_are_children_and_non_node_fields_are_metadata():
    ns = fresh_namespace()
    Pt = make_point_class(ns)
    p = Pt(1.0, [2, 3], z=5)
    leaves, spec = optree_core.tree_flatten(p, namespace=ns)
    assert leaves == [1.0, 2, 3]
    assert spec.kind == optree_core.PyTreeKind.CUSTOM
    assert spec.type is Pt
    assert spec.entries() == ["x", "y"]
    assert optree_core.tree_paths(p, namespace=ns) == [("x",), ("y", 0), ("y", 1)]
    rebuilt = spec.unflatten([4.0, 5, 6])
    assert rebuilt == Pt(4.0, [5, 6], z=5)
    assert optree_core.tree_map(lambda v: v * 2, p, namespace=ns) == Pt(2.0, [4, 6], z=5)
    # z is metadata: two instances differing in z have different structures.
    assert spec != optree_core.tree_structure(Pt(1.0, [2, 3], z=6), namespace=ns)


def test_is_a_leaf_outside_its_namespace():
    ns = fresh_namespace()
    Pt = make_point_class(ns)
    p = Pt(1.0, [2])
    assert optree_core.tree_leaves(p) == [p]


def test_is_a_real_dataclass():
    ns = fresh_namespace()
    Pt = make_point_class(ns)
    p = Pt(1.0, [2])
    assert dataclasses.is_dataclass(p)
    assert odc.is_dataclass(p)
    assert [f.name for f in odc.fields(p)] == ["x", "y", "z"]
    assert odc.replace(p, x=9.0) == Pt(9.0, [2])
    assert odc.asdict(p) == {"x": 1.0, "y": [2], "z": 0}


def test_accessors_use_dataclass_entries():
    ns = fresh_namespace()
    Pt = make_point_class(ns)
    p = Pt(1.0, [2])
    accessors = optree_core.tree_accessors(p, namespace=ns)
    assert [a.codify("p") for a in accessors] == ["p.x", "p.y[0]"]
    assert isinstance(accessors[0][0], odc.DataclassEntry)
    assert [a(p) for a in accessors] == [1.0, 2]


def test_frozen_dataclass_round_trip():
    ns = fresh_namespace()

    @odc.dataclass(namespace=ns, frozen=True)
    class Frozen:
        a: int
        b: tuple

    f = Frozen(1, (2, 3))
    assert optree_core.tree_map(lambda v: v + 1, f, namespace=ns) == Frozen(2, (3, 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 5  # type: ignore[misc]


def test_dataclass_requires_a_namespace():
    with pytest.raises(TypeError):

        @odc.dataclass  # type: ignore[call-arg]
        class NoNamespace:
            a: int


def test_init_false_fields_are_rejected_or_kept_as_metadata():
    ns = fresh_namespace()
    with pytest.raises((TypeError, ValueError)):

        @odc.dataclass(namespace=ns)
        class Bad:
            a: int
            b: int = odc.field(default=0, init=False)  # a pytree node must be settable by __init__


def test_make_dataclass_registers_the_class_and_names_the_caller_module():
    ns = fresh_namespace()
    Point = odc.make_dataclass("Point", ["x", ("y", int, odc.field(pytree_node=False))],
                               namespace=ns)
    assert Point.__module__ == __name__
    leaves, spec = optree_core.tree_flatten(Point(1, 2), namespace=ns)
    assert leaves == [1]
    assert optree_core.tree_unflatten(spec, [5]) == Point(5, 2)
