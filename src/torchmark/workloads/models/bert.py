"""BERT-base encoder with pooler: 12 layers, 768 hidden, 12 heads, FFN 3072, 109,482,240 params.

Attention is ``F.scaled_dot_product_attention`` (fused kernels where the device has them).
Dropout is 0: it would make outputs random and defeat the fp32 correctness check; its cost is
element-wise work next to the 768x768 and 768x3072 matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from torchmark.variants.spec import CPU_TRAIN, FLOATS
from torchmark.workloads.base import WORKLOADS
from torchmark.workloads.models.base import ModelWorkload, Plan, Sizes


@dataclass(frozen=True)
class BertConfig:
    vocab: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    ffn: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    eps: float = 1e-12


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.attn_out = nn.Linear(c.hidden, c.hidden)
        self.attn_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.intermediate = nn.Linear(c.hidden, c.ffn)
        self.output = nn.Linear(c.ffn, c.hidden)
        self.out_norm = nn.LayerNorm(c.hidden, eps=c.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x))
        )
        x = self.attn_norm(x + self.attn_out(a.transpose(1, 2).reshape(b, t, h)))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    """Returns (sequence_output, pooled_output), as BERT's reference implementation does."""

    def __init__(self, c: BertConfig = BertConfig()) -> None:
        super().__init__()
        self.word = nn.Embedding(c.vocab, c.hidden)
        self.position = nn.Embedding(c.max_positions, c.hidden)
        self.token_type = nn.Embedding(c.type_vocab, c.hidden)
        self.embed_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.layers))
        self.pooler = nn.Linear(c.hidden, c.hidden)
        for m in self.modules():  # BERT's init: N(0, 0.02)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(
        self, ids: torch.Tensor, token_types: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed_norm(self.word(ids) + self.position(pos) + self.token_type(token_types))
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


class BertClassifier(nn.Module):
    """Sequence classification fine-tuning: a 2-way head on the pooled output."""

    def __init__(self, bert: Bert, classes: int = 2) -> None:
        super().__init__()
        self.bert = bert
        pooler = bert.pooler
        self.head = nn.Linear(pooler.out_features, classes, device=pooler.weight.device)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
        return self.head(self.bert(ids, token_types)[1])


@WORKLOADS.register("bert-base")
class BertWorkload(ModelWorkload):
    name: ClassVar[str] = "bert-base"
    summary: ClassVar[str] = "BERT-base encoder + pooler, seq 128 (109.5 M parameters)"
    item_unit: ClassVar[str] = "sequences"
    optimizer: ClassVar[str] = "adamw"
    plans: ClassVar[dict[str, Plan]] = {
        "quick": Plan({"infer": ("fp32",)}, only=1, cpu_sizes={"seq": 32}, gpu_sizes={"seq": 128}),
        "standard": Plan(
            {
                "infer": (*FLOATS, "int8-dynamic", "cuda-graphs"),
                "infer-e2e": ("fp32",),
                "train": FLOATS,
            },
            cpu_cap=2,
            gpu_cap=256,
            cpu_sizes={"seq": 128},
            gpu_sizes={"seq": 128},
            cpu_scenarios={
                "infer": ("fp32", "tf32", "amp-bf16", "int8-dynamic"),
                "train": CPU_TRAIN,
            },
        ),
        "full": Plan(
            {
                "infer": (
                    *FLOATS,
                    "int8-dynamic",
                    "amp-bf16+compile",
                    "cuda-graphs",
                    "amp-bf16+cuda-graphs",
                ),
                "infer-e2e": ("fp32", "amp-bf16"),
                "train": (*FLOATS, "amp-bf16+compile"),
            },
            cpu_cap=16,
            gpu_cap=1024,
            cpu_sizes={"seq": 128},
            gpu_sizes={"seq": 128},
        ),
    }

    def make_model(self, sizes: Sizes) -> nn.Module:
        return Bert(BertConfig(layers=sizes.layers or 12, vocab=sizes.vocab or BertConfig.vocab))

    def make_inputs(self, sizes: Sizes, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        seq = sizes.seq or 128
        ids = torch.randint(0, sizes.vocab or BertConfig.vocab, (sizes.batch, seq), generator=g)
        # sentence A then sentence B, as in a paired-input fine-tuning task
        types = (torch.arange(seq) >= seq // 2).long().expand(sizes.batch, seq).contiguous()
        return ids, types

    def make_labels(self, sizes: Sizes, g: torch.Generator) -> torch.Tensor:
        return torch.randint(0, 2, (sizes.batch,), generator=g)

    def train_module(self, model: nn.Module) -> nn.Module:
        assert isinstance(model, Bert)
        return BertClassifier(model)

    def notes(self, scenario: str) -> list[str]:
        if scenario == "train":
            return ["train: sequence classification (2-way head on the pooler, +1,538 params)"]
        return []

    def train_extra(self, sizes: Sizes) -> dict[str, Any]:
        return {"task": "sequence classification, 2 classes"}
