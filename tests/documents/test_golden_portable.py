"""Goldens must compare equal in any clone: local paths are written as <repo> / <cache>."""

from conformance import paths
from conformance.checks.goldens import golden_view
from conformance.documents import observation


def test_repo_and_cache_paths_are_portable():
    o = observation.new("c", "vllm", "0.33.0", "plan", "h200")
    o["provenance"]["mapping"] = {"target": {"model": str(paths.MODELS_DIR / "tiny-hybrid")},
                                  "log": f"{paths.cache_dir()}/logs/x.log"}
    o["message"] = f"could not read {paths.REPO_ROOT}/suites/cases/x.yaml"
    view = golden_view(o, [])
    assert view["provenance"]["mapping"] == {"target": {"model": "<repo>/conformance/models/tiny-hybrid"},
                                             "log": "<cache>/logs/x.log"}
    assert view["message"] == "could not read <repo>/suites/cases/x.yaml"
    assert str(paths.REPO_ROOT) not in repr(view)
