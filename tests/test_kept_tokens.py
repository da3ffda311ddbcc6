"""Kept outputs as a token control across runs (verify/importer/kept_tokens.py)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from verify.importer import kept_tokens

LONG = [[1, 2, 3, 4], [5, 6, 7, 8]]


def _archive(folder: Path, name: str, members: dict[str, list | dict]) -> None:
    (folder / "raw").mkdir(exist_ok=True)
    with tarfile.open(folder / "raw" / name, "w:xz") as tar:
        for member, outputs in members.items():
            data = json.dumps(outputs).encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_members_name_their_builds_and_config(gpu_results_root: Path):
    _archive(gpu_results_root / "0.22.0", "tokens-a.tar.xz",
             {"patched-and-series-presence-k20p95-b2-l3.json": [[1, 2, 3], [4, 5, 6]],
              "notes.txt": []})  # fmt: skip
    (kept,) = kept_tokens.load("0.22.0")
    assert kept.builds == ("patched", "series") and kept.sampling == "presence-k20p95"
    assert (kept.batch, kept.length, kept.outputs[1]) == (2, 3, (4, 5, 6))


def test_a_build_differing_from_itself_on_a_common_prefix_is_found(gpu_results_root: Path):
    folder = gpu_results_root / "0.22.0"
    _archive(
        folder, "tokens-long.tar.xz", {"pristine-pen-b2-l4.json": [[1, 2, 3, 4], [5, 6, 7, 8]]}
    )
    _archive(folder, "tokens-short.tar.xz", {"pristine-pen-b2-l2.json": [[1, 2], [5, 6]]})
    assert kept_tokens.disagreement("0.22.0", "pristine", "pen-b2-l9") is None  # prefixes agree
    _archive(folder, "tokens-short.tar.xz", {"pristine-pen-b2-l2.json": [[1, 2], [5, 9]]})
    kept_tokens._read.cache_clear()
    found = kept_tokens.disagreement("0.22.0", "pristine", "pen-b2-l9")
    assert found and "request 1 from step 1 (6 vs 9)" in found
    assert kept_tokens.disagreement("0.22.0", "patched", "pen-b2-l9") is None  # another build
    assert kept_tokens.disagreement("0.22.0", "pristine", "pen-b4-l9") is None  # another batch


def test_outputs_of_another_output_distribution_are_not_compared(gpu_results_root: Path):
    folder = gpu_results_root / "0.22.0"
    _archive(folder, "tokens-unscaled.tar.xz", {"pristine-pen-b2-l2.json": [[1, 2], [5, 6]]})
    nats = {"output_entropy": "1.00 nats"}
    _archive(folder, "tokens-1nat.tar.xz", {"run.json": nats, "pristine-pen-b2-l4.json": LONG})
    _archive(folder, "tokens-1nat-short.tar.xz",
             {"run.json": nats, "pristine-pen-b2-l2.json": [[1, 2], [5, 9]]})  # fmt: skip
    assert kept_tokens.disagreement("0.22.0", "pristine", "pen-b2-l9") is None  # one unscaled
    found = kept_tokens.disagreement("0.22.0", "pristine", "pen-b2-l9", "1.00 nats")
    assert found and "tokens-1nat" in found and "tokens-unscaled" not in found


def test_the_token_control_fails_where_kept_outputs_disagree(gpu_results_root: Path):
    """Across engine starts: the baseline agreeing with its second engine is not enough when
    another run of its build kept a differing prefix: the verdict is inconclusive, not fail."""
    from verify.ab import rounds as ab_rounds
    from verify.importer import gpu_engine_ab

    base, twin, cell = (f"{b}/pen-b2-l4" for b in ("pristine", "pristine2", "patched"))
    rounds = [ab_rounds.Round(0, (base,), {base: {"token_ids_hash": "a"}}),
              ab_rounds.Round(1, (twin,), {twin: {"token_ids_hash": "a"}}),
              ab_rounds.Round(2, (cell,), {cell: {"token_ids_hash": "b"}})]  # fmt: skip
    verdict = gpu_engine_ab._tokens(rounds, base, cell, twin, "tokens", ("0.22.0", None))
    assert verdict.outcome == "fail"  # the control agrees and nothing else was kept
    folder = gpu_results_root / "0.22.0"
    _archive(
        folder, "tokens-long.tar.xz", {"pristine-pen-b2-l4.json": [[1, 2, 3, 4], [5, 6, 7, 8]]}
    )
    _archive(folder, "tokens-short.tar.xz", {"pristine-pen-b2-l2.json": [[1, 2], [5, 9]]})
    verdict = gpu_engine_ab._tokens(rounds, base, cell, twin, "tokens", ("0.22.0", None))
    assert verdict.outcome == "inconclusive" and "request 1 from step 1" in verdict.reason
