"""The work of each built-in case, derived on the server from the case alone (workload,
variant, params, CPU or accelerator): a submitted document's ``work`` is checked against it,
never trusted (MLPerf's submission checker keeps its own reference the same way).

Torch-free: the micro workloads' formulas are written here as their modules declare them,
and the models' work at batch 1 is ``model_work.json`` (``scripts/make-work-catalogue``,
from ``workloads/models/table.py``). ``tests/integration/test_work_catalogue.py`` holds both
equal to what each workload's ``prepare`` declares.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
F32 = 4
# matmul: bytes per element of each input, and of the output (int8 x int8 -> int32)
MATMUL_BYTES = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "int8": 1}
SEED_SIZE = 12288  # seed_add.BLOG_SIZE
TRANSFERS = ("h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable")
# input pipelines: (images per epoch, batch, items per image) of the CPU and the accelerator
# shapes (pipeline/workload.py: CPU_SHAPE, GPU_SHAPE, TOKENS_CPU, TOKENS_GPU)
INPUT_SHAPES = {
    "input": {False: (256, 16, 1), True: (512, 64, 1)},
    "input-tokens": {False: (128, 8, 32), True: (128, 16, 512)},
}
INPUT_UNITS = {"input": "images", "input-tokens": "tokens"}
MODEL_PARAMS = ("scenario", "precision", "batch")

Work = dict[str, Any]  # flops, bytes, items, item_unit; a bytes of None: not derived


def work(
    workload: str, variant: str, params: Mapping[str, Any], accelerator: bool
) -> list[Work] | None:
    """The works a built-in case may declare (seed-add's as-published loop has two: torch
    folded its TorchScript or not), or None where the catalogue does not know the case."""
    try:
        maker = _MAKERS.get(workload)
        return None if maker is None else maker(variant, dict(params), accelerator)
    except (KeyError, TypeError, ValueError):
        return None  # params this workload never plans


def _int(p: dict[str, Any], key: str, default: int | None = None) -> int:
    value = p[key] if default is None else p.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}={value!r}")
    return value


def _w(flops: float = 0.0, bytes: float | None = 0.0, items: float = 1.0, unit: str = "it") -> Work:
    return {"flops": float(flops), "bytes": bytes, "items": float(items), "item_unit": unit}


def _elementwise(flops_per_element: int) -> Any:
    def make(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
        if variant != "float32" or set(p) != {"n"}:
            return None
        n = _int(p, "n")
        return [_w(flops_per_element * n, 3 * F32 * n, n, "elem")]

    return make


def _matmul(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
    if variant not in MATMUL_BYTES or set(p) != {"n"}:
        return None
    n, size = _int(p, "n"), MATMUL_BYTES[variant]
    out = 4 if variant == "int8" else size
    return [_w(2.0 * n**3, n * n * (2 * size + out), 1, "matmul")]


def _seed_add(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
    if set(p) - {"size"} or variant not in ("as-published", "intended"):
        return None
    n = _int(p, "size", SEED_SIZE)
    tensor = F32 * n * n

    def unfolded(extra_add: bool) -> Work:
        if accelerator:
            return _w(0, 2 * tensor)  # only the host-to-device copy is counted
        return _w(0, 2 * tensor + 3 * tensor + (3 * tensor if extra_add else 0))

    if variant == "intended":
        return [unfolded(False)]
    return [_w(n * n, 2 * tensor), unfolded(True)]  # folded (one self-add), or not


def _transfer(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
    if not accelerator or variant not in TRANSFERS or set(p) != {"bytes"}:
        return None
    return [_w(0, _int(p, "bytes") // 4 * 4, 1, "copy")]


def _collectives(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
    if set(p) != {"bytes", "ranks"}:
        return None
    _int(p, "ranks")
    return [_w(0, _int(p, "bytes"), 1, "call")]


def _input(workload: str) -> Any:
    def make(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
        images, _, per_sample = INPUT_SHAPES[workload][accelerator]
        batch, images = _int(p, "batch"), _int(p, "images", images)
        unit = INPUT_UNITS[workload]
        if variant == "resident":
            return [_w(0, 0, batch * per_sample, unit)]
        if variant == "loader":
            return [_w(0, 0, images // batch * batch * per_sample, unit)]
        return None

    return make


@functools.cache
def _models() -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = json.loads((HERE / "model_work.json").read_text())
    return table


def _model(workload: str) -> Any:
    def make(variant: str, p: dict[str, Any], accelerator: bool) -> list[Work] | None:
        scenario, batch = p.get("scenario", variant), _int(p, "batch")
        if not isinstance(p.get("precision", "fp32"), str) or scenario != variant:
            return None
        sizes = {k: _int(p, k) for k in p if k not in MODEL_PARAMS}
        knobs = ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
        row = _models().get(f"{workload}/{scenario}/{knobs}")
        if row is None:
            return None
        # decode's bytes (weights and KV cache per step) depend on the precision's element
        # sizes: left to the rate check against the device's datasheet bandwidth
        nbytes = None if scenario == "decode" else 0.0
        return [_w(row["flops"] * batch, nbytes, row["items"] * batch, row["item_unit"])]

    return make


def model_workloads() -> list[str]:
    return sorted({key.split("/")[0] for key in _models()})


_MAKERS: dict[str, Any] = {
    "add": _elementwise(1),
    "triad": _elementwise(2),
    "matmul": _matmul,
    "seed-add": _seed_add,
    "transfer": _transfer,
    "collectives": _collectives,
    "input": _input("input"),
    "input-tokens": _input("input-tokens"),
} | {name: _model(name) for name in model_workloads()}


def matches(declared: Mapping[str, Any], derived: Work) -> bool:
    """Whether a result's declared work is the derived one (to float rounding)."""
    for key in ("flops", "bytes", "items"):
        want = derived[key]
        got = declared.get(key)
        if want is None:
            continue
        if not isinstance(got, int | float) or abs(got - want) > 1e-9 * max(abs(want), 1.0):
            return False
    return declared.get("item_unit") == derived["item_unit"]


def describe(derived: Work) -> str:
    parts = [f"{k}={derived[k]:.6g}" for k in ("flops", "bytes", "items") if derived[k] is not None]
    return " ".join(parts) + f" {derived['item_unit']}"
