"""Host telemetry through psutil: CPU clocks, CPU time of this process vs the rest of the
machine, load average, temperatures where the kernel exposes them, memory.

CPU time is read as cumulative counters (seconds); the trace turns two readings into
"cores used" over the span between them, split into this process and everything else.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from torchmark.telemetry.base import Reading, Source, SourceUnavailable

CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")


def base_clock_mhz(cpufreq: Path = CPUFREQ) -> float | None:
    """The CPU's base (non-turbo) clock where the driver exposes it (intel_pstate, amd-pstate)."""
    for name in ("base_frequency", "amd_pstate_nominal_freq"):
        try:
            return int((cpufreq / name).read_text().strip()) / 1000  # kHz -> MHz
        except (OSError, ValueError):
            continue
    return None


class HostSource(Source):
    role = "host"

    def __init__(self) -> None:
        self.name = "host"
        self._proc: psutil.Process | None = None
        self._tree: RunTree | None = None
        self.missing: dict[str, str] = {}

    def open(self) -> dict[str, Any]:
        try:
            self._proc = psutil.Process()
            self._proc.cpu_times()
            self._tree = RunTree()
            psutil.cpu_times()
        except (psutil.Error, OSError) as e:
            raise SourceUnavailable(f"psutil cannot read CPU times ({e})") from None
        freq = _safe(psutil.cpu_freq)
        max_mhz = freq.max if freq is not None and freq.max else None
        if _safe(lambda: psutil.cpu_freq(percpu=True)) in (None, []):
            self.missing["clock"] = "CPU clock not exposed (no cpufreq, e.g. a container)"
        if not _temperatures():
            self.missing["temperature"] = "no temperature sensors exposed"
        if not hasattr(os, "getloadavg"):
            self.missing["load"] = "no load average on this OS"
        return {
            "logical_cores": psutil.cpu_count(logical=True),
            "max_mhz": max_mhz,
            "base_mhz": base_clock_mhz(),
            "missing": dict(self.missing),
        }

    def read(self) -> Reading:
        assert self._proc is not None and self._tree is not None, "open() first"
        try:
            sys_t = psutil.cpu_times()
            run_s = self._tree.cpu_s()
        except (psutil.Error, OSError) as e:
            raise SourceUnavailable(f"psutil stopped reading CPU times ({e})") from None
        freqs = None if "clock" in self.missing else _safe(lambda: psutil.cpu_freq(percpu=True))
        mhz = _clocks_of_our_cores(freqs or [])
        temps = None if "temperature" in self.missing else _temperatures()
        mem = psutil.virtual_memory()
        return {
            # guest time is already inside user time on Linux; steal is the hypervisor's
            "busy_s": _busy(sys_t),
            "steal_s": getattr(sys_t, "steal", 0.0),
            # the run's processes (this one, its children, sibling ranks): never "other"
            "proc_s": run_s,
            "clock_mhz": max(mhz) if mhz else None,
            "clock_min_mhz": min(mhz) if mhz else None,
            "temp_c": max(temps) if temps else None,
            "load1": os.getloadavg()[0] if "load" not in self.missing else None,
            "mem_used_bytes": mem.total - mem.available,
        }


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except (OSError, RuntimeError, psutil.Error, NotImplementedError):
        return None  # sensors unreadable or permission denied on /sys: not exposed


def _temperatures() -> list[float]:
    fn = getattr(psutil, "sensors_temperatures", None)
    found = _safe(fn) if fn else None
    return [t.current for entries in (found or {}).values() for t in entries if t.current]


class OtherLoad:
    """Cores used by *other* processes over a region (``with OtherLoad() as load: ...``):
    the run's own processes (``RunTree``: ranks, workers, children) are never other load.

    Ceilings are cached per machine: one measured while another process held a core would
    understate the machine for every later run, so the runner refuses to cache it.
    """

    def __init__(self, count_processes: bool = False) -> None:
        self.cores: float | None = None  # other processes
        self.own_cores: float | None = None  # this process
        self.logical_cores: int | None = psutil.cpu_count(logical=True)
        # other processes that used at least BUSY_PROCESS_CORES over the region, when asked:
        # reading every process's CPU time costs ~10 ms here, twice
        self.processes: int | None = None
        self._count = count_processes

    def __enter__(self) -> OtherLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> OtherLoad:
        self._tree = RunTree()
        self._t0 = _safe(lambda: (os.times().elapsed, _busy_s(), self._tree.cpu_s()))
        self._each0 = _per_process(self._tree.pids()) if self._count else {}
        return self

    def stop(self) -> None:
        t1 = _safe(lambda: (os.times().elapsed, _busy_s(), self._tree.cpu_s()))
        # CPU times tick every 10 ms: a region under 0.2 s cannot tell load apart from noise
        if self._t0 and t1 and t1[0] - self._t0[0] >= 0.2:
            wall = t1[0] - self._t0[0]
            own = t1[2] - self._t0[2]
            self.cores = max(0.0, (t1[1] - self._t0[1] - own) / wall)
            self.own_cores = own / wall
            if self._count:
                each1 = _per_process(self._tree.pids())
                busy = [
                    p
                    for p, t in each1.items()
                    if t - self._each0.get(p, t) >= BUSY_PROCESS_CORES * wall
                ]
                self.processes = len(busy)

    def facts(self) -> dict[str, Any]:
        """The load as a telemetry summary holds it (``other_cores``, ``logical_cores``,
        ``other_processes``): what the verdicts' load words read."""
        return {
            "other_cores": self.cores,
            "logical_cores": self.logical_cores,
            "other_processes": self.processes,
        }


# A process using a tenth of a core over a region counts as one of the others that loaded it.
BUSY_PROCESS_CORES = 0.1


def _per_process(ours: set[int] | frozenset[int] = frozenset()) -> dict[int, float]:
    """CPU seconds of every process outside the run (``ours``) by pid (those psutil may
    read)."""
    skip = set(ours) | {os.getpid()}
    out: dict[int, float] = {}
    for p in psutil.process_iter(["cpu_times"]):
        t = p.info.get("cpu_times")
        if p.pid not in skip and t is not None:
            out[p.pid] = float(t.user + t.system)
    return out


def _busy(t: Any) -> float:
    """Busy CPU seconds of a ``psutil.cpu_times()`` reading (guest time is inside user time
    on Linux; steal is the hypervisor's and counted apart)."""
    return float(
        t.user
        + t.system
        + getattr(t, "nice", 0.0)
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
    )


def _busy_s() -> float:
    return _busy(psutil.cpu_times())


def _clocks_of_our_cores(freqs: list[Any]) -> list[float]:
    """Clocks of the cores this process may run on. Idle cores under a powersave governor
    sit near 1 GHz: an average over every core of a 64-core host would tag a 2-thread run
    throttled. The fastest of ours is what counts; package throttling lowers them all."""
    try:
        ours = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        ours = list(range(len(freqs)))
    return [freqs[i].current for i in ours if i < len(freqs) and freqs[i].current]


# Listing a process tree reads every process's /proc entry (~2 ms for 85 processes here):
# the tree is listed again at most this often, its members' CPU times read every time.
TREE_REFRESH_S = 0.5


def run_root(
    env: Mapping[str, str] | None = None,
    ancestors: Callable[[], list[int]] | None = None,
) -> int:
    """The process whose tree is the run: a rank's parent (torchrun's agent, torchmark's
    own launcher, Slurm's step daemon: it started the sibling ranks), else this process.
    ``ancestors``: this process's parents, nearest first."""
    e = os.environ if env is None else env
    up = ancestors or (lambda: [p.pid for p in psutil.Process().parents()])
    if ("LOCAL_RANK" in e and "WORLD_SIZE" in e) or "SLURM_STEP_ID" in e:
        parents = _safe(up) or []
        if parents:
            return int(parents[0])
    return os.getpid()


class RunTree:
    """CPU seconds of the run's processes: the root (``run_root``) and every descendant,
    including the children that have exited (their time is in their parent's
    ``children_*`` once reaped), so a worker that ends never turns into other load."""

    def __init__(
        self,
        root: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        pid = run_root() if root is None else root
        try:
            self._root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._root = None
        self._me = psutil.Process()
        self._members: list[psutil.Process] = []
        self._listed = float("-inf")

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._listed < TREE_REFRESH_S:
            return
        self._listed = now
        root = self._root if self._root is not None else self._me
        try:
            self._members = [root, *root.children(recursive=True)]
        except psutil.Error:  # the root ended (a launcher killed): this process alone
            self._root = None
            kids = _safe(lambda: self._me.children(recursive=True)) or []
            self._members = [self._me, *kids]

    def pids(self) -> set[int]:
        self._refresh()
        return {p.pid for p in self._members}

    def cpu_s(self) -> float:
        self._refresh()
        total = 0.0
        for p in self._members:
            try:
                t = p.cpu_times()
            except psutil.Error:  # ended since listed: its time is in its parent's children
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return float(total)
