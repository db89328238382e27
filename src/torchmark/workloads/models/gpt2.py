"""GPT-2 small: 12 layers, 768 hidden, 12 heads, context 1024, tied embeddings, 124,439,808 params.

Attention is ``F.scaled_dot_product_attention``; a KV cache serves prefill and decode.
Dropout is 0 (as in nanoGPT's pre-training default): random masks would defeat the fp32
correctness check, and dropout is element-wise work beside the matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from torchmark import variants
from torchmark.devices.base import Device
from torchmark.format import round_up
from torchmark.stats.measurement import Measurement
from torchmark.variants.spec import CPU_TRAIN, FLOATS
from torchmark.workloads.base import WORKLOADS, Prepared
from torchmark.workloads.models.base import ModelWorkload, Plan, Sizes, latency_quantiles


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    context: int = 1024
    layers: int = 12
    heads: int = 12
    hidden: int = 768
    eps: float = 1e-5


class KVCache:
    """Keys and values per layer, (batch, heads, length, head_dim), written in place.

    Allocated on first write in the dtype the model produces (fp32, or bf16/fp16 under
    autocast); every slot read was written first, so the zero fill is never seen.
    """

    def __init__(self, layers: int, length: int) -> None:
        self.length = length
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ck, cv = self.k[layer], self.v[layer]
        if ck is None or cv is None or ck.dtype != k.dtype or ck.shape[0] != k.shape[0]:
            shape = (k.shape[0], k.shape[1], self.length, k.shape[3])
            ck = self.k[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            cv = self.v[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        end = pos + k.shape[2]
        ck[:, :, pos:end] = k
        cv[:, :, pos:end] = v
        return ck[:, :, :end], cv[:, :, :end]


class Block(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.ln_1 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.c_attn = nn.Linear(c.hidden, 3 * c.hidden)
        self.attn_proj = nn.Linear(c.hidden, c.hidden)
        self.ln_2 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.c_fc = nn.Linear(c.hidden, 4 * c.hidden)
        self.mlp_proj = nn.Linear(4 * c.hidden, c.hidden)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0, pos: int = 0
    ) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = (
            y.view(b, t, self.heads, h // self.heads).transpose(1, 2)
            for y in self.c_attn(self.ln_1(x)).split(h, dim=2)
        )
        if cache is not None:
            k, v = cache.update(layer, k, v, pos)
        s = k.shape[2]
        if s == t:  # no past: plain causal attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif t == 1:  # one new token attends to every cached position
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # several new tokens after a past: causal, shifted by pos
            rows = torch.arange(pos, pos + t, device=x.device)[:, None]
            mask = torch.arange(s, device=x.device)[None, :] <= rows
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, h))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, c: GPT2Config = GPT2Config()) -> None:
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab, c.hidden)
        self.wpe = nn.Embedding(c.context, c.hidden)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.hidden, eps=c.eps)
        for name, p in self.named_parameters():  # GPT-2's init
            if p.dim() == 2:
                std = 0.02 / (2 * c.layers) ** 0.5 if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(
        self,
        idx: torch.Tensor,
        cache: KVCache | None = None,
        pos: int = 0,
        last_only: bool = False,
    ) -> torch.Tensor:
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + t, device=idx.device))
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i, pos)
        x = self.ln_f(x)
        if last_only:  # generation needs only the next token's logits
            x = x[:, -1:]
        return F.linear(x, self.wte.weight)  # tied: the LM head is the token embedding


class Prefill(nn.Module):
    """The prompt's forward pass: fills the KV cache, returns the next token's logits."""

    def __init__(self, gpt: GPT2, length: int) -> None:
        super().__init__()
        self.gpt = gpt
        self.cache = KVCache(gpt.config.layers, length)

    def forward(self, prompt: torch.Tensor) -> torch.Tensor:
        return self.gpt(prompt, self.cache, 0, last_only=True)


class Decode(nn.Module):
    """Generate ``cont.shape[1]`` tokens after a cached prompt, one token per step.

    The tokens fed back are a fixed random continuation (teacher forcing), not the argmax:
    every precision then decodes the same sequence and the last step's logits can be checked
    against fp32. The cost of a step does not depend on which token is fed.
    The prompt is prefilled on the first call (untimed warm-up) and again only when the
    precision changes; each call rewrites the same cache slots after the prompt.
    """

    def __init__(self, gpt: GPT2, length: int) -> None:
        super().__init__()
        self.gpt = gpt
        self.cache = KVCache(gpt.config.layers, length)
        self._filled: tuple[Any, ...] | None = None

    def forward(self, prompt: torch.Tensor, cont: torch.Tensor) -> torch.Tensor:
        kind = prompt.device.type
        amp = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
        # a deep copy (int8 quantisation) must prefill with its own weights: id(self)
        key = (id(self), torch.get_autocast_dtype(kind) if amp else None)
        if self._filled != key:
            self.gpt(prompt, self.cache, 0, last_only=True)
            self._filled = key
        p = prompt.shape[1]
        logits = prompt.new_empty(0)
        for i in range(cont.shape[1]):
            logits = self.step(cont[:, i : i + 1], p + i)
        return logits

    def step(self, token: torch.Tensor, pos: int) -> torch.Tensor:
        """One generated token at position ``pos``, attending to the ``pos`` cached before it
        and itself; the prompt must have been prefilled."""
        return self.gpt(token, self.cache, pos, last_only=True)


@WORKLOADS.register("gpt2")
class GPT2Workload(ModelWorkload):
    name: ClassVar[str] = "gpt2"
    summary: ClassVar[str] = "GPT-2 small, context 1024, KV-cache prefill/decode (124.4 M params)"
    item_unit: ClassVar[str] = "tokens"
    optimizer: ClassVar[str] = "adamw"
    scenarios: ClassVar[tuple[str, ...]] = ("infer", "infer-e2e", "train", "prefill", "decode")
    plans: ClassVar[dict[str, Plan]] = {
        "quick": Plan({"infer": ("fp32",)}, only=1, cpu_sizes={"seq": 32}, gpu_sizes={"seq": 128}),
        "standard": Plan(
            {
                "infer": ("fp32", "tf32", "amp-bf16", "int8-dynamic"),
                "train": FLOATS,
                "prefill": ("fp32", "amp-bf16"),
                "decode": ("fp32", "amp-bf16", "int8-dynamic"),
            },
            cpu_cap=2,
            gpu_cap=32,
            cpu_sizes={"seq": 128, "new_tokens": 16},
            gpu_sizes={"seq": 1024, "new_tokens": 128},
            cpu_scenarios={
                "infer": ("fp32", "tf32", "int8-dynamic"),
                "train": CPU_TRAIN,
                "prefill": ("fp32",),
                "decode": ("fp32", "int8-dynamic"),
            },
        ),
        "full": Plan(
            {
                "infer": (
                    *FLOATS,
                    "int8-dynamic",
                    "amp-bf16+compile",
                ),
                "infer-e2e": ("fp32",),
                "train": (*FLOATS, "amp-bf16+compile"),
                "prefill": FLOATS,
                "decode": (*FLOATS, "int8-dynamic"),
            },
            cpu_cap=4,
            gpu_cap=64,
            cpu_sizes={"seq": 128, "new_tokens": 32},
            gpu_sizes={"seq": 1024, "new_tokens": 128},
        ),
    }
    # decode: batch 1 (latency, memory-bound) and a larger batch (throughput)
    DECODE_BATCHES: ClassVar[dict[bool, tuple[int, ...]]] = {False: (1, 4), True: (1, 16)}
    # prefill / decode run on a 128-token prompt; train / infer on `seq` tokens
    PROMPT: ClassVar[int] = 128

    # The model's vocabulary rounds up to a multiple of this; 1: the published 50,257.
    VOCAB_MULTIPLE: ClassVar[int] = 1

    def tokens(self, sizes: Sizes) -> int:
        """The vocabulary token ids and targets are drawn from (the data's)."""
        return sizes.vocab or GPT2Config.vocab

    def config(self, sizes: Sizes) -> GPT2Config:
        vocab = round_up(self.tokens(sizes), self.VOCAB_MULTIPLE)
        return GPT2Config(layers=sizes.layers or 12, vocab=vocab)

    def make_model(self, sizes: Sizes) -> nn.Module:
        return GPT2(self.config(sizes))

    def plan_sizes(self, plan: Plan, device: Device, scenario: str) -> Sizes:
        s = super().plan_sizes(plan, device, scenario)
        if scenario in ("prefill", "decode"):
            s = replace(s, seq=min(s.seq, self.PROMPT))
        return s if scenario == "decode" else replace(s, new_tokens=0)

    def batches(self, plan: Plan, device: Device, scenario: str) -> tuple[int, ...]:
        if scenario == "decode" and plan.only is None:
            return self.DECODE_BATCHES[device.is_accelerator]
        return super().batches(plan, device, scenario)

    def make_inputs(self, sizes: Sizes, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        seq, vocab = sizes.seq or 128, self.tokens(sizes)
        ids = torch.randint(0, vocab, (sizes.batch, seq), generator=g)
        if sizes.new_tokens:
            cont = torch.randint(0, vocab, (sizes.batch, sizes.new_tokens), generator=g)
            return ids, cont
        return (ids,)

    def make_labels(self, sizes: Sizes, g: torch.Generator) -> torch.Tensor:
        # next-token prediction: targets are the inputs shifted; random ids serve as well
        vocab = self.tokens(sizes)  # never a padded logit: as in a real corpus
        return torch.randint(0, vocab, (sizes.batch, sizes.seq or 128), generator=g)

    def runnable(
        self, model: nn.Module, scenario: str, sizes: Sizes, device: Device, g: torch.Generator
    ) -> tuple[nn.Module, tuple[Any, ...], Any]:
        if scenario not in ("prefill", "decode"):
            return super().runnable(model, scenario, sizes, device, g)
        assert isinstance(model, GPT2)
        inputs = tuple(t.to(device.torch_device) for t in self.make_inputs(sizes, g))
        length = (sizes.seq or 128) + sizes.new_tokens
        module: nn.Module = (
            Prefill(model, length) if scenario == "prefill" else Decode(model, length)
        )
        return module, inputs, None

    def items(self, scenario: str, sizes: Sizes) -> float:
        if scenario == "decode":
            return float(sizes.batch * sizes.new_tokens)
        return float(sizes.batch * (sizes.seq or 128))

    def ceiling(self, scenario: str, sizes: Sizes, v: variants.Variant) -> str:
        # Decode reads every weight per step for 1..16 tokens: ~1-16 FLOP per weight byte,
        # far below a GPU's ~300 FLOP/B ridge point, so bandwidth is its limit.
        return "bandwidth" if scenario == "decode" else v.ceiling

    def bytes_per_call(self, scenario: str, sizes: Sizes, v: variants.Variant) -> float:
        """Decode's compulsory traffic: every weight once per step (the position table aside:
        one row is read), plus the KV cache up to the current position, per layer."""
        if scenario != "decode":
            return 0.0
        c = self.config(sizes)
        kv_elem = 2 if v.amp_dtype is not None else 4
        model = self.meta_model(sizes)
        assert isinstance(model, GPT2)
        # quantize_dynamic converts nn.Linear only: their weights are int8 (1 byte), while
        # their biases, the LayerNorms and the embeddings (so the tied LM head) stay fp32.
        int8 = (
            {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
            if v.precision == "int8-dynamic"
            else set()
        )

        def elem(p: torch.Tensor) -> int:
            if id(p) in int8:
                return 1
            return 2 if v.amp_dtype is not None else p.element_size()

        weights = sum(p.numel() * elem(p) for p in model.parameters() if p is not model.wpe.weight)
        prompt = sizes.seq or 128
        positions = sum(prompt + i + 1 for i in range(sizes.new_tokens))
        kv = 2 * c.layers * sizes.batch * c.hidden * kv_elem * positions
        return float(sizes.new_tokens * weights + kv)

    def notes(self, scenario: str) -> list[str]:
        if scenario == "decode":
            return [
                "decode: one call generates new_tokens tokens per sequence after a cached "
                "prompt of seq tokens; tokens/s is in total across the batch "
                "(batch x new_tokens / call time); per sequence it is that / batch "
                "(extra: tokens_per_s_per_sequence); per-token latency = call time / "
                "new_tokens (extra: per_token_latency_s)",
                "decode bytes: weights once per step (at the autocast dtype for AMP; for "
                "int8 nn.Linear weights at 1 byte, embeddings, LM head and biases fp32) + the "
                "KV cache read up to each position; % of ceiling is bandwidth utilisation",
            ]
        if scenario == "prefill":
            return [
                "prefill: tokens/s = batch x prompt tokens / call time, in total across the "
                "batch; logits only for the last position (what generation needs)"
            ]
        if scenario == "train":
            return ["train: next-token cross-entropy over every position; AdamW"]
        return []

    def prepare(self, case: Any) -> Prepared:
        prepared = super().prepare(case)
        if case.param_dict.get("scenario") == "decode":
            sizes = Sizes.from_params(case.param_dict)

            def summarize(m: Measurement) -> dict[str, Any]:
                out = latency_quantiles(m)
                per_call = float(m.median)
                out["per_token_latency_s"] = per_call / sizes.new_tokens
                out["tokens_per_s_per_sequence"] = sizes.new_tokens / per_call
                return out

            prepared.summarize = summarize
        return prepared
