"""Fuzz driver for optree_core's C++ bindings, meant to run under AddressSanitizer + UBSan.

A seeded random loop (reproducible: ``--seed``) throws random trees, malformed custom nodes,
corrupted pickle states and wrong unflatten inputs at every binding entry point. Python
exceptions are expected and ignored; what must never happen is a crash, a sanitizer report or a
hang. Run by ``tests/sanitize/run.sh`` against a sanitizer build; it also runs (without the
memory checks) against an ordinary build:

    python packages/optree-core/tests/sanitize/fuzz_bindings.py --seconds 60 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import pickle
import random
import sys
import threading
import time
from typing import Any

import optree_core

Point = collections.namedtuple("Point", ["x", "y"])
Empty = collections.namedtuple("Empty", [])
NS = "fuzz"


class Node:
    """A custom node whose flatten/unflatten behaviour is picked at random per class."""

    def __init__(self, *children: Any) -> None:
        self.children = list(children)


class Boom(Exception):
    pass


class BadKey:
    """A dict key whose ordering raises; its hash and equality still work."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BadKey) and other.n == self.n

    def __lt__(self, other: object) -> bool:
        raise Boom("no ordering")


class Weird:
    """A leaf whose equality, hash and repr all misbehave."""

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        raise Boom("repr")


# -- malformed flatten / unflatten behaviours ---------------------------------------------------


def _children_gen(node: Node):
    yield from node.children


def _raising_gen(node: Node):
    yield from node.children[:1]
    raise Boom("generator")


def make_flatten(rng: random.Random, shared: dict[str, Any]):
    mode = rng.choice(
        [
            "ok2",
            "ok3",
            "tuple-children",
            "generator",
            "raising-generator",
            "not-a-tuple",
            "one-tuple",
            "four-tuple",
            "children-int",
            "entries-mismatch",
            "entries-not-iterable",
            "raise",
            "self-child",
            "fresh-child",
            "mutate-shared-list",
            "mutate-shared-dict",
            "unhashable-metadata",
            "many-children",
            "none-result",
            "gc-collect",
        ]
    )

    def flatten(node: Node):
        if mode == "ok2":
            return node.children, len(node.children)
        if mode == "ok3":
            return node.children, None, [f"c{i}" for i in range(len(node.children))]
        if mode == "tuple-children":
            return tuple(node.children), "meta"
        if mode == "generator":
            return _children_gen(node), None
        if mode == "raising-generator":
            return _raising_gen(node), None
        if mode == "not-a-tuple":
            return 42
        if mode == "one-tuple":
            return (node.children,)
        if mode == "four-tuple":
            return node.children, None, None, None
        if mode == "children-int":
            return 7, None
        if mode == "entries-mismatch":
            return node.children, None, list(range(len(node.children) + 1))
        if mode == "entries-not-iterable":
            return node.children, None, 3
        if mode == "raise":
            raise Boom("flatten")
        if mode == "self-child":
            return [node], None
        if mode == "fresh-child":
            return [type(node)()], None
        if mode == "mutate-shared-list":
            shared["list"].clear()
            shared["list"].extend(range(rng.randrange(5)))
            return node.children, None
        if mode == "mutate-shared-dict":
            shared["dict"].clear()
            shared["dict"].update({f"k{rng.randrange(4)}": 1})
            return node.children, None
        if mode == "unhashable-metadata":
            return node.children, [1, 2]
        if mode == "many-children":
            return [0] * 1000, None
        if mode == "none-result":
            return None
        if rng.random() < 0.02:  # a full collection mid-flatten, now and then (it is slow)
            gc.collect()
        return node.children, None

    return flatten


def make_unflatten(rng: random.Random):
    mode = rng.choice(["ok", "ok", "raise", "return-none", "return-int", "keep-children"])
    kept: list[Any] = []

    def unflatten(metadata: Any, children: Any):
        if mode == "raise":
            raise Boom("unflatten")
        if mode == "return-none":
            return None
        if mode == "return-int":
            return 3
        if mode == "keep-children":
            kept.append(children)  # hold a reference to whatever container we were given
        return Node(*children)

    return unflatten


# -- random trees ---------------------------------------------------------------------------------


class TreeMaker:
    def __init__(self, rng: random.Random, classes: list[type], shared: dict[str, Any]):
        self.rng = rng
        self.classes = classes
        self.shared = shared

    def leaf(self) -> Any:
        r = self.rng
        return r.choice(
            [
                lambda: r.randrange(-5, 5),
                lambda: r.random(),
                lambda: "s" * r.randrange(3),
                lambda: None,
                lambda: object(),
                lambda: Weird(),
                lambda: b"",
                lambda: float("nan"),
                lambda: Node(),
            ]
        )()

    def tree(self, depth: int = 0) -> Any:
        r = self.rng
        if depth > r.choice([2, 4, 6]) or r.random() < 0.25:
            return self.leaf()
        width = r.randrange(0, 5)
        kids = lambda: [self.tree(depth + 1) for _ in range(width)]  # noqa: E731
        kind = r.randrange(16)
        if kind == 0:
            return kids()
        if kind == 1:
            return tuple(kids())
        if kind == 2:
            return {f"k{r.randrange(6)}": self.tree(depth + 1) for _ in range(width)}
        if kind == 3:
            keys = [
                r.choice([r.randrange(5), f"s{r.randrange(5)}", (r.randrange(3),)])
                for _ in range(width)
            ]
            return {k: self.tree(depth + 1) for k in keys}
        if kind == 4:
            return collections.OrderedDict(
                (f"o{r.randrange(6)}", self.tree(depth + 1)) for _ in range(width)
            )
        if kind == 5:
            factory = r.choice([list, int, None, dict])
            return collections.defaultdict(
                factory, {r.randrange(9): self.tree(depth + 1) for _ in range(width)}
            )
        if kind == 6:
            items = kids()
            return collections.deque(items, maxlen=r.choice([None, len(items), len(items) + 2]))
        if kind == 7:
            return Point(self.tree(depth + 1), self.tree(depth + 1))
        if kind == 8:
            return Empty()
        if kind == 9:
            return time.struct_time([self.tree(depth + 1) for _ in range(9)])
        if kind == 10:
            return {BadKey(r.randrange(4)): self.tree(depth + 1) for _ in range(width)}
        if kind == 11 and self.classes:
            return r.choice(self.classes)(*kids())
        if kind == 12:
            return self.shared["list"]
        if kind == 13:
            return self.shared["dict"]
        if kind == 14:
            cyc: list[Any] = kids()
            cyc.append(cyc)
            return cyc
        return None


# -- the operations -------------------------------------------------------------------------------


def random_is_leaf(rng: random.Random):
    return rng.choice(
        [
            None,
            lambda x: isinstance(x, list),
            lambda x: isinstance(x, tuple) and len(x) == 1,
            lambda x: (_ for _ in ()).throw(Boom("is_leaf")) if isinstance(x, dict) else False,
            lambda x: 1,  # truthy non-bool
        ]
    )


def corrupt(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """A randomly damaged copy of a pickle state: ints shifted, tuples cut, types swapped."""
    if depth > 8:
        return value
    roll = rng.random()
    if isinstance(value, bool) or value is None:
        return rng.choice([value, 0, 1, -1, "x", None]) if roll < 0.1 else value
    if isinstance(value, int):
        if roll < 0.3:
            return rng.choice([value + 1, value - 1, -1, 0, 2**31, -(2**63), 10**6])
        return value
    if isinstance(value, tuple):
        items = [corrupt(rng, v, depth + 1) for v in value]
        if roll < 0.1 and items:
            items.pop(rng.randrange(len(items)))
        elif roll < 0.15:
            items.append(rng.choice([0, None, (), "junk"]))
        elif roll < 0.2:
            return list(items)
        return tuple(items)
    if isinstance(value, list):
        return [corrupt(rng, v, depth + 1) for v in value]
    if isinstance(value, str) and roll < 0.1:
        return value + "?"
    return value


def ignore(fn, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception:  # Python errors are fine; crashes are what we hunt
        return None


def one_round(rng: random.Random, maker: TreeMaker, specs: list[Any]) -> None:
    ns = rng.choice(["", NS])
    none_is_leaf = rng.random() < 0.3
    is_leaf = random_is_leaf(rng)
    kw = {"none_is_leaf": none_is_leaf, "namespace": ns}
    tree = maker.tree()
    other = maker.tree() if rng.random() < 0.5 else tree

    flat = ignore(optree_core.tree_flatten, tree, is_leaf, **kw)
    ignore(optree_core.tree_flatten_with_path, tree, is_leaf, **kw)
    ignore(optree_core.tree_leaves, tree, is_leaf, **kw)
    ignore(optree_core.tree_paths, tree, is_leaf, **kw)
    ignore(optree_core.tree_accessors, tree, is_leaf, **kw)
    ignore(lambda: list(optree_core.tree_iter(tree, is_leaf, **kw)))
    ignore(optree_core.tree_map, lambda *xs: xs[0], tree, other, is_leaf=is_leaf, **kw)
    ignore(optree_core.tree_map_with_path, lambda p, *xs: p, tree, is_leaf=is_leaf, **kw)
    ignore(optree_core.tree_broadcast_prefix, other, tree, is_leaf, **kw)
    ignore(optree_core.tree_broadcast_map, lambda *xs: 0, other, tree, is_leaf=is_leaf, **kw)
    ignore(lambda: [e("t") for e in optree_core.prefix_errors(other, tree, is_leaf, **kw)])
    ignore(optree_core.tree_flatten_one_level, tree, is_leaf, **kw)
    ignore(optree_core.tree_replace_nones, 0, tree, namespace=ns)
    ignore(
        optree_core.tree_partition, lambda x: bool(x) if isinstance(x, int) else False, tree, **kw
    )
    ignore(optree_core.all_leaves, [tree, other], is_leaf, **kw)
    ignore(optree_core.tree_sum, tree, **kw)

    if flat is None:
        return
    leaves, spec = flat
    specs.append(spec)
    if len(specs) > 64:
        specs.pop(rng.randrange(len(specs)))
    n = len(leaves)
    wrong = rng.choice(
        [
            leaves,
            leaves[:-1],
            [*leaves, 0],
            iter(leaves),
            (x for x in [*leaves[: rng.randrange(n + 1)], *([0] * rng.randrange(3))]),
            _raising_leaves(leaves),
            5,
            None,
            "abc",
        ]
    )
    ignore(optree_core.tree_unflatten, spec, wrong)
    ignore(spec.unflatten, leaves)
    ignore(spec.flatten_up_to, other)
    ignore(spec.child, rng.randrange(-3, spec.num_children + 3))
    ignore(spec.entry, rng.randrange(-3, spec.num_children + 3))
    ignore(spec.children)
    ignore(spec.entries)
    ignore(spec.paths)
    ignore(spec.accessors)
    ignore(repr, spec)
    ignore(hash, spec)
    ignore(spec.is_leaf)
    peer = rng.choice(specs)
    ignore(spec.compose, peer)
    ignore(spec.is_prefix, peer)
    ignore(spec.is_suffix, peer)
    ignore(spec.broadcast_to_common_suffix, peer)
    ignore(lambda: spec == peer)
    ignore(lambda: spec < peer)
    ignore(lambda: spec >= peer)
    ignore(optree_core.tree_transpose, spec, peer, tree)
    ignore(optree_core.treespec_tuple, [spec, peer])
    ignore(optree_core.treespec_dict, {"a": spec, "b": peer})
    ignore(optree_core.treespec_deque, [spec, peer], maxlen=rng.randrange(-1, 3))
    ignore(optree_core.treespec_list, [spec, 3])
    ignore(optree_core.treespec_namedtuple, Point(spec, peer))
    ignore(optree_core.treespec_structseq, time.struct_time([spec] * 9))

    data = ignore(pickle.dumps, spec)
    if data is not None:
        ignore(pickle.loads, data)
        # Corrupted pickle states must be rejected, never trusted.
        reduced = ignore(spec.__reduce__)
        if isinstance(reduced, tuple) and len(reduced) >= 2:
            for _ in range(3):
                bad = corrupt(rng, reduced[1])
                rebuilt = ignore(reduced[0], *bad) if isinstance(bad, tuple) else None
                if rebuilt is not None and len(reduced) > 2:
                    ignore(rebuilt.__setstate__, corrupt(rng, reduced[2]))
                if rebuilt is not None:
                    ignore(repr, rebuilt)
                    ignore(rebuilt.unflatten, range(max(0, getattr(rebuilt, "num_leaves", 0))))
                    ignore(rebuilt.paths)
                    ignore(hash, rebuilt)
                    ignore(lambda r=rebuilt: r == spec)
        # (CPython 3.11's own unpickler prints "SystemError: deallocated bytearray object has
        # exported buffers" for some flipped bytes, a BYTEARRAY8 with an absurd length: not ours.)
        cut = data[: rng.randrange(len(data) + 1)]
        ignore(pickle.loads, cut)
        if data:
            flipped = bytearray(data)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            ignore(pickle.loads, bytes(flipped))


def _raising_leaves(leaves):
    yield from leaves[:1]
    raise Boom("leaves iterator")


def churn_registry(rng: random.Random, classes: list[type], shared: dict[str, Any]) -> None:
    """Register, re-register and unregister custom node classes with random behaviours."""
    roll = rng.random()
    if roll < 0.5 or not classes:
        cls = type(f"Node{rng.randrange(10**6)}", (Node,), {})
        ns = rng.choice([NS, "fuzz-other"])
        ignore(
            optree_core.register_pytree_node,
            cls,
            make_flatten(rng, shared),
            make_unflatten(rng),
            namespace=ns,
        )
        classes.append(cls)
    elif roll < 0.8:
        cls = classes.pop(rng.randrange(len(classes)))
        ignore(optree_core.unregister_pytree_node, cls, namespace=NS)
        ignore(optree_core.unregister_pytree_node, cls, namespace="fuzz-other")
    else:
        cls = rng.choice(classes)
        ignore(
            optree_core.register_pytree_node,
            cls,
            make_flatten(rng, shared),
            make_unflatten(rng),
            namespace=NS,
        )
    ignore(
        optree_core.register_pytree_node, list, lambda x: (x, None), lambda m, c: c, namespace=NS
    )
    ignore(optree_core.unregister_pytree_node, int, namespace=NS)


def worker(seed: int, deadline: float, rounds: list[int], errors: list[BaseException]) -> None:
    rng = random.Random(seed)
    classes: list[type] = []
    shared: dict[str, Any] = {"list": [1, 2, 3], "dict": {"a": 1}}
    maker = TreeMaker(rng, classes, shared)
    specs: list[Any] = []
    count = 0
    try:
        while time.monotonic() < deadline:
            if rng.random() < 0.2:
                churn_registry(rng, classes, shared)
            if rng.random() < 0.01:
                ignore(optree_core.tree_leaves, _deep(rng.choice([100, 5000, 50_000])))
            if rng.random() < 0.01:
                gc.collect()
            one_round(rng, maker, specs)
            count += 1
    except BaseException as exc:  # reported by main
        errors.append(exc)
    rounds.append(count)


def _deep(depth: int) -> Any:
    tree: Any = 0
    for _ in range(depth):
        tree = [tree] if depth % 2 else {"k": tree}
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="time budget")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "0")))
    parser.add_argument("--threads", type=int, default=3, help="concurrent fuzz threads")
    args = parser.parse_args(argv)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    print(
        f"fuzzing optree_core {optree_core.__version__} for {args.seconds:.0f}s, seed {args.seed},"
        f" {args.threads} thread(s)",
        flush=True,
    )
    deadline = time.monotonic() + args.seconds
    rounds: list[int] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=worker, args=(args.seed * 1000 + i, deadline, rounds, errors), daemon=True
        )
        for i in range(args.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=args.seconds + 300)
    if any(t.is_alive() for t in threads):
        print("FUZZ FAILURE: a fuzz thread hung", flush=True)
        return 2
    if errors:
        print(f"FUZZ FAILURE: {type(errors[0]).__name__}: {errors[0]}", flush=True)
        return 1
    gc.collect()
    print(f"fuzz ok: {sum(rounds)} rounds, no crash", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
