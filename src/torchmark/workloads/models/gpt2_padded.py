"""GPT-2 small with its vocabulary padded to a multiple of 64, as nanoGPT: does padding pay
against ``gpt2``'s same cases."""

from __future__ import annotations

from typing import Any, ClassVar

from torchmark.variants.spec import CPU_TRAIN
from torchmark.workloads.base import WORKLOADS, Prepared
from torchmark.workloads.models.base import Plan, Sizes
from torchmark.workloads.models.gpt2 import GPT2Workload


@WORKLOADS.register("gpt2-padded")
class GPT2PaddedWorkload(GPT2Workload):
    """GPT-2 small with its vocabulary padded to a multiple of 64 (50,257 -> 50,304), as
    nanoGPT does. Token ids and targets stay below 50,257: the 47 extra logits are computed
    and never a target. On an H100 GPT-2's LM-head GEMMs over 50,257 (not a multiple of 8)
    ran on slow sm80 cutlass kernels, 30 ms of an 87 ms bf16 train step at batch 16.

    FLOPs are what the padded model computes (FlopCounterMode on it): the extra logits count
    as work done, so MFU stays the hardware's utilisation; they are 0.025 % of a step's
    FLOPs (see METHOD.md), and tokens/s compares with ``gpt2`` directly."""

    name: ClassVar[str] = "gpt2-padded"
    summary: ClassVar[str] = (
        "GPT-2 small with the vocabulary padded to 50,304 (a multiple of 64), as nanoGPT"
    )
    VOCAB_MULTIPLE: ClassVar[int] = 64
    # The cases that tell whether padding pays against `gpt2`'s same cases: tensor-core
    # precisions on a GPU; on the CPU fp32 at batch 1 (2 cores must finish in minutes).
    plans: ClassVar[dict[str, Plan]] = {
        "quick": GPT2Workload.plans["quick"],
        "standard": Plan(
            {"train": ("amp-bf16",), "infer": ("amp-bf16",)},
            cpu_cap=1,
            gpu_cap=32,
            cpu_sizes={"seq": 128},
            gpu_sizes={"seq": 1024},
            cpu_scenarios={"train": ("fp32",), "infer": ("fp32",)},
        ),
        "full": Plan(
            {
                "train": ("amp-bf16", "amp-fp16", "amp-bf16+compile"),
                "infer": ("amp-bf16", "amp-fp16", "amp-bf16+compile"),
            },
            cpu_cap=2,
            gpu_cap=64,
            cpu_sizes={"seq": 128},
            gpu_sizes={"seq": 1024},
            cpu_scenarios={"train": CPU_TRAIN, "infer": ("fp32",)},
        ),
    }

    def prepare(self, case: Any) -> Prepared:
        prepared = super().prepare(case)
        sizes = Sizes.from_params(case.param_dict)
        used, vocab = self.tokens(sizes), self.config(sizes).vocab
        prepared.notes.append(
            f"vocabulary padded from {used:,} to {vocab:,} (a multiple of "
            f"{self.VOCAB_MULTIPLE}); the {vocab - used} extra logits are computed and "
            "counted as FLOPs, never a target"
        )
        return prepared

    def describe(self) -> dict[str, Any]:
        sizes = Sizes()
        return super().describe() | {
            "vocab": self.config(sizes).vocab,
            "tokens_from": self.tokens(sizes),
        }
