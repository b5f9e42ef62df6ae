"""The optimizer step under FSDP2 on 2 ranks as a pytest-benchmark suite: fused_optim's drop-in
against torch.optim's default path, ``foreach=True`` and ``fused=True`` on the same mesh and the
same sharded parameters (bench_fsdp_step.py's workload: an MLP of 8 layers 1024 x 1024, 4.2M
parameters per rank's shard).

All contenders live in one launch of the ranks, each with its own optimizer over the same DTensor
parameters, and the ranks themselves interleave them round by round (balanced orders, as the rest
of the suite); each contender's samples (the median step of a round, the slowest rank's) are then
handed to its test. ``--device cuda`` runs the ranks on NCCL, one GPU each.

    pytest benchmarks/distributed/test_fsdp_step.py [--quick] [--rounds 8] [--device cuda] [-k Adam]
"""

from __future__ import annotations

import _suite
import bench_fsdp_step as workload  # this folder is on sys.path (pytest's prepend import mode)
import pytest

OURS = "fused_optim"
CONTENDERS = workload.CONTENDERS
OPTIMIZERS = _suite.pick(list(workload.OPTIMIZERS), ["Adam"])


def _notes(done: list[_suite.Workload]) -> list[str]:
    lines = [
        "| optimizer | ranks | device | shard (elements per rank) | contenders that raised |",
        "|---|---:|---|---:|---|",
    ]
    for w in done:
        info = w.info
        errors = "; ".join(f"{k}: {v}" for k, v in info.get("errors", {}).items()) or "-"
        lines.append(
            f"| {w.params['optimizer']} | {info.get('world')} | {info.get('device')} | "
            f"{info.get('shard_numel')} | {errors} |"
        )
    return lines


REPORT = _suite.Report(
    title="optimizer step under FSDP2",
    pairs=[
        _suite.Pair("torch default", OURS, 1.0, name="torch default / fused_optim"),
        _suite.Pair("torch foreach", OURS, name="torch foreach / fused_optim"),
        _suite.Pair("torch fused", OURS, name="torch fused / fused_optim"),
    ],
    note="ratio = torch.optim time / fused_optim time (medians of the slowest rank's step); above 1: "
    "fused_optim is faster",
    notes=_notes,
    ours=(OURS,),
)


def _raiser(error: str):
    def fail() -> None:
        raise RuntimeError(f"{OURS} raised on the ranks: {error}")

    return fail


@pytest.mark.parametrize("contender", CONTENDERS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_fsdp_step(race, request, optimizer, contender):
    rounds = _suite.ROUNDS or _suite.pick(8, 1)
    args = workload.parser().parse_args(
        [
            "--optimizer",
            optimizer,
            "--rounds",
            str(rounds),
            "--device",
            request.config.getoption("--device"),
            *_suite.pick([], ["--width", "64", "--layers", "2", "--steps", "1", "--warmup", "0"]),
        ]
    )

    def build():
        result = workload.launch(args)
        info = {k: result[k] for k in ("world", "device", "shard_numel", "load")}
        info["errors"] = result["errors"]
        fns = {}
        for name in CONTENDERS:
            if name in result["errors"]:  # a peer that cannot run is skipped; ours failing fails
                error = result["errors"][name]
                fns[name] = error if name != OURS else _raiser(error)
                continue
            samples = iter(result["samples"][name])  # handed out one per round, in order
            fns[name] = lambda samples=samples: {"seconds": next(samples)}
        return fns, info

    race(build, rounds=rounds, warmup=0, self_timed=True)
