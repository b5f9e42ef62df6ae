"""Pytree flatten / unflatten / map as a pytest-benchmark suite: optree_core against optree, jax,
torch.utils._pytree and dm-tree on the ResNet trees and the size sweep of bench_pytree.py.

One workload = one tree and one operation; its contenders are the libraries, timed interleaved
(benchmarks/_suite.py), each sample the mean of a calibrated loop of calls (>= 20 ms), the
collector off during the rounds as in timeit. A library that is not installed is skipped.

    pytest benchmarks/pytree [--rounds 15] [-k "resnet50 and flatten"]
"""

from __future__ import annotations

import functools

import _suite
import bench_pytree as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest

LIBRARIES = list(workloads.LOADERS)  # optree_core first: the baseline
MODELS = _suite.pick(workloads.MODELS, ("resnet18",))
SIZES = _suite.pick(workloads.SWEEP_SIZES, (10,))
TREES = ([f"{m} {kind}" for m in MODELS for kind in ("modules", "state_dict")]
         + [f"{kind} {n}" for n in SIZES for kind in ("plain", "odict/ntuple")])

REPORT = _suite.Report(
    title="optree-core pytree operations",
    pairs=[_suite.Pair(peer, "optree_core", target=(
        {op: target for op in workloads.OPS if scope in ("all", op)}
        if (scope_target := workloads.TARGETS.get(peer)) and (scope := scope_target[0])
        and (target := scope_target[1]) else None))
        for peer in LIBRARIES[1:]],
    series="op",
    note="ratio = peer time / optree_core time (medians); above 1: optree_core is faster",
    notes=lambda done: [f"[warn] {w.params['tree']}: leaf counts differ: {w.info['leaf_counts']}"
                        for w in done if len(set(w.info["leaf_counts"].values())) > 1],
)


@functools.cache
def library(name: str) -> workloads.Library | str:
    try:
        return workloads.LOADERS[name]()
    except ImportError as exc:
        return f"not installed ({exc})"


@functools.lru_cache(maxsize=1)
def model_trees(model: str) -> dict[str, object]:
    return dict(workloads.model_trees((model,)))


def make_tree(name: str) -> object:
    kind, size = name.rsplit(" ", 1)[0], name.rsplit(" ", 1)[1]
    if kind == "plain":
        return workloads.plain_tree(int(size))
    if kind == "odict/ntuple":
        return workloads.ordered_tree(int(size))
    trees = model_trees(name.split(" ")[0])
    if name not in trees:
        pytest.skip("the ResNet trees need torch")
    return trees[name]


@pytest.mark.parametrize("contender", LIBRARIES)
@pytest.mark.parametrize("op", workloads.OPS)
@pytest.mark.parametrize("tree", TREES)
def test_pytree(race, tree, op, contender):
    def build():
        the_tree = make_tree(tree)
        libs = {name: library(name) for name in LIBRARIES}
        present = [lib for lib in libs.values() if not isinstance(lib, str)]
        counts = {lib.name: len(lib.flatten(the_tree)[0]) for lib in present}
        fns = {name: lib if isinstance(lib, str) else workloads.operation(lib, the_tree, op)
               for name, lib in libs.items()}
        return fns, {"leaves": counts.get("optree_core", 0), "leaf_counts": counts}

    race(build, rounds=15, min_time=_suite.pick(0.02, 0.001), disable_gc=True)
