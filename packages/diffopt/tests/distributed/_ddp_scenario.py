"""One rank of the DDP meta-gradient check, run by ``test_ddp.py`` under torchrun (gloo, loopback).

For each inner loop of ``examples/distributed/learned_dataset_ddp.py`` every rank computes, in
float64, its own meta-gradient with a plain (unwrapped) copy of the model, and the meta-gradient
DistributedDataParallel leaves in ``.grad`` after ``backward``; then one outer step. Rank 0 writes
what it measured to the JSON file named on the command line.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

EXAMPLE = Path(__file__).parents[2] / "examples" / "distributed" / "learned_dataset_ddp.py"
spec = importlib.util.spec_from_file_location("learned_dataset_ddp", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


def check(inner: str, rank: int, world: int) -> dict:
    model = example.LearnedDataset(100, inner, generator=torch.Generator().manual_seed(0))
    plain = copy.deepcopy(model)
    ddp = DistributedDataParallel(model)
    x, y = example.real_data(64, torch.Generator().manual_seed(100 + rank), torch.float64)

    # This rank's own meta-gradient, without DDP.
    loss = plain(x, y, example.fresh_classifier(10 + rank, torch.float64, torch.device("cpu")))
    (own,) = torch.autograd.grad(loss, plain.points)
    every = [torch.empty_like(own) for _ in range(world)]
    dist.all_gather(every, own)

    ddp(x, y, example.fresh_classifier(10 + rank, torch.float64, torch.device("cpu"))).backward()
    got = model.points.grad
    mean = torch.stack(every).mean(0)

    torch.optim.SGD(ddp.parameters(), lr=0.5).step()
    points = [torch.empty_like(model.points) for _ in range(world)]
    dist.all_gather(points, model.points.detach())
    return {
        "diff_from_mean": (got - mean).abs().max().item(),
        "mean_norm": mean.norm().item(),
        "rank_spread": (every[0] - every[-1]).abs().max().item(),
        "points_spread_after_step": max((p - points[0]).abs().max().item() for p in points),
        "dtype": str(got.dtype),
    }


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {inner: check(inner, rank, world) for inner in example.INNER_LOOPS}
    results["world"] = world
    if rank == 0:
        Path(sys.argv[1]).write_text(json.dumps(results))
    # Tear down together, so neither rank closes its gloo connections while the other still uses
    # them (this did not stop the rare gloo abort test_ddp.py retries; its cause is still open).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
