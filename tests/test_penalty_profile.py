"""The GPU profile reader (verify/importer/penalty_profile.py): torch.profiler's CUDA tables of
a plain and a penalized config -> the GPU time a penalized step adds, per build."""

from __future__ import annotations

import json

import pytest

from verify.importer import gpu
from verify.importer import penalty_profile as pp

COLUMNS = ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
           "Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg", "# of Calls")  # fmt: skip
HEAD = "  ".join(COLUMNS)


def table(rows: dict[str, float], total_ms: float) -> str:
    """A torch.profiler key_averages table: `rows` {name: self CUDA ms}, then the host table."""
    lines = ["-" * 40, HEAD, "-" * 40]
    for name, ms in rows.items():
        lines.append(f"{name}  0.00%  0.000us  0.00%  0.000us  0.000us  {ms:.3f}ms  1.00%  "
                     f"{ms:.3f}ms  1.000us  64")  # fmt: skip
    lines += ["-" * 40, "Self CPU time total: 1.000ms", f"Self CUDA time total: {total_ms:.3f}ms"]
    return "\n".join(lines) + "\n\n" + "host table, not read\nSelf CUDA time total: 1.000s"


def profile_dir(tmp_path, build: str, plain: dict, pen: dict, totals=(640.0, 652.8)):
    folder = tmp_path / f"v1-{build}"
    folder.mkdir()
    configs = {"plain-k20p95-b32-l64": {"config": {"batch": 32, "output_len": 64}},
               "presence-k20p95-b32-l64": {"config": {"batch": 32, "output_len": 64}}}  # fmt: skip
    summary = {"model_runner": "V1", "output_entropy": {"measured_nats": 1.0}, "configs": configs}
    if build == "pristine":
        summary["machine"] = {"gpu": "NVIDIA H100 80GB HBM3"}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "plain-k20p95-b32-l64.txt").write_text(table(plain, totals[0]))
    (folder / "presence-k20p95-b32-l64.txt").write_text(table(pen, totals[1]))
    return folder / "summary.json"


def test_the_first_table_is_read_and_rows_of_one_shown_name_add_up():
    total, rows = pp.gpu_table(table({"aten::mul": 1.5, "void at::k...": 2.0}, 10.0))
    assert total == 10_000.0 and rows == {"aten::mul": 1500.0, "void at::k...": 2000.0}
    doubled = table({"void at::k...": 2.0}, 4.0).replace("\n" + "-" * 40 + "\nSelf CPU", "\n" +
        "void at::k...  0.00%  0.000us  0.00%  0.000us  0.000us  2.000ms  1.00%  2.000ms  1.000us"
        "  64\n" + "-" * 40 + "\nSelf CPU", 1)  # fmt: skip
    assert pp.gpu_table(doubled)[1] == {"void at::k...": 4000.0}
    with pytest.raises(ValueError, match="not a torch.profiler CUDA table"):
        pp.gpu_table("a cProfile text")


def test_a_build_adds_its_penalized_step_time_and_names_the_ops_that_add_most(tmp_path):
    plain = {"aten::mm": 500.0, "aten::mul": 0.0}
    pen = {"aten::mm": 500.05, "aten::mul": 8.0, "void at::elementwise...": 8.0, "aten::gt": 3.0}
    got = pp.build_profile(profile_dir(tmp_path, "pristine", plain, pen))
    assert got["runner"] == "V1" and got["build"] == "pristine" and got["steps"] == 64
    assert got["added_gpu_us_per_step"] == pytest.approx(12_800 / 64)
    assert got["added_share"] == pytest.approx(12.8 / 640)
    # template kernels repeat their op's time; 0.05 ms over 64 steps is below the floor
    assert list(got["top_added_us_per_step"]) == ["aten::mul", "aten::gt"]
    assert got["top_added_us_per_step"]["aten::mul"] == pytest.approx(8000 / 64)


def test_the_line_gives_each_build_and_the_penalized_step_against_the_release(tmp_path):
    base = pp.build_profile(profile_dir(tmp_path, "pristine", {}, {"aten::mul": 12.8}))
    ours = pp.build_profile(
        profile_dir(tmp_path, "patched", {}, {"_k": 0.64}, totals=(640.0, 640.64))
    )
    text = pp.line([base, ours], "0.22.0")
    assert "v0.22.0 +200 µs (2.0%: aten::mul 200 µs)" in text
    assert "this PR +10 µs (0.1%: _k 10 µs; its penalized step -190 µs against v0.22.0's)" in text
    assert "presence 1.5 vs none (top-k 20, top-p 0.95, temperature 1)" in text
    assert "(torch.profiler, NVIDIA H100 80GB HBM3, V1," in text
    assert "(torch.profiler, GPU not recorded, V1," in pp.line([ours], "0.22.0")
    assert pp.line([], "0.22.0") is None


def test_a_record_without_profiles_is_left_as_it_is(monkeypatch):
    record = {"step": "e2e-gpu-penalty-cost", "numbers": {"n": 1}, "tables": ["t"]}
    monkeypatch.setattr(pp, "profiles", lambda *a: [])
    assert pp.attach(record, "0.22.0", "V1") == record


def test_both_cost_records_name_their_profiles_in_the_registry():
    cost = gpu.params("0.22.0", "e2e-gpu-penalty-cost")
    assert cost["goal_gpu"] == "H100" and cost["profiles"].endswith("/summary.json")
    assert gpu.params("0.22.0", "e2e-gpu-mrv2-penalty-rows-cost")["profiles"] == cost["profiles"]
    assert gpu.params("0.22.0", "no-such-record") == {}
