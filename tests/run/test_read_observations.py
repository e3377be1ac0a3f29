"""`conformance/run/rundir.py` `read_observations`: a run directory, or its observations.jsonl named
directly, reads the same validated observations; a file of another name is taken as a directory and said
to hold no observations file."""

from __future__ import annotations

import pytest

from conformance.errors import ConformanceError
from conformance.paths import REPO_ROOT
from conformance.run import rundir

RUN = REPO_ROOT / "suites" / "results" / "live" / "h100-four-runs" / "run-1"


def test_a_run_directory_or_its_observations_file(tmp_path):
    by_dir = rundir.read_observations(RUN)
    assert [o["engine"]["name"] for o in by_dir] == ["vllm", "reference"]
    assert rundir.read_observations(RUN / rundir.OBSERVATIONS_FILE) == by_dir
    other = tmp_path / "obs.jsonl"
    other.write_text((RUN / rundir.OBSERVATIONS_FILE).read_text())
    with pytest.raises(ConformanceError, match="no observations file"):
        rundir.read_observations(other)
