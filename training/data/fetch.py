"""Getting source packages: wheels from PyPI (pip download) and Debian packages (apt-get download + dpkg -x)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("transduce.data")


def pip_wheel(name: str, work: Path) -> Path:
    """Download a wheel (no dependencies, no install) into ``work`` and return its path."""
    found = sorted(work.glob(f"{name}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", name,
                        "-d", str(work)], check=True, capture_output=True)
        found = sorted(work.glob(f"{name}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download {name} produced no wheel in {work}")
    return found[-1]


def apt_extract(package: str, work: Path) -> Path | None:
    """``apt-get download`` + ``dpkg -x`` into work/<package>; None (with a warning) when it cannot be had."""
    target = work / "deb" / package
    if (target / ".done").exists():
        return target
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["apt-get", "download", package], cwd=debs, capture_output=True, text=True)
    candidates = sorted(debs.glob(f"{package}_*.deb"))
    if result.returncode != 0 or not candidates:
        log.warning("skipping Debian package %s: %s", package, (result.stderr.strip().splitlines() or ["?"])[-1])
        return None
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg", "-x", str(candidates[-1]), str(target)], check=True)
    (target / ".done").touch()
    return target
