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


def test_register_node_registers_an_existing_dataclass_in_every_call_form():
    for form in ("call", "keyword-decorator", "positional-decorator"):
        ns = fresh_namespace()

        @dataclasses.dataclass
        class Box:
            a: int
            b: list
            tag: str = odc.field(default="t", pytree_node=False)

        if form == "call":
            assert odc.register_node(Box, namespace=ns) is Box
        elif form == "keyword-decorator":
            assert odc.register_node(namespace=ns)(Box) is Box
        else:
            assert odc.register_node(ns)(Box) is Box
        leaves, spec = optree_core.tree_flatten(Box(1, [2, 3], "x"), namespace=ns)
        assert leaves == [1, 2, 3]
        assert optree_core.tree_unflatten(spec, [10, 20, 30]) == Box(10, [20, 30], "x")
        children, metadata = Box.__optree_dataclass_fields__
        assert list(children) == ["a", "b"] and list(metadata) == ["tag"]


def test_register_node_argument_errors():
    @dataclasses.dataclass
    class Box:
        a: int

    with pytest.raises(ValueError, match="namespace is required"):
        odc.register_node(Box)
    with pytest.raises(ValueError, match="given twice"):
        odc.register_node("ns", namespace="ns")
    with pytest.raises(ValueError, match="cannot be empty"):
        odc.register_node("")
    with pytest.raises(TypeError, match="must be a string"):
        odc.register_node(Box, namespace=1)
    with pytest.raises(TypeError, match="not a dataclass"):
        odc.register_node(int, namespace="ns")
    with pytest.raises(TypeError, match="Expected a dataclass"):
        odc.register_node(Box(1), namespace="ns")


def test_register_node_only_once_and_empty_namespace_is_global():
    @dataclasses.dataclass
    class Once:
        a: int

    odc.register_node(Once, namespace="")  # '' is the global namespace here, as in optree
    try:
        assert optree_core.tree_leaves(Once(4)) == [4]
        assert optree_core.tree_structure(Once(4)).namespace == ""
        with pytest.raises(TypeError, match="already registered"):
            odc.register_node(Once, namespace=fresh_namespace())
    finally:
        optree_core.unregister_pytree_node(Once, namespace=optree_core.registry.GLOBAL_NAMESPACE)


def test_register_node_leaves_no_marker_when_registration_fails():
    ns = fresh_namespace()

    @dataclasses.dataclass
    class Taken:
        a: int

    optree_core.register_pytree_node(Taken, lambda t: ((t.a,), None),
                                     lambda _, c: Taken(*c), namespace=ns)
    with pytest.raises(ValueError, match="already registered"):
        odc.register_node(Taken, namespace=ns)
    assert "__optree_dataclass_fields__" not in Taken.__dict__
    odc.register_node(Taken, namespace=fresh_namespace())  # still registrable elsewhere


def test_register_node_rolls_back_when_the_marker_cannot_be_set():
    ns = fresh_namespace()

    class Refusing(type):
        def __setattr__(cls, name, value):
            if name == "__optree_dataclass_fields__":
                raise AttributeError("read-only class")
            super().__setattr__(name, value)

    @dataclasses.dataclass
    class Stubborn(metaclass=Refusing):
        a: int

    with pytest.raises(AttributeError, match="read-only"):
        odc.register_node(Stubborn, namespace=ns)
    assert optree_core.tree_leaves(Stubborn(1), namespace=ns) == [Stubborn(1)]  # rolled back


def test_register_node_rejects_init_vars_and_uninitialised_children_and_warns_on_init_false():
    @dataclasses.dataclass
    class WithInitVar:
        a: int
        scale: dataclasses.InitVar[int] = 1

    with pytest.raises(TypeError, match="InitVar"):
        odc.register_node(WithInitVar, namespace=fresh_namespace())

    @dataclasses.dataclass
    class Hidden:
        a: int
        cache: int = dataclasses.field(default=0, init=False)

    with pytest.raises(TypeError, match="'cache'"):
        odc.register_node(Hidden, namespace=fresh_namespace())

    @dataclasses.dataclass(init=False)
    class Manual:
        a: int

        def __init__(self, a):
            self.a = a

    ns = fresh_namespace()
    with pytest.warns(UserWarning, match="init=False"):
        odc.register_node(Manual, namespace=ns)
    assert optree_core.tree_map(lambda v: v + 1, Manual(1), namespace=ns).a == 2


def test_dataclass_decorator_refuses_a_second_application():
    with pytest.raises(TypeError, match="more than once"):
        @odc.dataclass(namespace=fresh_namespace())
        @odc.dataclass(namespace=fresh_namespace())
        class Twice:
            a: int


def test_field_reads_pytree_node_from_metadata_and_gates_doc():
    import sys

    assert odc.field(metadata={"pytree_node": False}).metadata["pytree_node"] is False
    assert odc.field().metadata["pytree_node"] is True
    with pytest.raises(TypeError, match="init=False"):
        odc.field(init=False, metadata={"pytree_node": True})
    if sys.version_info < (3, 14):
        with pytest.raises(TypeError, match="doc"):
            odc.field(doc="the weight")
    else:
        assert odc.field(doc="the weight").doc == "the weight"


def test_public_api_mirrors_dataclasses():
    assert odc.__all__ == ["DataclassEntry", "register_node", *dataclasses.__all__]
    for name in dataclasses.__all__:
        if name not in {"field", "dataclass", "make_dataclass"}:
            assert getattr(odc, name) is getattr(dataclasses, name)


def test_make_dataclass_accepts_the_dataclasses_spelling_of_namespace():
    ns = fresh_namespace()
    Vec = odc.make_dataclass("Vec", ["x", "y"], namespace={"norm1": lambda s: s.x + s.y}, ns=ns)
    assert Vec(1, 2).norm1() == 3
    assert optree_core.tree_leaves(Vec(1, 2), namespace=ns) == [1, 2]
    with pytest.raises(TypeError, match="registry namespace"):
        odc.make_dataclass("Vec", ["x"], namespace={})


def test_dataclass_entry_integers_count_registered_children():
    ns = fresh_namespace()

    @odc.dataclass(namespace=ns)
    class Mixed:
        meta: str = odc.field(default="m", pytree_node=False)
        a: int = 1
        b: int = 2

    entry = optree_core.DataclassEntry(1, Mixed, optree_core.PyTreeKind.CUSTOM)
    assert entry.field == "b"  # the second child, not the second declared field
    assert entry.fields == ("meta", "a", "b") and entry.init_fields == ("meta", "a", "b")
    assert entry.children_fields == ("a", "b")


def test_weakref_slot_follows_the_running_python():
    # weakref_slot is new in Python 3.11: on 3.10 the default must not reach the stdlib (the
    # wheel for 3.10 failed every decorated class before), and asking for it is refused as there.
    import sys

    @odc.dataclass(namespace=fresh_namespace(), slots=True)
    class Point:
        x: float

    assert Point(1.0).x == 1.0
    made = odc.make_dataclass("Made", ["x"], namespace=fresh_namespace())
    assert made(2.0).x == 2.0
    plain = type("Weak", (), {"__annotations__": {"x": "float"}})
    if sys.version_info < (3, 11):  # noqa: UP036 (ruff targets 3.11; release.py runs this suite on 3.10)
        with pytest.raises(TypeError, match="weakref_slot"):
            odc.dataclass(plain, namespace=fresh_namespace(), slots=True, weakref_slot=True)
    else:
        weak = odc.dataclass(plain, namespace=fresh_namespace(), slots=True, weakref_slot=True)
        assert "__weakref__" in weak.__slots__
