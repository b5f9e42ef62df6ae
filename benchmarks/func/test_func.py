"""torch.func as a pytest-benchmark suite: ``vmap`` against Python loops, for an ensemble of small
models (one Adam step each) and for task-batched MAML, with TorchOpt's same vmapped code where it
runs; the variants are bench_func.py's.

One sample = one ensemble step or one MAML outer step, variants interleaved
(benchmarks/_suite.py), 1 thread unless ``--threads``.

    pytest benchmarks/func [--rounds 7] [-k ensemble]
"""

from __future__ import annotations

import _suite
import bench_func as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest

ENSEMBLE = ["loop (diffopt.Adam per model)", "vmap-step (diffopt)",
            "vmap-grad + one fused update (diffopt)", "vmap-step (torchopt)"]
MAML = ["loop (diffopt)", "vmap (diffopt)", "vmap (torchopt)"]

REPORT = {
    "test_ensemble": _suite.Report(
        title="ensemble of small MLPs, one Adam step each",
        pairs=[_suite.Pair(ENSEMBLE[0], ENSEMBLE[1], name="loop / vmap-step"),
               _suite.Pair(ENSEMBLE[0], ENSEMBLE[2], name="loop / vmap-grad + fused"),
               _suite.Pair(ENSEMBLE[3], ENSEMBLE[1], name="torchopt vmap-step / ours")],
        note="ratio = the first variant's time / the second's (medians); above 1: the second "
             "is faster",
        ours=tuple(ENSEMBLE[:3]), threads=1),
    "test_maml_vmap": _suite.Report(
        title="MAML: vmap over the task batch",
        pairs=[_suite.Pair(MAML[0], MAML[1], name="loop / vmap"),
               _suite.Pair(MAML[2], MAML[1], name="torchopt vmap / diffopt vmap")],
        note="ratio = the first variant's time / the second's (medians); above 1: the second "
             "is faster",
        ours=tuple(MAML[:2]), threads=1),
}


def _with_reasons(variants: dict, names: list[str]) -> dict:
    return {name: variants.get(name, "torchopt is not installed") for name in names}


@pytest.mark.parametrize("contender", ENSEMBLE)
@pytest.mark.parametrize("models", _suite.pick([32], [2]))
def test_ensemble(race, models, contender):
    race(lambda: _with_reasons(workloads.ensemble_variants(models), ENSEMBLE), rounds=21)


@pytest.mark.parametrize("contender", MAML)
@pytest.mark.parametrize(("problem", "inner"), _suite.pick(
    [("mlp", "sgd"), ("mlp", "adam"), ("conv", "sgd"), ("conv", "adam")], [("mlp", "sgd")]))
def test_maml_vmap(race, problem, inner, contender):
    # Whole cycles of the suite's balanced orders (6 rounds for 3 contenders); the MLP's steps
    # take milliseconds, so four cycles, where 7 rounds left its ratio to a few samples.
    race(lambda: _with_reasons(workloads.maml_variants(problem, inner), MAML),
         rounds=24 if problem == "mlp" else 6)
