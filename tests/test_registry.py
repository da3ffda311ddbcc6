"""patches/registry/: one entry per patch of every series, each naming a patch that exists."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from verify import registry
from verify.errors import PatchbenchError
from verify.paths import PACKAGE_PARENT
from verify.series import read_series
from verify.versions import PINNED

PATCHES_DIR = PACKAGE_PARENT / "patches"
COMMITTED_RESULTS = Path(__file__).resolve().parent.parent / "results"

PINS = list(PINNED)


def test_every_series_patch_has_exactly_one_entry_and_every_entry_a_patch() -> None:
    assert registry.validate(PINS) == []


def test_every_recorded_step_names_records_or_says_why_not() -> None:
    for entry in registry.load().values():
        for step in entry.steps:
            assert step.records or step.not_applicable or step.note, (entry.slug, step.title)


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    reg = tmp_path / "registry"
    shutil.copytree(PATCHES_DIR / "registry", reg)
    return reg, PATCHES_DIR


def test_a_patch_without_an_entry_is_named(tmp_path: Path) -> None:
    reg, patches = _copy(tmp_path)
    (reg / "mrv2-skip-fp32-logits-copy.toml").unlink()
    problems = registry.validate(PINS, reg, patches)
    assert any("0.22.0/0001" in p and "0 registry entries" in p for p in problems)


def test_an_entry_naming_no_patch_is_named(tmp_path: Path) -> None:
    reg, patches = _copy(tmp_path)
    path = reg / "recovered-tokens-split-vocab.toml"
    path.write_text(path.read_text().replace("Split the vocabulary", "Split the vocab"))
    problems = registry.validate(PINS, reg, patches)
    assert any("recovered-tokens-split-vocab" in p and "no patch" in p for p in problems)


def test_renumbering_keeps_the_link() -> None:
    patch = read_series("0.22.0")[5]
    renamed = type(patch)("0099-renamed.patch", patch.path, patch.subject, patch.body, {})
    assert registry.entry_for(renamed, "0.22.0").slug == "recovered-tokens-split-vocab"


@pytest.mark.parametrize(
    "text, message",
    [
        ("title = ", "not valid TOML"),
        ('title = "x"', "missing"),
    ],
)
def test_bad_entries_are_named_errors(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad-entry.toml").write_text(text)
    with pytest.raises(PatchbenchError, match=message):
        registry.load(tmp_path)


def test_unknown_step_rule_is_a_named_error(tmp_path: Path) -> None:
    src = (PATCHES_DIR / "registry" / "mrv2-skip-fp32-logits-copy.toml").read_text()
    (tmp_path / "x.toml").write_text(src.replace('rule = "tests"', 'rule = "vibes"', 1))
    with pytest.raises(PatchbenchError, match="unknown rule 'vibes'"):
        registry.load(tmp_path)


def test_two_headline_steps_are_a_named_error(tmp_path: Path) -> None:
    src = (PATCHES_DIR / "registry" / "mrv2-skip-fp32-logits-copy.toml").read_text()
    marked = src.replace("[[steps]]\n", "[[steps]]\nheadline = true\n")
    assert marked.count("headline = true") > 1
    (tmp_path / "x.toml").write_text(marked)
    with pytest.raises(PatchbenchError, match="more than one headline step"):
        registry.load(tmp_path)


def test_diff_hash_ignores_the_message_but_not_the_code(tmp_path: Path) -> None:
    patch = read_series("0.22.0")[0]
    copy = tmp_path / patch.name
    text = patch.path.read_text()
    copy.write_text(text.replace("Why:", "Why (reworded):", 1))
    reworded = type(patch)(patch.name, copy, patch.subject, patch.body, patch.trailers)
    assert registry.diff_hash(reworded) == registry.diff_hash(patch)
    copy.write_text(text.replace("\n+", "\n+ ", 1))
    assert registry.diff_hash(reworded) != registry.diff_hash(patch)


def test_harness_hash_follows_file_content(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    first = registry.harness_hash(["a.py"], tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert registry.harness_hash(["a.py"], tmp_path) != first
    assert registry.harness_hash([], tmp_path) == "none"


def test_every_committed_record_is_attributed_to_a_patch() -> None:
    """Over the checkout's own results/ (the suite's results folder is empty)."""
    from verify import results

    checked = []
    for version in PINS:
        for record in results.load_all(version, COMMITTED_RESULTS):
            if record["outcome"] == "not run":
                continue  # e.g. a seed's tests all skipped on a pin that carries no such patch
            assert registry.attributed(version, record["step"]), record["_path"]
            checked.append(record["step"])
    assert len(checked) > len(PINS), f"no committed records under {COMMITTED_RESULTS}"


def test_a_harness_proof_is_no_patch_evidence(tmp_path: Path) -> None:
    from verify.importer import gpu_engine_resolution

    assert gpu_engine_resolution.STEP in registry.harness_proofs()
    assert registry.patches_for_record("0.22.0", gpu_engine_resolution.STEP) == []
    assert not registry.attributed("0.22.0", "no-such-record")
    src = (registry.registry_dir() / "penalty-state-device.toml").read_text()
    (tmp_path / "x.toml").write_text(
        src.replace('records = ["upstream-tests"]', 'records = ["gpu-engine-resolution"]', 1)
    )
    assert any("names harness proof(s) gpu-engine-resolution" in p
               for p in registry.validate(PINS, tmp_path))  # fmt: skip


def test_cli_check_passes_on_the_committed_registry(capsys) -> None:
    assert registry.main(["check"]) == 0
    assert "0 problem(s)" in capsys.readouterr().out


def _registry_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of patches/ (series and registry) that `registry check` reads."""
    shutil.copytree(PATCHES_DIR, tmp_path / "patches")
    monkeypatch.setenv("PATCHBENCH_PATCHES_DIR", str(tmp_path / "patches"))
    return tmp_path / "patches" / "registry"


def test_cli_check_fails_on_an_entry_with_no_step_that_can_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, bad_input
) -> None:
    entry = _registry_copy(tmp_path, monkeypatch) / "pooling-prompt-ids-no-device-copy.toml"
    text = entry.read_text().replace("[[steps]]\n", '[[steps]]\nnot_applicable = "no run"\n')
    entry.write_text(text)
    assert registry.main(["check"]) == 1
    lines = [x for x in capsys.readouterr().out.splitlines() if "can fail" in x]
    assert lines and lines[0].startswith(
        "registry pooling-prompt-ids-no-device-copy: no step on pin 0.22.0 can fail"
    )
    assert "kind, title, device, rule, records, command, e.g. [[steps]] kind = " in lines[0]
    bad_input("a registry entry whose every step is `not_applicable`", lines[0])


@pytest.mark.parametrize(
    "edit, what, message",
    [
        (lambda t: t.replace("title = ", "title ", 1), "a TOML syntax error",
         "registry file recovered-tokens-tiled-kernel.toml: not valid TOML (Expected '='"),
        (lambda t: t.replace("why = ", "reason = ", 1), "a missing `why` key",
         "registry recovered-tokens-tiled-kernel: missing why; an entry needs title, devices"),
        (lambda t: t.replace("\ncommand = ", "\ncmd = ", 1), "a step without `command`",
         "registry recovered-tokens-tiled-kernel: a step lacks command; a step needs kind"),
        (lambda t: t.replace('runners = ["V1"]', 'runners = ["V3"]'), "an unknown runner",
         "registry recovered-tokens-tiled-kernel: runners = ['V3']; name the model runner(s)"),
        (lambda t: re.sub(r'reaches = ".*"', 'reaches = ""', t), "an empty `reaches`",
         "registry recovered-tokens-tiled-kernel: reaches is empty; say which requests"),
        (lambda t: re.sub(r'\ndiffers = ".*"', "", t, count=1), "a related item without `differs`",
         "registry recovered-tokens-tiled-kernel: a [[related]] item lacks differs"),
        (lambda t: t.replace('state = "merged"', 'state = "merged-in 0.17.0"', 1),
         "a related item with an unknown state",
         "registry recovered-tokens-tiled-kernel: related #34974: bad state 'merged-in 0.17.0'"),
        (lambda t: t.replace('state = "merged"', 'state = "open"', 1),
         "a backport of an unmerged PR",
         "registry recovered-tokens-tiled-kernel: related #34974: bad a backport of an unmerged"),
    ],
)  # fmt: skip
def test_cli_check_prints_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, bad_input, edit, what, message
) -> None:
    entry = _registry_copy(tmp_path, monkeypatch) / "recovered-tokens-tiled-kernel.toml"
    entry.write_text(edit(entry.read_text()))
    assert registry.main(["check"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"error: {message}")
    bad_input(f"`python -m verify.registry check` on a registry entry with {what}", err.strip())


def test_a_merged_in_patch_must_be_a_backport_of_its_upstream_pr(tmp_path, monkeypatch) -> None:
    entry = _registry_copy(tmp_path, monkeypatch) / "recovered-tokens-tiled-kernel.toml"
    entry.write_text(entry.read_text().replace('relation = "backport"\n', ""))
    from verify import pins

    own = [v for v in PINNED if v not in pins.with_key("ported_from")]  # a copy follows no port
    problems = registry.validate(own, tmp_path / "patches" / "registry")
    assert problems == [
        "registry recovered-tokens-tiled-kernel: 0.16.0/0001-Kernel-Tile-the-vocabulary-in-"
        "sample_recovered_token.patch says merged-in 0.17.0 (Upstream: https://github.com/"
        'vllm-project/vllm/pull/34974); add that PR under [[related]] with state = "merged" '
        'and relation = "backport"'
    ]


def test_every_entry_lists_related_upstream_work() -> None:
    for entry in registry.load().values():
        assert entry.related, entry.slug
        assert all(r.checked and r.state in registry.RELATED_STATES for r in entry.related)


@pytest.mark.parametrize(
    ("field", "text", "problem"),
    [
        ("future_plan", "Bound B=32 within 1.1% [0.5%, 1.7%] first.", "a measured figure ('1.1%')"),
        ("how", "The launcher halves host time (7.5 us per call).", "a measured figure ('7.5 us')"),
        ("future_plan", "As session 30 showed, profile first.", "a session or issue number"),
        ("why", "Seen on 2026-11-28 on the lent machine.", "a date"),
        ("why", "Slow on the H100 only.", "a machine name ('H100')"),
        ("future_plan", "Propose upstream." * 20, "future_plan is 340 characters (at most 300)"),
    ],
)
def test_registry_prose_holds_no_figures_or_history(tmp_path, field, text, problem) -> None:
    src = (registry.registry_dir() / "recovered-tokens-tiled-kernel.toml").read_text()
    lines = [f"{field} = {json.dumps(text)}" if ln.startswith(f"{field} = ") else ln
             for ln in src.splitlines()]  # fmt: skip
    (tmp_path / "x.toml").write_text("\n".join(lines) + "\n")
    assert any(problem in p for p in registry.validate(PINS, tmp_path)), problem


def test_the_committed_registry_prose_is_within_its_rules() -> None:
    for entry in registry.load().values():
        assert registry.prose_problems(entry) == [], entry.slug


def test_a_speed_step_without_a_threshold_is_a_problem(tmp_path: Path) -> None:
    src = (registry.registry_dir() / "mrv2-skip-fp32-logits-copy.toml").read_text()
    assert "threshold = 0.01" in src
    (tmp_path / "x.toml").write_text(src.replace("threshold = 0.01\n", "", 1))
    problems = registry.validate(PINS, tmp_path)
    assert any(p.startswith("registry x: step ") and "states no threshold" in p for p in problems)


def test_a_records_threshold_comes_from_every_step_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """registry.threshold: the one value the steps naming the record state; a named error
    where none states one, they disagree, or no step names the record."""
    assert registry.threshold("0.22.0", "e2e-gpu-penalties-v1") == 0.02  # five entries agree
    assert registry.threshold("0.22.0", "gpu-serve-ab") == 0.01
    with pytest.raises(registry.ThresholdError, match="no step"):
        registry.threshold("0.22.0", "no-such-record")
    reg = _registry_copy(tmp_path, monkeypatch)
    entry = reg / "penalty-state-device.toml"
    entry.write_text(entry.read_text().replace("threshold = 0.02\n", "threshold = 0.05\n", 1))
    with pytest.raises(registry.ThresholdError, match="penalty-state-device: 0.05"):
        registry.threshold("0.22.0", "e2e-gpu-penalties-v1")


def test_importers_take_speed_thresholds_from_the_registry() -> None:
    """No judge call in verify/importer passes a numeric literal (a threshold written in code):
    every speed rule's threshold is the registry's (registry.threshold)."""
    import ast

    judges = {"judge", "judge_shapes", "_identity_and_speed", "judge_lengths"}
    found = []
    for path in sorted((PACKAGE_PARENT / "verify" / "importer").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            values = [*node.args, *(k.value for k in node.keywords)]
            literal = [v.value for v in values if isinstance(v, ast.Constant)
                       and isinstance(v.value, float)]  # fmt: skip
            if name in judges and literal:
                found.append(f"{path.name}:{node.lineno} {name}({literal})")
    assert found == []


def test_the_steps_naming_a_record_are_found_on_their_pin() -> None:
    found = registry.naming("0.22.0", "e2e-gpu-penalty-cost")
    assert [(e.slug, st.records) for e, st in found] == [
        ("penalty-state-device", ("e2e-gpu-penalty-cost",))
    ]
    assert registry.naming("0.22.0", "no-such-record") == []
