"""Pristine sdists: index lookup, hash check, cache, offline fallback (local HTTP index)."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from tests.conftest import make_sdist
from verify import sdist
from verify.errors import PatchbenchError


class _Index:
    """A PEP 691 JSON simple index on 127.0.0.1 serving one project's files."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.hashes: dict[str, str] = {}
        handler = self._handler()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path: Path, sha256: str | None = None) -> None:
        self.hashes[path.name] = sha256 or hashlib.sha256(path.read_bytes()).hexdigest()

    def _handler(self):
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/simple/vllm/":
                    files = [
                        {"filename": name, "url": f"/files/{name}", "hashes": {"sha256": digest}}
                        for name, digest in index.hashes.items()
                    ]
                    body = json.dumps({"files": files}).encode()
                    kind = sdist.JSON_ACCEPT
                elif self.path.startswith("/files/"):
                    body = (index.directory / self.path[len("/files/") :]).read_bytes()
                    kind = "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path, monkeypatch):
    served = tmp_path / "served"
    served.mkdir()
    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    server = _Index(served)
    monkeypatch.setenv("PATCHBENCH_INDEX_URL", server.url)
    yield server
    server.close()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


def test_fetch_downloads_verifies_and_caches(index):
    index.add(make_sdist(index.directory, "1.2.3"))
    path = sdist.fetch("1.2.3")
    assert path.read_bytes() == (index.directory / "vllm-1.2.3.tar.gz").read_bytes()
    assert path.with_name(path.name + ".sha256").read_text().strip() == index.hashes[path.name]
    mtime = path.stat().st_mtime_ns
    assert sdist.fetch("1.2.3") == path and path.stat().st_mtime_ns == mtime  # cache hit


def test_unknown_version_is_a_clear_error(index, bad_input):
    index.add(make_sdist(index.directory, "1.2.3"))
    expected = "vllm 9.9.9 has no vllm-9.9.9.tar.gz .*newest versions .*: 1.2.3"
    with pytest.raises(PatchbenchError, match=expected) as info:
        sdist.fetch("9.9.9")
    bad_input("a vLLM version the index does not publish", str(info.value))


def test_hash_mismatch_discards_the_download(index, bad_input):
    index.add(make_sdist(index.directory, "1.2.3"), sha256="0" * 64)
    with pytest.raises(PatchbenchError, match="sha256 mismatch") as info:
        sdist.fetch("1.2.3")
    bad_input("a download whose sha256 differs from the index's", str(info.value))
    assert list((sdist.cache_dir() / "sdists").iterdir()) == []


def test_no_network_and_no_cache(index, monkeypatch, bad_input):
    monkeypatch.setenv("PATCHBENCH_INDEX_URL", _closed_port_url())
    expected = "cannot reach the package index .* no cached file"
    with pytest.raises(PatchbenchError, match=expected) as info:
        sdist.fetch("1.2.3")
    bad_input("no network and no cached sdist", str(info.value))


def test_no_network_uses_the_verified_cache(index, monkeypatch, bad_input):
    index.add(make_sdist(index.directory, "1.2.3"))
    cached = sdist.fetch("1.2.3")
    monkeypatch.setenv("PATCHBENCH_INDEX_URL", _closed_port_url())
    assert sdist.fetch("1.2.3") == cached
    cached.write_bytes(b"tampered")
    with pytest.raises(PatchbenchError, match="does not match its recorded sha256") as info:
        sdist.fetch("1.2.3")
    bad_input("no network and a tampered cached sdist", str(info.value))


def test_cached_file_with_wrong_hash_is_downloaded_again(index):
    index.add(make_sdist(index.directory, "1.2.3"))
    cached = sdist.fetch("1.2.3")
    cached.write_bytes(b"truncated")
    assert sdist.fetch("1.2.3").read_bytes() == (index.directory / cached.name).read_bytes()


def test_unpack_strips_the_top_folder(tmp_path):
    tarball = make_sdist(tmp_path, "1.2.3")
    tree = sdist.unpack(tarball, tmp_path / "tree")
    assert (tree / "vllm" / "__init__.py").read_text() == "__version__ = '1.2.3'\n"


def test_unpack_rejects_a_corrupt_tarball(tmp_path, bad_input):
    bad = tmp_path / "vllm-1.2.3.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(PatchbenchError, match="not a readable sdist") as info:
        sdist.unpack(bad, tmp_path / "tree")
    bad_input("a corrupt sdist tarball", str(info.value))
    assert not (tmp_path / "tree").exists()
