"""Where the tests find the SciCode files: the read-only folder beside the project, else fetched as a user gets them.

`../shared/` (or the folder named by SCICODE_SHARED_DIR) holds the official files and the validation targets
(`scicode/test_data_dev.h5`), the service kits and the official-prompts fixture. Without its `scicode/` folder, the
tests that need the problem files and the validation targets get them the way a user does: the download stage
fetches the problem files from the package index (the sha256-pinned `nvidia-scicode` wheel) and the project derives
the validation targets from the reference code. That is done once into a cache folder (SCICODE_TEST_DATA_CACHE,
else a folder under the temp dir), under a lock so that concurrent sessions and xdist workers share one copy, and
laid out as `../shared/scicode/` is: the seven pinned files and `test_data_dev.h5`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHARED_ROOT_VARIABLE = "SCICODE_SHARED_DIR"
DATA_CACHE_VARIABLE = "SCICODE_TEST_DATA_CACHE"
DEAD_ARCHIVE_URL = "http://127.0.0.1:9/scicode.zip"  # no archive: the problem files come from the wheel
VALIDATION_TARGETS = "test_data_dev.h5"
COMPLETE_MARKER = ".complete"
CACHE_LAYOUT = "1"  # the marker's content: a cache of another layout is made again


def shared_root() -> Path:
    """The folder of read-only data beside the project (`../shared`, or SCICODE_SHARED_DIR)."""
    named = os.environ.get(SHARED_ROOT_VARIABLE)
    return Path(named) if named else PROJECT_ROOT.parent / "shared"


def official_scicode_dir() -> Path | None:
    """`<shared>/scicode` when it holds the official files; None otherwise."""
    folder = shared_root() / "scicode"
    return folder if (folder / "problems_dev.jsonl").is_file() else None


def data_cache_dir() -> Path:
    named = os.environ.get(DATA_CACHE_VARIABLE)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"scicode-test-data-{os.getuid()}"


class FetchFailed(RuntimeError):
    """The problem files could not be fetched or the validation targets not derived; the message says why."""


def fetched_scicode_dir(log: Callable[[str], None] = lambda line: None) -> Path:
    """The cache's `scicode/` folder, laid out as `<shared>/scicode`, made once (module docstring)."""
    cache = data_cache_dir()
    folder = cache / "scicode"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = folder / COMPLETE_MARKER
        if marker.is_file() and marker.read_text(encoding="utf-8") == CACHE_LAYOUT:
            return folder
        _fill(cache, folder, log)
        marker.write_text(CACHE_LAYOUT, encoding="utf-8")
    return folder


def _fill(cache: Path, folder: Path, log: Callable[[str], None]) -> None:
    """Download the pinned files into `cache/data` (the download stage) and derive the validation targets there;
    then copy them, read-only, into `folder`."""
    from stages.benchmark.pins import required_files
    from stages.config.settings import load_settings
    from stages.download.stage import run_download
    from stages.errors import PipelineError
    from stages.targets.derive import derive_targets

    data_dir = cache / "data"
    values = {"data_dir": str(data_dir), "dataset_zip_url": DEAD_ARCHIVE_URL, "step_timeout_seconds": "900"}
    settings = load_settings(values, cwd=cache)
    try:
        log(f"fetching the SciCode problem files into {data_dir} (the download stage: the pinned wheel)")
        run_download(settings)
        log("deriving the validation targets from the reference code (once; a few minutes)")
        record = derive_targets(settings)
    except PipelineError as error:
        raise FetchFailed(f"the SciCode files could not be fetched as a user gets them: {error}") from error
    if record.get("status") != "complete":
        raise FetchFailed(f"the validation targets were derived only in part: see {data_dir}/scicode/")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sources = {name: settings.data_paths.file(name) for name in required_files()}
    sources[VALIDATION_TARGETS] = settings.data_paths.derived_targets
    for name, source in sources.items():
        shutil.copyfile(source, folder / name)
        (folder / name).chmod(0o444)
