import pytest

from conformance.pytest_plugin.gpu_pinning import device_for_worker, visible_gpus


def test_visible_from_env_keeps_order_and_ids():
    assert visible_gpus("3,1", 8) == ["3", "1"]
    assert visible_gpus("", 2) == ["0", "1"]
    assert visible_gpus(None, 0) == []


def test_each_worker_gets_its_own_gpu():
    visible = visible_gpus("4,5", 8)
    got = [device_for_worker(f"gw{i}", visible, 2) for i in range(2)]
    assert got == ["4", "5"]
    assert len(set(got)) == 2


def test_more_workers_than_gpus_is_refused():
    with pytest.raises(ValueError, match="only 2 GPU"):
        device_for_worker("gw2", ["0", "1"], 3)


def test_not_a_worker_id():
    with pytest.raises(ValueError):
        device_for_worker("master", ["0"], 1)


def test_hardware_note_names_the_pinned_device(monkeypatch):
    from conformance.harness.hardware import visible_device_note

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert "CUDA_VISIBLE_DEVICES=1" in visible_device_note()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "CUDA_VISIBLE_DEVICES" not in visible_device_note()
