"""The pytree workloads: optree_core against optree, jax.tree_util, torch.utils._pytree and
dm-tree (test_pytree.py, the pytest-benchmark suite, times them side by side).

Reproduces the tree-operation comparison of the TorchOpt paper (Ren et al., 2023): the
parameter-and-buffer trees of ResNet-18/50/101/152 (the nested dict of the module hierarchy and
the flat ``state_dict`` OrderedDict, tensors as leaves), plus a sweep from 10 to 100,000 leaves
over plain dict/list/tuple trees and OrderedDict/namedtuple-heavy trees.

    python benchmarks/pytree/bench_pytree.py [--quick] [pytest options]

is ``pytest benchmarks/pytree/test_pytree.py`` (see benchmarks/RESULTS.md). Peers are imported
lazily; one that is not installed is skipped.
"""

from __future__ import annotations

import collections
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

OPS = ("flatten", "unflatten", "map")
SWEEP_SIZES = (10, 100, 1_000, 10_000, 100_000)
MODELS = ("resnet18", "resnet50", "resnet101", "resnet152")
# Targets of issue 2, as peer time / optree_core time.
TARGETS = {"optree": ("all", 1.1), "jax": ("all", 2.5), "torch": ("flatten", 20.0)}


def _identity(x: Any) -> Any:
    return x


# -- the libraries under test ----------------------------------------------------------------------


class Library(NamedTuple):
    """One pytree implementation: how to flatten, unflatten and map with it."""

    name: str
    flatten: Callable[[Any], tuple[list[Any], Any]]
    unflatten: Callable[[Any, list[Any], Any], Any]  # (spec, leaves, original tree)
    tree_map: Callable[[Any], Any]


def _load_optree_like(module_name: str, label: str) -> Library:
    mod = importlib.import_module(module_name)
    return Library(
        label,
        mod.tree_flatten,
        lambda spec, leaves, tree: mod.tree_unflatten(spec, leaves),
        lambda tree: mod.tree_map(_identity, tree),
    )


def _load_jax() -> Library:
    from jax import tree_util

    return Library(
        "jax",
        tree_util.tree_flatten,
        lambda spec, leaves, tree: tree_util.tree_unflatten(spec, leaves),
        lambda tree: tree_util.tree_map(_identity, tree),
    )


def _load_torch() -> Library:
    import torch.utils._pytree as pytree

    return Library(
        "torch",
        pytree.tree_flatten,
        lambda spec, leaves, tree: pytree.tree_unflatten(leaves, spec),
        lambda tree: pytree.tree_map(_identity, tree),
    )


def _load_dm_tree() -> Library:
    import tree as dm_tree

    # dm-tree has no treedef object: unflatten_as takes the original structure.
    return Library(
        "dm-tree",
        lambda tree: (dm_tree.flatten(tree), None),
        lambda spec, leaves, tree: dm_tree.unflatten_as(tree, leaves),
        lambda tree: dm_tree.map_structure(_identity, tree),
    )


LOADERS: dict[str, Callable[[], Library]] = {
    "optree_core": lambda: _load_optree_like("optree_core", "optree_core"),
    "optree": lambda: _load_optree_like("optree", "optree"),
    "jax": _load_jax,
    "torch": _load_torch,
    "dm-tree": _load_dm_tree,
}


# -- the trees ------------------------------------------------------------------------------------

Pair = collections.namedtuple("Pair", ["a", "b"])
Triple = collections.namedtuple("Triple", ["a", "b", "c"])


def plain_tree(n_leaves: int) -> list[dict[str, Any]]:
    """A list of chunks of 10 leaves nested in dicts, lists and tuples (depth 4)."""
    chunks = []
    for start in range(0, n_leaves, 10):
        x = list(range(start, start + 10))
        chunks.append(
            {
                "a": (x[0], x[1]),
                "b": [x[2], x[3], x[4]],
                "c": x[5],
                "d": {"e": x[6], "f": x[7], "g": [x[8], x[9]]},
            }
        )
    return chunks


def ordered_tree(n_leaves: int) -> list[collections.OrderedDict[str, Any]]:
    """The same leaf count in OrderedDicts and namedtuples."""
    chunks = []
    for start in range(0, n_leaves, 10):
        x = list(range(start, start + 10))
        chunks.append(
            collections.OrderedDict(
                a=Pair(x[0], x[1]),
                b=Triple(x[2], x[3], x[4]),
                c=x[5],
                d=collections.OrderedDict(e=x[6], f=x[7], g=Pair(x[8], Pair(x[9], ()))),
            )
        )
    return chunks


def model_trees(models: tuple[str, ...]) -> list[tuple[str, Any]]:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("[skip] ResNet trees: torch is not installed", file=sys.stderr)
        return []
    sys.path.insert(0, str(Path(__file__).parent))
    import resnet

    trees = []
    for name in models:
        model = resnet.resnet(name)
        trees.append((f"{name} modules", resnet.module_tree(model)))
        trees.append((f"{name} state_dict", resnet.state_dict_tree(model)))
    return trees


def operation(lib: Library, tree: Any, op: str) -> Callable[[], Any]:
    """One call of ``op`` by ``lib`` on ``tree`` (unflatten from the library's own spec)."""
    leaves, spec = lib.flatten(tree)
    if op == "flatten":
        return lambda: lib.flatten(tree)
    if op == "unflatten":
        return lambda: lib.unflatten(spec, leaves, tree)
    return lambda: lib.tree_map(tree)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    sys.exit(_suite.run_suite(Path(__file__).with_name("test_pytree.py"), sys.argv[1:]))
