"""The vLLM environment is the one the plugin was tested with (scripts/requirements-vllm.txt): a
drift fails with one line naming the package and both versions, never a silent skip."""
from importlib.metadata import version
from pathlib import Path

import pytest

PINS = Path(__file__).resolve().parents[2] / "scripts" / "requirements-vllm.txt"


def _pins():
    for line in PINS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, want = line.partition("==")
            yield name, want


@pytest.mark.parametrize("name,want", list(_pins()))
def test_pinned_version(name, want):
    have = version(name).split("+")[0]  # torch's local version (+cu130) is the wheel's build
    assert have == want, f"{name} {have} installed, {want} pinned (scripts/requirements-vllm.txt)"
