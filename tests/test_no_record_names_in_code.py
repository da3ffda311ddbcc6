"""Record names live in the registry: a ratchet over the record-name literals still written in
verify/ and scripts/ (the importer loop, verify/importer/loop.py, takes a step's record name
from its registry step). A file may not gain one, and a file that loses some must lower its
allowance here, so the count only falls."""

from __future__ import annotations

import re
from pathlib import Path

from verify import registry

ROOT = Path(__file__).resolve().parents[1]
#: Files that still name records in code, and how many such literals each holds.
ALLOWED = {
    "verify/importer/gpu.py": 17,
    "verify/importer/cpu.py": 7,
    "verify/results.py": 4,
    "verify/registry.py": 1,
    "scripts/gpu_verify.py": 3,
    "verify/upstream_tests.py": 2,
    "verify/e2e/identity.py": 2,
    "verify/readiness.py": 1,
    "verify/e2e/accuracy.py": 1,
    "verify/e2e/serving.py": 1,
    "verify/e2e/__main__.py": 1,
    "verify/importer/gpu_engine_resolution.py": 1,
    "verify/importer/gpu_engine_ab.py": 1,
    "verify/importer/gpu_penalty_check.py": 1,  # a harness proof: no registry step names it
}


def record_names() -> set[str]:
    names = {r for entry in registry.load().values() for s in entry.steps for r in s.records}
    return names | set(registry.harness_proofs())


def literal_counts(root: Path, names: set[str]) -> dict[str, int]:
    """{file: quoted record-name literals in it} over verify/ and scripts/ under `root`."""
    pattern = re.compile("[\"'](" + "|".join(map(re.escape, sorted(names))) + ")[\"']")
    counts = {}
    for folder in ("verify", "scripts"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix in {".py", ".sh"}:
                found = len(pattern.findall(path.read_text(errors="replace")))
                if found:
                    counts[path.relative_to(root).as_posix()] = found
    return counts


def test_no_file_names_more_records_than_allowed():
    counts = literal_counts(ROOT, record_names())
    grown = {f: n for f, n in counts.items() if n > ALLOWED.get(f, 0)}
    assert not grown, f"record names written in code (take them from the registry step): {grown}"
    fallen = {f: (ALLOWED[f], counts.get(f, 0)) for f in ALLOWED if counts.get(f, 0) < ALLOWED[f]}
    assert not fallen, f"lower these allowances to the new counts: {fallen}"


def test_the_scan_sees_a_planted_literal(tmp_path):
    (tmp_path / "verify").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "verify" / "x.py").write_text('STEP = "gpu-penalty-state-check"\nOTHER = "x"\n')
    (tmp_path / "scripts" / "y.sh").write_text("echo 'gpu-penalty-state-check'\n")
    counts = literal_counts(tmp_path, record_names())
    assert counts == {"verify/x.py": 1, "scripts/y.sh": 1}
