"""Records keyed by patch: ids and diff hashes from the registry, staleness with a named reason."""

from __future__ import annotations

from pathlib import Path

from verify import results

SLUG = "penalty-staging-one-gather"


def _record(**changes):
    record = results.make(
        "equivalence-penalty-output-tokens", "penalty-output-tokens", "0.22.0", "pass"
    )
    record.update(changes)
    return record


def test_an_old_style_call_is_attributed_through_the_registry(tmp_path: Path) -> None:
    record = results.make("microbench-003-build", "003", "0.22.0", "pass")
    assert list(record["patches"]) == [SLUG]
    assert record["harness_hash"] != "none" and record["schema"] == 2
    path = results.write(record, "cpu", "x", root=tmp_path)
    assert path == tmp_path / "cpu" / "0.22.0" / "x.json"


def test_fresh_record_is_not_stale() -> None:
    assert results.staleness(_record(), SLUG, "0.22.0") == ""


def test_patch_changed_is_named() -> None:
    record = _record(patches={SLUG: "0" * 12})
    assert results.staleness(record, SLUG, "0.22.0").startswith("patch changed")


def test_harness_changed_is_named() -> None:
    assert results.staleness(_record(harness_hash="elsewhere"), SLUG, "0.22.0") == (
        "harness changed"
    )


def test_tree_not_the_stamped_series_is_named() -> None:
    reason = results.staleness(_record(stamped_series="abc"), SLUG, "0.22.0")
    assert reason.startswith("tree not the stamped series")


def test_legacy_record_of_another_series_is_stale() -> None:
    record = _record(series_hash="0ld5eri3s0")
    del record["patches"]
    assert "without per-patch hashes" in results.staleness(record, SLUG, "0.22.0")


def test_a_comment_edit_in_another_patch_does_not_stale_this_one() -> None:
    # Another patch's diff hash changing leaves this patch's evidence fresh.
    record = _record()
    record["patches"]["penalty-staging-copy-new-tokens"] = "f" * 12
    record["series_hash"] = "changed000"
    assert results.staleness(record, SLUG, "0.22.0") == ""


def test_machine_provenance_is_taken_as_given() -> None:
    machine = {"python": "3.12.3", "gpu": "H100", "cpu": results.UNKNOWN}
    record = results.make("kernel-010", "010", "0.22.0", "pass", machine=machine)
    assert record["machine"] == machine


def test_tree_stamp_names_a_tree_that_is_not_the_series(make_tree, workspace) -> None:
    from tests.conftest import commit_change

    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "x + 1\n", "x - 1\n", "[Perf] A change")
    tree.export()
    build, patches = workspace / "build", workspace / "patches"
    current = results.series_hash("9.9.0", patches)
    assert results.tree_stamp("9.9.0", build, patches) == current
    commit_change(tree, "vllm/sampler.py", "x - 1\n", "x - 2\n", "[Perf] Unexported")
    assert results.tree_stamp("9.9.0", build, patches) == f"differs from {current}"
    assert results.tree_stamp("1.2.3", build, patches) is None


def _cpuinfo(monkeypatch, text: str | None) -> None:
    """/proc/cpuinfo as `text`, or unreadable when None."""
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self) != "/proc/cpuinfo":
            return real(self, *args, **kwargs)
        if text is None:
            raise OSError("no /proc here")
        return text

    monkeypatch.setattr(Path, "read_text", read_text)


def test_cpu_model_is_read_from_cpuinfo(monkeypatch) -> None:
    _cpuinfo(monkeypatch, "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t: x\n")
    assert results.cpu_model() == "Test CPU 9000"


def test_cpu_model_falls_back_to_platform_never_empty(monkeypatch) -> None:
    _cpuinfo(monkeypatch, None)
    monkeypatch.setattr(results.platform, "processor", lambda: "")
    monkeypatch.setattr(results.platform, "machine", lambda: "aarch64")
    assert results.cpu_model() == "aarch64"


def test_the_ab_driver_records_the_same_cpu_model(monkeypatch) -> None:
    from verify.ab.__main__ import host_provenance

    _cpuinfo(monkeypatch, "model name\t: Test CPU 9000\n")
    assert host_provenance()["cpu"] == "Test CPU 9000" == results.cpu_model()
