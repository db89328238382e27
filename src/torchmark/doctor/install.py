"""Install checks: the torch build, the driver against the CUDA runtime, cuDNN."""

from __future__ import annotations

from torchmark.doctor.base import Check, Facts

# CUDA wheels on download.pytorch.org, newest first: the right one is the newest the
# driver supports (a driver runs any CUDA runtime up to its own version).
CUDA_WHEELS = ((13, 0), (12, 9), (12, 8), (12, 6), (12, 4), (12, 1), (11, 8))


def wheel_for(cuda_driver: list[int] | None) -> str:
    """The pip command for the newest CUDA wheel this driver can run."""
    tag = "cu128"
    if cuda_driver:
        ok = [w for w in CUDA_WHEELS if tuple(w) <= tuple(cuda_driver)]
        tag = f"cu{ok[0][0]}{ok[0][1]}" if ok else "cu118"
    return f"pip install torch --index-url https://download.pytorch.org/whl/{tag}"


def check_torch_build(f: Facts) -> list[Check]:
    t, gpus = f["torch"], f["nvidia_gpus_seen"]
    build = f"torch {t['version']}"
    if not (t["cuda"] or t["hip"]):
        if gpus:
            return [
                Check(
                    "torch build",
                    "fail",
                    f"{build} is a CPU-only build, but this machine has {gpus} NVIDIA GPU(s)",
                    wheel_for(f["nvml"].get("cuda_driver")),
                )
            ]
        if t["mps_available"]:
            return [Check("torch build", "ok", f"{build}, Apple MPS available")]
        return [Check("torch build", "ok", f"{build}, CPU-only build; no NVIDIA GPU found")]
    runtime = f"CUDA {t['cuda']}" if t["cuda"] else f"ROCm {t['hip']}"
    if t["cuda_available"]:
        return [Check("torch build", "ok", f"{build} with {runtime}; GPU usable")]
    why = t.get("cuda_init_error") or "torch.cuda.is_available() is False"
    if gpus:
        return [
            Check(
                "torch build",
                "fail",
                f"{build} with {runtime}, but no usable GPU ({why})",
                "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES; if the driver is "
                f"older than {runtime}: {wheel_for(f['nvml'].get('cuda_driver'))}",
            )
        ]
    return [
        Check(
            "torch build",
            "warn",
            f"{build} with {runtime} on a machine without a GPU: only the CPU is measured",
            "fine for CPU runs; the CPU wheel is smaller: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu",
        )
    ]


def check_driver(f: Facts) -> list[Check]:
    cuda, drv = f["torch"]["cuda"], f["nvml"].get("cuda_driver")
    if not cuda:
        return [Check("driver vs CUDA runtime", "skip", "torch has no CUDA runtime")]
    if not drv:
        return [Check("driver vs CUDA runtime", "skip", "driver version not readable (no NVML)")]
    rt = [int(x) for x in cuda.split(".")[:2]]
    d = f"driver {f['nvml'].get('driver')} supports CUDA {drv[0]}.{drv[1]}; torch uses CUDA {cuda}"
    if drv[0] < rt[0]:
        return [
            Check(
                "driver vs CUDA runtime", "fail", d, f"update the NVIDIA driver or {wheel_for(drv)}"
            )
        ]
    if drv < rt:
        return [
            Check(
                "driver vs CUDA runtime",
                "warn",
                d + " (minor-version compatibility: PTX JIT kernels may fail)",
                f"update the NVIDIA driver or {wheel_for(drv)}",
            )
        ]
    return [Check("driver vs CUDA runtime", "ok", d)]


def check_cudnn(f: Facts) -> list[Check]:
    t = f["torch"]
    if not t["cuda_available"]:
        return [Check("cuDNN", "skip", "no usable CUDA GPU")]
    if t["cudnn"]:
        return [Check("cuDNN", "ok", f"cuDNN {t['cudnn']}")]
    return [
        Check(
            "cuDNN",
            "warn",
            "cuDNN not available: convolutions use slow fallback kernels",
            wheel_for(f["nvml"].get("cuda_driver")),
        )
    ]
