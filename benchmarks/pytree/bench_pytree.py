"""Pytree flatten / unflatten / map: optree_core against optree, jax.tree_util,
torch.utils._pytree and dm-tree, side by side in one process.

Reproduces the tree-operation comparison of the TorchOpt paper (Ren et al., 2023): the
parameter-and-buffer trees of ResNet-18/50/101/152 (the nested dict of the module hierarchy and
the flat ``state_dict`` OrderedDict, tensors as leaves), plus a sweep from 10 to 100,000 leaves
over plain dict/list/tuple trees and OrderedDict/namedtuple-heavy trees.

Each figure is the median over repeats of the mean time of one call, timeit-style: one warm-up
call, then a loop count chosen so one repeat lasts at least ``--min-time``; the libraries'
repeats are interleaved so background load hits them alike. Ratios are peer time /
optree_core time (above 1: optree_core is faster).

    python benchmarks/pytree/bench_pytree.py            # full run, a few minutes
    python benchmarks/pytree/bench_pytree.py --quick    # short run (the demo)

Peers are imported lazily; one that is not installed is skipped with a message.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _report  # benchmarks/_report.py: the progress bar and the summary table

OPS = ("flatten", "unflatten", "map")
SWEEP_SIZES = (10, 100, 1_000, 10_000, 100_000)
QUICK_SWEEP_SIZES = (10, 1_000, 100_000)
MODELS = ("resnet18", "resnet50", "resnet101", "resnet152")
QUICK_MODELS = ("resnet18", "resnet152")
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


def load_libraries(names: list[str]) -> list[Library]:
    libraries = []
    for name in names:
        try:
            libraries.append(LOADERS[name]())
        except ImportError as exc:
            print(f"[skip] {name}: not installed ({exc})", file=sys.stderr)
    return libraries


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


def sweep_trees(sizes: tuple[int, ...]) -> list[tuple[str, Any]]:
    trees = []
    for n in sizes:
        trees.append((f"plain {n}", plain_tree(n)))
        trees.append((f"odict/ntuple {n}", ordered_tree(n)))
    return trees


# -- timing -----------------------------------------------------------------------------------------


def calibrate(fn: Callable[[], Any], min_time: float) -> int:
    """Warm up, then pick a loop count whose run lasts at least min_time (timeit's autorange)."""
    fn()
    loops = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time or loops >= 1 << 20:
            return loops
        loops *= 2 if elapsed == 0 else max(2, min(10, int(min_time / elapsed) + 1))


class ColdTrees(list):
    """Trees of distinct structures, each flattened once per call: what a library pays for a
    structure it has not seen (no cache can help; the report divides by their number)."""


def cold_trees(n_trees: int = 2000, n_keys: int = 50) -> ColdTrees:
    return ColdTrees({f"k{i}_{j}": float(j) for j in range(n_keys)} for i in range(n_trees))


def _callable(lib: Library, tree: Any, op: str) -> Callable[[], Any]:
    if isinstance(tree, ColdTrees):
        return lambda: [lib.flatten(one) for one in tree]
    leaves, spec = lib.flatten(tree)
    if op == "flatten":
        return lambda: lib.flatten(tree)
    if op == "unflatten":
        return lambda: lib.unflatten(spec, leaves, tree)
    return lambda: lib.tree_map(tree)


def measure_row(
    libs: list[Library], tree: Any, op: str, repeats: int, min_time: float
) -> dict[str, float | None]:
    """Median seconds per call of each library on one (tree, op).

    The libraries' repeats are interleaved (in a rotating order), so a burst of load from
    elsewhere on the machine hits all of them alike instead of skewing one ratio.
    """
    fns: dict[str, Callable[[], Any]] = {}
    loops: dict[str, int] = {}
    for lib in libs:
        try:
            fns[lib.name] = _callable(lib, tree, op)
            loops[lib.name] = calibrate(fns[lib.name], min_time)
        except Exception as exc:  # a peer that cannot handle a tree is reported, not fatal
            _report.write(f"[skip] {lib.name} {op}: {type(exc).__name__}: {exc}", file=sys.stderr)
            fns.pop(lib.name, None)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: collector pauses are not the library's cost
    try:
        for r in range(repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                fn, n = fns[name], loops[name]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                samples[name].append((time.perf_counter() - t0) / n)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        lib.name: statistics.median(samples[lib.name]) if lib.name in samples else None
        for lib in libs
    }


def check_same_leaves(libs: list[Library], name: str, tree: Any) -> None:
    """Every peer must see the same leaf count, or the comparison is meaningless."""
    counts = {lib.name: len(lib.flatten(tree)[0]) for lib in libs}
    if len(set(counts.values())) > 1:
        _report.write(f"[warn] {name}: leaf counts differ between libraries: {counts}",
                      file=sys.stderr)


# -- report -----------------------------------------------------------------------------------------


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.3f} ms"


def report(rows: list[dict[str, Any]], libs: list[Library]) -> str:
    peers = [lib.name for lib in libs if lib.name != "optree_core"]
    header = ["tree", "leaves", "op", "optree_core", *peers, *[f"{p}/ours" for p in peers]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        ours = row["times"].get("optree_core")
        cells = [row["tree"], str(row["leaves"]), row["op"], _fmt_time(ours)]
        cells += [_fmt_time(row["times"].get(p)) for p in peers]
        for p in peers:
            t = row["times"].get(p)
            cells.append(f"{t / ours:.2f}" if t is not None and ours else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparisons(rows: list[dict[str, Any]], libs: list[Library]) -> list[_report.Comparison]:
    """peer/ours per peer and op, with the targets of issue 2 on the ops they name."""
    out = []
    for peer in (lib.name for lib in libs if lib.name != "optree_core"):
        scope, target = TARGETS.get(peer, ("all", None))
        for op in OPS:
            covered = target is not None and scope in ("all", op)
            comparison = _report.Comparison(f"{peer}/ours {op}", target if covered else None)
            for row in rows:
                ours, theirs = row["times"].get("optree_core"), row["times"].get(peer)
                if row["op"] == op and ours and theirs is not None:
                    comparison.add(row["tree"], theirs / ours)
            out.append(comparison)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer trees and repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timing repeats (median)")
    parser.add_argument("--min-time", type=float, default=None, help="seconds per repeat")
    parser.add_argument(
        "--libs",
        default="optree_core,optree,jax,torch,dm-tree",
        help="comma-separated libraries (optree_core is the baseline)",
    )
    parser.add_argument("--no-models", action="store_true", help="skip the ResNet trees")
    parser.add_argument("--json", type=Path, help="also write the raw timings here")
    _report.add_progress_flag(parser)
    args = parser.parse_args(argv)

    repeats = args.repeats or (5 if args.quick else 15)
    min_time = args.min_time or (0.005 if args.quick else 0.02)
    names = [n.strip() for n in args.libs.split(",") if n.strip()]
    if "optree_core" not in names:
        names.insert(0, "optree_core")
    libs = load_libraries(names)
    if not libs or libs[0].name != "optree_core":
        print("optree_core is not importable: nothing to compare against", file=sys.stderr)
        return 1

    trees = [] if args.no_models else model_trees(QUICK_MODELS if args.quick else MODELS)
    trees += sweep_trees(QUICK_SWEEP_SIZES if args.quick else SWEEP_SIZES)

    rows = []
    bar = _report.progress(desc="pytree", total=len(trees) * len(OPS), unit="row",
                           no_progress=args.no_progress)
    for tree_name, tree in trees:
        check_same_leaves(libs, tree_name, tree)
        n_leaves = len(libs[0].flatten(tree)[0])
        for op in OPS:
            bar.set_postfix_str(f"{tree_name} {op}")
            times = measure_row(libs, tree, op, repeats, min_time)
            rows.append({"tree": tree_name, "leaves": n_leaves, "op": op, "times": times})
            _report.write(
                f"  {tree_name:<24} {op:<9} "
                + "  ".join(f"{k}={_fmt_time(v)}" for k, v in times.items()),
                file=sys.stderr,
            )
            bar.update()
    bar.close()
    cold = cold_trees()  # flatten only: cold-tree flatten (issue 15)
    times = measure_row(libs, cold, "flatten", repeats, min_time)
    rows.append({"tree": f"cold: {len(cold)} distinct 50-key dicts, per dict", "leaves": 50,
                 "op": "flatten",
                 "times": {k: v / len(cold) if v is not None else None for k, v in times.items()}})

    versions = {}
    for mod in ("optree_core", "optree", "jax", "torch", "tree"):
        m = sys.modules.get(mod)
        if m is not None:
            versions[mod] = getattr(m, "__version__", "?")
    print(
        f"\nPython {platform.python_version()} on {platform.machine()}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    print(
        f"median of {repeats} repeats, >= {min_time * 1e3:.0f} ms each; identity function for map\n"
    )
    print(report(rows, libs))
    print()
    print(_report.summary_table(comparisons(rows, libs), title="Summary against issue 2's targets"))
    if args.json:
        args.json.write_text(json.dumps({"versions": versions, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
