"""treeqa.data.download against a local HTTP server that can break and ignore Range."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import random
import signal
import socket
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from treeqa.data import download as dl
from treeqa.data.download import (
    CATALOGUE,
    DownloadError,
    DownloadInterrupted,
    DownloadWarning,
    download,
    fetch,
)

BLOB = random.Random(0).randbytes(300_000)
BLOB_SHA256 = hashlib.sha256(BLOB).hexdigest()
BLOB_MD5 = hashlib.md5(BLOB).hexdigest()


class FileServer(ThreadingHTTPServer):
    """Serves ``files`` by name; ``drop_after`` cuts the next body short once; ``stall_after``
    sends that many bytes of each body, then nothing until ``release`` is set;
    ``ignore_range`` answers every request with the whole file and 200."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.drop_after: int | None = None
        self.stall_after: int | None = None
        self.release = threading.Event()
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FileServer

    def do_GET(self) -> None:
        srv = self.server
        wanted = self.headers.get("Range")
        srv.requests.append((self.path, wanted))
        if self.path.startswith("/moved/"):  # like nlp.stanford.edu -> downloads.cs.stanford.edu
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/moved"))
            self.end_headers()
            return
        body = srv.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        start = 0
        if wanted and not srv.ignore_range:
            start = int(wanted.removeprefix("bytes=").removesuffix("-"))
            if start >= len(body):  # as a real server says a range past the end
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        if srv.drop_after is not None:
            payload, srv.drop_after = payload[: srv.drop_after], None
            self.close_connection = True
        if srv.stall_after is not None:
            self.wfile.write(payload[: srv.stall_after])
            self.wfile.flush()
            srv.release.wait(timeout=30)
            return
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    # A proxy from the environment must not see requests meant for 127.0.0.1.
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.delenv(dl.ENV_BASE, raising=False)
    srv = FileServer()
    srv.files["blob.bin"] = BLOB
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_full_download_verifies_checksums(server: FileServer, tmp_path: Path) -> None:
    target = tmp_path / "sub" / "blob.bin"
    out = fetch(f"{server.url}/blob.bin", target, sha256=BLOB_SHA256, md5=BLOB_MD5, progress=True)
    assert out == target
    assert target.read_bytes() == BLOB
    assert not (tmp_path / "sub" / "blob.bin.part").exists()
    assert server.requests == [("/blob.bin", None)]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_only(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI job's log (stderr a file or a pipe) gets no bar: its carriage-return redraws
    would pile up in one line."""
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    fetch(f"{server.url}/blob.bin", tmp_path / "a.bin", sha256=BLOB_SHA256, progress=True)
    assert log.getvalue() == ""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    fetch(f"{server.url}/blob.bin", tmp_path / "b.bin", sha256=BLOB_SHA256, progress=True)
    assert "\r" in terminal.getvalue() and "b.bin" in terminal.getvalue()


def test_resume_after_dropped_connection(server: FileServer, tmp_path: Path) -> None:
    target, part = tmp_path / "blob.bin", tmp_path / "blob.bin.part"
    server.drop_after = 70_000
    url = f"{server.url}/blob.bin"
    with pytest.raises(DownloadError, match="blob.bin.*resume"):
        fetch(url, target, sha256=BLOB_SHA256, progress=False)
    assert not target.exists()
    assert part.stat().st_size == 70_000

    fetch(url, target, sha256=BLOB_SHA256, progress=False)
    assert server.requests[-1] == ("/blob.bin", "bytes=70000-")
    assert target.read_bytes() == BLOB
    assert not part.exists()


def test_server_ignoring_range_restarts_cleanly(server: FileServer, tmp_path: Path) -> None:
    target, part = tmp_path / "blob.bin", tmp_path / "blob.bin.part"
    part.write_bytes(BLOB[:50_000])
    server.ignore_range = True
    # No size given: the 200's Content-Length is what the result is checked against.
    fetch(f"{server.url}/blob.bin", target, sha256=BLOB_SHA256, progress=False)
    assert server.requests == [("/blob.bin", "bytes=50000-")]
    assert target.read_bytes() == BLOB


def test_resume_survives_redirect(server: FileServer, tmp_path: Path) -> None:
    (tmp_path / "blob.bin.part").write_bytes(BLOB[:1234])
    fetch(f"{server.url}/moved/blob.bin", tmp_path / "blob.bin", sha256=BLOB_SHA256, progress=False)
    assert server.requests == [("/moved/blob.bin", "bytes=1234-"), ("/blob.bin", "bytes=1234-")]
    assert (tmp_path / "blob.bin").read_bytes() == BLOB


def test_complete_part_file_needs_no_request(server: FileServer, tmp_path: Path) -> None:
    (tmp_path / "blob.bin.part").write_bytes(BLOB)
    fetch(f"{server.url}/blob.bin", tmp_path / "blob.bin", size=len(BLOB), progress=False)
    assert server.requests == []
    assert (tmp_path / "blob.bin").read_bytes() == BLOB


def test_complete_part_file_of_unknown_size_is_verified_not_fetched_again(
    server: FileServer, tmp_path: Path
) -> None:
    # Stopped after the last byte (during verification, say) with no size known (SST): the
    # server's 416 says the file is that long, so the part is verified rather than thrown away.
    (tmp_path / "blob.bin.part").write_bytes(BLOB)
    fetch(f"{server.url}/blob.bin", tmp_path / "blob.bin", sha256=BLOB_SHA256, progress=False)
    assert server.requests == [("/blob.bin", f"bytes={len(BLOB)}-")]
    assert (tmp_path / "blob.bin").read_bytes() == BLOB


def test_checksum_mismatch_deletes_and_reports(server: FileServer, tmp_path: Path) -> None:
    target = tmp_path / "blob.bin"
    with pytest.raises(
        DownloadError, match=f"sha256 mismatch for blob.bin: expected {'0' * 64}, got {BLOB_SHA256}"
    ):  # the file's name, not its deleted .part's
        fetch(f"{server.url}/blob.bin", target, sha256="0" * 64, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_in_the_way_is_said_before_the_transfer(
    server: FileServer, tmp_path: Path
) -> None:
    (tmp_path / "blob.bin" / "x").mkdir(parents=True)
    with pytest.raises(DownloadError, match=r"blob\.bin is a folder; the download is written"):
        fetch(f"{server.url}/blob.bin", tmp_path / "blob.bin", progress=False)
    assert server.requests == []
    (tmp_path / "sst").write_text("mine")  # a file where the dataset's folder goes
    with pytest.raises(DownloadError, match=r"cannot create the folder .*sst/x: .*sst is a file"):
        fetch(f"{server.url}/blob.bin", tmp_path / "sst" / "x" / "blob.bin", progress=False)
    assert (tmp_path / "sst").read_text() == "mine"


def test_wrong_size_fails_before_transfer(server: FileServer, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match=f"offers {len(BLOB)} bytes, expected 12"):
        fetch(f"{server.url}/blob.bin", tmp_path / "blob.bin", size=12, progress=False)
    assert not (tmp_path / "blob.bin").exists()


def test_not_found_names_url(server: FileServer, tmp_path: Path) -> None:
    url = f"{server.url}/missing.json"
    with pytest.raises(DownloadError, match=f"{url}: HTTP 404"):
        fetch(url, tmp_path / "missing.json", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_refused_connection_names_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("no_proxy", "*")
    with socket.socket() as s:  # bound but never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/x.bin"
        with pytest.raises(DownloadError, match=f"{url}: .*refused; nothing was downloaded$"):
            fetch(url, tmp_path / "x.bin", progress=False, timeout=2)
    assert list(tmp_path.iterdir()) == []  # was "kept 0 bytes in x.bin.part", which did not exist


def test_stall_keeps_every_byte_that_arrived(server: FileServer, tmp_path: Path) -> None:
    target, part = tmp_path / "blob.bin", tmp_path / "blob.bin.part"
    server.stall_after = 70_000
    url = f"{server.url}/blob.bin"
    with pytest.raises(DownloadError, match="timed out; kept 70,000 bytes in .*blob.bin.part"):
        fetch(url, target, sha256=BLOB_SHA256, progress=False, timeout=0.5)
    assert part.stat().st_size == 70_000  # read(1 MiB) used to hold them and lose them

    server.stall_after = None
    fetch(url, target, sha256=BLOB_SHA256, progress=False)
    assert server.requests[-1] == ("/blob.bin", "bytes=70000-")
    assert target.read_bytes() == BLOB


def test_mismatched_file_survives_a_failed_download(server: FileServer, tmp_path: Path) -> None:
    target = tmp_path / "blob.bin"
    target.write_text("the user's edited copy")
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(f"{server.url}/gone.bin", target, sha256=BLOB_SHA256, progress=False)
    assert target.read_text() == "the user's edited copy"  # was deleted before the request
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]


def test_mismatched_file_is_moved_aside_for_a_verified_one(
    server: FileServer, tmp_path: Path
) -> None:
    target = tmp_path / "blob.bin"
    (tmp_path / "blob.bin.old").write_text("an older backup")
    target.write_text("the user's edited copy")
    with pytest.warns(
        DownloadWarning, match="blob.bin did not verify .* moved it to .*blob.bin.old2"
    ):
        fetch(f"{server.url}/blob.bin", target, sha256=BLOB_SHA256, progress=False)
    assert target.read_bytes() == BLOB
    assert (tmp_path / "blob.bin.old2").read_text() == "the user's edited copy"
    assert (tmp_path / "blob.bin.old").read_text() == "an older backup"


def _sst_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("trees/", b"")
        for split in ("train", "dev", "test"):
            zf.writestr(f"trees/{split}.txt", f"(3 (2 {split}) (4 good))\n")
    return buf.getvalue()


def test_sst_zip_unpacks_flat_and_second_call_is_offline(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _sst_zip()
    (real,) = CATALOGUE["sst"]
    fixture = dataclasses.replace(real, sha256=hashlib.sha256(archive).hexdigest())
    monkeypatch.setitem(CATALOGUE, "sst", [fixture])
    server.files[real.filename] = archive
    monkeypatch.setenv(dl.ENV_BASE, server.url + "/")

    paths = download("sst", tmp_path, progress=False)
    assert sorted(p.name for p in paths) == ["dev.txt", "test.txt", "train.txt"]
    assert all(p.parent == tmp_path / "sst" for p in paths)
    assert (tmp_path / "sst" / "train.txt").read_text() == "(3 (2 train) (4 good))\n"
    assert server.requests == [(f"/{real.filename}", None)]

    again = download("sst", tmp_path, progress=False)
    assert again == paths
    assert len(server.requests) == 1


def test_unzip_moves_a_changed_file_aside(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _sst_zip()
    (real,) = CATALOGUE["sst"]
    monkeypatch.setitem(
        CATALOGUE, "sst", [dataclasses.replace(real, sha256=hashlib.sha256(archive).hexdigest())]
    )
    server.files[real.filename] = archive
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "train.txt").write_text("(2 mine)\n")
    with pytest.warns(
        DownloadWarning, match="train.txt did not verify .*moved it to .*train.txt.old"
    ):
        download("sst", tmp_path, base_url=server.url, progress=False)
    assert (tmp_path / "sst" / "train.txt").read_text() == "(3 (2 train) (4 good))\n"
    assert (tmp_path / "sst" / "train.txt.old").read_text() == "(2 mine)\n"  # was overwritten


def _verified_sst_zip_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test archive in ``folder/sst``, verified: download() goes straight to unzipping."""
    archive = _sst_zip()
    (real,) = CATALOGUE["sst"]
    monkeypatch.setitem(
        CATALOGUE, "sst", [dataclasses.replace(real, sha256=hashlib.sha256(archive).hexdigest())]
    )
    (folder / "sst").mkdir(exist_ok=True)
    (folder / "sst" / real.filename).write_bytes(archive)
    return real.filename


def test_an_unzip_stopped_by_ctrl_c_leaves_no_half_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _verified_sst_zip_in(tmp_path, monkeypatch)

    class Bar(contextlib.nullcontext):  # Ctrl-C while the first member is being written
        def update(self, n: int) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(dl, "_bar", lambda *a, **k: Bar(Bar()))
    with pytest.raises(DownloadInterrupted, match="interrupted while unpacking"):
        download("sst", tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "sst").iterdir()) == [name]


def test_base_url_argument_wins_and_squad_lands_as_is(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = [
        dataclasses.replace(r, md5=None, sha256=BLOB_SHA256, size=None) for r in CATALOGUE["squad"]
    ]
    monkeypatch.setitem(CATALOGUE, "squad", resources)
    monkeypatch.setenv(dl.ENV_BASE, "http://127.0.0.1:9/unused")
    for r in resources:
        server.files[r.filename] = BLOB
    paths = download("squad", tmp_path, base_url=server.url, progress=False)
    assert paths == [tmp_path / "squad" / "train-v1.1.json", tmp_path / "squad" / "dev-v1.1.json"]
    assert all(p.read_bytes() == BLOB for p in paths)


def test_a_mirror_that_is_not_a_url_is_named_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """urllib's "unknown url type" named neither the variable nor the flag it came from."""
    monkeypatch.setenv(dl.ENV_BASE, "mirror.example.org/sst")
    with pytest.raises(ValueError, match=r"\$TREEQA_DOWNLOAD_BASE 'mirror.example.org/sst' is not"):
        download("sst", tmp_path / "data", progress=False)
    with pytest.raises(ValueError, match=r"the mirror '/srv/mirror' is not a URL.*file:///"):
        download("sst", tmp_path / "data", base_url="/srv/mirror", progress=False)
    # A URL of a scheme urllib does not fetch is said to be one, with those it does.
    with pytest.raises(ValueError, match=r"'gopher://x/' is not a URL this command reads \(http"):
        download("sst", tmp_path / "data", base_url="gopher://x/", progress=False)
    assert not (tmp_path / "data").exists()


def test_unknown_name() -> None:
    with pytest.raises(ValueError, match="sst"):
        download("imagenet", Path("unused"))


def test_catalogue_is_consistent() -> None:
    assert {"sst", "squad", "glove"} <= CATALOGUE.keys()
    for resources in CATALOGUE.values():
        for r in resources:
            assert r.url.endswith("/" + r.filename)
            assert r.unpack in (None, "zip")
            assert r.sha256 is None or len(r.sha256) == 64
            assert r.md5 is None or len(r.md5) == 32


def test_cli_download_through_a_mirror(
    server: FileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from treeqa.cli.main import main

    archive = _sst_zip()
    (real,) = CATALOGUE["sst"]
    monkeypatch.setitem(
        CATALOGUE, "sst", [dataclasses.replace(real, sha256=hashlib.sha256(archive).hexdigest())]
    )
    server.files[real.filename] = archive
    assert (
        main(["data", "download", "sst", "--dir", str(tmp_path), "--base-url", server.url + "/"])
        == 0
    )
    assert sorted(Path(p).name for p in capsys.readouterr().out.split()) == [
        "dev.txt",
        "test.txt",
        "train.txt",
    ]
    assert (tmp_path / "sst" / "test.txt").is_file()
    assert main(["data", "download", "nope", "--dir", str(tmp_path)]) == 2
    assert "sst" in capsys.readouterr().err


def test_cli_download_failure_is_one_line_naming_the_url(
    server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.cli.main import main

    argv = ["data", "download", "squad", "--dir", str(tmp_path), "--base-url", server.url]
    assert main(argv) == 2  # was a DownloadError traceback
    err = capsys.readouterr().err
    assert err == f"treeqa data download: error: {server.url}/train-v1.1.json: HTTP 404 Not Found\n"
    assert list(tmp_path.iterdir()) == []  # the folder made for it was left behind, empty
    (tmp_path / "mine.txt").write_text("kept\n")
    assert main(["data", "download", "squad", "--dir", str(tmp_path / "new" / "data"), "--base-url", server.url]) == 2  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]  # every folder it made, gone


def _blob_as_squad(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    resources = [
        dataclasses.replace(r, md5=None, sha256=BLOB_SHA256, size=None) for r in CATALOGUE["squad"]
    ]
    monkeypatch.setitem(CATALOGUE, "squad", resources)
    for r in resources:
        server.files[r.filename] = BLOB


def test_cli_failure_keeps_the_users_file(
    server: FileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from treeqa.cli.main import main

    _blob_as_squad(server, monkeypatch)
    mine = tmp_path / "squad" / "train-v1.1.json"
    mine.parent.mkdir()
    mine.write_text('{"my": "edited copy"}')
    with socket.socket() as s:  # bound but never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{s.getsockname()[1]}"
        assert (
            main(["data", "download", "squad", "--dir", str(tmp_path), "--base-url", refused]) == 2
        )
    assert mine.read_text() == '{"my": "edited copy"}'  # was deleted

    assert (
        main(["data", "download", "squad", "--dir", str(tmp_path), "--base-url", server.url]) == 0
    )
    err = capsys.readouterr().err
    assert f"treeqa data download: warning: {mine} did not verify" in err
    assert mine.read_bytes() == BLOB
    assert Path(f"{mine}.old").read_text() == '{"my": "edited copy"}'


def test_cli_ctrl_c_is_one_line_and_exit_130(
    server: FileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from treeqa.cli.main import main

    _blob_as_squad(server, monkeypatch)
    server.stall_after = 70_000
    # A real SIGINT to this (main) thread while it waits on the stalled socket, as Ctrl-C sends.
    ctrl_c = threading.Timer(
        0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)
    )
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctrl_c.start()
        code = main(["data", "download", "squad", "--dir", str(tmp_path), "--base-url", server.url])
    except KeyboardInterrupt:  # fail this test rather than stop the whole session
        pytest.fail("Ctrl-C escaped from `treeqa data download` as a KeyboardInterrupt")
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
    part = tmp_path / "squad" / "train-v1.1.json.part"
    assert code == 130
    err = capsys.readouterr().err  # was a KeyboardInterrupt traceback
    said = f"treeqa data download: interrupted; kept 70,000 bytes in {part}, run again to resume"
    assert err.splitlines()[-1] == said  # after the progress bar
    assert "Traceback" not in err
    assert part.stat().st_size == 70_000


def test_interrupt_is_still_a_keyboard_interrupt() -> None:
    assert issubclass(DownloadInterrupted, KeyboardInterrupt)


def test_cli_unknown_name_and_unwritable_dir_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.cli.main import main

    assert main(["data", "download", "nope", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "treeqa data download: error: unknown download 'nope'; "
        f"choose one of {', '.join(CATALOGUE)}\n"
    )
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    assert main(["data", "download", "squad", "--dir", str(not_a_dir)]) == 2
    err = capsys.readouterr().err  # was "treeqa data: error: [Errno 20] Not a directory: ..."
    assert (
        err
        == f"treeqa data download: error: cannot create the folder {not_a_dir / 'squad'}: {not_a_dir} is a file\n"
    )


def test_a_folder_where_a_member_unpacks_is_said_before_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sst" / "train.txt").mkdir(parents=True)
    name = _verified_sst_zip_in(tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match=r"train\.txt is a folder; a file of .* unpacks there"):
        download("sst", tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "sst").iterdir()) == sorted([name, "train.txt"])


def test_a_damaged_member_of_a_zip_checked_by_size_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GloVe's archives are verified by size alone: a wrong byte inside a member's compressed
    # data is first seen by zlib while unpacking, and is said like any other broken zip.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        text = "".join(f"w{i} 0.{i:04d} -0.{i * 7 % 9999:04d}\n" for i in range(5000))
        zf.writestr("glove.6B.50d.txt", text)
    archive = bytearray(buf.getvalue())
    member = zipfile.ZipFile(io.BytesIO(bytes(archive))).infolist()[0]
    archive[member.header_offset + 30 + len(member.filename) + 40] ^= 0xFF
    (real,) = CATALOGUE["glove6b"]
    monkeypatch.setitem(CATALOGUE, "glove6b", [dataclasses.replace(real, size=len(archive))])
    (tmp_path / "glove").mkdir()
    (tmp_path / "glove" / real.filename).write_bytes(archive)
    with pytest.raises(DownloadError, match=r"glove\.6B\.zip: not a valid zip \(.*delete it"):
        download("glove6b", tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "glove").iterdir()) == [real.filename]


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
def test_a_second_download_into_the_same_folder_is_refused_and_touches_nothing(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two at once appended to the same .part; the first to finish deleted it as the wrong size,
    # and the other failed on a .part that was gone: both lost everything they had fetched.
    import fcntl
    import os

    _blob_as_squad(server, monkeypatch)
    folder = tmp_path / "squad"
    folder.mkdir()
    (folder / "train-v1.1.json.part").write_bytes(BLOB[:1000])
    fd = os.open(folder, os.O_RDONLY)  # what a download in another process holds
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(DownloadError, match=r"another download is writing into .*squad"):
            download("squad", tmp_path, base_url=server.url, progress=False)
    finally:
        os.close(fd)
    assert server.requests == []
    assert (folder / "train-v1.1.json.part").read_bytes() == BLOB[:1000]
    download("squad", tmp_path, base_url=server.url, progress=False)  # once it has finished
    assert (folder / "train-v1.1.json").read_bytes() == BLOB
