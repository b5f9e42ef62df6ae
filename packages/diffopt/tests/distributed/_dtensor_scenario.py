"""One rank of the DTensor check, run by ``test_dtensor.py`` under torchrun (2 gloo ranks, loopback).

For every alias that takes ``use_accelerated_op``, plain and accelerated, and each placement
(Shard(0), Shard(1), Replicate: shapes that shard unevenly), three differentiable inner steps
on a tree of DTensor leaves, then the meta-gradient of an outer loss: compared, in float64, with
the same run on the whole plain tensors. Rank 0 writes what it measured to the JSON file named
on the command line; a run that raises records its error instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh

import diffopt

torch.set_num_threads(1)
SHAPES = {"w": (4, 6), "b": (5, 3)}
ALIASES = ["adam", "adamw", "nadam", "lion", "adan", "rprop", "asgd", "adafactor"]
PLACEMENTS = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}


def unroll(name: str, accelerated: bool, place) -> tuple[dict, dict, str]:
    """Three inner steps from the same data; the final leaves, the meta-gradient, the leaves' type."""
    gen = torch.Generator().manual_seed(0)
    whole = {
        k: [torch.randn(s, generator=gen, dtype=torch.float64) for _ in range(3)]
        for k, s in SHAPES.items()
    }
    params = {k: place(v[0]).requires_grad_() for k, v in whole.items()}
    meta = {k: place(v[1].abs() + 0.5).requires_grad_() for k, v in whole.items()}
    target = {k: place(v[2]) for k, v in whole.items()}
    opt = getattr(diffopt, name)(0.05, use_accelerated_op=accelerated)
    state = opt.init(params)
    for _ in range(3):
        loss = sum(((params[k] * meta[k] - target[k]) ** 2).sum() for k in params)
        grads = dict(
            zip(params, torch.autograd.grad(loss, list(params.values()), create_graph=True))
        )
        updates, state = opt.update(grads, state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    outer = sum((p**2).sum() for p in params.values())
    meta_grads = dict(zip(meta, torch.autograd.grad(outer, list(meta.values()))))
    kind = type(params["w"]).__name__

    def full(t):
        return t.full_tensor() if isinstance(t, DTensor) else t

    return (
        {k: full(v).detach() for k, v in params.items()},
        {k: full(v) for k, v in meta_grads.items()},
        kind,
    )


def check(mesh, name: str, accelerated: bool, placement: str) -> dict:
    params, meta_grads, _ = unroll(name, accelerated, lambda t: t.clone())
    gen = torch.Generator().manual_seed(0)  # unroll's first draws: the leaves it starts from
    start = {k: torch.randn(s, generator=gen, dtype=torch.float64) for k, s in SHAPES.items()}
    try:
        ours, our_grads, kind = unroll(
            name, accelerated, lambda t: distribute_tensor(t.clone(), mesh, [PLACEMENTS[placement]])
        )
    except Exception as error:  # recorded for the test, which decides what is allowed to fail
        return {"error": f"{type(error).__name__}: {error}"[:600]}
    return {
        "kind": kind,
        "param_diff": max((ours[k] - params[k]).abs().max().item() for k in params),
        "moved": max((params[k] - start[k]).abs().max().item() for k in params),
        "grad_diff": max((our_grads[k] - meta_grads[k]).abs().max().item() for k in meta_grads),
        "grad_norm": max(g.abs().max().item() for g in meta_grads.values()),
    }


def main() -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    results = {
        f"{name}/{accelerated}/{placement}": check(mesh, name, accelerated, placement)
        for name in ALIASES
        for accelerated in (False, True)
        for placement in PLACEMENTS
    }
    results["world"] = dist.get_world_size()
    if dist.get_rank() == 0:
        Path(sys.argv[1]).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
