"""Fetching a manifest-bound dataset (SciCode-Verified) from a local HTTP server on 127.0.0.1 that serves the shared
copy at the pinned revision's path, a corrupted copy, nothing, or an endless body."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from stages.benchmark.datasets import ProblemDataError, dataset_named
from stages.config.settings import Settings, load_settings
from stages.download import bound, fetch
from stages.download.bound import BoundDataError
from stages.download.stage import run_download
from stages.select.stage import select_problems
from tests.support.loopback_http import LoopbackServer
from tests.support.run_artifacts import json_at, json_str

REVISION = "faa28a1d4e709bf94c659f04ba608e51d3dceb1f"
SHARED_MD5 = "07c4cd521ea60a166c05737ddfa51ac0"
PINNED_MD5 = "5c604d8dbf52642bd94e13b92c8f52eb"
NAMES = ("problems_test.jsonl", "manifest.json")


class PublishedFiles(LoopbackServer):
    """An HTTP server on 127.0.0.1 serving `files` under `/<revision>/scicode_verified/<name>` (404 otherwise), or an
    endless body when `endless`; it records the paths asked for."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.endless = False
        self.asked: list[str] = []
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.origin}/mirror"

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        self.asked.append(request.path)
        prefix = f"/mirror/{REVISION}/scicode_verified/"
        name = request.path.removeprefix(prefix) if request.path.startswith(prefix) else None
        if self.endless:
            request.send_response(200)
            request.end_headers()
            try:
                while True:
                    request.wfile.write(b"x" * 65536)
            except OSError:
                return
        body = self.files.get(name or "")
        if body is None:
            request.send_error(404, "Not Found")
            return
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


@pytest.fixture
def published(shared_verified: Path) -> Iterator[PublishedFiles]:
    server = PublishedFiles()
    server.files = {name: (shared_verified / name).read_bytes() for name in NAMES}
    yield server
    server.close()


def settings_for(data_dir: Path, tmp_path: Path, base_url: str, **extra: str) -> Settings:
    return load_settings(
        {
            "dataset": "verified",
            "model": "m",
            "data_dir": str(data_dir),
            "results_dir": str(tmp_path / "results"),
            "dataset_zip_url": "",
            "dataset_base_url": base_url,
            **extra,
        }
    )


def left_in(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def test_a_fetched_copy_of_another_revision_is_refused_with_both_md5s(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles
) -> None:
    settings = settings_for(staged_data_dir, tmp_path, published.base_url)
    with pytest.raises(BoundDataError) as refused:
        run_download(settings)
    message = str(refused.value)
    assert message.startswith("checksum mismatch for fetched problems_test.jsonl: md5 " + SHARED_MD5)
    assert PINNED_MD5 in message and REVISION in message and "\n" not in message
    assert published.asked == [f"/mirror/{REVISION}/scicode_verified/{name}" for name in NAMES]
    assert left_in(settings.benchmark.folder) == []  # nothing placed, no temp file left


def test_a_fetched_copy_is_accepted_with_verify_checksums_false(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(staged_data_dir, tmp_path, published.base_url, verify_checksums="false")
    record = run_download(settings)
    assert left_in(settings.benchmark.folder) == ["manifest.json", "problems_test.jsonl", "staged.json"]
    assert json_at(record, "files", "problems_test.jsonl", "checksum") == "mismatch-allowed"
    source = json_str(json_at(record, "files", "problems_test.jsonl", "source"))
    assert source.startswith(f"fetched {published.base_url}/")
    assert "checksum mismatch accepted because verify_checksums=false" in capsys.readouterr().err
    assert len(select_problems(settings)) == 64
    asked = len(published.asked)
    run_download(settings)  # current: nothing fetched again
    assert len(published.asked) == asked


def test_the_pinned_revision_is_verified(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served files whose manifest states the pinned md5 are `verified` (the pin here made the shared copy's)."""
    verified = dataset_named("verified")
    assert verified.published is not None
    pinned = replace(verified, published=replace(verified.published, problems_md5=SHARED_MD5))
    monkeypatch.setattr(bound, "_bound_parts", lambda benchmark: (pinned.manifest, pinned.published))
    record = run_download(settings_for(staged_data_dir, tmp_path, published.base_url))
    assert {json_str(json_at(record, "files", name, "checksum")) for name in NAMES} == {"verified"}


def test_a_corrupted_served_file_is_refused_naming_the_file_and_both_md5s(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles
) -> None:
    published.files["problems_test.jsonl"] = published.files["problems_test.jsonl"].replace(b"def ", b"def  ", 1)
    settings = settings_for(staged_data_dir, tmp_path, published.base_url, verify_checksums="false")
    with pytest.raises(ProblemDataError) as refused:
        run_download(settings)
    message = str(refused.value)
    assert f"differs from the md5 {SHARED_MD5} stated by {settings.benchmark.folder / 'manifest.json'}" in message
    problems = settings.benchmark.folder / "problems_test.jsonl"
    assert message.startswith(f"{problems} (fetched {published.base_url}/{REVISION}/scicode_verified/problems_test")
    assert left_in(settings.benchmark.folder) == []


def test_a_missing_file_is_one_line_naming_the_url(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles
) -> None:
    del published.files["manifest.json"]
    settings = settings_for(staged_data_dir, tmp_path, published.base_url)
    with pytest.raises(BoundDataError) as refused:
        run_download(settings)
    assert str(refused.value).startswith(
        f"dataset=verified: cannot fetch {published.base_url}/{REVISION}/scicode_verified/manifest.json: HTTP 404"
    )
    assert left_in(settings.benchmark.folder) == []


def test_an_endless_body_is_cut_at_the_stated_bound(
    tmp_path: Path, staged_data_dir: Path, published: PublishedFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch, "MAX_PUBLISHED_FILE_BYTES", 1 << 20)
    published.endless = True
    settings = settings_for(staged_data_dir, tmp_path, published.base_url)
    with pytest.raises(BoundDataError, match=f"more than {1 << 20} bytes: not a published data file"):
        run_download(settings)
    assert left_in(settings.benchmark.folder) == []
