#!/usr/bin/env python3
"""A small transformer language model trained under FSDP2 with a fused_optim optimizer, checkpointed
with torch.distributed.checkpoint (DCP).

Each rank draws its own batches of a synthetic task (arithmetic sequences modulo the vocabulary:
the next token follows from the previous two, so the loss falls from log(vocab) towards 0). Every
transformer block and then the whole model are wrapped with ``fully_shard``, so each rank holds a
1/world share of every parameter, gradient and optimizer state; the optimizer is a drop-in
``fused_optim`` class whose step runs its fused kernel on the local shards. Rank 0 prints the loss
averaged over the ranks. With ``--checkpoint-dir``, the model and optimizer are saved there with
``dcp.save`` (every ``--save-every`` steps and at the end), and a run whose directory already
holds a checkpoint resumes from it with ``dcp.load``. CPU processes talk over gloo; with CUDA,
each process takes the GPU of its local rank and NCCL.

    torchrun --standalone --nproc-per-node 2 packages/fused-optim/examples/fsdp2_train.py \\
        [--steps 60] [--optimizer AdamW] [--bf16] [--checkpoint-dir ckpt]

On several machines, start the same command on each with ``--nnodes N --nproc-per-node GPUS
--rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id JOB`` instead of ``--standalone`` (see
the fused-optim README). Run without torchrun, it is a world of one process.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import fused_optim


class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (
            t.unflatten(-1, (self.heads, -1)).transpose(1, 2)
            for t in self.qkv(self.norm1(x)).chunk(3, dim=-1)
        )
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).flatten(-2))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and the output projection."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def sample(
    args: argparse.Namespace, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """A batch of arithmetic sequences ``(start + t * stride) % vocab``, ``context + 1`` tokens."""
    start = torch.randint(args.vocab, (args.batch, 1), generator=generator)
    stride = torch.randint(1, 8, (args.batch, 1), generator=generator)
    return ((start + stride * torch.arange(args.context + 1)) % args.vocab).to(device)


def init_distributed() -> torch.device:
    """The process group from torchrun's environment (a world of one without torchrun): NCCL and
    this local rank's GPU where CUDA is available, gloo on the CPU otherwise."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
        )
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        return device
    dist.init_process_group("gloo")
    return torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=60, help="train until this step (counting resumed ones)"
    )
    parser.add_argument("--optimizer", default="AdamW", choices=fused_optim.optim.__all__)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch", type=int, default=16, help="sequences per rank and step")
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 forward/backward (FSDP2 MixedPrecisionPolicy), float32 reductions and step",
    )
    parser.add_argument(
        "--no-reshard",
        action="store_true",
        help="keep parameters gathered from forward to backward (reshard_after_forward=False)",
    )
    parser.add_argument(
        "--checkpoint-dir", type=Path, help="save here; resume from here when it holds a checkpoint"
    )
    parser.add_argument(
        "--save-every", type=int, default=0, help="also save every N steps (0: only at the end)"
    )
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()

    device = init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))

    torch.manual_seed(
        0
    )  # the same initial model on every rank (fully_shard keeps each rank's share)
    model = TinyLM(args.vocab, args.dim, args.heads, args.layers, args.context).to(device)
    shard_args = dict(mesh=mesh, reshard_after_forward=not args.no_reshard)
    if args.bf16:
        shard_args["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for block in model.blocks:
        fully_shard(block, **shard_args)
    fully_shard(model, **shard_args)
    optimizer = getattr(fused_optim, args.optimizer)(model.parameters(), lr=args.lr)

    start = 0
    if args.checkpoint_dir is not None and (args.checkpoint_dir / ".metadata").exists():
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {
            "model": model_state,
            "optim": optim_state,
            "step": torch.zeros((), dtype=torch.int64),
        }
        dcp.load(state, checkpoint_id=args.checkpoint_dir)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from step {start} ({args.checkpoint_dir})", flush=True)

    def save(step: int) -> None:
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save(
            {"model": model_state, "optim": optim_state, "step": torch.tensor(step)},
            checkpoint_id=args.checkpoint_dir,
        )
        if rank == 0:
            print(f"saved step {step} to {args.checkpoint_dir}", flush=True)

    if rank == 0:
        print(
            f"{world} ranks on {device.type}, fused_optim.{args.optimizer}, "
            f"{sum(p.numel() for p in model.parameters())} parameters; initial loss about "
            f"log({args.vocab}) = {math.log(args.vocab):.2f}",
            flush=True,
        )
    generator = torch.Generator().manual_seed(1000 * rank + start)  # each rank its own data
    tic = time.perf_counter()
    for step in range(start + 1, args.steps + 1):
        tokens = sample(args, generator, device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0 or step == args.steps:
            mean = loss.detach().clone()
            dist.all_reduce(
                mean, op=dist.ReduceOp.AVG if device.type == "cuda" else dist.ReduceOp.SUM
            )
            if device.type != "cuda":
                mean /= world  # gloo has no AVG
            if rank == 0:
                print(
                    f"step {step:5d}  loss {mean.item():.4f}  ({time.perf_counter() - tic:.1f} s)",
                    flush=True,
                )
        if args.checkpoint_dir is not None and args.save_every and step % args.save_every == 0:
            save(step)
    if (
        args.checkpoint_dir is not None
        and args.steps > start
        and (not args.save_every or args.steps % args.save_every)
    ):
        save(args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
