"""scripts/gpu_mrv2_sampler_bench.py: the summary math (no torch) and a CPU end-to-end smoke run
(slow)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_mrv2_sampler_bench.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_mrv2_sampler_bench", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(rnd: int, variant: str, us: float, ids: str = "h") -> dict:
    return {
        "round": rnd,
        "shape": "random/b8",
        "variant": variant,
        "ok": True,
        "wall_us": us,
        "ids_hash": ids,
    }


def test_summary_pairs_rounds_and_checks_identity() -> None:
    m = _load()
    setup = {"ok": True, "ids_hash": "h", "first_ids": [1]}
    data = {
        "params": {"configs": {"random": {"temperature": 1.0}}, "batches": [8]},
        "setup": {
            "random/b8": {
                "pristine": {**setup, "copy_skipped": False},
                "patched": {**setup, "copy_skipped": True},
            }
        },
        "rounds": [
            _row(0, "pristine", 120.0),
            _row(0, "patched", 100.0),
            _row(1, "patched", 100.0),
            _row(1, "pristine", 110.0),
            _row(2, "pristine", 130.0),  # unpaired: patched failed in round 2
            {"round": 2, "shape": "random/b8", "variant": "patched", "ok": False, "error": "x"},
        ],
        "copy_ref": [{"round": 0, "batch": 8, "variant": "pristine", "ok": True, "wall_us": 9.0}],
    }
    e = m.summarize(data)["random/b8"]
    assert e["speedup"]["n"] == 2
    geo = (1.2 * 1.1) ** 0.5  # verify.stats: geometric mean of the paired ratios
    assert e["speedup"]["ratio"] == pytest.approx(geo)
    assert 0 < e["speedup"]["ci95_low"] < geo < e["speedup"]["ci95_high"]
    assert e["pristine"]["us_median"] == 120.0
    assert e["ids_identical"] is True and e["patched_skips_as_expected"] is True
    assert e["copy_ref_us"] == 9.0 and len(e["errors"]) == 1
    assert "random" in m.table({"random/b8": e})
    assert m.brief({"random/b8": e})["random/b8"]["speedup"] == pytest.approx(geo)


def test_out_paths() -> None:
    m = _load()
    assert m._paths(Path("/x/m.json")) == (Path("/x/m.json"), Path("/x/m-raw"))
    assert m._paths(Path("/x/out")) == (Path("/x/out/micro-000.json"), Path("/x/out/raw"))


@pytest.mark.slow
def test_cpu_smoke(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Both workers on CPU (Triton interpreter, CPU stand-ins): ids identical, copy skipped
    only by the patched sampler and only for random/greedy batches."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from verify.equivalence.roots import materialize

    request.getfixturevalue("main_tree")  # after the skips: only a run that needs it builds it
    pristine, patched = materialize("0.22.0")
    out = tmp_path / "m000.json"
    roots = ["--pristine-root", str(pristine), "--patched-root", str(patched)]
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--batches", "1,8", *roots]
    cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.exists(), proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert proc.returncode == 0, (data["errors"], proc.stdout[-3000:], proc.stderr[-3000:])
    assert set(data["results"]) == {
        f"{c}/b{b}" for c in ("random", "greedy", "top_p") for b in (1, 8)
    }
    for key, e in data["results"].items():
        assert e["ids_identical"] is True, key
        assert e["patched_skips_as_expected"] is True, key
        assert e["pristine"]["copy_skipped"] is False, key
        assert e["speedup"]["n"] == 2, key
