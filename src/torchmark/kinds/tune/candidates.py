"""What tune measures: one ``Candidate`` configuration, the variants it tries, and the few
lines of PyTorch that apply the one it recommends."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torchmark import variants
from torchmark.devices import Device

# Precisions and optimisations tried one at a time; variants.applies() skips what cannot run.
SINGLE_VARIANTS = ("channels-last", "tf32", "amp-bf16", "amp-fp16", "int8-dynamic", "cuda-graphs")
PRECISION_ORDER = ("int8-dynamic", "amp-fp16", "amp-bf16", "tf32")


@dataclass(frozen=True)
class Candidate:
    """One configuration to measure. ``grad``: ``no_grad`` (baseline) or ``inference_mode``."""

    name: str
    variant: str = "fp32"
    grad: str = "inference_mode"
    threads: int | None = None  # None: torch's default for this process
    batch: int = 1
    compile_mode: str | None = None
    stage: str = "variant"

    def config(self) -> dict[str, Any]:
        d = asdict(self)
        del d["name"], d["stage"]
        return d


def code_lines(c: Candidate, device: Device) -> list[str]:
    """The few lines of PyTorch that apply ``c`` to ``model`` and input ``x``."""
    v = variants.parse(c.variant)
    lines = ["import torch", "", "model.eval()"]
    if c.threads:
        lines.append(f"torch.set_num_threads({c.threads})")
    lines.append(f'model = model.to("{device.torch_device}")')
    if v.precision == "tf32":
        lines += [
            "torch.backends.cuda.matmul.allow_tf32 = True",
            "torch.backends.cudnn.allow_tf32 = True",
        ]
    if v.precision == "int8-dynamic":
        lines.append(
            "model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, "
            "dtype=torch.qint8)"
        )
    if v.channels_last:
        lines += [
            "model = model.to(memory_format=torch.channels_last)",
            "x = x.contiguous(memory_format=torch.channels_last)",
        ]
    if v.compile:
        mode = f', mode="{c.compile_mode}"' if c.compile_mode else ""
        lines.append(f"model = torch.compile(model{mode})  # compiles on the first call")
    ctx = "torch.no_grad()" if c.grad == "no_grad" else "torch.inference_mode()"
    if v.amp_dtype is not None:
        dt = str(v.amp_dtype).removeprefix("torch.")
        ctx += f', torch.autocast("{device.torch_device.type}", dtype=torch.{dt})'
    if c.batch > 1:
        lines.append(f"# feed {c.batch} inputs per call (x has batch dimension {c.batch})")
    if v.cuda_graphs:
        lines += [
            "static_x = x.clone()",
            "g = torch.cuda.CUDAGraph()",
            f"with {ctx}:",
            "    for _ in range(3):  # warm up before capture",
            "        model(static_x)",
            "    with torch.cuda.graph(g):",
            "        static_out = model(static_x)",
            "# per call: static_x.copy_(x); g.replay(); out = static_out",
        ]
        return lines
    lines += [f"with {ctx}:", "    out = model(x)"]
    return lines
