"""verify.body: failing checks always in the body's table; the penalty-cost table."""

from __future__ import annotations

from types import SimpleNamespace

from verify import body

KEY = """Penalty cost: ...

| B | L | sampling | pristine cost | series cost | patched cost | pristine on MRV2 cost | a | b | GPU, model: run(s) |
|---|---|---|---|---|---|---|---|---|---|
| 32 | 2048 | no top-k/top-p, seeded | 38.1% | 14.2% | 1.6% | - | - | - | H200, qwen3-0.6b-random: d1 |
| 128 | 512 | top-k/top-p, seeded | 15.2% | - | 0.1% | 1.0% | - | - | H200, qwen3-8b, 1.00 nats: d2 |
"""  # noqa: E501


def _ev(states: list[str], key: str = "") -> SimpleNamespace:
    rows = [(f"step{i}", state, f"detail {i}", [{"key_table": key}]) for i, state in
            enumerate(states)]  # fmt: skip
    return SimpleNamespace(rows=rows, version="0.22.0")


def test_failing_rows_come_first_and_are_never_cut():
    ev = _ev(["pass", "pass", "fail", "no difference resolved", "fail"])
    shown = body.shown_rows(ev, 3)
    assert [r[0] for r in shown] == ["step2", "step4", "step0"]
    assert [r[0] for r in body.shown_rows(ev, 1)] == ["step2", "step4"]  # past the limit


def test_steps_that_do_not_apply_come_after_the_others():
    ev = _ev(["not applicable", "pass", "no difference resolved"])
    assert [r[0] for r in body.shown_rows(ev, 2)] == ["step1", "step2"]


def test_the_cost_table_keeps_production_shapes_and_plain_words():
    table = body.cost_table(_ev(["pass"], KEY))
    assert table[1].startswith("| B | L | sampling | penalty cost v0.22.0 | this PR |")
    rows = [r for r in table if r.startswith("| 128")]
    assert rows == ["| 128 | 512 | top-k/top-p, seeded | 15.2% | 0.1% | 1.0% | "
                    "H200, qwen3-8b, 1.00 nats: d2 |"]  # fmt: skip
    assert not any("random" in r or "pristine" in r or "series" in r for r in table)
    assert body.cost_table(_ev(["pass"])) == []


MRV2_KEY = """| B | L | sampling | penalty cost v0.22.0 (MRV2) | penalty cost this PR (MRV2) | GPU, model |
|---|---|---|---|---|---|
| 128 | 512 | pen vs plain | 1.1% [1.0%, 1.2%], n=5 | 1.8% [1.5%, 2.1%], n=5 | H200, qwen3-8b |
"""  # noqa: E501


def test_a_narrow_cost_table_is_shown_as_it_is_and_a_stale_one_not_at_all():
    table = body.cost_table(_ev(["pass"], MRV2_KEY))
    assert table[1] == MRV2_KEY.splitlines()[0]
    assert table[3] == MRV2_KEY.splitlines()[2]
    assert body.cost_table(_ev(["pass (stale)"], MRV2_KEY)) == []
    assert body.cost_table(_ev(["pass (stale)"], KEY)) == []


def test_the_profile_sentence_of_the_cost_record_follows_its_table():
    ev = _ev(["pass"], MRV2_KEY)
    ev.rows[0][3][0]["numbers"] = {"profile": {"summary": "GPU time a penalized step adds: x"}}
    table = body.cost_table(ev)
    assert table[-2:] == ["", "GPU time a penalized step adds: x"]
    assert body.cost_table(_ev(["pass"], MRV2_KEY))[-1] == MRV2_KEY.splitlines()[2]
