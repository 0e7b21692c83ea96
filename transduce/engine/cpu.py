"""This machine's CPU as /proc/cpuinfo describes it: its model name and feature flags (the engine's int8 choices,
the benchmarks' machine description)."""

from __future__ import annotations

import functools


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """(model name, every feature flag) of the first CPU in the text of /proc/cpuinfo (x86 "model name"/"flags",
    aarch64 "Hardware"/"Features")."""
    model, flags = "", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return model, flags


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (none where there is no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return parse_cpuinfo(cpuinfo.read())[1]
    except OSError:
        return frozenset()
