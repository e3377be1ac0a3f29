"""`--cases` has one syntax in every face (`conformance.run.selection`): patterns as separate arguments or a
comma list, each `tag:NAME`, a case file or a glob over case ids; `conformance run`, `conformance plan`,
`conformance cases` and `pytest suites/` select the same cases for the same words."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conformance import paths
from conformance.cli.main import main
from conformance.errors import UnknownCaseError
from conformance.run.selection import EVERY_CASE, select_cases

WORDS = "tag:seed,drafting-table-d*"


def _ids(cases) -> list[str]:
    return [c.id for c in cases]


def test_a_comma_list_and_separate_arguments_select_the_same_cases():
    joined, _ = select_cases(WORDS)
    split, described = select_cases(WORDS.split(","))
    tagged = {c.id for c in select_cases(None, default=EVERY_CASE)[0] if "seed" in (c.spec.get("tags") or ())}
    assert _ids(joined) == _ids(split) and described == "tag:seed drafting-table-d*"
    assert tagged and tagged <= set(_ids(joined))
    assert {i for i in _ids(joined) if i.startswith("drafting-table-")} == {
        "drafting-table-dflash", "drafting-table-draft_model", "drafting-table-dspark"}


def test_a_case_file_comes_first_and_is_not_selected_twice():
    path = paths.cases_dir() / "seed-draft-kv-c8.yaml"
    cases, _ = select_cases([str(path), "seed-draft-kv-*"])
    assert _ids(cases) == ["seed-draft-kv-c8", "seed-draft-kv-c32"]


def test_a_pattern_that_matches_nothing_is_named():
    with pytest.raises(UnknownCaseError, match=r"unknown case 'nope-\*'.*\(known: "):
        select_cases(["tag:seed", "nope-*"])
    with pytest.raises(UnknownCaseError, match=r"unknown case tag 'no-such-tag'"):
        select_cases("tag:no-such-tag")
    assert select_cases("nope-*", required=False)[0] == []   # the suites: a pattern may mean the live cases alone


def test_conformance_cases_lists_what_the_selection_selects(capsys):
    assert main(["cases", WORDS]) == 0
    assert capsys.readouterr().out.split() == _ids(select_cases(WORDS)[0])


def test_conformance_plan_takes_the_same_words(tmp_path):
    out = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--cases",
                          "tag:no-such-tag,drafting-table-dflash"], capture_output=True, text=True, cwd=paths.REPO_ROOT,
                         timeout=300)
    assert out.returncode == 2 and "unknown case tag 'no-such-tag'" in out.stderr, out.stderr
    out = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--cases",
                          "drafting-table-dflash,drafting-table-pard"], capture_output=True, text=True,
                         cwd=paths.REPO_ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [o["case_id"] for o in json.loads(out.stdout)] == ["drafting-table-dflash", "drafting-table-pard"]


def test_the_suites_collect_the_cases_of_the_same_words():
    out = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "--collect-only", "-q", "-p", "no:randomly",
                          "--engines", "reference", "--cases", WORDS], capture_output=True, text=True,
                         cwd=paths.REPO_ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    collected = set(re.findall(r"\[reference-([^\]]+)\]", out.stdout))
    assert collected == set(_ids(select_cases(WORDS)[0]))
