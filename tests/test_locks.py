"""verify.locks: a folder built once however many processes ask at a time, never seen half
written, and rebuilt after an interrupted build."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from verify.locks import build_once


def _done(path: Path) -> bool:
    return (path / "complete").exists()


def _slow_write(path: Path) -> None:
    """Counts its calls in a file beside the folder, then writes slowly."""
    with open(path.parent.parent / "calls", "a") as fh:
        fh.write("call\n")
    (path / "part").write_text("first half\n")
    time.sleep(0.5)
    (path / "complete").write_text("done\n")


def _build(path: str, seen: multiprocessing.Queue) -> None:
    built = build_once(Path(path), _done, _slow_write)
    seen.put(sorted(p.name for p in built.iterdir()))


def test_processes_asking_at_once_build_it_once_and_see_it_whole(tmp_path):
    target = tmp_path / "sites" / "patched"
    ctx = multiprocessing.get_context("fork")
    seen = ctx.Queue()
    procs = [ctx.Process(target=_build, args=(str(target), seen)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    assert [seen.get(timeout=5) for _ in procs] == [["complete", "part"]] * 3
    assert (tmp_path / "calls").read_text() == "call\n"


def test_an_interrupted_build_leaves_nothing_in_place_and_the_next_one_finishes(tmp_path):
    target = tmp_path / "sites" / "patched"

    def broken(path: Path) -> None:
        (path / "part").write_text("first half\n")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_once(target, _done, broken)
    assert not target.exists()
    build_once(target, _done, _slow_write)
    assert sorted(p.name for p in target.iterdir()) == ["complete", "part"]
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_finished_folder_is_not_rebuilt_and_a_stale_one_is_replaced(tmp_path):
    target = tmp_path / "sites" / "patched"
    build_once(target, _done, _slow_write)
    build_once(target, _done, _slow_write)
    assert (tmp_path / "calls").read_text() == "call\n"
    build_once(target, lambda p: (p / "v2").exists(), lambda p: (p / "v2").touch())
    assert [p.name for p in target.iterdir()] == ["v2"]


def test_tiny_models_asked_for_at_once_are_built_once(tmp_path, monkeypatch):
    """verify.tinymodel.ensure_model builds through build_once: two runs asking for one model at
    a time (e.g. two nox sessions) build it once, and a build interrupted before is redone."""
    import stat
    import sys
    import threading

    from verify import tinymodel

    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    monkeypatch.setenv("PATCHBENCH_GSM8K_TRAIN", str(data))
    final = tmp_path / "models" / "chat-k"
    monkeypatch.setattr(tinymodel, "model_dir", lambda kind: final)
    builder = tmp_path / "python"  # stands in for the runtime venv's python
    builder.write_text(
        f"#!{sys.executable}\n"
        "import sys, time, pathlib\n"
        f"with open({str(tmp_path / 'calls')!r}, 'a') as fh: fh.write('call\\n')\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\n"
        "time.sleep(0.5)\n"
        "(out / 'MANIFEST.json').write_text('{}')\n"
    )
    builder.chmod(builder.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / ".chat-k.tmp").mkdir()  # left by an interrupted build
    (tmp_path / "models" / ".chat-k.tmp" / "half").write_text("")
    seconds: list[float] = []

    def ask() -> None:
        seconds.append(tinymodel.ensure_model("chat", str(builder), say=lambda _: None)[1])

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (tmp_path / "calls").read_text() == "call\n"
    assert sorted(p.name for p in final.iterdir()) == ["MANIFEST.json"]
    assert sorted(s > 0 for s in seconds) == [False, True]  # the waiter reports no build
