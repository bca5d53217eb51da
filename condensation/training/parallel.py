"""How the processes of a training run hold the model (``TrainConfig.sharding``): ``Replicated``
(DDP through accelerate: every process holds everything) or ``Sharded`` (FSDP2: weights,
gradients and AdamW state in shards). The loop and the checkpoint manager call the same five
methods of either; everything else about a run (data order, loss, schedule, logs) is the same.

FSDP2 is applied here with ``torch.distributed.fsdp.fully_shard``, one unit per transformer block
(the model's ``_no_split_modules``) and the rest (embeddings, final norm, head) in the root unit,
rather than through accelerate's FSDP plugin: accelerate enables its plugin on GPUs only (on
CPUs it silently falls back to DDP), so the sharded path could not be tested without a GPU; the
same ``fully_shard`` call runs on CPUs (gloo) and GPUs (NCCL). accelerate still starts the
processes and provides the device, the collectives and ``backward``.

Under ``Sharded``, every forward is a collective (it gathers each block's weights): every rank
runs every forward, validation and the condensation probe included, and full weights for a
checkpoint are gathered by all ranks onto the main process. The resumable state stays sharded
(``torch.distributed.checkpoint``, a file per rank): gathering AdamW's moments of a model that
needs FSDP onto one process is what FSDP is there to avoid, and a resume needs the same world
size anyway (``checkpointing.resume_mismatch``), so each rank reads back exactly its own shard.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from accelerate import Accelerator

# torch.distributed's FSDP and checkpoint modules (0.5 s to import) are imported by the methods of
# Sharded: only a sharded run needs them.

OptimizerFactory = Callable[[torch.nn.Module], torch.optim.Optimizer]


class Replicated:
    """Every process holds the whole model; accelerate wraps it in DDP when there are several."""

    sharded = False

    def prepare(self, accelerator: Accelerator, model: torch.nn.Module, make_optimizer: OptimizerFactory):
        """The model to train (DDP-wrapped when distributed) and its optimizer."""
        return accelerator.prepare(model, make_optimizer(model))

    def no_sync(self, accelerator: Accelerator, model: torch.nn.Module, sync: bool):
        """Around a micro-batch's backward: gradients are all-reduced only when ``sync``."""
        return contextlib.nullcontext() if sync else accelerator.no_sync(model)

    def clip_grad_norm(self, accelerator: Accelerator, model: torch.nn.Module, max_norm: float) -> torch.Tensor:
        return accelerator.clip_grad_norm_(model.parameters(), max_norm)

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        """None: ``save_pretrained`` reads the whole module itself."""
        return None

    def save_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path, main: bool):
        """Weights and optimizer into ``directory`` (the main process writes them)."""
        if main:
            # safetensors' save_model/load_model handle tied weights (GPT-2's wte = lm_head).
            safetensors.torch.save_model(module, str(directory / "model.safetensors"))
            torch.save(optimizer.state_dict(), directory / "optimizer.pt")

    def load_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> None:
        safetensors.torch.load_model(module, str(directory / "model.safetensors"))
        optimizer.load_state_dict(torch.load(directory / "optimizer.pt", map_location="cpu", weights_only=True))


class Sharded:
    """FSDP2 over all of the run's processes."""

    sharded = True
    SHARDS = "shards"
    """The state's subdirectory of weight and optimizer shards (``torch.distributed.checkpoint``)."""

    def prepare(self, accelerator: Accelerator, model: torch.nn.Module, make_optimizer: OptimizerFactory):
        """Shard ``model`` in place (each rank keeps 1/world of every tensor, on its device) and
        build the optimizer over the shards: its moments are sharded alike."""
        # deferred: sharded runs only, see the imports
        from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
        from torch.distributed.fsdp import fully_shard  # noqa: PLC0415

        if accelerator.num_processes < 2:
            raise ValueError("sharding: fsdp shards over several processes; this run has one (use sharding: ddp)")
        mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
        block_names = set(getattr(model, "_no_split_modules", None) or ())
        blocks = [module for module in model.modules() if type(module).__name__ in block_names]
        if not blocks:
            raise ValueError(f"sharding: fsdp found no transformer block in {type(model).__name__} (_no_split_modules)")
        for block in blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)  # the rest: embeddings (tied or not), final norm, head
        return model, make_optimizer(model)

    def no_sync(self, accelerator: Accelerator, model: Any, sync: bool):
        # As DDP's no_sync: gradients of the micro-batches before the last accumulate unreduced.
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()

    def clip_grad_norm(self, accelerator: Accelerator, model: torch.nn.Module, max_norm: float) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # the DTensor's global value

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Every tensor whole, on the CPU of the main process (empty elsewhere); all ranks call it.
        Tied weights (GPT-2's wte = lm_head) come back as one tensor under each name, as an
        unsharded model's state dict has them, so that ``save_pretrained`` stores them once."""
        # deferred: sharded runs only, see the imports
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: PLC0415

        full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        names: dict[int, list[str]] = {}
        for name, parameter in module.named_parameters(remove_duplicate=False):
            names.setdefault(id(parameter), []).append(name)
        for first, *tied in names.values():
            for name in tied:
                if first in full:
                    full[name] = full[first]
        return full

    def save_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path, main: bool):
        """Every rank writes its shards of weights and optimizer into ``directory/shards``."""
        # deferred: sharded runs only, see the imports
        import torch.distributed.checkpoint as dcp  # noqa: PLC0415
        from torch.distributed.checkpoint.state_dict import (  # noqa: PLC0415
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        state = {"model": get_model_state_dict(module), "optimizer": get_optimizer_state_dict(module, optimizer)}
        dcp.save(state, checkpoint_id=directory / self.SHARDS)

    def load_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> None:
        # deferred: sharded runs only, see the imports
        import torch.distributed.checkpoint as dcp  # noqa: PLC0415
        from torch.distributed.checkpoint.state_dict import (  # noqa: PLC0415
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        state = {"model": get_model_state_dict(module), "optimizer": get_optimizer_state_dict(module, optimizer)}
        dcp.load(state, checkpoint_id=directory / self.SHARDS)
        set_model_state_dict(module, state["model"])
        set_optimizer_state_dict(module, optimizer, state["optimizer"])


def model_layout(sharding: str) -> Replicated | Sharded:
    """The layout ``TrainConfig.sharding`` names."""
    return {"ddp": Replicated, "fsdp": Sharded}[sharding]()
