"""Reports: PR-template order, evidence per patch from the registry, outcomes a reviewer can
trust (not applicable / not run / stale), numbers from records only, paste-ready size."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TRAILERS, commit_change
from verify import body, registry, report, runners
from verify.errors import PatchbenchError
from verify.series import read_series, series_hash

REPO = Path(__file__).resolve().parents[1]
ENTRY = """title = "Faster penalties"
devices = ["cpu"]
upstream_figure = "PR #1: 2x faster"
why = "The penalty build grows with L."
how = "Build it once."
future_plan = "Upstream it."
runners = ["V1"]
reaches = "V1 decode steps with a penalty"

[pins]
"9.9.0" = "[Perf] Faster penalties"

[[steps]]
kind = "equivalence"
title = "Equivalence"
device = "cpu"
rule = "tests"
records = ["equivalence-x"]
command = "pytest tests/equivalence/test_x.py"
harness = ["tests/equivalence/test_x.py"]

[[steps]]
kind = "microbench"
title = "Penalty build A/B"
device = "cpu"
rule = "performance"
records = ["microbench-x"]
command = "python scripts/bench_x.py --lengths 256,4096   (this project)"

[[steps]]
kind = "upstream-tests"
title = "Upstream tests"
device = "cpu"
rule = "tests"
records = ["upstream-x"]
upstream = true
command = "pytest tests/v1/sample/test_penalties.py"

[[steps]]
kind = "serve-bench"
title = "Serving benchmark"
device = "cpu"
rule = "serve-bench"
records = ["serve-x"]
command = "vllm bench serve --model $MODEL"

[[steps]]
kind = "e2e"
title = "Generation A/B (GPU)"
device = "cuda"
rule = "identity"
records = []
command = "-"
not_applicable = "CUDA logits keep the dense path"
"""


#: A pin's vllm/config/vllm.py, reduced to what decides its runner (verify.runners).
CONFIG_22 = """
DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES = frozenset({"Qwen3ForCausalLM"})


class VllmConfig:
    def _is_default_v2_model_runner_model(self):
        return not self.model_config.is_moe

    def _get_v2_model_runner_unsupported_features(self):
        unsupported = []
        if self.spec.method in ("ngram", "ngram_gpu"):
            unsupported.append("ngram speculative decoding")
        elif self.spec.method not in ("eagle", "mtp"):
            unsupported.append(f"speculative method '{self.spec.method}'")
        return unsupported
"""
TEMPLATE_22 = """<!-- markdownlint-disable -->
PLEASE FILL IN THE PR DESCRIPTION HERE.

## Purpose

## Test Plan

## Test Result

---
<details>
<summary> Checklist </summary>

- [ ] The purpose of the PR.
</details>

**BEFORE SUBMITTING** (anything below is removed)
"""
TEMPLATE_33 = """<!-- markdownlint-disable -->

## Overview

<!-- Summarize the change in 1-2 lines. -->

## Claims

## Validation

## Details

---

<details>
<summary> Pull Request Checklist </summary>

- [ ] **Design Fit:** ...
</details>
"""


def _record(step, outcome, reason="", numbers=None, patches=None, series="current"):
    return {
        "schema": 2, "step": step, "seed": "x", "vllm_version": "9.9.0", "series_hash": series,
        "patches": patches or {}, "harness_hash": "none",
        "machine": {"cpu": "AMD EPYC", "python": "3.11.7", "gpu": None},
        "date": "2026-11-23T00:00:00+00:00", "command": "nox -s x /root/secret/path",
        "outcome": outcome, "reason": reason, "numbers": numbers or {}, "tables": [],
    }  # fmt: skip


@pytest.fixture
def built(make_tree, workspace):
    return _build(make_tree, workspace)


def _build(
    make_tree,
    workspace,
    extra=None,
    entry=ENTRY,
    template: str | None = TEMPLATE_22,
    config: str | None = CONFIG_22,
):
    """(index, the patch's report) of a one-patch release with records of some steps;
    `extra`: {file name: (step, outcome, other fields)}: more records of the current patch;
    `entry`: the patch's registry entry; `template`: the build tree's PR template (None: none);
    `config`: its vllm/config/vllm.py (None: none)."""
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(
        tree, "vllm/sampler.py", "x + 1\n", "x - 1\n", "[Perf] Faster penalties", TRAILERS
    )
    tree.export()
    if template is not None:  # after the export: the file is the sdist's, not a change
        (tree.path / ".github").mkdir(exist_ok=True)
        (tree.path / body.TEMPLATE).write_text(template)
    if config is not None:
        (tree.path / "vllm" / "config").mkdir(parents=True, exist_ok=True)
        (tree.path / runners.SOURCE).write_text(config)
    patches = workspace / "patches"
    (patches / "registry").mkdir()
    (patches / "registry" / "faster-penalties.toml").write_text(entry)
    patch = read_series("9.9.0", patches)[0]
    own = {"faster-penalties": registry.diff_hash(patch)}
    current = series_hash("9.9.0", patches)
    ratio = {"ratio": 0.5, "low": 0.45, "high": 0.55, "n": 6, "mde": 0.04}
    records = {
        "eq.json": _record(
            "equivalence-x", "pass", patches=own, series=current,
            numbers={"passed": 9, "files": {
                "tests/equivalence/test_x.py": {"passed": 3, "failed": 0, "skipped": 0},
                "tests/equivalence/test_other_patch.py": {"passed": 6, "failed": 0, "skipped": 0},
            }},
        ) | {"harness_hash": registry.harness_hash(["tests/equivalence/test_x.py"])},
        "bench.json": _record(
            "microbench-x", "pass", "faster: time 0.500 [0.450, 0.550], n=6",
            numbers={"time_patched_over_pristine": ratio}, patches=own, series=current,
        ),
        "up.json": _record(
            "upstream-x", "pass", patches={"faster-penalties": "0ld0ld0ld0ld"}, series=current
        ),
    }  # fmt: skip
    for name, (step, outcome, fields) in (extra or {}).items():
        records[name] = _record(step, outcome, patches=own, series=current) | fields
    out = workspace / "results" / "cpu" / "9.9.0"
    out.mkdir(parents=True)
    for name, data in records.items():
        (out / name).write_text(json.dumps(data))
    index = report.build(
        "9.9.0", workspace / "reports", patches, workspace / "results", workspace / "build"
    )
    return index, (index.parent / "0001-Perf-Faster-penalties.md").read_text()


def test_body_is_the_pins_template_with_the_headline_first(built):
    _, text = built
    assert text.index("## Purpose") < text.index("## Test Plan") < text.index("## Test Result")
    head = "\n".join(text.splitlines()[: body.HEAD_LINES])
    assert "Faster penalties." in head
    assert "faster: time 0.500 [0.450, 0.550], n=6 vs v9.9.0 (CPU (AMD EPYC))" in head
    assert text.rstrip().endswith("(anything below is removed)")  # the checklist as shipped
    assert "PLEASE FILL" not in text


def test_a_newer_template_gets_its_own_sections(make_tree, workspace):
    _, text = _build(make_tree, workspace, template=TEMPLATE_33)
    names = [line for line in text.splitlines() if line.startswith("## ")]
    assert names == ["## Overview", "## Claims", "## Validation", "## Details"]
    assert "faster: time 0.500" in "\n".join(text.splitlines()[: body.HEAD_LINES])
    assert "<summary> Pull Request Checklist </summary>" in text


def test_a_pin_without_a_template_is_a_named_error(make_tree, workspace, monkeypatch):
    monkeypatch.setattr(body.sdist, "cache_dir", lambda: workspace / "no-cache")
    with pytest.raises(PatchbenchError, match="no .github/PULL_REQUEST_TEMPLATE.md"):
        _build(make_tree, workspace, template=None)


def test_an_unknown_template_section_is_a_named_error(make_tree, workspace):
    with pytest.raises(PatchbenchError, match="section 'Motivation'"):
        _build(make_tree, workspace, template=TEMPLATE_22.replace("Purpose", "Motivation"))


@pytest.mark.parametrize(
    "version, sections",
    [
        ("0.22.0", ["Purpose", "Test Plan", "Test Result"]),
        ("0.33.0", ["Overview", "Claims", "Validation", "Details"]),
    ],
)
def test_the_real_pins_templates(version, sections, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_BUILD_DIR", str(REPO / "build"))
    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(Path.home() / ".cache" / "vllm-patchbench"))
    try:
        tmpl = body.read_template(version)
    except PatchbenchError as exc:
        pytest.skip(f"no build tree or cached sdist of {version}: {exc}")
    assert tmpl.sections == sections
    assert tmpl.trailer[0] == "---" and "</details>" in tmpl.trailer


def test_the_registry_headline_step_is_the_headline(make_tree, workspace):
    serve = ("serve-x", "no difference resolved", {"reason": "throughput 1.01 [0.97, 1.05]"})
    serve_step = 'command = "vllm bench serve --model $MODEL"\n'
    entry = ENTRY.replace(serve_step, serve_step + "headline = true\n")
    _, text = _build(make_tree, workspace, {"serve.json": serve}, entry)
    assert "**Headline:** throughput 1.01 [0.97, 1.05] vs v9.9.0" in text
    assert "- no difference resolved" in text


def test_a_stale_headline_says_the_current_form_is_not_measured(make_tree, workspace):
    old = {"faster-penalties": "0ld0ld0ld0ld"}
    serve = ("serve-x", "pass", {"reason": "throughput 1.2 [1.1, 1.3]", "patches": old})
    serve_step = 'command = "vllm bench serve --model $MODEL"\n'
    entry = ENTRY.replace(serve_step, serve_step + "headline = true\n")
    _, text = _build(make_tree, workspace, {"serve.json": serve}, entry)
    assert "current form is not yet measured" in text
    assert "to measure it: `vllm bench serve --model $MODEL`" in text
    assert "1.2 [1.1, 1.3]" not in text.split("## Test Plan")[0]


def test_a_resolved_adverse_effect_is_in_the_body(make_tree, workspace):
    itl = {"mean_itl_ms": {"ratio": 1.08, "ci95": [1.004, 1.163], "n": 12}}
    unresolved = {"p99_itl_ms": {"ratio": 1.3, "ci95": [0.8, 2.1], "n": 12}}
    serve = ("serve-x", "no difference resolved", {"numbers": itl | unresolved})
    _, text = _build(make_tree, workspace, {"serve.json": serve})
    assert "mean_itl_ms 1.080 [1.004, 1.163], n=12 this PR / v9.9.0" in text
    assert "p99_itl_ms" not in text


def test_each_step_states_its_own_outcome(built):
    _, text = built
    # Only this patch's own test file is counted, not the seed's other files.
    assert "| Equivalence | CPU | pass | 3 passed, 0 failed, 0 skipped |" in text
    assert (
        "| Generation A/B (GPU) | GPU | not applicable | CUDA logits keep the dense path |" in text
    )
    assert "| Serving benchmark | CPU | not run | no record of this step on this pin |" in text
    assert "| Upstream tests | CPU | pass (stale) | stale: patch changed" in text


def test_a_gpu_step_without_a_record_says_why_it_is_not_run(monkeypatch):
    step = registry.Step("e2e", "Cost A/B (GPU)", "cuda", "performance", ("x",), "-", note="n")
    cpu_step = registry.Step("e2e", "Cost A/B (CPU)", "cpu", "performance", ("x",), "-")
    monkeypatch.setattr(report.versions, "GPU_NOT_RUNNABLE", {"9.9.0": "needs torch 9"})
    assert report.why_not_run(step, "9.9.0") == "needs torch 9; n"
    assert report.why_not_run(step, "9.8.0") == "no record of this step on this pin; n"
    assert report.why_not_run(cpu_step, "9.9.0") == "no record of this step on this pin"


def test_test_plan_has_upstream_commands_apart_from_ours(built):
    _, text = built
    plan = text[text.index("## Test Plan") : text.index("## Test Result")]
    assert plan.index("On v9.9.0 with this PR applied") < plan.index("pytest tests/v1/sample")
    ours = plan.index("<details><summary>Checks against v9.9.0")
    assert ours < plan.index("pytest tests/equivalence/test_x") < plan.index("</details>")
    assert "# this project\npython scripts/bench_x.py --lengths 256,4096" in plan


def test_no_local_paths_and_paste_ready_size(built):
    index, text = built
    appendix = (index.parent / "0001-Perf-Faster-penalties-appendix.md").read_text()
    assert "/root/" not in text + appendix and "<local path>" in appendix
    assert len(text.splitlines()) <= body.MAX_LINES
    assert "The penalty build grows with L." in appendix  # the prose is kept beside the body


def test_a_long_body_moves_prose_then_rows_to_the_appendix(make_tree, workspace, monkeypatch):
    monkeypatch.setattr(body, "MAX_LINES", 46)
    _, text = _build(make_tree, workspace)
    assert len(text.splitlines()) <= 46
    assert "Build it once." not in text and "more checks in the appendix" in text


@pytest.mark.parametrize("word", ["pristine", "series", "patched", "planted", "A/B core"])
def test_plain_replaces_project_words(word):
    assert word not in body.plain(f"the {word} run: pristine/patched", "0.22.0")


def test_matrix_is_per_patch(built):
    index, _ = built
    matrix = index.read_text()
    row = next(line for line in matrix.splitlines() if "faster-penalties" in line)
    cells = [c.strip() for c in row.split("|")[3:-1]]
    assert cells[-1] == "not ready: upstream tests, identity, related work"
    assert dict(zip(report.KINDS, cells[:-1], strict=True)) == {
        "equivalence": "pass",
        "upstream-tests": "pass (stale)",
        "microbench": "pass",
        "kernel": "-",
        "e2e": "not applicable",
        "serve-bench": "not run",
        "gsm8k": "-",
        "embeddings": "-",
        "attribution": "-",
    }
    assert "Legend:" in matrix


def test_a_patch_without_registry_entry_is_a_named_error(make_tree, workspace, bad_input):
    """Issue 19 row 3: reports no longer join by a `test_NNN_` file in `Verify:` (TRAILERS
    names none); a patch the registry does not know is a named error that rewrites nothing."""
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "x + 1\n", "x - 1\n", "[Perf] Unknown", TRAILERS)
    tree.export()
    (workspace / "patches" / "registry").mkdir()
    earlier = workspace / "reports" / "9.9.0" / "0001-Perf-Unknown.md"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier report\n")
    with pytest.raises(PatchbenchError, match="no registry entry") as error:
        report.build("9.9.0", *(workspace / d for d in ("reports", "patches", "results", "build")))
    bad_input("`report` of a patch with no registry entry", str(error.value))
    assert earlier.read_text() == "an earlier report\n"  # the error rewrote nothing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("see /root/pb-work/s8/raw.json now", "see <local path> now"),
        ("the file .gpu/kvar/p_kS.py", "the file <local path>"),
        ("\\n../../../work/wt23/.venv/torch.py:365: 14 warnings", "\\n<local path> 14 warnings"),
        ("vocab 151936/2", "vocab 151936/2"),
    ],
)
def test_scrub_removes_machine_local_paths(text, expected):
    assert report.scrub(text) == expected


def test_a_failing_render_leaves_the_old_reports_in_place(built, workspace, monkeypatch):
    index, text = built
    (index.parent / "0009-gone.md").write_text("a report of a patch no longer in the series")
    before = {p.name: p.read_text() for p in index.parent.iterdir()}

    def broken(evidence):
        raise KeyError("key_table")

    monkeypatch.setattr(report, "render_appendix", broken)
    with pytest.raises(KeyError):
        report.build("9.9.0", *(workspace / d for d in ("reports", "patches", "results", "build")))
    assert {p.name: p.read_text() for p in index.parent.iterdir()} == before
    monkeypatch.undo()
    report.build("9.9.0", *(workspace / d for d in ("reports", "patches", "results", "build")))
    assert not (index.parent / "0009-gone.md").exists()  # a stale page goes once all rendered
    assert (index.parent / "0001-Perf-Faster-penalties.md").read_text() == text


def test_counts_of_a_record_with_several_pytest_runs():
    runs = {"shipped/pristine": {"passed": 3, "failed": 1, "skipped": 0}, "edited/patched": {}}
    record = _record("upstream-x", "pass", numbers={"runs": runs})
    assert report.counts([record]) == "shipped/pristine: 3 passed, 1 failed"


def test_counts_say_first_which_patch_explains_a_failure_only_the_series_has():
    runs = {"shipped/pristine": {"passed": 3, "failed": 1}, "shipped/patched": {"passed": 2,
            "failed": 2}}  # fmt: skip
    only = [{"test": "t", "patch": "0003-Perf-x.patch"}]
    record = _record("upstream-x", "pass", numbers={"runs": runs, "patched_only_failures": only,
                                                      "unexplained": []})  # fmt: skip
    assert report.counts([record]).startswith(
        "1 fail only once 0003 applies, each explained by that patch; shipped/pristine: 3 passed"
    )
    record["numbers"]["unexplained"] = ["t"]
    assert report.counts([record]).startswith("shipped/pristine: 3 passed")


def test_counts_of_an_identity_record():
    numbers = {"requests": 12, "identical_requests": 6, "control_identical_requests": 12}
    assert report.counts([_record("e2e-x", "fail", "differ", numbers=numbers)]) == (
        "6 of 12 requests identical (pristine with itself: 12 of 12)"
    )


def test_ratio_table_names_a_nested_group_once():
    r = {"ratio": 1.01, "low": 0.99, "high": 1.03, "n": 9, "mde": 0.02}
    numbers = {"top": r, "pooled": {"B=32 (5 runs: a long title)": {"cost": r, "A/A": r}}}
    rows = report.ratio_table(numbers)
    assert [row.split(" | ")[0] for row in rows[2:]] == [
        "| top",
        "| **pooled / B=32 (5 runs: a long title)**",
        "| cost",
        "| A/A",
    ]
    assert sum("a long title" in row for row in rows) == 1


BODIES = sorted(
    p for p in (REPO / "reports").glob("*/0*.md") if not p.name.endswith("-appendix.md")
)
#: Project words no committed body may use (verify.body.PLAIN says what it says instead).
VOCABULARY = re.compile(r"\b(series|pristine|A/B core|planted|pools?|turns|lent|sessions?)\b")


@pytest.mark.parametrize("path", BODIES, ids=lambda p: f"{p.parent.name}/{p.name[:4]}")
def test_committed_bodies_fit_speak_plainly_and_their_commands_parse(path):
    text = path.read_text()
    assert len(text.splitlines()) <= body.MAX_LINES
    assert "**Headline:**" in "\n".join(text.splitlines()[: body.HEAD_LINES])
    assert "- **Runner:** " in text  # the runner(s) the change reaches, from the registry
    assert re.search(r"\*\*Related upstream work\*\*|Backport of #\d+|This is upstream #\d+", text)
    prose = re.sub(r"```bash\n.*?```", "", text, flags=re.S)
    assert not VOCABULARY.search(prose), VOCABULARY.search(prose)
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        assert not re.search(r"<[^>\n]+>|=\.\.\.", block), block  # no placeholders to fill in
        run = subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True)
        assert run.returncode == 0, (block, run.stderr)


def test_the_template_is_read_from_the_cached_sdist_without_a_build_tree(tmp_path, monkeypatch):
    import io
    import tarfile

    from verify import sdist

    monkeypatch.setenv("PATCHBENCH_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    text = b"## Purpose\n\n## Test Plan\n\n## Test Result\n\n---\n<details>\n</details>\n"
    tarball = sdist.cached_path("9.9.0")
    tarball.parent.mkdir(parents=True)
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("vllm-9.9.0/.github/PULL_REQUEST_TEMPLATE.md")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    assert body.read_template("9.9.0").sections == ["Purpose", "Test Plan", "Test Result"]
    tarball.unlink()
    with pytest.raises(PatchbenchError, match="python -m verify apply 9.9.0"):
        body.read_template("9.9.0")


def test_a_records_own_headline_leads_the_body(make_tree, workspace):
    line = "penalized decode 1.18x [1.15, 1.20] vs v9.9.0, H200, qwen3-8b shape, n=11"
    serve = ("serve-x", "no difference resolved", {"reason": "a; b", "headline": line})
    serve_step = 'command = "vllm bench serve --model $MODEL"\n'
    entry = ENTRY.replace(serve_step, serve_step + "headline = true\n")
    _, text = _build(make_tree, workspace, {"serve.json": serve}, entry)
    assert f"**Headline:** {line}" in text.split("## Test Plan")[0]


def test_the_pin_readme_lists_its_harness_proofs(tmp_path):
    """Records that prove the harness (registry.harness_proofs) get a line each in the pin's
    README; a pin without them gets none."""
    from verify import report, results

    record = results.make(
        "gpu-penalty-history", "series", "0.22.0", "fail", reason="row 3 differs at step 9"
    )
    folder = tmp_path / "gpu" / "0.22.0"
    folder.mkdir(parents=True)
    (folder / "gpu-penalty-history.json").write_text(json.dumps(record))
    lines = report.harness_proofs("0.22.0", tmp_path)
    assert any("`gpu-penalty-history`" in line and "fail: row 3 differs" in line for line in lines)
    assert report.harness_proofs("0.16.0", tmp_path) == []
