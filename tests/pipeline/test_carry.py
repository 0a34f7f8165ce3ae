"""`carry` through real doit runs: its own run folder, config.json, generation records and fingerprints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.run_files import config_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens on the discard port: download falls through


def run_doit(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "doit", "-f", str(PROJECT_ROOT / "dodo.py"), "-d", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=workdir)


def test_each_carry_mode_generates_into_its_own_run(tmp_path: Path, staged_data_dir: Path) -> None:
    common = (f"data_dir={staged_data_dir}", f"dataset_zip_url={DEAD_URL}", "sample_ids=19", "mode=naive")
    runs = tmp_path / "results" / "scicode" / "gold"
    configs = {}
    for carry, run_name in (("full", "validation-naive-bg"), ("definition", "validation-naive-bg-carrydef")):
        result = run_doit(tmp_path, "generate", *common, f"carry={carry}")
        assert result.returncode == 0, result.stderr + result.stdout
        config = json.loads(config_file(runs / run_name).read_text(encoding="utf-8"))
        generation = json.loads((runs / run_name / "generations" / "19.json").read_text(encoding="utf-8"))
        assert config["settings"]["carry"] == carry and generation["carry"] == carry
        assert generation["status"] == "complete"
        configs[carry] = config
    full, definition = configs["full"]["stage_fingerprints"], configs["definition"]["stage_fingerprints"]
    assert full["generate"] != definition["generate"] and full["score"] != definition["score"]
    assert full["select"] == definition["select"]
    assert sorted(path.name for path in runs.iterdir()) == ["validation-naive-bg", "validation-naive-bg-carrydef"]

    bad = run_doit(tmp_path, "generate", *common, "carry=whole")
    assert bad.returncode != 0
    assert "invalid carry=whole: expected one of full, definition" in bad.stderr
