"""Issue 28 item 11: a literal `{}` in an argv template is refused by `engines check` with a message
that says how to write it (`{{}}`), and `{{}}` then reaches the command as `{}`."""

from __future__ import annotations

import json

from ._cli import cli


def _engine(tmp_path, word: str):
    path = tmp_path / "brace.yaml"
    path.write_text(json.dumps({"name": "brace", "role": "under-test", "version": "1",
                                "plan": {"command": {"argv": ["sh", "-c", f"echo {word} >&2; exit 1"]}}}))
    return path


def test_a_literal_empty_brace_pair_is_refused_saying_to_double_it(tmp_path):
    ran = cli(["engines", "check", str(_engine(tmp_path, "{}"))], tmp_path)
    assert ran.rc == 2, ran.out + ran.err
    said = ran.out + ran.err
    assert "plan.command.argv[2]" in said and "write {{}}" in said, said


def test_a_doubled_brace_reaches_the_command_as_a_literal(tmp_path):
    ran = cli(["plan", "--engine", str(_engine(tmp_path, "{{}}")), "--case", "tiny-dflash-c4-k8",
               "--log-dir", str(tmp_path / "logs")], tmp_path)
    obs = json.loads(ran.out[:ran.out.rindex("}") + 1])
    assert obs["message"].rstrip().endswith("{}"), obs["message"]
