"""scripts/screenshots.py against the live server: the README's three pictures, 1280×800 PNGs."""
import os
import struct
import subprocess
import sys

import pytest

from tests.factories import ROOT, TINY_OVERRIDES

from .conftest import CHROMIUM


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_the_script_photographs_the_run_page_the_candidate_inspector_and_compare(live_server_url, user, finished,
                                                                                 tmp_path):
    from webapp.runs.services import create_run

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing")
    other = create_run(user, "other", finished.problem_set, TINY_OVERRIDES)
    out = tmp_path / "screenshots"
    done = subprocess.run([sys.executable, "scripts/screenshots.py", "--url", live_server_url, "--username", "alice",
                           "--password", "alice-password-1", "--runs", f"{finished.pk},{other.pk}", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    shots = sorted(out.iterdir())
    assert [p.name for p in shots] == ["candidate-inspector.png", "compare.png", "run-page.png"]
    assert all(png_size(p) == (1280, 800) for p in shots)


def test_the_script_runs_the_cpu_demo_preset_as_it_ships_by_default():
    """README's run times are measured by the script's runs: its default must be the preset's own length."""
    import importlib.util

    from webapp.runs.presets import presets

    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    demo = next(p for p in presets() if p["name"] == "cpu-demo")
    assert script.PRESET_STEPS == demo["config"]["train"]["steps"]
