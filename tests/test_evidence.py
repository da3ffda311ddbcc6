"""Evidence is never silently replaced: a run writes into its own folder unless told to
record, and a recorded record replaces a committed one only when at least as strong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify import evidence, paths, results
from verify.series import series_hash

V = "0.22.0"
SERVE = "cpu/0.22.0/e2e-serve-bench.json"


def record(step: str, series: str | None = None, **numbers: int) -> dict:
    """A whole synthetic record of pin 0.22.0 (current series unless `series`)."""
    data = dict.fromkeys(results.REQUIRED[2], "")
    data |= {"schema": 2, "step": step, "vllm_version": V, "outcome": "pass", "date": results.now(),
             "series_hash": series or series_hash(V), "numbers": numbers, "tables": []}  # fmt: skip
    return data


def put(root: Path, relative: str, data: dict) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "new, old, why",
    [
        (record("s", repeats=2), record("s", repeats=12), "2 rounds < 12"),
        (record("e", passed=3, failed=0, skipped=0), record("e", passed=30, failed=1, skipped=0),
         "3 tests < 31"),
        (record("s", "0000000000", repeats=12), record("s", repeats=12),
         f"series 0000000000 is not the current {series_hash(V)} (the kept one's is)"),
        (record("s", "0000000000", repeats=20), record("s", repeats=2),
         f"series 0000000000 is not the current {series_hash(V)} (the kept one's is)"),
        (record("s", repeats=2), record("s", "0000000000", repeats=12), "2 rounds < 12"),
        (record("s", repeats=12), record("s", repeats=12), ""),
        (record("s", repeats=20), record("s", repeats=12), ""),
        (record("s", repeats=2), record("s", "0000000000", repeats=2), ""),
        (record("t", tokens_per_root=10), record("t", n_samples=99), ""),
    ],
)  # fmt: skip
def test_strength_rule(new, old, why):
    assert evidence.weaker(new, old, series_hash(V)) == why


def test_a_weaker_record_is_kept(tmp_path, bad_input):
    tracked, run = tmp_path / "results", tmp_path / "run"
    committed = put(tracked, SERVE, record("e2e-serve-bench", repeats=12)).read_bytes()
    put(run, SERVE, record("e2e-serve-bench", repeats=2))
    [decision] = evidence.promote(V, run, force=False, tracked=tracked)
    assert not decision.replaced
    assert decision.line() == f"kept     {SERVE}: new is 2 rounds < 12"
    assert (tracked / SERVE).read_bytes() == committed
    bad_input("`nox -s verify-0.22.0 -- --quick --record` with a 12-round serve bench committed",
              decision.line())  # fmt: skip


@pytest.mark.parametrize("repeats", [12, 20])
def test_an_equal_or_stronger_record_replaces(tmp_path, repeats):
    tracked, run = tmp_path / "results", tmp_path / "run"
    put(tracked, SERVE, record("e2e-serve-bench", repeats=12, note=1))
    new = put(run, SERVE, record("e2e-serve-bench", repeats=repeats)).read_bytes()
    [decision] = evidence.promote(V, run, force=False, tracked=tracked)
    assert decision.line() == f"replaced {SERVE}: at least as strong"
    assert (tracked / SERVE).read_bytes() == new


def test_force_replaces_a_weaker_record(tmp_path):
    tracked, run = tmp_path / "results", tmp_path / "run"
    put(tracked, SERVE, record("e2e-serve-bench", repeats=12))
    new = put(run, SERVE, record("e2e-serve-bench", repeats=2)).read_bytes()
    [decision] = evidence.promote(V, run, force=True, tracked=tracked)
    assert decision.line() == f"replaced {SERVE}: --force, though 2 rounds < 12"
    assert (tracked / SERVE).read_bytes() == new


def test_unchanged_copies_and_raw_files_are_not_promoted(tmp_path):
    tracked, run = tmp_path / "results", tmp_path / "run"
    same = record("e2e-serve-bench", repeats=12)
    put(tracked, SERVE, same)
    put(run, SERVE, same)
    put(run, "cpu/0.22.0/bench_raw.json", {"benchmark": "x"})
    new = put(run, "cpu/0.22.0/e2e-gsm8k.json", record("e2e-gsm8k", n_samples=20)).read_bytes()
    decisions = [d.line() for d in evidence.promote(V, run, force=False, tracked=tracked)]
    assert decisions == ["replaced cpu/0.22.0/e2e-gsm8k.json: no committed record"]
    assert (tracked / "cpu/0.22.0/e2e-gsm8k.json").read_bytes() == new
    assert not (tracked / "cpu/0.22.0/bench_raw.json").exists()


def test_run_folders_respect_the_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(tmp_path / "r"))
    monkeypatch.setenv("PATCHBENCH_REPORTS_DIR", str(tmp_path / "p"))
    monkeypatch.setenv("PATCHBENCH_BUILD_DIR", str(tmp_path / "build"))
    with evidence.run_folders(V) as run:
        assert (run.results, run.reports, run.own) == (tmp_path / "r", tmp_path / "p", False)
    assert not (tmp_path / "build").exists()


class StubSession:
    """A nox session of `verify-0.22.0` whose CPU-tier commands write quick records into the
    run's folder; every other command is only noted."""

    def __init__(self, posargs: list[str]):
        self.posargs, self.name, self.commands = posargs, "verify-0.22.0", []

    def run(self, *args: str, env: dict | None = None, **kwargs) -> None:
        self.commands.append((args, env))
        if "verify.e2e" in args:
            step = args[args.index("verify.e2e") + 1]
            sizes = {"tokens": {"tokens_per_root": 100}, "embed": {"vectors": 32},
                     "serve": {"repeats": 2}}  # fmt: skip
            for name in ("e2e-serve-bench", "e2e-gsm8k") if step == "serve" else ():
                put(
                    paths.results_root(),
                    f"cpu/{V}/{name}.json",
                    record(name, **sizes[step]),
                )
            if step != "serve":
                name = {"tokens": "e2e-token-identity", "embed": "e2e-embeddings"}[step]
                put(
                    paths.results_root(),
                    f"cpu/{V}/{name}.json",
                    record(name, **sizes[step]),
                )

    def log(self, *args) -> None:
        pass

    warn = error = log


@pytest.fixture
def checkout(tmp_path, monkeypatch, loaded_noxfile) -> Path:
    """A checkout with a committed 12-round serve bench and a report; the main job's apply,
    check, equivalence and report stubbed (report writes one file)."""
    repo = tmp_path / "repo"
    put(repo / "results", SERVE, record("e2e-serve-bench", repeats=12))
    (repo / "reports" / V).mkdir(parents=True)
    (repo / "reports" / V / "README.md").write_text("committed\n")
    for name in ("PATCHBENCH_RESULTS_DIR", "PATCHBENCH_REPORTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATCHBENCH_REPO", str(repo))
    monkeypatch.setenv("PATCHBENCH_PATCHES_DIR", str(Path(__file__).parent.parent / "patches"))
    monkeypatch.setenv("PATCHBENCH_BUILD_DIR", str(tmp_path / "build"))

    def tool(session, *args: str) -> None:
        if args[0] == "report":
            (paths.reports_root() / V).mkdir(parents=True, exist_ok=True)
            (paths.reports_root() / V / "README.md").write_text("this run\n")

    monkeypatch.setattr(loaded_noxfile, "_tool", tool)
    monkeypatch.setattr(loaded_noxfile, "_equivalence", lambda session, version: None)
    return repo


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_default_run_leaves_the_committed_evidence_alone(checkout, loaded_noxfile, capsys):
    before = snapshot(checkout)
    loaded_noxfile.verify(StubSession(["--quick"]), V)
    assert snapshot(checkout) == before
    out = capsys.readouterr().out
    [run] = (checkout.parent / "build" / "runs").iterdir()
    assert (
        f"verify-0.22.0 wrote its records to {run}/results and its reports to {run}/reports; "
        "results/ and reports/ are unchanged (`-- --record` records into them)" in out
    )
    assert json.loads((run / "results" / SERVE).read_text())["numbers"] == {"repeats": 2}
    assert (run / "reports" / V / "README.md").read_text() == "this run\n"


def test_record_keeps_the_stronger_and_says_so(checkout, loaded_noxfile, capsys):
    committed = (checkout / "results" / SERVE).read_bytes()
    session = StubSession(["--quick", "--record"])
    loaded_noxfile.verify(session, V)
    out = capsys.readouterr().out
    assert f"kept     {SERVE}: new is 2 rounds < 12" in out
    assert "replaced cpu/0.22.0/e2e-token-identity.json: no committed record" in out
    assert (checkout / "results" / SERVE).read_bytes() == committed
    assert (checkout / "results" / "cpu" / V / "e2e-token-identity.json").exists()
    args, env = session.commands[-1]
    assert args[-2:] == ("report", V)  # reports/ rebuilt from results/ after recording
    assert env == {"PATCHBENCH_RESULTS_DIR": str(checkout / "results"),
                   "PATCHBENCH_REPORTS_DIR": str(checkout / "reports")}  # fmt: skip


def test_force_without_record_runs_nothing(checkout, loaded_noxfile):
    session = StubSession(["--force"])

    def error(message: str) -> None:
        raise RuntimeError(message)

    session.error = error
    with pytest.raises(RuntimeError, match=r"--force only applies to --record") as info:
        loaded_noxfile.verify(session, V)
    assert session.commands == []
    assert not (checkout.parent / "build" / "runs").exists()
    assert (
        str(info.value)
        == "--force only applies to --record (`-- --record --force`); nothing was run"
    )
