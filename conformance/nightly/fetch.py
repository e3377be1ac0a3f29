"""A run directory from where CI left it: a local path, or an http(s) URL of an artifact.

Contract: `fetch_run_dir(source, work_dir)` returns a local run directory (one holding
observations.jsonl). A local path is used as it is (`reports/latest` followed). A URL is downloaded
with httpx (redirects followed, a status other than 2xx an error naming the URL and the status)
into `work_dir`, and must be a .tar.gz / .tgz / .tar or .zip of a run directory (at the archive's
root or in one folder of it); members that would land outside the extraction folder (absolute paths,
`..`, links) are refused. Every failure raises `ConformanceError` naming the source.
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from pathlib import Path
from urllib.parse import urlparse

from conformance.errors import ConformanceError
from conformance.run.rundir import OBSERVATIONS_FILE, resolve_run_dir

DOWNLOAD_TIMEOUT_S = 300.0


def is_url(source: str) -> bool:
    return urlparse(source).scheme in ("http", "https")


def fetch_run_dir(source: str, work_dir: Path) -> Path:
    if not is_url(source):
        run_dir = resolve_run_dir(Path(source))
        if not (run_dir / OBSERVATIONS_FILE).is_file():
            raise ConformanceError(f"{source}: not a run directory (no {OBSERVATIONS_FILE})")
        return run_dir
    name = Path(urlparse(source).path).name or "artifact"
    dest = Path(work_dir) / hashlib.sha256(source.encode()).hexdigest()[:16]
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / name
    _download(source, archive)
    extracted = dest / "run"
    extracted.mkdir(exist_ok=True)
    _extract(source, archive, extracted)
    return _run_dir_in(source, extracted)


def _download(url: str, path: Path) -> None:
    import httpx

    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=DOWNLOAD_TIMEOUT_S) as resp:
            if not 200 <= resp.status_code < 300:
                raise ConformanceError(f"{url}: HTTP {resp.status_code} {resp.reason_phrase}")
            with path.open("wb") as fh:
                for chunk in resp.iter_bytes():
                    fh.write(chunk)
    except httpx.HTTPError as exc:
        raise ConformanceError(f"{url}: could not download: {type(exc).__name__}: {exc}") from None


def _inside(root: Path, member: str) -> bool:
    target = (root / member).resolve()
    return target == root.resolve() or root.resolve() in target.parents


def _extract(source: str, archive: Path, into: Path) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            bad = [n for n in zf.namelist() if not _inside(into, n)]
            if bad:
                raise ConformanceError(f"{source}: archive member {bad[0]!r} lies outside the archive's folder")
            zf.extractall(into)
        return
    try:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                if not (m.isfile() or m.isdir()) or not _inside(into, m.name):
                    raise ConformanceError(f"{source}: archive member {m.name!r} is a link or lies outside the "
                                           "archive's folder")
            tf.extractall(into, filter="data")
    except tarfile.TarError as exc:
        raise ConformanceError(f"{source}: not a .tar.gz, .tar or .zip of a run directory ({exc})") from None


def _run_dir_in(source: str, root: Path) -> Path:
    if (root / OBSERVATIONS_FILE).is_file():
        return root
    found = sorted(p.parent for p in root.rglob(OBSERVATIONS_FILE) if len(p.relative_to(root).parts) == 2)
    if len(found) != 1:
        raise ConformanceError(f"{source}: the archive holds {len(found)} run directories at its root or one "
                               f"folder down (expected one with {OBSERVATIONS_FILE})")
    return found[0]
