"""benchmarks/gpu_live.sh save-caches / restore: the compile caches of one GPU host sent to the next.

save-caches packs vLLM's compile cache and Triton's from the home folder; a pack over 15 MiB comes back as
parts of at most 15 MiB (compile-caches.tgz.part-NN), one over 3 x 15 MiB without Triton's cache. The
next host's `install-fw` (and `install`) unpacks a stash folder's compile-caches.tgz, or its parts, into
its home folder before anything else, byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

from conformance.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_live.sh"
MIB = 1024 * 1024


def _home(root, triton_bytes: int):
    home = root / "home"
    (home / ".cache/vllm/torch_compile_cache/8ac9").mkdir(parents=True)
    (home / ".cache/vllm/torch_compile_cache/8ac9/graph.py").write_text("compiled\n")
    (home / ".triton/cache").mkdir(parents=True)
    (home / ".triton/cache/kernel.cubin").write_bytes(os.urandom(triton_bytes))     # does not compress
    return home


def _run(step: str, results, home, stash=None):
    scratch = results.parent / f"scratch-{results.name}"          # the script's own folders, kept in tmp_path
    env = dict(os.environ, HOME=str(home), STASH=str(stash or results / "no-stash"),
               FW_WHEELS=str(results / "no-such.whl"), GPU_OUT=str(scratch / "gpu-out"), GOLDENS=str(scratch / "goldens"))
    return subprocess.run(["bash", str(SCRIPT), str(results), step], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=120)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_large_pack_comes_back_in_parts_and_the_next_host_unpacks_them(tmp_path):
    home = _home(tmp_path, 20 * MIB)
    results = tmp_path / "results"
    results.mkdir()
    saved = _run("save-caches", results, home)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    parts = sorted(results.glob("compile-caches.tgz.part-*"))
    assert [p.name for p in parts] == ["compile-caches.tgz.part-00", "compile-caches.tgz.part-01"], saved.stdout
    assert all(p.stat().st_size <= 15 * MIB for p in parts) and not (results / "compile-caches.tgz").exists()
    assert "in 2 parts of at most 15 MiB" in saved.stdout

    stash = tmp_path / "stash"
    (stash / "c0").mkdir(parents=True)
    for p in parts:
        shutil.copy(p, stash / "c0" / p.name)
    fresh = tmp_path / "fresh-home"
    fresh.mkdir()
    (tmp_path / "r2").mkdir()
    restored = _run("install-fw", tmp_path / "r2", fresh, stash)     # its pip install fails: no wheels here
    assert "compile caches from the parts in" in restored.stdout, restored.stdout + restored.stderr
    assert _sha(fresh / ".triton/cache/kernel.cubin") == _sha(home / ".triton/cache/kernel.cubin")
    assert (fresh / ".cache/vllm/torch_compile_cache/8ac9/graph.py").read_text() == "compiled\n"


def test_a_pack_over_three_parts_leaves_tritons_cache_out_and_a_small_one_stays_whole(tmp_path):
    home = _home(tmp_path, 48 * MIB)
    results = tmp_path / "results"
    results.mkdir()
    saved = _run("save-caches", results, home)
    assert saved.returncode == 0 and "with Triton's cache: vLLM's alone" in saved.stdout, saved.stdout
    pack = results / "compile-caches.tgz"
    assert pack.exists() and not list(results.glob("compile-caches.tgz.part-*"))
    names = subprocess.run(["tar", "tzf", str(pack)], capture_output=True, text=True, check=True).stdout
    assert ".cache/vllm/torch_compile_cache/8ac9/graph.py" in names and ".triton" not in names

    stash = tmp_path / "stash"
    (stash / "c0").mkdir(parents=True)
    shutil.copy(pack, stash / "c0" / pack.name)
    fresh = tmp_path / "fresh-home"
    fresh.mkdir()
    (tmp_path / "r2").mkdir()
    restored = _run("install-fw", tmp_path / "r2", fresh, stash)
    assert f"compile caches from {stash}/c0/compile-caches.tgz" in restored.stdout, restored.stdout
    assert (fresh / ".cache/vllm/torch_compile_cache/8ac9/graph.py").exists()


def test_no_cache_yet_is_said_plainly(tmp_path):
    home = tmp_path / "empty-home"
    home.mkdir()
    results = tmp_path / "results"
    results.mkdir()
    saved = _run("save-caches", results, home)
    assert "no compile cache under" in saved.stdout and not list(results.glob("compile-caches*"))
