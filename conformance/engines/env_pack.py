"""Oracle packs: an oracle's cached venv, as a wheelhouse for an offline host of another Python and platform.

Contract: `pack(request)` reads the exact versions the engine's ready venv resolved (`pip list
--format=freeze`), leaves out what the host already has at that exact version (`host_freeze`), what it is
told the host provides at whatever version (`use_host` globs over normalized names, unless named in
`need`; each such package is a deviation, with both versions when the freeze says the host's), pip itself,
and what `leave_out` names; fetches one wheel per remaining package (env_pack_fetch) and writes
`<out>/wheels/*.whl`, `<out>/oracle-pack.json`, `<out>/install.sh` and `<out>/bin/<entry>` launchers
(env_pack_scripts). Nothing final is written until every wheel is there: a pack that fails names each
package without a wheel, keeps what it fetched (a rerun resumes) and raises `ConformanceError`.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from conformance.documents.file_digest import sha256_of
from conformance.engines.engine_file import EngineFile
from conformance.engines.env_pack_fetch import PackFetchError, Pin, Target, fetch, required_glibc, validate_target
from conformance.engines.env_pack_scripts import Launcher, write_scripts
from conformance.engines.pack_provenance import PACK_FILE
from conformance.engines.venv import OracleEnv, oracle_env
from conformance.errors import ConformanceError

PACK_FORMAT = 1
INSTALLER_PACKAGES = ("pip",)  # the host brings its own installer
DOWNLOAD_WORKERS = 4

# The launchers of each engine: a console script is read from the venv's entry_points.txt (its real entry);
# a module launcher runs `python3 -m <module>`; an interpreter launcher is `python3` with the pack's site (the
# SGLang manifest runs `{sglang_python} -m sglang.launch_server`: `--live-set sglang_python=<pack>/bin/python`).
_LAUNCHERS = {
    "vllm": [("console_script", "vllm", None, "serve")],
    "sglang": [("module", "sglang-launch-server", "sglang.launch_server", None),
               ("interpreter", "python", None, "sglang.launch_server")],
}


@dataclass
class PackRequest:
    engine: EngineFile
    target: Target
    out: Path
    host_freeze: Path | None = None
    use_host: list[str] = field(default_factory=list)
    need: list[str] = field(default_factory=list)
    leave_out: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    deviation_env: list[str] = field(default_factory=list)  # K=V
    deviation_args: list[str] = field(default_factory=list)
    deviation_reason: str = "given when the pack was made, without a reason"
    wheel_cache: Path | None = None


def parse_freeze(text: str, where: str) -> dict[str, Pin]:
    """`name==version` lines (comments, blanks, `-e`/URL lines skipped) keyed by normalized name."""
    pins: dict[str, Pin] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-") or " @ " in line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)", line)
        if not m:
            raise ConformanceError(f"{where}:{n}: `{raw.strip()}` is no `name==version` line")
        pin = Pin(m.group(1), m.group(2))
        pins[pin.key] = pin
    return pins


def venv_freeze(spec: EngineFile) -> tuple[OracleEnv, dict[str, Pin]]:
    """The engine's ready venv and what it resolved; a clear error for an engine with no venv or none built."""
    env = oracle_env(spec)  # OracleEnvError: no venv of its own
    state = env.state()
    if state != "ready":
        raise ConformanceError(f"{spec.name} {spec.version}: its venv at {env.path} is {state}; "
                               f"build it first with `conformance envs install {spec.name}`")
    # NOTE: from the venv's own folder and with no PYTHONPATH: `python -m` puts the working directory on
    # sys.path, and a checkout's *.egg-info there would be listed as a package of the venv
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(env.python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=False, cwd=str(env.path), env=clean)
    if out.returncode != 0:
        raise ConformanceError(f"{env.path}: `pip list --format=freeze` failed: {out.stderr.strip()[-500:]}")
    return env, parse_freeze(out.stdout, f"{env.path} (pip list --format=freeze)")


def _console_entry(env: OracleEnv, dist: str, name: str) -> tuple[str, str]:
    """(module, attr) of console script `name` declared by distribution `dist` in the venv."""
    for ep_file in sorted(env.path.glob("lib/python*/site-packages/*.dist-info/entry_points.txt")):
        if canonicalize_name(ep_file.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0]) != canonicalize_name(dist):
            continue
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment]
        parser.read(ep_file)
        if parser.has_option("console_scripts", name):
            value = parser.get("console_scripts", name).split("[", 1)[0].strip()
            module, _, attr = value.partition(":")
            return module.strip(), attr.strip()
    raise ConformanceError(f"{env.path}: no console script `{name}` declared by {dist}")


def launchers_for(spec: EngineFile, env: OracleEnv) -> list[Launcher]:
    out = []
    for kind, name, module, args_after in _LAUNCHERS.get(spec.name, []):
        if kind == "console_script":
            mod, attr = _console_entry(env, spec.name, name)
            out.append(Launcher(name, mod, attr, args_after))
        else:
            out.append(Launcher(name, module, None, args_after))
    return out


def _applies_to(ln: Launcher) -> str:
    """Where a launcher appends the deviation args: `vllm serve`, `python -m sglang.launch_server`, `name`."""
    if ln.module is None and ln.args_after:
        return f"{ln.name} -m {ln.args_after}"
    return f"{ln.name} {ln.args_after}" if ln.args_after else ln.name


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConformanceError(f"--deviation-env {item}: give NAME=VALUE")
        env[key] = value
    return env


def _normalize_glob(glob: str) -> str:
    """A glob over names, normalized as names are (lower case, runs of `-_.` as one `-`)."""
    return re.sub(r"[-_.]+", "-", glob.lower())


def _same_version(a: str, b: str) -> bool:
    """PEP 440 equality (local labels count: 2.11.0+cu130 is not 2.11.0); text equality for what is no version."""
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def select(venv: dict[str, Pin], host: dict[str, Pin], req: PackRequest) -> tuple[list[Pin], list[dict], list[dict]]:
    """(pins to pack, left out with reasons, host-package deviations)."""
    need = {canonicalize_name(n) for n in req.need}
    leave = {canonicalize_name(n) for n in req.leave_out}
    only = {canonicalize_name(n) for n in req.only}
    for flag, names in (("--need", need), ("--leave-out", leave), ("--only", only)):
        unknown = sorted(names - set(venv))
        if unknown:
            raise ConformanceError(f"{flag} {', '.join(unknown)}: not in {req.engine.name}'s venv")
    for glob in req.use_host:
        if not any(fnmatch.fnmatchcase(key, _normalize_glob(glob)) for key in venv):
            raise ConformanceError(f"--use-host {glob}: matches no package of {req.engine.name}'s venv")
    keep, left, deviations = [], [], []
    for key in sorted(venv):
        pin = venv[key]
        hosted = host.get(key)
        glob = next((g for g in req.use_host if fnmatch.fnmatchcase(key, _normalize_glob(g))), None)
        if only and key not in only:
            left.append({"name": pin.name, "version": pin.version, "reason": "not selected (--only)"})
        elif key in INSTALLER_PACKAGES:
            left.append({"name": pin.name, "version": pin.version, "reason": "the installer; the host brings its own"})
        elif key in leave:
            left.append({"name": pin.name, "version": pin.version, "reason": "left out on request (--leave-out)"})
        elif key in need:
            keep.append(pin)
        elif hosted is not None and _same_version(hosted.version, pin.version):
            left.append({"name": pin.name, "version": pin.version, "host_version": hosted.version,
                         "reason": "the host has this exact version (--host-freeze)"})
        elif glob is not None:
            host_version = hosted.version if hosted else None
            reason = f"the host provides it (--use-host {glob})"
            left.append({"name": pin.name, "version": pin.version, "host_version": host_version, "reason": reason})
            deviations.append({"kind": "host_package", "name": pin.name, "pack_version": pin.version,
                               "host_version": host_version or "not in the host freeze", "reason": reason})
        else:
            keep.append(pin)
    return keep, left, deviations


def _fetch_all(pins: list[Pin], req: PackRequest, wheels: Path, progress: Callable[[str], None]) -> list[dict]:
    done: list[dict] = []
    failures: list[str] = []
    width = len(str(len(pins)))
    with ThreadPoolExecutor(max_workers=DOWNLOAD_WORKERS) as pool:
        futures = {pool.submit(fetch, pin, req.target, wheels, req.wheel_cache): pin for pin in pins}
        for n, fut in enumerate(as_completed(futures), 1):
            pin = futures[fut]
            try:
                path, source = fut.result()
            except PackFetchError as exc:
                failures.append(str(exc))
                progress(f"  [{n:>{width}}/{len(pins)}] {pin.name}=={pin.version}  NO WHEEL")
                continue
            size = path.stat().st_size
            progress(f"  [{n:>{width}}/{len(pins)}] {pin.name}=={pin.version}  {path.name}  "
                     f"{size / 2**20:.2f} MiB  ({source})")
            done.append({"name": pin.name, "version": pin.version, "file": path.name, "size_bytes": size,
                         "sha256": sha256_of(path), "source": source})
    if failures:
        raise ConformanceError(f"{len(failures)} of {len(pins)} packages have no wheel for "
                               f"{req.target.interpreter} on {req.target.platform}; nothing else was written "
                               f"(the {len(done)} fetched stay in {wheels}; a rerun resumes):\n"
                               + "\n".join(f"  {f}" for f in sorted(failures)))
    return sorted(done, key=lambda p: canonicalize_name(p["name"]))


def pack(req: PackRequest, progress: Callable[[str], None] = lambda m: None) -> dict:
    """Build the pack in `req.out`; returns the document written to `oracle-pack.json`."""
    validate_target(req.target)
    dev_env = _parse_env(req.deviation_env)
    host: dict[str, Pin] = {}
    if req.host_freeze is not None:
        if not req.host_freeze.is_file():
            raise ConformanceError(f"--host-freeze {req.host_freeze}: no such file")
        host = parse_freeze(req.host_freeze.read_text(), str(req.host_freeze))
    if req.wheel_cache is not None and not req.wheel_cache.is_dir():
        raise ConformanceError(f"--wheel-cache {req.wheel_cache}: no such directory")
    if req.out.exists() and not req.out.is_dir():
        raise ConformanceError(f"--out {req.out}: exists and is not a directory")
    env, venv = venv_freeze(req.engine)
    launchers = launchers_for(req.engine, env)
    pins, left, host_devs = select(venv, host, req)
    wheels = req.out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    progress(f"{req.engine.name} {req.engine.version}: packing {len(pins)} of {len(venv)} packages for "
             f"cp{req.target.python.replace('.', '')} on {req.target.platform} into {req.out} "
             f"({len(left)} left out)")
    packages = _fetch_all(pins, req, wheels, progress)
    keep_files = {p["file"] for p in packages}
    for stale in sorted(wheels.glob("*.whl")):
        if stale.name not in keep_files:
            progress(f"  removed {stale.name}: not part of this pack")
            stale.unlink()
    glibc = [(required_glibc(p["file"]), p["name"]) for p in packages]
    newest = max(((g, n) for g, n in glibc if g is not None), default=None)
    deviations = [{"kind": "env", "name": k, "value": v, "reason": req.deviation_reason} for k, v in dev_env.items()]
    deviations += [{"kind": "arg", "value": a, "applies_to": [_applies_to(ln) for ln in launchers],
                    "reason": req.deviation_reason} for a in req.deviation_args]
    doc = {
        "format": PACK_FORMAT,
        "engine": req.engine.name,
        "version": req.engine.version,
        "python": req.target.python,
        "platform": req.target.platform,
        "platform_tags": req.target.platform_tags() + ["any"],
        "source_venv": str(env.path),
        "host_freeze": str(req.host_freeze) if req.host_freeze else None,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "requires_glibc": f"{newest[0][0]}.{newest[0][1]} ({newest[1]})" if newest else None,
        "total_bytes": sum(p["size_bytes"] for p in packages),
        "packages": packages,
        "left_out": left,
        "deviations": deviations + host_devs,
        "launchers": [{"name": ln.name, "python_argv": ln.python_argv(), "deviation_args_after": ln.args_after}
                      for ln in launchers],
    }
    (req.out / PACK_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    write_scripts(req.out, launchers, dev_env, list(req.deviation_args),
                  f"{req.engine.name} {req.engine.version} for Python {req.target.python} on {req.target.platform}")
    progress(f"{req.engine.name} {req.engine.version}: {len(packages)} wheels, "
             f"{doc['total_bytes'] / 2**30:.2f} GiB in {wheels}, the host's glibc at least {doc['requires_glibc'] or 'any'}; install on the host with `bash {req.out}/install.sh`")
    return doc
