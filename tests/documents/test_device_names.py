"""The device profiles' names are written once, in conformance/documents/devices.yaml: the case schema's `device`
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
    monkeypatch.setitem(devices.PROFILES, "h300", dataclasses.replace(devices.PROFILES["h200"], name="h300"))
    schemas.load_schema.cache_clear()
    try:
        assert not [line for line in error_lines("case", case, "c.yaml") if ": device:" in line]
    finally:
        monkeypatch.undo()
        schemas.load_schema.cache_clear()


def test_a_bad_devices_file_is_refused_naming_the_profile_and_field(tmp_path):
    import pytest

    from conformance.errors import ConformanceError

    good = devices.load_profiles()
    assert good == devices.PROFILES and good["h200"].device_capability == (9, 0)
    bad = tmp_path / "devices.yaml"
    bad.write_text("h999:\n  hardware: x\n  total_memory_bytes: '1'\n  device_capability: [9]\n  num_sms: 1\n"
                   "  unified_memory: false\n  async_scheduling: true\n  colour: red\n")
    with pytest.raises(ConformanceError) as err:
        devices.load_profiles(bad)
    text = str(err.value)
    assert f"{bad}: h999.total_memory_bytes: '1' is not an int" in text
    assert f"{bad}: h999.device_capability: [9] is not [major, minor]" in text
    assert f"{bad}: h999.colour: unknown field" in text
