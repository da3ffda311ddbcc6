"""Which equivalence modules run on a pin comes from the registry's harness lists."""

from __future__ import annotations

from pathlib import Path

from tests.equivalence.conftest import modules_named_on

EQUIVALENCE = Path(__file__).parent / "equivalence"


def test_every_equivalence_module_runs_on_some_pin():
    from verify.versions import PINNED

    named = set().union(*(modules_named_on(v) for v in PINNED))
    modules = {f"tests/equivalence/{p.name}" for p in EQUIVALENCE.glob("test_*.py")}
    assert modules <= named, sorted(modules - named)


def test_a_step_limited_to_other_pins_does_not_select_its_module():
    # recovered-tokens-in-vocab-guard's full check names 0.16.0 and 0.22.0; 0.18.1 runs the guard
    assert "tests/equivalence/test_recovered_tokens.py" in modules_named_on("0.16.0")
    assert "tests/equivalence/test_recovered_tokens.py" not in modules_named_on("0.18.1")
    assert "tests/equivalence/test_recovered_tokens_in_vocab.py" in modules_named_on("0.18.1")


def test_a_ported_pin_runs_the_modules_of_the_patches_it_carries():
    # 0.26.0 is ported from 0.22.0 and carries the device penalty state, not the MRV2 rows
    assert "tests/equivalence/test_penalty_state_device.py" in modules_named_on("0.26.0")
    assert "tests/equivalence/test_mrv2_penalty_rows.py" not in modules_named_on("0.26.0")
