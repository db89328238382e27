"""Host checks: threads, CPU governor and boost, memory, competing load."""

from __future__ import annotations

from torchmark.doctor.base import GIB, Check, Facts


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


def check_load(f: Facts) -> list[Check]:
    """Other processes' load now (a sample of ``sample_s``) and over the last minute (the
    load average: runnable processes, this one asleep while it samples): a quiet sample
    beside a busy minute is a machine between bursts, not a quiet one."""
    ld = f["load"]
    cores = f["threads"]["logical_cores"] or 1
    top = ", ".join(f"{p['name']} ({p['pid']}) {p['cpu_pct']} %" for p in ld["top"])
    sample = ld.get("sample_s")
    over = f" over {sample:g} s" if sample else " now"
    detail = f"other processes use {ld['other_cores']:.1f} of {cores} cores{over}"
    load1 = (ld.get("loadavg") or [None])[0]
    if load1 is not None:
        detail += f"; 1-minute load {load1:.2f}"
    if ld["other_cores"] >= 0.5 or (load1 is not None and load1 >= 0.5 + ld["other_cores"]):
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
