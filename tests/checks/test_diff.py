from conformance.checks.diff import json_diff


def test_json_diff_names_dotted_paths():
    a = {"memory": {"pool": {"num_blocks": 10}, "x": [1, 2]}, "b": 1}
    b = {"memory": {"pool": {"num_blocks": 11}, "x": [1, 3, 4]}, "b": 1}
    got = {d.path: (d.expected, d.actual) for d in json_diff(a, b)}
    assert got == {"memory.pool.num_blocks": (10, 11), "memory.x.length": (2, 3), "memory.x[1]": (2, 3)}


def test_equal_documents_have_no_difference():
    doc = {"a": [1, {"b": None}], "c": 1.5}
    assert json_diff(doc, doc) == []
