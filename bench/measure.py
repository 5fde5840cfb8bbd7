"""Measuring helpers for the benchmark: statistics and /proc readings (Linux)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (10 ms resolution)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) * TICK_S if fields else 0.0


def children_cpu_seconds(pid: int) -> float:
    """CPU of the live descendants of `pid`, plus what its reaped children used."""
    fields = _stat(pid)
    total = (int(fields[13]) + int(fields[14])) * TICK_S if fields else 0.0
    return total + sum(cpu_seconds(child) for child in descendants(pid))


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(name))
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _stat(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return raw[raw.rfind(")") + 2 :].split()
