"""The custom-node registry: registration with namespaces, the errors it raises, the class
decorator, dict_insertion_ordered, and thread safety."""

from __future__ import annotations

import collections
import contextlib
import gc
import threading
import time
import weakref

import pytest
from helpers import fresh_namespace

import optree_core


class Box:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return type(other) is type(self) and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"Box({self.a!r}, {self.b!r})"


def register_box(cls, ns, with_entries=True):
    if with_entries:
        flatten = lambda box: ((box.a, box.b), "meta", ("a", "b"))  # noqa: E731
    else:
        flatten = lambda box: ((box.a, box.b), "meta")  # noqa: E731
    optree_core.register_pytree_node(cls, flatten, lambda meta, ch: cls(*ch), namespace=ns)


def fresh_box_class():
    return type("Box", (Box,), {})


# -- namespaces -----------------------------------------------------------------------------------


def test_registered_type_is_a_node_only_in_its_namespace():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    tree = [cls(1, [2, 3])]
    assert optree_core.tree_leaves(tree) == tree[:1]
    assert optree_core.tree_leaves(tree, namespace=ns) == [1, 2, 3]
    assert optree_core.tree_leaves(tree, namespace=fresh_namespace()) == tree[:1]
    paths, _, spec = optree_core.tree_flatten_with_path(tree, namespace=ns)
    assert paths == [(0, "a"), (0, "b", 0), (0, "b", 1)]
    assert spec.namespace == ns
    assert spec.unflatten([7, 8, 9]) == [cls(7, [8, 9])]
    assert optree_core.tree_map(lambda x: x * 2, tree, namespace=ns) == [cls(2, [4, 6])]


def test_entries_default_to_child_indices():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns, with_entries=False)
    assert optree_core.tree_paths(cls(1, 2), namespace=ns) == [(0,), (1,)]
    assert optree_core.tree_structure(cls(1, 2), namespace=ns).entries() == [0, 1]


def test_same_type_in_two_namespaces_with_different_flatten():
    cls = fresh_box_class()
    ns1, ns2 = fresh_namespace(), fresh_namespace()
    register_box(cls, ns1)
    optree_core.register_pytree_node(
        cls, lambda box: ((box.b,), box.a), lambda meta, ch: cls(meta, ch[0]), namespace=ns2
    )
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns1) == [1, 2]
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns2) == [2]
    spec1 = optree_core.tree_structure(cls(1, 2), namespace=ns1)
    spec2 = optree_core.tree_structure(cls(1, 2), namespace=ns2)
    assert spec1 != spec2


def test_tree_map_with_custom_nodes_compares_metadata():
    cls, ns = fresh_box_class(), fresh_namespace()
    optree_core.register_pytree_node(
        cls, lambda box: ((box.b,), box.a), lambda meta, ch: cls(meta, ch[0]), namespace=ns
    )
    assert optree_core.tree_map(lambda x, y: x + y, cls("m", 1), cls("m", 2), namespace=ns) == cls(
        "m", 3
    )
    with pytest.raises(ValueError):
        optree_core.tree_map(lambda x, y: x + y, cls("m", 1), cls("n", 2), namespace=ns)


# -- errors ---------------------------------------------------------------------------------------


def test_registering_twice_raises_value_error():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    with pytest.raises(ValueError, match="already registered"):
        register_box(cls, ns)
    # The first registration still works.
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns) == [1, 2]


@pytest.mark.parametrize(
    "builtin",
    [
        tuple,
        list,
        dict,
        type(None),
        collections.OrderedDict,
        collections.defaultdict,
        collections.deque,
    ],
)
def test_builtin_types_cannot_be_registered(builtin):
    with pytest.raises(ValueError):
        optree_core.register_pytree_node(
            builtin, lambda x: ((), None), lambda m, c: builtin(), namespace=fresh_namespace()
        )


def test_unregistering_unknown_type_raises_value_error():
    with pytest.raises(ValueError, match="not registered"):
        optree_core.unregister_pytree_node(fresh_box_class(), namespace=fresh_namespace())
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    with pytest.raises(ValueError):
        optree_core.unregister_pytree_node(cls, namespace=fresh_namespace())
    with pytest.raises(ValueError):
        optree_core.unregister_pytree_node(list, namespace=ns)


def test_unregister_then_register_again():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    optree_core.unregister_pytree_node(cls, namespace=ns)
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns) == [cls(1, 2)]
    with pytest.raises(ValueError):
        optree_core.unregister_pytree_node(cls, namespace=ns)
    register_box(cls, ns)
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns) == [1, 2]


def test_spec_made_before_unregister_still_unflattens():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    spec = optree_core.tree_structure(cls(1, 2), namespace=ns)
    optree_core.unregister_pytree_node(cls, namespace=ns)
    assert spec.unflatten([3, 4]) == cls(3, 4)


def test_namespace_and_class_arguments_are_validated():
    cls = fresh_box_class()
    flatten, unflatten = (lambda b: ((), None)), (lambda m, c: cls(0, 0))
    with pytest.raises(ValueError):
        optree_core.register_pytree_node(cls, flatten, unflatten, namespace="")
    with pytest.raises(TypeError):
        optree_core.register_pytree_node(cls, flatten, unflatten, namespace=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        optree_core.register_pytree_node(1, flatten, unflatten, namespace="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        optree_core.register_pytree_node(cls, flatten, unflatten)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        optree_core.tree_leaves([1], namespace=1)  # type: ignore[arg-type]


def test_register_returns_the_class():
    cls, ns = fresh_box_class(), fresh_namespace()
    out = optree_core.register_pytree_node(
        cls, lambda b: ((b.a, b.b), None), lambda m, c: cls(*c), namespace=ns
    )
    assert out is cls


# -- register_pytree_node_class -----------------------------------------------------------------


def test_register_pytree_node_class_decorator_forms():
    ns = fresh_namespace()

    @optree_core.register_pytree_node_class(namespace=ns)
    class Vec:
        def __init__(self, *xs):
            self.xs = xs

        def tree_flatten(self):
            return self.xs, len(self.xs)

        @classmethod
        def tree_unflatten(cls, meta, children):
            assert meta == len(children)
            return cls(*children)

    assert optree_core.tree_leaves(Vec(1, [2]), namespace=ns) == [1, 2]
    assert optree_core.tree_map(lambda x: -x, Vec(1, 2), namespace=ns).xs == (-1, -2)

    ns2 = fresh_namespace()

    @optree_core.register_pytree_node_class(ns2)
    class Named:
        def __init__(self, v):
            self.v = v

        def tree_flatten(self):
            return (self.v,), None, ("v",)

        @classmethod
        def tree_unflatten(cls, meta, children):
            return cls(*children)

    assert optree_core.tree_paths(Named([1]), namespace=ns2) == [("v", 0)]


def test_register_pytree_node_class_requires_a_namespace():
    with pytest.raises((TypeError, ValueError)):

        @optree_core.register_pytree_node_class
        class NoNamespace:
            def tree_flatten(self):
                return (), None

            @classmethod
            def tree_unflatten(cls, meta, children):
                return cls()


# -- dict_insertion_ordered -----------------------------------------------------------------------


def test_dict_insertion_ordered_context():
    ns = fresh_namespace()
    tree = {"b": 1, "a": 2}
    with optree_core.dict_insertion_ordered(True, namespace=ns):
        leaves, spec = optree_core.tree_flatten(tree, namespace=ns)
        assert leaves == [1, 2]
        assert spec.entries() == ["b", "a"]
        assert optree_core.tree_paths(tree, namespace=ns) == [("b",), ("a",)]
        # Other namespaces are unaffected.
        assert optree_core.tree_leaves(tree) == [2, 1]
    assert optree_core.tree_leaves(tree, namespace=ns) == [2, 1]


def test_dict_insertion_ordered_restores_after_exception():
    ns = fresh_namespace()
    with pytest.raises(KeyError), optree_core.dict_insertion_ordered(True, namespace=ns):
        raise KeyError("x")
    assert optree_core.tree_leaves({"b": 1, "a": 2}, namespace=ns) == [2, 1]


# -- lifetime -----------------------------------------------------------------------------------


def test_registry_keeps_functions_alive_while_registered():
    cls, ns = fresh_box_class(), fresh_namespace()

    def make():
        def flatten(box):
            return (box.a, box.b), None

        return flatten, weakref.ref(flatten)

    flatten, ref = make()
    optree_core.register_pytree_node(cls, flatten, lambda m, c: cls(*c), namespace=ns)
    del flatten
    gc.collect()
    assert ref() is not None
    assert optree_core.tree_leaves(cls(1, 2), namespace=ns) == [1, 2]
    optree_core.unregister_pytree_node(cls, namespace=ns)
    gc.collect()
    assert ref() is None, "unregistering must release the flatten function"


# -- thread safety --------------------------------------------------------------------------------


def test_concurrent_register_flatten_unregister():
    n_threads, rounds = 8, 60
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)
    shared_cls, shared_ns = fresh_box_class(), fresh_namespace()
    register_box(shared_cls, shared_ns)
    shared_tree = {"x": [shared_cls(1, (2, 3)), {"y": shared_cls(4, None)}]}

    def worker(index: int) -> None:
        try:
            start.wait()
            for r in range(rounds):
                cls, ns = fresh_box_class(), f"thread-{index}-{r}"
                register_box(cls, ns)
                tree = [cls(index, [r, shared_cls(0, 0)]), {"k": cls(None, r)}]
                leaves, spec = optree_core.tree_flatten(tree, namespace=ns)
                assert leaves == [index, r, shared_cls(0, 0), r]
                assert spec.unflatten(leaves) == tree
                with pytest.raises(ValueError):
                    register_box(cls, ns)
                optree_core.unregister_pytree_node(cls, namespace=ns)
                assert optree_core.tree_leaves(tree, namespace=ns) == [tree[0], tree[1]["k"]]
                assert optree_core.tree_leaves(shared_tree, namespace=shared_ns) == [1, 2, 3, 4]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]


def test_concurrent_registration_of_one_type_succeeds_exactly_once():
    n_threads = 16
    cls, ns = fresh_box_class(), fresh_namespace()
    start = threading.Barrier(n_threads)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        start.wait()
        try:
            register_box(cls, ns)
            result = "ok"
        except ValueError:
            result = "dup"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["dup"] * (n_threads - 1) + ["ok"]


def test_concurrent_flatten_and_map_of_shared_tree():
    tree = {f"k{i}": [i, (i, {"z": i}), collections.deque([i], maxlen=2)] for i in range(200)}
    expected_leaves = optree_core.tree_leaves(tree)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(30):
                leaves, spec = optree_core.tree_flatten(tree)
                assert leaves == expected_leaves
                assert optree_core.tree_map(lambda x: x, tree) == tree
                assert spec.unflatten(leaves) == tree
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]


def test_unregister_while_another_thread_is_inside_the_flatten_function():
    # The flatten function yields the GIL mid-call while another thread unregisters and
    # re-registers the type: the flattening thread must finish with the registration it
    # started with (or see the type as a leaf), never use a freed entry.
    # The handshake below can miss (each side may clear the other's event), so its waits are
    # bounded; 5 ms bounds keep 200 rounds under a few seconds. The churner collects the young
    # generations only: the entries it drops are young, and a full collection in a process that
    # imported torch takes 0.1 s (this test once took 66 s there, 11 s with 50 ms bounds alone).
    cls, ns = fresh_box_class(), fresh_namespace()
    inside = threading.Event()
    proceed = threading.Event()
    stop = threading.Event()
    handoffs = []  # the flatten calls during which the churner unregistered the type

    def flatten(box):
        inside.set()
        if proceed.wait(timeout=0.005):
            handoffs.append(box)
        time.sleep(0)
        return (box.a, box.b), None

    def register():
        optree_core.register_pytree_node(cls, flatten, lambda m, c: cls(*c), namespace=ns)

    register()
    errors: list[BaseException] = []

    def churn():
        try:
            while not stop.is_set():
                inside.wait(timeout=0.005)
                with contextlib.suppress(ValueError):
                    optree_core.unregister_pytree_node(cls, namespace=ns)
                gc.collect(1)
                proceed.set()
                with contextlib.suppress(ValueError):
                    register()
                inside.clear()
                proceed.clear()
        except BaseException as exc:
            errors.append(exc)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        for i in range(200):
            tree = [cls(i, [i + 1]), cls(0, 0)]
            leaves, spec = optree_core.tree_flatten(tree, namespace=ns)
            assert spec.num_leaves == len(leaves)
            rebuilt = spec.unflatten(leaves)
            assert optree_core.tree_leaves(rebuilt) == optree_core.tree_leaves(tree)
    finally:
        stop.set()
        churner.join(timeout=60)
    assert not errors, errors[0]
    assert handoffs, "the type was never unregistered during a flatten call: the test tested nothing"


def test_register_pytree_node_class_without_methods_raises_type_error():
    class Plain:
        pass

    with pytest.raises(TypeError, match="Plain"):
        optree_core.register_pytree_node_class(Plain, namespace=fresh_namespace())


def test_register_pytree_node_class_prefers_the_dunder_protocol():
    @optree_core.register_pytree_node_class(namespace="dunder-protocol")
    class Both:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __tree_flatten__(self):
            return (self.a, self.b), "dunder"

        @classmethod
        def __tree_unflatten__(cls, metadata, children):
            assert metadata == "dunder"
            return cls(*children)

        def tree_flatten(self):  # the older names lose when both are defined
            raise AssertionError("the plain-name protocol must not be used")

        tree_unflatten = tree_flatten

    try:
        leaves, spec = optree_core.tree_flatten(Both(1, [2, 3]), namespace="dunder-protocol")
        assert leaves == [1, 2, 3]
        rebuilt = optree_core.tree_unflatten(spec, [10, 20, 30])
        assert (rebuilt.a, rebuilt.b) == (10, [20, 30])
    finally:
        optree_core.unregister_pytree_node(Both, namespace="dunder-protocol")


def test_register_pytree_node_class_without_either_protocol_names_both():
    class Half:
        def __tree_flatten__(self):
            return (), None

    with pytest.raises(TypeError, match="__tree_unflatten__"):
        optree_core.register_pytree_node_class(Half, namespace="dunder-protocol")


def test_registry_size_and_registry_view_follow_registrations():
    from optree_core import _C
    from optree_core.registry import _NODETYPE_REGISTRY

    ns = "size-view"
    base_all, base_global, base_ns = (_C.get_registry_size(), _C.get_registry_size(""),
                                      _C.get_registry_size(ns))
    assert base_global >= 7 and base_ns == base_global  # the built-ins are global
    assert len(_NODETYPE_REGISTRY) == base_all + 2  # plus namedtuple and struct sequences
    assert _NODETYPE_REGISTRY[dict].kind == optree_core.PyTreeKind.DICT
    assert _NODETYPE_REGISTRY[collections.namedtuple].kind == optree_core.PyTreeKind.NAMEDTUPLE
    flat = _NODETYPE_REGISTRY[collections.OrderedDict].flatten_func(
        collections.OrderedDict(b=1, a=2))
    assert flat == ([1, 2], ["b", "a"], ("b", "a"))
    assert _NODETYPE_REGISTRY[dict].unflatten_func(["a"], [5]) == {"a": 5}
    register_box(Box, ns)
    try:
        assert _C.get_registry_size() == base_all + 1
        assert _C.get_registry_size("") == base_global
        assert _C.get_registry_size(ns) == base_ns + 1
        entry = _NODETYPE_REGISTRY[(ns, Box)]
        assert entry.type is Box and entry.namespace == ns
        assert (ns, Box) in set(_NODETYPE_REGISTRY) and len(list(_NODETYPE_REGISTRY)) == \
            len(_NODETYPE_REGISTRY)
        with pytest.raises(KeyError):
            _NODETYPE_REGISTRY[Box]  # not global
    finally:
        optree_core.unregister_pytree_node(Box, namespace=ns)
    assert _C.get_registry_size() == base_all
    assert (ns, Box) not in _NODETYPE_REGISTRY


def test_build_flags_under_optree_names():
    from optree_core import _C

    assert _C.OPTREE_HAS_FROZENDICT is False and _C.OPTREE_HAS_SUBINTERPRETER_SUPPORT is False
    assert _C.PYBIND11_HAS_NATIVE_ENUM is True  # PyTreeKind is a real enum.IntEnum
    assert isinstance(_C.Py_DEBUG, bool) and isinstance(_C.Py_GIL_DISABLED, bool)
    assert issubclass(_C.InternalError, SystemError)


def test_register_pytree_node_get_resolves_as_flattening_does():
    get = optree_core.register_pytree_node.get
    point = collections.namedtuple("point", "x y")
    assert get(dict).kind == optree_core.PyTreeKind.DICT and get(dict).namespace == ""
    assert get(point).kind == optree_core.PyTreeKind.NAMEDTUPLE
    assert get(type(__import__("time").gmtime())).kind == optree_core.PyTreeKind.STRUCTSEQUENCE
    assert get(frozenset) is None
    ns = "get-view"
    register_box(Box, ns)
    try:
        assert get(Box) is None and get(Box, namespace=ns).namespace == ns
        assert Box in get(namespace=ns) and Box not in get()
        assert get(namespace=ns)[dict].kind == optree_core.PyTreeKind.DICT
    finally:
        optree_core.unregister_pytree_node(Box, namespace=ns)
    with pytest.raises(TypeError):
        get(1)
    with pytest.raises(TypeError):
        get(dict, namespace=1)


def test_registry_entries_of_builtins_are_stable():
    get = optree_core.register_pytree_node.get
    assert get(dict) is get(dict) and get() == get()
    assert get(dict).flatten_func is get(dict).flatten_func


def test_registry_get_reports_builtins_user_registrations_and_leaves():
    import collections

    from optree_core.registry import DictMetaData

    get = optree_core.register_pytree_node.get
    assert get(list).kind == optree_core.PyTreeKind.LIST
    assert get(frozenset) is None
    assert get(collections.namedtuple("P", "a")).kind == optree_core.PyTreeKind.NAMEDTUPLE
    values, meta, _ = get(dict).flatten_func({"b": 1, "a": 2})
    assert list(values) == [2, 1] and meta == ["a", "b"] and list(meta.original_keys) == ["b", "a"]
    assert isinstance(meta, DictMetaData)
    assert list(get(dict).unflatten_func(meta, [20, 10])) == ["b", "a"]  # insertion order back

    class Node:
        pass

    ns = fresh_namespace()
    optree_core.register_pytree_node(Node, lambda n: ((), None), lambda m, c: Node(), namespace=ns)
    try:
        assert get(Node) is None and get(Node, namespace=ns).namespace == ns
        assert get(namespace=ns)[Node].type is Node and Node not in get()
        assert len(get(namespace=ns)) == len(get()) + 1
    finally:
        optree_core.unregister_pytree_node(Node, namespace=ns)
    assert get(Node, namespace=ns) is None
    with pytest.raises(TypeError, match="class or None"):
        get(3)


def test_dict_metadata_checks_its_keys_and_pickles():
    import pickle

    from optree_core.registry import DictMetaData

    meta = DictMetaData(["a", "b"], original_keys=["b", "a"])
    again = pickle.loads(pickle.dumps(meta))
    assert again == ["a", "b"] and list(again.original_keys) == ["b", "a"]
    with pytest.raises(ValueError, match="distinct keys"):
        DictMetaData(["a", "b"], original_keys=["a"])
    with pytest.raises(ValueError, match="not the same keys"):
        DictMetaData(["a", "b"], original_keys=["a", "c"])


def test_registering_a_namedtuple_class_warns_before_touching_the_registry():
    import warnings

    Pair = collections.namedtuple("Pair", "a b")
    ns = fresh_namespace()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="namedtuple"):
            optree_core.register_pytree_node(Pair, lambda p: ((p.b, p.a), None),
                                             lambda _, c: Pair(c[1], c[0]), namespace=ns)
    assert optree_core.tree_structure(Pair(1, 2), namespace=ns).kind == optree_core.PyTreeKind.NAMEDTUPLE
    with pytest.warns(UserWarning, match="namedtuple"):
        optree_core.register_pytree_node(Pair, lambda p: ((p.b, p.a), None),
                                         lambda _, c: Pair(c[1], c[0]), namespace=ns)
    assert optree_core.tree_leaves(Pair(1, 2), namespace=ns) == [2, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the refused duplicate overrides nothing: no warning
        with pytest.raises(ValueError, match="already registered"):
            optree_core.register_pytree_node(Pair, lambda p: ((), None), lambda _, c: None,
                                             namespace=ns)
    optree_core.unregister_pytree_node(Pair, namespace=ns)


def test_legacy_node_class_gets_the_dunder_protocol():
    ns = fresh_namespace()

    @optree_core.register_pytree_node_class(namespace=ns)
    class Rev(collections.UserList):
        def tree_flatten(self):
            return list(reversed(self.data)), "rev", None

        @classmethod
        def tree_unflatten(cls, metadata, children):
            return cls(reversed(children))

    children, metadata, _ = Rev([1, 2]).__tree_flatten__()
    assert children == [2, 1] and Rev.__tree_unflatten__(metadata, children) == Rev([1, 2])
    optree_core.unregister_pytree_node(Rev, namespace=ns)


def test_nested_global_insertion_order_contexts_restore_the_outer_mode():
    from optree_core.registry import GLOBAL_NAMESPACE

    def order():
        return optree_core.tree_leaves({"b": 1, "a": 2})

    with optree_core.dict_insertion_ordered(True, namespace=GLOBAL_NAMESPACE):
        with optree_core.dict_insertion_ordered(False, namespace=GLOBAL_NAMESPACE):
            assert order() == [2, 1]
        assert order() == [1, 2]
    assert order() == [2, 1]


def test_flatten_one_level_says_what_the_node_is_and_keeps_dict_order():
    from optree_core.registry import DictMetaData

    out = optree_core.tree_flatten_one_level({"b": 1, "a": 2})
    assert out.type is dict and out.kind == optree_core.PyTreeKind.DICT
    assert out.path_entry_type is optree_core.MappingEntry
    assert isinstance(out.metadata, DictMetaData) and list(out.metadata.original_keys) == ["b", "a"]
    assert list(out.unflatten_func(out.metadata, out.children)) == ["b", "a"]
    assert out.unflatten_func(["a", "b"], [2, 1]) == {"a": 2, "b": 1}  # a plain key list works
    dd = collections.defaultdict(int, {"y": 1, "x": 2})
    out = optree_core.tree_flatten_one_level(dd)
    rebuilt = out.unflatten_func(out.metadata, out.children)
    assert list(rebuilt) == ["y", "x"] and rebuilt.default_factory is int


def test_custom_flatten_returning_a_tuple_of_the_wrong_length_raises_runtime_error():
    class Three:
        pass

    ns = "wrong-arity"
    for result, error in (((1,), RuntimeError), ((1, 2, 3, 4), RuntimeError), ([1, None], TypeError)):
        optree_core.register_pytree_node(Three, lambda _, r=result: r, lambda m, c: Three(),
                                         namespace=ns)
        try:
            with pytest.raises(error, match="2- or 3-tuple"):
                optree_core.tree_flatten(Three(), namespace=ns)
            with pytest.raises(error, match="2- or 3-tuple"):
                optree_core.tree_flatten_one_level(Three(), namespace=ns)
        finally:
            optree_core.unregister_pytree_node(Three, namespace=ns)


def test_custom_flatten_with_entries_of_another_length_raises_runtime_error():
    class Pair:
        pass

    ns = "entries-arity"
    optree_core.register_pytree_node(Pair, lambda _: ((1, 2), None, ("a", "b", "c")),
                                     lambda m, c: Pair(), namespace=ns)
    try:
        for flatten in (optree_core.tree_flatten, optree_core.tree_flatten_one_level):
            with pytest.raises(RuntimeError, match=r"children \(2\) and number of entries \(3\)"):
                flatten(Pair(), namespace=ns)
    finally:
        optree_core.unregister_pytree_node(Pair, namespace=ns)


def test_registry_view_lists_registrations_in_the_order_they_were_made():
    get = optree_core.register_pytree_node.get
    before = list(get())
    first, second, ns = fresh_box_class(), fresh_box_class(), fresh_namespace()
    register_box(second, optree_core.registry.GLOBAL_NAMESPACE)
    register_box(first, ns)
    try:
        assert list(get()) == [*before, second]  # a later registration comes last
        assert list(get(namespace=ns)) == [*before, second, first]
    finally:
        optree_core.unregister_pytree_node(second, namespace=optree_core.registry.GLOBAL_NAMESPACE)
        optree_core.unregister_pytree_node(first, namespace=ns)
    assert list(get()) == before


def test_dict_entries_follow_dict_insertion_ordered_and_keep_their_own_order():
    get = optree_core.register_pytree_node.get
    tree = {"b": 2, "c": 3, "a": 1}
    sorted_entry = get(dict)
    ns = fresh_namespace()
    with optree_core.dict_insertion_ordered(True, namespace=ns):
        assert get(dict) is sorted_entry  # only ns flattens in insertion order
        ordered_entry = get(dict, namespace=ns)
        assert get(namespace=ns)[dict] is ordered_entry is not sorted_entry
        assert get(namespace=ns) != get() and list(get(namespace=ns)) == list(get())
        assert get(list, namespace=ns) is get(list)  # kinds with their own order: one entry
        children, keys, entries = ordered_entry.flatten_func(tree)
        assert (children, keys, entries) == ((2, 3, 1), ["b", "c", "a"], ("b", "c", "a"))
    # Each entry keeps its order whatever the mode now is.
    assert ordered_entry.flatten_func(tree)[1] == ["b", "c", "a"]
    with optree_core.dict_insertion_ordered(True, namespace=optree_core.registry.GLOBAL_NAMESPACE):
        assert get(dict) is ordered_entry
        assert sorted_entry.flatten_func(tree)[:2] == ((1, 2, 3), ["a", "b", "c"])
        factory, keys = get(collections.defaultdict).flatten_func(
            collections.defaultdict(int, tree))[1]
        assert factory is int and keys == ["b", "c", "a"]
    for entry in (sorted_entry, ordered_entry):  # either rebuilds the dict in its own order
        children, keys, _ = entry.flatten_func(tree)
        rebuilt = entry.unflatten_func(keys, children)
        assert rebuilt == tree and list(rebuilt) == list(tree)


def test_custom_registry_entry_is_one_object_until_unregistered():
    get = optree_core.register_pytree_node.get
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    entry = get(cls, namespace=ns)
    assert entry is get(namespace=ns)[cls] is get(cls, namespace=ns)
    assert optree_core.unregister_pytree_node(cls, namespace=ns) is entry
    # A new registration of the same class is a new entry, with its own functions.
    optree_core.register_pytree_node(cls, lambda box: ((box.a,), None), lambda m, c: cls(*c, 0),
                                     namespace=ns)
    try:
        assert get(cls, namespace=ns) is not entry
        assert get(cls, namespace=ns).flatten_func is not entry.flatten_func
    finally:
        optree_core.unregister_pytree_node(cls, namespace=ns)


def test_unregistering_releases_the_entry_and_the_class():
    cls, ns = fresh_box_class(), fresh_namespace()
    register_box(cls, ns)
    optree_core.register_pytree_node.get(cls, namespace=ns)  # makes and keeps the entry
    optree_core.unregister_pytree_node(cls, namespace=ns)
    ref = weakref.ref(cls)
    del cls
    gc.collect()
    assert ref() is None
