"""The device profiles' names are written once, in conformance/documents/devices.py: the case schema's `device`
enum is filled from them, so a profile added there is a case's device at once, and a name not there is
refused naming the profiles."""

from __future__ import annotations

import dataclasses

from conformance.documents import devices, schemas
from conformance.documents.schemas import SCHEMAS_DIR, error_lines, load_schema


def test_the_case_schema_offers_exactly_the_profiles():
    assert load_schema("case")["properties"]["device"]["enum"] == list(devices.PROFILES)
    assert "h200" not in (SCHEMAS_DIR / "case.schema.json").read_text()


def test_a_profile_added_to_the_device_data_is_a_cases_device(monkeypatch):
    case = {"device": "h300"}
    schemas.load_schema.cache_clear()
    assert any("device: 'h300' is not one of" in line for line in error_lines("case", case, "c.yaml"))
    monkeypatch.setitem(devices.PROFILES, "h300", dataclasses.replace(devices.H200, name="h300"))
    schemas.load_schema.cache_clear()
    try:
        assert not [line for line in error_lines("case", case, "c.yaml") if ": device:" in line]
    finally:
        monkeypatch.undo()
        schemas.load_schema.cache_clear()
