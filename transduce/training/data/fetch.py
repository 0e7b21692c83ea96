"""Getting source packages: wheels from PyPI (pip download) and Debian packages (apt-get download + dpkg -x)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("transduce.data")


def pip_wheel(name: str, work: Path, requirement: str | None = None) -> Path:
    """Download a wheel (no dependencies, no install) into ``work`` unless one is there; return its path.

    ``name`` is the project as wheel file names spell it (``auf_deutsch``); ``requirement`` what pip is asked for
    (default: ``name``).
    """
    work.mkdir(parents=True, exist_ok=True)
    found = sorted(work.glob(f"{name}-*.whl"))
    if not found:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                requirement or name,
                "-d",
                str(work),
            ],
            capture_output=True,
            text=True,
        )
        found = sorted(work.glob(f"{name}-*.whl"))
        if result.returncode != 0 or not found:
            last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise OSError(f"pip download {name} failed: {last}")
    return found[-1]


def apt_extract(package: str, work: Path) -> Path | None:
    """``apt-get download`` + ``dpkg -x`` into work/deb/<package>; None (with a warning) when it cannot be had.

    The .deb file name (with its version) is recorded in work/deb/<package>/.deb.
    """
    target = work / "deb" / package
    if (target / ".done").exists():
        return target
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    candidates = sorted(debs.glob(f"{package}_*.deb"))
    if not candidates:
        result = subprocess.run(["apt-get", "download", package], cwd=debs, capture_output=True, text=True)
        candidates = sorted(debs.glob(f"{package}_*.deb"))
        if result.returncode != 0 or not candidates:
            reason = (result.stderr.strip().splitlines() or ["no .deb"])[-1]
            log.warning("skipping Debian package %s: %s", package, reason)
            return None
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg", "-x", str(candidates[-1]), str(target)], check=True)
    (target / ".deb").write_text(candidates[-1].name + "\n")
    (target / ".done").touch()
    return target


def deb_name(root: Path, package: str) -> str:
    """The .deb file name recorded by apt_extract (the package name when unknown)."""
    marker = root / ".deb"
    return marker.read_text().strip() if marker.exists() else package
