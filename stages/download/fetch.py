"""Bringing one source's files into temp files next to their final place, hashed on the way.

Copies from a folder, a resumable download of an archive URL (HTTP Range requests, progress bar on
stderr), zip-slip-safe extraction of the wanted members, and a wheel fetched with pip's downloader (never
installed). A source that cannot be used raises `SourceUnavailable`. Which files are wanted, the checksum
checks, their placement and the manifest are the download stage's (`stages.download.stage`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tqdm import tqdm

from stages.storage.artifacts import sha256_file
from stages.storage.paths import safe_name

MemberLocator = Callable[[str], str | None]

CHUNK_SIZE = 1 << 20
NETWORK_TIMEOUT_SECONDS = 60.0
PIP_TIMEOUT_SECONDS = 600.0
STAGED_FILE_MODE = 0o644  # mkstemp creates 0600; staged data files are ordinary readable files


class SourceUnavailable(Exception):
    """One source could not be used; the download stage warns once and tries the next source."""


# ---------------------------------------------------------------------------
# Staged files: bytes in a temp file next to their final place (or already in place), hashed once
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedFile:
    name: str
    path: Path
    size: int
    sha256: str
    source: str


def stream_to_temp(reader: IO[bytes], dest: Path, name: str, source: str) -> StagedFile:
    """Copy `reader` into a temp file in `dest`, hashing on the way."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=dest)
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: reader.read(CHUNK_SIZE), b""):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        os.chmod(temp_name, STAGED_FILE_MODE)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return StagedFile(name, Path(temp_name), size, digest.hexdigest(), source)


def already_placed(path: Path, source: str) -> StagedFile:
    return StagedFile(path.name, path, path.stat().st_size, sha256_file(path), source)


def is_placed(staged: StagedFile, dest: Path) -> bool:
    return staged.path == dest / staged.name


def discard(batch: list[StagedFile], dest: Path) -> None:
    for staged in batch:
        if not is_placed(staged, dest):
            staged.path.unlink(missing_ok=True)


@contextmanager
def temp_batch(dest: Path) -> Iterator[list[StagedFile]]:
    """A list of staged files whose temp files are removed if the block fails."""
    batch: list[StagedFile] = []
    try:
        yield batch
    except BaseException:
        discard(batch, dest)
        raise


# ---------------------------------------------------------------------------
# Archive download (resumable) and extraction (zip-slip-safe)
# ---------------------------------------------------------------------------


def display_url(url: str) -> str:
    """`url` without user credentials."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="<redacted>@" + parts.netloc.rsplit("@", 1)[1]))


@contextmanager
def local_archive(url: str, downloads: Path) -> Iterator[Path]:
    """A local path to the archive: the file itself for file:// URLs, else a download removed after use."""
    if url.startswith("file://"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if not path.is_file():
            raise SourceUnavailable(f"no such file {path}")
        yield path
        return
    archive = _download(url, downloads)
    try:
        yield archive
    finally:
        archive.unlink(missing_ok=True)


def _download(url: str, downloads: Path) -> Path:
    """Download `url` into `downloads`, resuming a partial download left by an earlier run."""
    downloads.mkdir(parents=True, exist_ok=True)
    stem = hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]
    basename = safe_name(Path(urllib.parse.urlsplit(url).path).name or "archive.zip")
    complete = downloads / f"{stem}-{basename}"
    partial_file = complete.with_name(complete.name + ".part")
    try:
        _transfer(url, partial_file)
    except urllib.error.HTTPError as error:
        raise SourceUnavailable(f"HTTP {error.code} {error.reason}") from None
    except (OSError, http.client.HTTPException) as error:
        kept = partial_file.stat().st_size if partial_file.exists() else 0
        resume = f"; {kept} bytes kept in {partial_file} to resume next time" if kept else ""
        raise SourceUnavailable(f"download failed ({_reason(error)}){resume}") from None
    os.replace(partial_file, complete)
    return complete


def _reason(error: BaseException) -> str:
    """Why a transfer failed, in words (`Connection refused`, `timed out`): the system's reason, not a class name."""
    reason = getattr(error, "reason", None) or error
    words = getattr(reason, "strerror", None) or str(reason)
    return str(words) or "the connection failed"


def _transfer(url: str, partial_file: Path) -> None:
    offset = partial_file.stat().st_size if partial_file.exists() else 0
    try:
        response = _open_url(url, offset)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:
            raise
        partial_file.unlink()  # the server cannot continue this partial download: start over
        offset = 0
        response = _open_url(url, offset)
    with response:
        offset = _resume_offset(response, offset, partial_file)
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else None
        _append_body(response, partial_file, offset, total)


def _open_url(url: str, offset: int) -> http.client.HTTPResponse:
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    # http(s) only (a file:// URL is read in place, never opened here), so the answer is an HTTPResponse.
    response: http.client.HTTPResponse = urllib.request.urlopen(
        urllib.request.Request(url, headers=headers), timeout=NETWORK_TIMEOUT_SECONDS
    )
    return response


def _resume_offset(response: http.client.HTTPResponse, offset: int, partial_file: Path) -> int:
    """Where the body continues: `offset` if the server honoured Range, 0 if it sent the whole file."""
    if response.status != 206:
        return 0
    if offset and response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
        return offset
    partial_file.unlink(missing_ok=True)
    raise ConnectionError(f"server answered an unexpected range {response.headers.get('Content-Range')!r}")


def _append_body(response: http.client.HTTPResponse, partial_file: Path, offset: int, total: int | None) -> None:
    """Write the body after `offset` bytes of `partial_file`; a short body is a connection error."""
    with (
        open(partial_file, "ab" if offset else "wb") as out,
        tqdm(
            total=total,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"download {partial_file.name.removesuffix('.part')}",
            file=sys.stderr,
            leave=False,
        ) as bar,
    ):
        for chunk in iter(lambda: response.read(CHUNK_SIZE), b""):
            out.write(chunk)
            bar.update(len(chunk))
    received = partial_file.stat().st_size
    if total is not None and received < total:
        raise ConnectionError(f"connection closed after {received} of {total} bytes")


def _is_unsafe_member(member: str) -> bool:
    """Absolute paths, drive letters and `..` components would escape the extraction folder."""
    normalized = member.replace("\\", "/")
    return normalized.startswith("/") or bool(re.match(r"[A-Za-z]:", normalized)) or ".." in normalized.split("/")


def _member_rank(member: str, name: str) -> tuple[int, bool, bool]:
    """Prefer root members, then `scicode/`, then local names over upstream names."""
    return member.count("/"), not member.startswith("scicode/"), Path(member).name != name


def _select_members(archive: zipfile.ZipFile, names: list[str], locate: MemberLocator) -> dict[str, zipfile.ZipInfo]:
    chosen: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = None if info.is_dir() else locate(info.filename)
        if name not in names:
            continue
        if name not in chosen or _member_rank(info.filename, name) < _member_rank(chosen[name].filename, name):
            chosen[name] = info
    return chosen


def extract_members(
    archive_path: Path, names: list[str], dest: Path, label: str, locate: MemberLocator
) -> list[StagedFile]:
    """Extract the wanted known files of a zip into temp files in `dest`, refusing unsafe archives."""
    try:
        with zipfile.ZipFile(archive_path) as archive:
            unsafe = next((info.filename for info in archive.infolist() if _is_unsafe_member(info.filename)), None)
            if unsafe is not None:
                raise SourceUnavailable(
                    f"refused archive: member {unsafe!r} would extract outside the data folder (zip-slip)"
                )
            with temp_batch(dest) as batch:
                for name, info in _select_members(archive, names, locate).items():
                    with archive.open(info) as reader:
                        batch.append(stream_to_temp(reader, dest, name, label))
                return batch
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
        raise SourceUnavailable(f"corrupt archive {archive_path.name}: not a readable zip ({error})") from None


def pip_download(requirement: str, folder: Path) -> Path:
    """The wheel of `requirement`, fetched by pip's downloader (nothing is installed)."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-input", "--disable-pip-version-check", "--quiet", "-d", str(folder), requirement,
    ]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SourceUnavailable(f"pip download did not finish ({error})") from None
    wheels = sorted(folder.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise SourceUnavailable(f"pip download failed ({lines[-1].strip() if lines else f'exit {result.returncode}'})")
    return wheels[0]


# ---------------------------------------------------------------------------
# One published file (a manifest-bound dataset's), size-capped
# ---------------------------------------------------------------------------

MAX_PUBLISHED_FILE_BYTES = 64 << 20  # a published problem file or manifest (SciCode-Verified's: under 1 MB)


class _CappedReader:
    """A reader that fails once more than `limit` bytes have been read (a server that never stops sending)."""

    def __init__(self, reader: IO[bytes], limit: int) -> None:
        self._reader, self._left = reader, limit

    def read(self, size: int = -1) -> bytes:
        chunk = self._reader.read(CHUNK_SIZE if size < 0 else size)
        self._left -= len(chunk)
        if self._left < 0:
            raise SourceUnavailable(f"more than {MAX_PUBLISHED_FILE_BYTES} bytes: not a published data file")
        return chunk


def fetch_file(url: str, dest: Path, name: str, source: str) -> StagedFile:
    """`url` (http, https or file) into a temp file in `dest` under `name`, at most MAX_PUBLISHED_FILE_BYTES;
    SourceUnavailable (one line naming the URL) when it cannot be fetched."""
    shown = display_url(url)
    try:
        with urllib.request.urlopen(url, timeout=NETWORK_TIMEOUT_SECONDS) as response:
            return stream_to_temp(_CappedReader(response, MAX_PUBLISHED_FILE_BYTES), dest, name, source)  # type: ignore[arg-type]
    except urllib.error.HTTPError as error:
        raise SourceUnavailable(f"{shown}: HTTP {error.code} {error.reason}") from None
    except SourceUnavailable as error:
        raise SourceUnavailable(f"{shown}: {error}") from None
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise SourceUnavailable(f"{shown}: {_reason(error)}") from None


def file_identity(path: Path | None) -> list[int] | None:
    """A file's size and modification time (what a fingerprint of staged files covers without hashing them); None
    for no path or a file that cannot be read."""
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]
