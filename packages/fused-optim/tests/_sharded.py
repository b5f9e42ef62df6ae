"""The drop-in optimizers on sharded models (FSDP2, tensor parallel, both on a 2-D mesh) and their
checkpoints through ``torch.distributed.checkpoint``: scenarios that ``test_fsdp.py`` runs on gloo
CPU ranks with ``_distributed.run_scenario``.

One scenario runs every optimizer through every configuration of one world size, so CI pays the
process start-up once per world size. For each configuration and optimizer, each implementation
(``fused``: fused_optim's class; ``torch``: torch.optim's, or for Lion and Adan the pure-PyTorch
class in ``fused_optim._reference``) takes ``STEPS`` steps of the sharded model, and every rank
runs the same twin on an unsharded copy fed the same data (each data-parallel rank's batch, the
losses averaged as FSDP2 averages gradients). A check records the largest difference of a gathered
(``full_tensor()``) parameter from the unsharded twin's, or the error the step raised.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from _distributed import Checks
from torch import nn

STEPS = 3
DIM, HEAD_DIM, HIDDEN, TOKENS, BATCH = 8, 2, 16, 6, 4

# Each optimizer with arguments that make every state buffer matter within three steps.
KWARGS: dict[str, dict[str, Any]] = {
    "Adam": dict(lr=1e-2, weight_decay=0.01),
    "AdamW": dict(lr=1e-2, weight_decay=0.1, amsgrad=True),
    "Adamax": dict(lr=1e-2),
    "NAdam": dict(lr=1e-2),
    "RAdam": dict(lr=1e-2),
    "SGD": dict(lr=1e-2, momentum=0.9, nesterov=True),
    "Adagrad": dict(lr=1e-2),
    "Adadelta": dict(lr=1.0),
    "RMSprop": dict(lr=2e-3, momentum=0.5, centered=True),
    "Rprop": dict(lr=1e-2),
    "ASGD": dict(lr=1e-2, t0=1.0),
    "Adafactor": dict(lr=1e-2),
    "Lion": dict(lr=1e-3, weight_decay=0.1),
    "Adan": dict(lr=1e-2, weight_decay=0.02),
}
RESEARCH = ("Lion", "Adan")  # not in torch.optim: their twins are fused_optim._reference's
# torch.optim's classes that raise on DTensor parameters (torch 2.13: in-place ops that would change
# placements); fused_optim's run them.
TORCH_FAILS = ("Adafactor", "Rprop")


def twin_class(name: str) -> type[torch.optim.Optimizer]:
    from fused_optim import _reference

    return getattr(_reference if name in RESEARCH else torch.optim, name)


class Block(nn.Module):
    """A transformer-like block: LayerNorm, attention-like token mixing, MLP, residuals, and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        # No key bias: softmax cancels it, so its gradient is rounding noise that Adagrad-like
        # steps (g / sqrt(sum g^2)) blow up to +-lr, differently in every summation order.
        self.q, self.k, self.v = (
            nn.Linear(DIM, DIM),
            nn.Linear(DIM, DIM, bias=False),
            nn.Linear(DIM, DIM),
        )
        self.proj = nn.Linear(DIM, DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        # Heads of HEAD_DIM features: under tensor parallelism q, k and v hold this rank's heads.
        q, k, v = (
            f(h).unflatten(-1, (-1, HEAD_DIM)).transpose(-2, -3) for f in (self.q, self.k, self.v)
        )
        attn = torch.softmax(q @ k.transpose(-1, -2) / HEAD_DIM**0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(-2, -3).flatten(-2))
        x = x + self.down(torch.nn.functional.gelu(self.up(x)))
        return self.head(x).mean(dim=(-1, -2))


def make_model() -> Block:
    torch.manual_seed(0)
    return Block()


def batch(step: int, dp_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + dp_rank)
    return torch.randn(BATCH, TOKENS, DIM, generator=gen), torch.randn(BATCH, generator=gen)


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


# --- configurations: (world size, how to shard a fresh model, the data-parallel degree) -----------


def _tp_plan() -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    # q, k, v and up split their outputs (each rank its heads), proj and down their inputs
    # (Megatron's split); the norm and head stay plain tensors beside the DTensors, as they do in
    # users' TP models (the drop-ins then make one op call for each kind).
    return {
        "q": ColwiseParallel(),
        "k": ColwiseParallel(),
        "v": ColwiseParallel(),
        "proj": RowwiseParallel(),
        "up": ColwiseParallel(),
        "down": RowwiseParallel(),
    }


def shard_fsdp(model: nn.Module, mesh: Any, **kwargs: Any) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for name in ("q", "k", "v", "up", "down"):
        fully_shard(getattr(model, name), mesh=mesh, **kwargs)
    return fully_shard(model, mesh=mesh, **kwargs)


def fsdp(model: nn.Module) -> tuple[nn.Module, int, int]:
    mesh = _mesh((dist.get_world_size(),))
    return shard_fsdp(model, mesh), dist.get_rank(), dist.get_world_size()


def fsdp_no_reshard(model: nn.Module) -> tuple[nn.Module, int, int]:
    mesh = _mesh((dist.get_world_size(),))
    return (
        shard_fsdp(model, mesh, reshard_after_forward=False),
        dist.get_rank(),
        dist.get_world_size(),
    )


def fsdp_mixed(model: nn.Module) -> tuple[nn.Module, int, int]:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mesh = _mesh((dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return shard_fsdp(model, mesh, mp_policy=policy), dist.get_rank(), dist.get_world_size()


def tp(model: nn.Module) -> tuple[nn.Module, int, int]:
    from torch.distributed.tensor.parallel import parallelize_module

    return parallelize_module(model, _mesh((dist.get_world_size(),)), _tp_plan()), 0, 1


def fsdp_tp(model: nn.Module) -> tuple[nn.Module, int, int]:
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = _mesh((2, dist.get_world_size() // 2), ("dp", "tp"))
    model = parallelize_module(model, mesh["tp"], _tp_plan())
    return shard_fsdp(model, mesh["dp"]), mesh["dp"].get_local_rank(), mesh["dp"].size()


def _mesh(shape: tuple[int, ...], names: tuple[str, ...] | None = None) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=names)


CONFIGS: dict[str, tuple[int, Callable[[nn.Module], tuple[nn.Module, int, int]]]] = {
    "fsdp": (2, fsdp),
    "fsdp_no_reshard": (2, fsdp_no_reshard),
    "fsdp_bf16": (2, fsdp_mixed),
    "tp": (2, tp),
    "fsdp_tp": (4, fsdp_tp),
}


# --- one run ------------------------------------------------------------------------------------


def full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def reference_forward(model: nn.Module, bf16: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """The unsharded twin's forward; with ``bf16``, FSDP2's mixed-precision forward (parameters and
    inputs cast to bfloat16, the float32 parameters keep the gradients)."""
    if not bf16:
        return model

    def forward(x: torch.Tensor) -> torch.Tensor:
        low = {k: p.to(torch.bfloat16) for k, p in model.named_parameters()}
        return torch.func.functional_call(model, low, (x.to(torch.bfloat16),)).float()

    return forward


def run(config: str, name: str, impl: str) -> dict[str, Any]:
    """``STEPS`` steps of ``impl``'s optimizer ``name`` on the sharded model beside the unsharded
    twin: the largest parameter difference, or the error."""
    import fused_optim

    _, shard = CONFIGS[config]
    model, dp_rank, dp_size = shard(make_model())
    reference = make_model()
    ref_forward = reference_forward(reference, bf16=config == "fsdp_bf16")
    cls = getattr(fused_optim, name) if impl == "fused" else twin_class(name)
    ref_opt = twin_class(name)(reference.parameters(), **KWARGS[name])
    opt = cls(model.parameters(), **KWARGS[name])
    for step in range(STEPS):
        x, y = batch(step, dp_rank)
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        opt.step()
        ref_opt.zero_grad()
        ref_loss = (
            sum(
                ((ref_forward(xr) - yr) ** 2).mean()
                for xr, yr in (batch(step, r) for r in range(dp_size))
            )
            / dp_size
        )
        ref_loss.backward()
        ref_opt.step()
    gathered = [full(p.detach()) for p in model.parameters()]
    return {
        "max_diff": max_diff(gathered, list(reference.parameters())),
        "moved": max_diff(gathered, list(make_model().parameters())),
    }


# --- checkpoints through torch.distributed.checkpoint ----------------------------------------------


def make_optimizer(impl: str, name: str, model: nn.Module) -> torch.optim.Optimizer:
    import fused_optim

    return (getattr(fused_optim, name) if impl == "fused" else twin_class(name))(
        model.parameters(), **KWARGS[name]
    )


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        opt.zero_grad()
        loss_fn(model, *batch(step, dist.get_rank())).backward()
        opt.step()


# The checkpoint cases compare this rank's shards (the model is sharded alike before and after the
# load) and combine the ranks' verdicts in one collective: gathering every tensor costs a collective
# each, most of the cases' time.


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def local_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """This rank's shards of the optimizer's state as DCP sees it (keyed by parameter names)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = get_optimizer_state_dict(model, opt)["state"]
    return {
        f"{k}/{key}": local(v).detach().clone()
        for k, s in state.items()
        for key, v in s.items()
        if isinstance(v, torch.Tensor)
    }


def local_params(model: nn.Module) -> list[torch.Tensor]:
    return [local(p.detach()).clone() for p in model.parameters()]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(
        ((x.double() - y.double()).abs().max().item() if x.numel() else 0.0)
        for x, y in zip(a, b, strict=True)
    )


def on_all_ranks(equal: bool, diff: float) -> tuple[bool, float]:
    """``(every rank equal, the largest diff of any rank)``, from one all-reduce."""
    both = torch.tensor([0.0 if equal else 1.0, diff], dtype=torch.float64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return both[0].item() == 0.0, both[1].item()


def checkpoint(name: str, writer: str, readers: list[str], path: str) -> dict[str, dict[str, Any]]:
    """``writer`` trains 2 steps under FSDP2, saves model and optimizer with ``dcp.save`` and takes a
    3rd step; for each of ``readers``, a fresh model and that optimizer load the checkpoint with
    ``dcp.load`` and take the 3rd step. Records per reader whether the loaded state equals the saved
    one bit for bit (``state_equal``) and the largest difference of the parameters after the 3rd
    steps (``max_diff``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    model, _, _ = fsdp(make_model())
    opt = make_optimizer(writer, name, model)
    train(model, opt, range(2))
    saved = local_state(model, opt)
    # sync_files=False: no fsync of each file (seconds on a loaded CI disk; the files are read back
    # by this same run, through the page cache)
    dcp.save(
        {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)},
        storage_writer=dcp.FileSystemWriter(path, sync_files=False),
    )
    train(model, opt, range(2, 3))
    expected = local_params(model)

    results = {}
    for reader in readers:
        torch.manual_seed(1)
        model, _, _ = fsdp(Block())  # other initial values: the load must overwrite them
        opt = make_optimizer(reader, name, model)
        state = {
            "model": get_model_state_dict(model),
            "optim": get_optimizer_state_dict(model, opt),
        }
        dcp.load(state, checkpoint_id=path)
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, opt, state["optim"])
        loaded = local_state(model, opt)
        state_equal = saved.keys() == loaded.keys() and all(
            saved[k].dtype == loaded[k].dtype and torch.equal(saved[k], loaded[k]) for k in saved
        )
        train(model, opt, range(2, 3))
        state_equal, diff = on_all_ranks(state_equal, max_diff(local_params(model), expected))
        results[reader] = {"state_equal": state_equal, "max_diff": diff}
    return results


def checkpoint_readers(name: str) -> dict[str, list[str]]:
    """Who reads whose checkpoint: fused_optim its own, and torch.optim's and fused_optim's each
    other's where torch.optim has the class and can step it on DTensors."""
    if name in TORCH_FAILS + RESEARCH:
        return {"fused": ["fused"]}
    return {"fused": ["fused", "torch"], "torch": ["fused"]}


def scenario(configs: list[str], names: list[str], checkpoint_dir: str = "") -> dict[str, Any]:
    """Every optimizer of ``names`` in every configuration of ``configs``, both implementations
    (checks named ``config/optimizer/impl``); with ``checkpoint_dir``, also the checkpoint cases
    under FSDP2 (checks named ``checkpoint/optimizer/writer``, a record per reader)."""
    checks = Checks()
    for config in configs:
        for name in names:
            # torch.optim on the sharded model is recorded once (the README's account of what it runs)
            for impl in ("fused", "torch") if config == "fsdp" else ("fused",):
                checks.run(f"{config}/{name}/{impl}", run, config, name, impl)
                dist.barrier()
    for name in names if checkpoint_dir else []:
        for writer, readers in checkpoint_readers(name).items():
            checks.run(
                f"checkpoint/{name}/{writer}",
                checkpoint,
                name,
                writer,
                readers,
                os.path.join(checkpoint_dir, f"{name}-{writer}"),
            )
            dist.barrier()
    return checks.results
