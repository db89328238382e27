"""`torchmark doctor`: is this install and this machine fit to measure on?

``gather()`` reads the machine once into a plain facts dict; every check is a pure function
of those facts returning ok / warn / fail / skip lines with the fix, so each can be tested
with made-up facts (a CPU-only torch on a box with an H100, a GPU at PCIe x4, ...).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
import torch

from torchmark.telemetry.host import OtherLoad

Status = Literal["ok", "warn", "fail", "skip"]
Facts = dict[str, Any]

# CUDA wheels on download.pytorch.org, newest first: the right one is the newest the
# driver supports (a driver runs any CUDA runtime up to its own version).
CUDA_WHEELS = ((13, 0), (12, 9), (12, 8), (12, 6), (12, 4), (12, 1), (11, 8))
GIB = 1024**3


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# ---------------------------------------------------------------------------------------
# Gathering (the only impure part)
# ---------------------------------------------------------------------------------------


def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:  # a fact that cannot be read is recorded as unknown, never guessed
        return default


def _q(
    fn: Callable[..., Any],
    *args: Any,
    scale: float | None = None,
    conv: Callable[[Any], Any] | None = None,
) -> Any:
    """One NVML query: None when the GPU does not support it (or it fails)."""
    try:
        v = fn(*args)
    except Exception:
        return None
    if scale is not None:
        v = v * scale
    return conv(v) if conv else v


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _nvml() -> Facts:
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as e:
        return {"ok": False, "error": str(e), "gpus": []}
    try:
        cuda = _try(nv.nvmlSystemGetCudaDriverVersion)
        out: Facts = {
            "ok": True,
            "driver": _q(nv.nvmlSystemGetDriverVersion, conv=_text),
            "cuda_driver": None if cuda is None else [cuda // 1000, (cuda % 1000) // 10],
            "gpus": [],
        }
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = _q(nv.nvmlDeviceGetMemoryInfo, h)
            procs = _q(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
            mig = _q(nv.nvmlDeviceGetMigMode, h)
            ecc = _q(nv.nvmlDeviceGetEccMode, h)
            reasons = _q(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            out["gpus"].append(
                {
                    "index": i,
                    "name": _q(nv.nvmlDeviceGetName, h, conv=_text),
                    "uuid": _q(nv.nvmlDeviceGetUUID, h, conv=_text),
                    "persistence": _q(nv.nvmlDeviceGetPersistenceMode, h, conv=bool),
                    "sm_mhz": _q(nv.nvmlDeviceGetClockInfo, h, 1),
                    "max_sm_mhz": _q(nv.nvmlDeviceGetMaxClockInfo, h, 1),
                    "power_limit_w": _q(nv.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3),
                    "default_power_limit_w": _q(
                        nv.nvmlDeviceGetPowerManagementDefaultLimit, h, scale=1e-3
                    ),
                    "temp_c": _q(nv.nvmlDeviceGetTemperature, h, 0),
                    "reasons": None if reasons is None else _decode(reasons),
                    "pcie_gen": _q(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_gen_max": _q(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "pcie_width": _q(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "pcie_width_max": _q(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "ecc": None if ecc is None else [bool(ecc[0]), bool(ecc[1])],
                    "mig": None if mig is None else [bool(mig[0]), bool(mig[1])],
                    "memory_total": None if mem is None else int(mem.total),
                    "memory_used": None if mem is None else int(mem.used),
                    "processes": [
                        {"pid": p.pid, "used_bytes": getattr(p, "usedGpuMemory", None) or 0}
                        for p in procs
                    ],
                }
            )
        return out
    except Exception as e:
        return {"ok": False, "error": f"NVML failed while reading GPUs: {e}", "gpus": []}
    finally:
        _try(nv.nvmlShutdown)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _decode(mask: int) -> list[str]:
    from torchmark.telemetry.nvml import decode_reasons

    return decode_reasons(int(mask))


def _smi_gpus() -> int:
    """NVIDIA GPUs the kernel driver sees, without NVML (nvidia-smi -L, /proc)."""
    gpus = _try(lambda: len(os.listdir("/proc/driver/nvidia/gpus")), 0)
    if not gpus and shutil.which("nvidia-smi"):
        out = _try(
            lambda: (
                subprocess.run(
                    ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10
                ).stdout
            ),
            "",
        )
        gpus = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return int(gpus)


def _tiny_ops() -> list[Facts]:
    """A small matmul + add on every device, compared with the same on the CPU."""
    from torchmark.devices import available

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    ref = a @ b + a
    out = []
    for d in _try(available, []) or []:
        fact: Facts = {"device": d.name, "label": _try(d.label, d.name)}
        try:
            t0 = time.perf_counter()
            got = (a.to(d.torch_device) @ b.to(d.torch_device) + a.to(d.torch_device)).cpu()
            fact["seconds"] = time.perf_counter() - t0
            err = float((got - ref).abs().max() / ref.abs().max())
            fact["max_rel_err"] = err
        except Exception as e:
            fact["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        out.append(fact)
    return out


@contextlib.contextmanager
def _pcie_busy(cuda_ok: bool) -> Iterator[bool]:
    """Queue ~0.2 s of pinned host->device copies on every GPU (64 MiB x 16 at ~25 GB/s)."""
    if not cuda_ok:
        yield False
        return
    try:
        src = torch.empty(16 * 2**20, dtype=torch.float32).pin_memory()
        src.uniform_()
        for i in range(torch.cuda.device_count()):
            dst = torch.empty_like(src, device=f"cuda:{i}")
            for _ in range(16):
                dst.copy_(src, non_blocking=True)
    except Exception:  # a GPU that cannot copy fails the tiny-op check; here just no load
        yield False
        return
    try:
        yield True
    finally:
        for i in range(torch.cuda.device_count()):
            _q(torch.cuda.synchronize, i)


def _cuda_init_error() -> str | None:
    if torch.version.cuda is None and not getattr(torch.version, "hip", None):
        return None
    try:
        torch.cuda.init()
        return None
    except Exception as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def _load() -> Facts:
    me = os.getpid()
    procs = list(psutil.process_iter(["pid", "name"]))
    for p in procs:
        _try(p.cpu_percent)
    with OtherLoad() as load:
        time.sleep(0.3)
    others, own_cores = load.cores or 0.0, load.own_cores or 0.0
    top = []
    for p in procs:
        pct = _try(p.cpu_percent, 0.0) or 0.0
        if p.pid != me and pct >= 10:
            top.append({"pid": p.pid, "name": p.info.get("name"), "cpu_pct": round(pct)})
    top.sort(key=lambda x: -x["cpu_pct"])
    return {
        "busy_cores": round(others + own_cores, 2),
        "other_cores": round(others, 2),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "top": top[:3],
    }


def gather() -> Facts:
    """Read every fact the checks need (about a second: a 0.3 s load sample, tiny ops)."""
    governors = sorted(
        {
            g
            for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
            if (g := _read(str(p)))
        }
    )
    vm = psutil.virtual_memory()
    affinity = _try(lambda: len(os.sched_getaffinity(0)))
    cuda_ok = torch.cuda.is_available()
    # An idle GPU drops its PCIe link to gen1 to save power: read the link while copies run.
    with _pcie_busy(cuda_ok) as busy:
        nvml = _nvml()
    nvml["pcie_under_load"] = busy
    return {
        "torch": {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cuda_available": cuda_ok,
            "cuda_device_count": torch.cuda.device_count() if cuda_ok else 0,
            "cuda_init_error": None if cuda_ok else _cuda_init_error(),
            "cudnn": _try(torch.backends.cudnn.version) if cuda_ok else None,
            "cudnn_available": _try(torch.backends.cudnn.is_available, False),
            "mps_available": _try(torch.backends.mps.is_available, False),
        },
        "nvml": nvml,
        "nvidia_gpus_seen": max(len(nvml["gpus"]), _smi_gpus()),
        "env": {
            k: os.environ[k]
            for k in (
                "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "NVIDIA_TF32_OVERRIDE",
            )
            if k in os.environ
        },
        "devices": _tiny_ops(),
        "threads": {
            "torch": torch.get_num_threads(),
            "interop": torch.get_num_interop_threads(),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
            "affinity": affinity,
        },
        "precision": {
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        },
        "cpufreq": {
            "governors": governors or None,
            "boost": _read("/sys/devices/system/cpu/cpufreq/boost"),
            "no_turbo": _read("/sys/devices/system/cpu/intel_pstate/no_turbo"),
        },
        "memory": {"total": vm.total, "available": vm.available},
        "load": _load(),
        "pid": os.getpid(),
    }


# ---------------------------------------------------------------------------------------
# Checks: pure functions of the facts
# ---------------------------------------------------------------------------------------


def wheel_for(cuda_driver: list[int] | None) -> str:
    """The pip command for the newest CUDA wheel this driver can run."""
    tag = "cu128"
    if cuda_driver:
        ok = [w for w in CUDA_WHEELS if tuple(w) <= tuple(cuda_driver)]
        tag = f"cu{ok[0][0]}{ok[0][1]}" if ok else "cu118"
    return f"pip install torch --index-url https://download.pytorch.org/whl/{tag}"


def _cuda_build(f: Facts) -> bool:
    return bool(f["torch"]["cuda"] or f["torch"]["hip"])


def check_torch_build(f: Facts) -> list[Check]:
    t, gpus = f["torch"], f["nvidia_gpus_seen"]
    build = f"torch {t['version']}"
    if not _cuda_build(f):
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


def check_devices(f: Facts) -> list[Check]:
    names = [d["device"] for d in f["devices"]]
    torch_gpus, nvml_gpus = f["torch"]["cuda_device_count"], len(f["nvml"]["gpus"])
    detail = "visible: " + ", ".join(f"{d['device']} ({d['label']})" for d in f["devices"])
    if torch_gpus and nvml_gpus > torch_gpus:
        vis = f["env"].get("CUDA_VISIBLE_DEVICES", "unset")
        return [
            Check(
                "devices",
                "warn",
                f"{detail}; torch sees {torch_gpus} of {nvml_gpus} GPUs "
                f"(CUDA_VISIBLE_DEVICES={vis})",
                "unset CUDA_VISIBLE_DEVICES to measure every GPU",
            )
        ]
    return [Check("devices", "ok" if names else "fail", detail if names else "no device found")]


def check_tiny_ops(f: Facts) -> list[Check]:
    out = []
    for d in f["devices"]:
        name = f"tiny op on {d['device']}"
        if "error" in d:
            out.append(
                Check(
                    name,
                    "fail",
                    f"64x64 matmul + add failed: {d['error']}",
                    "reinstall torch for this device; run `torchmark env`",
                )
            )
            continue
        err = d["max_rel_err"]
        # TF32 or a different summation order moves a 64-term fp32 dot product by ~1e-3.
        if err > 1e-2:
            out.append(
                Check(
                    name,
                    "fail",
                    f"result differs from the CPU by {err:.1e} (relative)",
                    "the device computes wrong results: check driver and hardware",
                )
            )
        else:
            out.append(Check(name, "ok", f"matches the CPU (max relative error {err:.1e})"))
    return out


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


def check_threads(f: Facts) -> list[Check]:
    th, omp = f["threads"], f["env"].get("OMP_NUM_THREADS")
    cores = th["affinity"] or th["logical_cores"] or 1
    phys = th["physical_cores"] or cores
    note = f" (OMP_NUM_THREADS={omp})" if omp else ""
    detail = f"torch uses {th['torch']} threads on {cores} usable cores ({phys} physical){note}"
    if th["torch"] > cores:
        return [
            Check(
                "threads",
                "warn",
                detail + ": oversubscribed, threads wait on each other",
                f"export OMP_NUM_THREADS={phys} or torchmark run --threads {phys}",
            )
        ]
    if th["torch"] < max(1, phys // 2):
        return [
            Check(
                "threads",
                "warn",
                detail + ": CPU results use a fraction of the cores",
                f"unset OMP_NUM_THREADS or torchmark run --threads {phys}",
            )
        ]
    return [Check("threads", "ok", detail)]


def check_tf32(f: Facts) -> list[Check]:
    if not f["torch"]["cuda_available"]:
        return [Check("TF32", "skip", "no CUDA GPU: TF32 applies to NVIDIA tensor cores only")]
    p = f["precision"]
    tf32 = p["cuda_matmul_allow_tf32"] or p["float32_matmul_precision"] != "highest"
    if "NVIDIA_TF32_OVERRIDE" in f["env"]:
        return [
            Check(
                "TF32",
                "warn",
                f"NVIDIA_TF32_OVERRIDE={f['env']['NVIDIA_TF32_OVERRIDE']} overrides "
                "PyTorch's TF32 settings for every library",
                "unset NVIDIA_TF32_OVERRIDE",
            )
        ]
    state = "on: fp32 matmul runs in TF32 (10-bit mantissa)" if tf32 else "off: fp32 is true fp32"
    return [
        Check(
            "TF32",
            "ok",
            f"TF32 {state}; float32_matmul_precision={p['float32_matmul_precision']}, "
            f"cudnn.allow_tf32={p['cudnn_allow_tf32']}; torchmark reports each separately",
        )
    ]


def check_governor(f: Facts) -> list[Check]:
    c = f["cpufreq"]
    out = []
    if not c["governors"]:
        out.append(Check("CPU governor", "skip", "not readable in /sys (VM or container)"))
    elif set(c["governors"]) == {"performance"}:
        out.append(Check("CPU governor", "ok", "performance"))
    else:
        out.append(
            Check(
                "CPU governor",
                "warn",
                f"{', '.join(c['governors'])}: clocks ramp with load, short runs vary",
                "sudo cpupower frequency-set -g performance",
            )
        )
    if c["boost"] == "0" or c["no_turbo"] == "1":
        out.append(
            Check(
                "CPU boost",
                "warn",
                "turbo boost disabled: CPU runs at base clock",
                "echo 1 | sudo tee /sys/devices/system/cpu/cpufreq/boost "
                "(or 0 > intel_pstate/no_turbo) - or keep it off on purpose",
            )
        )
    elif c["boost"] is None and c["no_turbo"] is None:
        out.append(Check("CPU boost", "skip", "not readable in /sys"))
    else:
        out.append(Check("CPU boost", "ok", "turbo boost enabled"))
    return out


def _gpu_checks(f: Facts, name: str, fn: Callable[[Facts], Check]) -> list[Check]:
    if not f["nvml"]["gpus"]:
        why = f["nvml"].get("error") or "no NVIDIA GPU"
        return [Check(name, "skip", f"no NVML ({why})" if f["nvml"].get("error") else why)]
    return [fn(g) for g in f["nvml"]["gpus"]]


def check_persistence(f: Facts) -> list[Check]:
    def one(g: Facts) -> Check:
        n = f"persistence mode gpu{g['index']}"
        if g["persistence"] is None:
            return Check(n, "skip", "not readable")
        if g["persistence"]:
            return Check(n, "ok", "on")
        return Check(
            n,
            "warn",
            "off: each new process pays driver start-up (about 1 s)",
            "sudo nvidia-smi -pm 1",
        )

    return _gpu_checks(f, "persistence mode", one)


def check_clocks_power(f: Facts) -> list[Check]:
    def one(g: Facts) -> Check:
        n = f"clocks and power gpu{g['index']}"
        lim, dflt = g["power_limit_w"], g["default_power_limit_w"]
        bad = [
            r
            for r in g["reasons"] or []
            if r in ("HW slowdown", "HW thermal slowdown", "SW thermal slowdown", "HW power brake")
        ]
        detail = (
            f"SM {g['sm_mhz']} of {g['max_sm_mhz']} MHz, {g['temp_c']} C, power limit {lim:.0f} W"
            if lim
            else f"SM {g['sm_mhz']} of {g['max_sm_mhz']} MHz"
        )
        if bad:
            return Check(
                n,
                "warn",
                f"{detail}; slowed while idle: {', '.join(bad)}",
                "check cooling and power cables before measuring",
            )
        if lim and dflt and lim < 0.95 * dflt:
            return Check(
                n,
                "warn",
                f"{detail}, below the default {dflt:.0f} W",
                f"sudo nvidia-smi -i {g['index']} -pl {dflt:.0f}",
            )
        return Check(n, "ok", detail)

    return _gpu_checks(f, "clocks and power", one)


def check_pcie(f: Facts) -> list[Check]:
    def one(g: Facts) -> Check:
        n = f"PCIe link gpu{g['index']}"
        gen, gmax, w, wmax = g["pcie_gen"], g["pcie_gen_max"], g["pcie_width"], g["pcie_width_max"]
        if None in (gen, gmax, w, wmax):
            return Check(n, "skip", "link not readable (NVLink-only or virtual GPU)")
        detail = f"gen{gen} x{w} (max gen{gmax} x{wmax})"
        if w < wmax:
            return Check(
                n,
                "warn",
                f"{detail}: fewer lanes than the card has, host<->device "
                f"transfers run at {100 * w / wmax:.0f} %",
                "reseat the card in a full x16 slot",
            )
        if gen < gmax and f["nvml"].get("pcie_under_load"):
            return Check(
                n,
                "warn",
                f"{detail} while copying: the link runs below its generation",
                "check the slot / BIOS PCIe setting and riser cables",
            )
        if gen < gmax:
            # Read at idle, when GPUs drop the link to gen1 to save power: only a note.
            return Check(n, "ok", f"{detail} at idle (idle GPUs lower the link generation)")
        return Check(n, "ok", detail)

    return _gpu_checks(f, "PCIe link", one)


def check_ecc_mig(f: Facts) -> list[Check]:
    def one(g: Facts) -> Check:
        n = f"ECC / MIG gpu{g['index']}"
        ecc, mig = g["ecc"], g["mig"]
        if mig and mig[0]:
            return Check(
                n,
                "warn",
                "MIG enabled: torchmark measures one slice, not the whole GPU",
                f"sudo nvidia-smi -i {g['index']} -mig 0 (if the GPU is yours alone)",
            )
        if ecc and ecc[0] != ecc[1]:
            return Check(
                n,
                "warn",
                "ECC change pending a reboot: numbers will change after it",
                "reboot before comparing runs",
            )
        e = "n/a" if ecc is None else ("on" if ecc[0] else "off")
        return Check(n, "ok", f"ECC {e}, MIG {'n/a' if mig is None else 'off'}")

    return _gpu_checks(f, "ECC / MIG", one)


def check_memory(f: Facts) -> list[Check]:
    m = f["memory"]
    out = []
    avail = m["available"] / GIB
    if avail < 2 or m["available"] < 0.1 * m["total"]:
        out.append(
            Check(
                "host memory",
                "warn",
                f"{avail:.1f} GiB free of {m['total'] / GIB:.0f}",
                "close other programs: large cases will be skipped as out of memory",
            )
        )
    else:
        out.append(Check("host memory", "ok", f"{avail:.1f} GiB free of {m['total'] / GIB:.0f}"))
    for g in f["nvml"]["gpus"]:
        if g["memory_total"] is None:
            continue
        free = (g["memory_total"] - g["memory_used"]) / GIB
        n, detail = (
            f"memory gpu{g['index']}",
            f"{free:.1f} GiB free of {g['memory_total'] / GIB:.0f}",
        )
        if g["memory_used"] > 0.1 * g["memory_total"]:
            out.append(Check(n, "warn", detail, "free the GPU: other allocations shrink cases"))
        else:
            out.append(Check(n, "ok", detail))
    return out


def check_gpu_processes(f: Facts) -> list[Check]:
    def one(g: Facts) -> Check:
        n = f"other processes gpu{g['index']}"
        others = [p for p in g["processes"] if p["pid"] != f["pid"]]
        if not others:
            return Check(n, "ok", "none")
        used = sum(p["used_bytes"] for p in others) / GIB
        pids = ", ".join(str(p["pid"]) for p in others[:5])
        return Check(
            n,
            "warn",
            f"{len(others)} other process(es) use {used:.1f} GiB (pid {pids})",
            "stop them: they share the GPU's time, memory and power",
        )

    return _gpu_checks(f, "other processes on GPU", one)


def check_load(f: Facts) -> list[Check]:
    ld = f["load"]
    cores = f["threads"]["logical_cores"] or 1
    top = ", ".join(f"{p['name']} ({p['pid']}) {p['cpu_pct']} %" for p in ld["top"])
    detail = f"other processes use {ld['other_cores']:.1f} of {cores} cores now"
    if ld["other_cores"] >= 0.5:
        return [
            Check(
                "machine load",
                "warn",
                f"{detail}" + (f": {top}" if top else ""),
                "stop them or wait: competing load slows CPU results (one busy process "
                "slowed a 2-thread add 50x)",
            )
        ]
    return [Check("machine load", "ok", detail)]


CHECKS: tuple[Callable[[Facts], list[Check]], ...] = (
    check_torch_build,
    check_driver,
    check_devices,
    check_tiny_ops,
    check_cudnn,
    check_threads,
    check_tf32,
    check_governor,
    check_persistence,
    check_clocks_power,
    check_pcie,
    check_ecc_mig,
    check_memory,
    check_gpu_processes,
    check_load,
)


def run_checks(facts: Facts) -> list[Check]:
    return [c for check in CHECKS for c in check(facts)]


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0
