"""Tests for the machine report behind ``mptrain devices``."""

import io
import json
import subprocess

import pytest
import torch
from rich.console import Console

from mptrain import devices
from mptrain.devices import collect_device_report, format_device_report

KEYS = {"cpus", "memory", "shm", "open_files", "torch", "sharing", "start_methods", "cuda"}


@pytest.fixture(scope="module")
def report():
    return collect_device_report()


def render(renderable):
    console = Console(file=io.StringIO(), width=100)
    console.print(renderable)
    return console.file.getvalue()


def test_report_has_all_sections_and_is_json(report):
    assert set(report) == KEYS
    assert json.loads(json.dumps(report)) == report


def test_report_values_are_sane(report):
    cpus = report["cpus"]
    assert 1 <= cpus["usable"] <= cpus["logical"]
    assert cpus["physical"] is None or 1 <= cpus["physical"] <= cpus["logical"]
    assert 0 < report["memory"]["available_bytes"] <= report["memory"]["total_bytes"]
    shm = report["shm"]
    assert shm["path"] == "/dev/shm"
    if shm["total_bytes"] is not None:
        assert 0 <= shm["free_bytes"] <= shm["total_bytes"]
    nofile = report["open_files"]
    if nofile["soft"] is not None and nofile["hard"] is not None:
        assert nofile["soft"] <= nofile["hard"]
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["num_threads"] >= 1
    assert report["sharing"]["current"] in report["sharing"]["available"]
    assert report["start_methods"]["default"] in report["start_methods"]["available"]


def test_collection_does_not_fix_the_start_method(monkeypatch):
    # The launcher must still be free to call set_start_method after the report. Checked
    # from an unset default: an earlier test in this process (torch.compile's worker pool)
    # may have fixed it.
    import multiprocessing

    monkeypatch.setattr(multiprocessing.context._default_context, "_actual_context", None)
    collect_device_report()
    assert multiprocessing.get_start_method(allow_none=True) is None


def test_collection_does_not_initialise_cuda(report):
    assert not torch.cuda.is_initialized()


def test_missing_shm_reports_none(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "SHM_PATH", str(tmp_path / "absent"))
    assert devices._shm() == {"path": str(tmp_path / "absent"), "total_bytes": None, "free_bytes": None}


def test_format_renders_every_section(report):
    text = render(format_device_report(report))
    for title in ("CPU", "Memory", "/dev/shm", "Open files", "Torch", "Sharing", "Start methods", "CUDA"):
        assert title in text
    assert torch.__version__ in text


def test_format_without_cuda_says_not_available(report):
    cpu_only = {**report, "cuda": {"available": False, "device_count": 0, "devices": [], "error": None}}
    assert "not available" in render(format_device_report(cpu_only))


def test_format_shows_cuda_devices(report):
    gpu = {"index": 0, "name": "Fake GPU", "capability": "8.0", "total_bytes": 80 * 1024**3, "free_bytes": 1024**3}
    with_gpu = {**report, "cuda": {"available": True, "device_count": 1, "devices": [gpu], "error": None}}
    text = render(format_device_report(with_gpu))
    assert "Fake GPU" in text and "80.0 GiB" in text and "not available" not in text


def test_no_cuda_query_process_without_devices(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("no subprocess expected without CUDA devices")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(subprocess, "run", fail)
    assert devices._cuda() == {"available": False, "device_count": 0, "devices": [], "error": None}


@pytest.mark.parametrize(
    "outcome",
    [
        subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback\nRuntimeError: driver too old\n"),
        subprocess.CompletedProcess([], 0, stdout="not json\n", stderr=""),
        subprocess.TimeoutExpired(cmd="python", timeout=60),
    ],
    ids=["nonzero-exit", "bad-output", "timeout"],
)
def test_cuda_query_failure_is_recorded_not_raised(monkeypatch, report, outcome):
    def fake_run(*args, **kwargs):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(subprocess, "run", fake_run)
    cuda = devices._cuda()
    assert cuda["available"] is False and cuda["devices"] == [] and cuda["device_count"] == 1
    assert cuda["error"]
    assert "error" in render(format_device_report({**report, "cuda": cuda}))


def test_cuda_query_success_is_parsed(monkeypatch):
    gpu = {"index": 0, "name": "Fake GPU", "capability": "9.0", "total_bytes": 10, "free_bytes": 5}
    stdout = "some warning\n" + json.dumps({"available": True, "devices": [gpu]}) + "\n"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess([], 0, stdout=stdout))
    assert devices._cuda() == {"available": True, "device_count": 1, "devices": [gpu], "error": None}


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA device")
def test_real_cuda_devices_are_listed(report):
    cuda = report["cuda"]
    assert cuda["error"] is None
    assert cuda["available"]
    assert len(cuda["devices"]) == cuda["device_count"] == torch.cuda.device_count()
    for device in cuda["devices"]:
        assert 0 <= device["free_bytes"] <= device["total_bytes"]
        assert device["capability"].count(".") == 1
    assert not torch.cuda.is_initialized()
