"""The seeds' small models: ``simplenet`` (seed 02's MLP) and ``linear10`` (seed 03's Linear)."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import torch
from torch import nn

from torchmark.variants.spec import CPU_TRAIN, FLOATS
from torchmark.workloads.base import WORKLOADS
from torchmark.workloads.models.base import ModelWorkload, Plan, Sizes


class SimpleNet(nn.Module):
    """Seed 02: Linear(1000, 512) - ReLU - Linear(512, 256) - ReLU - Linear(256, 2)."""

    def __init__(self, n_in: int = 1000, hidden: tuple[int, ...] = (512, 256), n_out: int = 2):
        super().__init__()
        dims = (n_in, *hidden)
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@WORKLOADS.register("simplenet")
class SimpleNetWorkload(ModelWorkload):
    name: ClassVar[str] = "simplenet"
    summary: ClassVar[str] = "an MLP 1000-512-256-2 (ReLU), 2 classes, 10000 x 1000 data"
    in_quick: ClassVar[bool] = True
    item_unit: ClassVar[str] = "samples"
    # Seed 02 trains 10 epochs over 10000 samples.
    DATASET: ClassVar[int] = 10_000
    EPOCHS: ClassVar[int] = 10
    plans: ClassVar[dict[str, Plan]] = {
        "quick": Plan({"infer": ("fp32",), "train": ("fp32",)}, cpu_cap=64, gpu_cap=64, only=64),
        "standard": Plan(
            {
                "infer": ("fp32", "tf32", "amp-bf16", "int8-dynamic"),
                "infer-e2e": ("fp32",),
                "train": FLOATS,
            },
            cpu_cap=256,
            gpu_cap=16384,
            # no infer-e2e on the CPU: with nothing to move it repeats infer (linear10 keeps it)
            cpu_scenarios={
                "infer": ("fp32", "tf32", "amp-bf16", "int8-dynamic"),
                "train": CPU_TRAIN,
            },
        ),
        "full": Plan(
            {
                "infer": (*FLOATS, "int8-dynamic", "compile"),
                "infer-e2e": ("fp32", "amp-bf16"),
                "train": (*FLOATS, "compile"),
            },
            cpu_cap=4096,
            gpu_cap=65536,
        ),
    }

    def make_model(self, sizes: Sizes) -> nn.Module:
        return SimpleNet()

    def make_inputs(self, sizes: Sizes, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(sizes.batch, 1000, generator=g),)

    def make_labels(self, sizes: Sizes, g: torch.Generator) -> torch.Tensor:
        return torch.randint(0, 2, (sizes.batch,), generator=g)

    def train_extra(self, sizes: Sizes) -> dict[str, Any]:
        steps = self.EPOCHS * -(-self.DATASET // sizes.batch)
        return {
            "seed_training_steps": steps,
            "seed_training_note": (
                f"time to train seed 02 ({self.EPOCHS} epochs x {self.DATASET} samples = "
                f"{steps} steps at batch {sizes.batch}) = {steps} x the median step time: "
                "derived, not measured; data loading excluded"
            ),
        }


class Linear10(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@WORKLOADS.register("linear10")
class Linear10Workload(ModelWorkload):
    name: ClassVar[str] = "linear10"
    summary: ClassVar[str] = "one nn.Linear(10, 1) on (1000, 10) inputs: dispatch-bound"
    in_quick: ClassVar[bool] = True
    item_unit: ClassVar[str] = "samples"
    plans: ClassVar[dict[str, Plan]] = {
        "quick": Plan({"infer": ("fp32",)}, only=1000),
        "standard": Plan(
            {"infer": ("fp32",), "infer-e2e": ("fp32",), "train": ("fp32",)}, only=1000
        ),
        "full": Plan(
            {"infer": ("fp32", "amp-bf16"), "infer-e2e": ("fp32",), "train": ("fp32",)},
            only=1000,
        ),
    }

    def make_model(self, sizes: Sizes) -> nn.Module:
        return Linear10()

    def make_inputs(self, sizes: Sizes, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(sizes.batch, 10, generator=g),)

    def make_labels(self, sizes: Sizes, g: torch.Generator) -> torch.Tensor:
        return torch.randn(sizes.batch, 1, generator=g)

    def loss(self, output: Any, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output.float(), labels)
