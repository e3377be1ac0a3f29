from conformance.diff import Rule, compare, json_diff


def test_json_diff_names_dotted_paths():
    a = {"memory": {"pool": {"num_blocks": 10}, "x": [1, 2]}, "b": 1}
    b = {"memory": {"pool": {"num_blocks": 11}, "x": [1, 3, 4]}, "b": 1}
    got = {d.path: (d.expected, d.actual) for d in json_diff(a, b)}
    assert got == {"memory.pool.num_blocks": (10, 11), "memory.x.length": (2, 3), "memory.x[1]": (2, 3)}


def test_equal_documents_have_no_difference():
    doc = {"a": [1, {"b": None}], "c": 1.5}
    assert json_diff(doc, doc) == []


def test_rules_tolerance_and_at_least():
    exp = {"m": {"bytes": 1000, "seats": 32, "n": 3}}
    act = {"m": {"bytes": 1040, "seats": 40, "n": 4}}
    rules = [Rule("m.bytes", "tolerance", rel_tol=0.05), Rule("m.seats", "at_least")]
    fails = compare(exp, act, rules, ["m.*"])
    assert [d.path for d in fails] == ["m.n"]
    fails = compare(exp, {"m": {"bytes": 1100, "seats": 31, "n": 3}}, rules, ["m.*"])
    assert sorted(d.path for d in fails) == ["m.bytes", "m.seats"]
