"""NVIDIA GPU checks, one line per GPU: TF32, persistence, clocks, PCIe, ECC/MIG, sharing."""

from __future__ import annotations

from collections.abc import Callable

from torchmark.doctor.base import GIB, Check, Facts


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
