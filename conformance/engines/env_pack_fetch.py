"""Fetching the wheels of an oracle pack: one exact `name==version` wheel per package, for another
Python and platform than this machine's.

Contract: `fetch(pin, target, ...)` leaves exactly one wheel of that name and version, whose tags a
CPython of `target.python` on `target.platform` installs, in `wheels_dir`, and returns it; taken (in
order) from `wheels_dir` itself (a pack resumed), from a `--wheel-cache` directory (by exact name and
version in the file name, then tags checked), else from `pip download --no-deps --only-binary=:all:`
with the target's interpreter and every platform tag it accepts. Raises `PackFetchError` naming the
package when no such wheel exists.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from conformance.errors import ConformanceError

_LEGACY_MANYLINUX = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
_OLDEST_GLIBC_MINOR = 5
_NEWEST_GLIBC_MINOR = 35  # the newest standard manylinux tag tried


class PackFetchError(ConformanceError):
    """No wheel of a pinned package for the pack's Python and platform."""


@dataclass(frozen=True)
class Pin:
    """One package at the exact version the oracle's venv resolved."""

    name: str  # as pip prints it
    version: str

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the pack installs on: python `3.12`, platform `manylinux_2_28_x86_64`."""

    python: str
    platform: str

    @property
    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    @property
    def interpreter(self) -> str:
        major, minor = self.python_tuple
        return f"cp{major}{minor}"

    def platform_tags(self) -> list[str]:
        """The given platform, then every older manylinux tag of its architecture down to glibc 2.5, then the
        newer standard ones up to glibc 2.35 as a last resort (pip matches manylinux tags exactly; pip
        prefers the earlier tags, so a newer-glibc wheel is taken only where no older one exists, and the
        pack records the glibc its wheels need). A platform that is no manylinux tag stands alone."""
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", self.platform)
        legacy = re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_(\w+)", self.platform)
        if m and m.group(1) == "2":
            glibc_minor, arch = int(m.group(2)), m.group(3)
        elif legacy:
            glibc_minor, arch = _LEGACY_MANYLINUX[legacy.group(1)], legacy.group(2)
        else:
            return [self.platform]
        minors = list(range(glibc_minor, _OLDEST_GLIBC_MINOR - 1, -1)) + list(range(glibc_minor + 1, _NEWEST_GLIBC_MINOR + 1))
        tags = [self.platform]
        for minor in minors:
            tags.append(f"manylinux_2_{minor}_{arch}")
            tags.extend(f"{alias}_{arch}" for alias, alias_minor in _LEGACY_MANYLINUX.items() if alias_minor == minor)
        return list(dict.fromkeys(tags))

    def supported_tags(self) -> frozenset[Tag]:
        return _supported_tags(self)


@functools.lru_cache(maxsize=8)
def _supported_tags(target: Target) -> frozenset[Tag]:
    plats = target.platform_tags()
    return frozenset(cpython_tags(target.python_tuple, platforms=plats)) | frozenset(
        compatible_tags(target.python_tuple, interpreter=target.interpreter, platforms=plats))


def validate_target(target: Target) -> None:
    if not re.fullmatch(r"3\.\d+", target.python):
        raise ConformanceError(f"--python {target.python}: give a CPython minor version such as 3.12")
    if not re.fullmatch(r"[a-z0-9_]+", target.platform):
        raise ConformanceError(f"--platform {target.platform}: give a wheel platform tag such as manylinux_2_28_x86_64")


def wheel_matches(path: Path, pin: Pin, target: Target) -> bool:
    """Whether a wheel file is `pin` exactly (name and version, local label included) for `target`."""
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
        if name != pin.key or version != Version(pin.version):
            return False
        return bool(tags & target.supported_tags())
    except (ValueError, InvalidVersion):
        return False


def required_glibc(wheel_file: str) -> tuple[int, int] | None:
    """The oldest glibc any of a wheel's manylinux tags asks for (None for a wheel with no manylinux tag)."""
    needs = []
    for tag in parse_wheel_filename(wheel_file)[3]:
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag.platform)
        legacy = re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_\w+", tag.platform)
        if m:
            needs.append((int(m.group(1)), int(m.group(2))))
        elif legacy:
            needs.append((2, _LEGACY_MANYLINUX[legacy.group(1)]))
    return min(needs) if needs else None


def _place(src: Path, wheels_dir: Path) -> Path:
    """Hard-link (else copy) a cached wheel into the pack."""
    dest = wheels_dir / src.name
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)
    return dest


def _download(pin: Pin, target: Target, wheels_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f".fetch-{pin.key}-", dir=wheels_dir.parent) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                "--disable-pip-version-check", "--no-input", "--python-version", target.python,
                "--implementation", "cp", "--dest", tmp]
        for plat in target.platform_tags() + ["any"]:
            argv += ["--platform", plat]
        argv.append(f"{pin.name}=={pin.version}")
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        got = [p for p in Path(tmp).iterdir() if p.name.endswith(".whl")]
        if out.returncode != 0 or len(got) != 1:
            said = [ln for ln in (out.stderr + out.stdout).splitlines() if ln.startswith("ERROR")] or \
                (out.stderr + out.stdout).strip().splitlines()[-3:]
            raise PackFetchError(
                f"{pin.name}=={pin.version}: no wheel for {target.interpreter} on {target.platform} "
                f"(tried platform tags {', '.join(target.platform_tags())}, any); pip said: {' | '.join(said)}")
        if not wheel_matches(got[0], pin, target):
            raise PackFetchError(f"{pin.name}=={pin.version}: pip downloaded {got[0].name}, which is not that exact "
                                 f"version for {target.interpreter} on {target.platform}")
        dest = wheels_dir / got[0].name
        shutil.move(str(got[0]), dest)
        return dest


def fetch(pin: Pin, target: Target, wheels_dir: Path, wheel_cache: Path | None) -> tuple[Path, str]:
    """The pack's wheel of `pin`, and where it came from: `pack` (already there), `cache` or `download`."""
    for source, folder in (("pack", wheels_dir), ("cache", wheel_cache)):
        if folder is None or not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.whl")):
            if wheel_matches(path, pin, target):
                return (path, source) if source == "pack" else (_place(path, wheels_dir), source)
    return _download(pin, target, wheels_dir), "download"
