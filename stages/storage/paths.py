"""Every path the pipeline reads or writes, in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # stages/, wherever it is imported from
# The folder that holds stages/: the checkout when run from it (PYTHONPATH, an editable install), site-packages when
# installed from a wheel. Nothing the package reads lies outside stages/; this is where a child python imports it.
IMPORT_ROOT = PACKAGE_DIR.parent
# The artifact schemas. They are kept in the checkout's top-level schemas/ folder, and stages/schemas is a link to it
# (`../schemas`): so the package reads them inside itself from the checkout and from a wheel alike, into which
# setuptools copies the linked files as the package data of `stages.schemas` (pyproject.toml).
SCHEMAS_DIR = PACKAGE_DIR / "schemas"
STATE_DIR_NAME = ".scicode"
ATTEMPT_SEPARATOR = "@"
COMPARE_DIR_NAME = "compare"


NAME_MAX = 255  # bytes of one file or folder name (Linux, macOS)
LONGEST_FILE_STEM = 200  # characters of a file name before its suffix, with room for an atomic write's temporary name


def safe_name(name: str) -> str:
    """A filesystem-safe rendering of a model or run name (no separators, no leading dots; ASCII), at most NAME_MAX
    characters (`bounded_name`: a name that fits is unchanged, so no run folder that exists is renamed)."""
    cleaned = re.sub(r"[^A-Za-z0-9._+=@-]+", "_", name).strip("._")
    return bounded_name(cleaned or "_", NAME_MAX)


def bounded_name(name: str, longest: int) -> str:
    """`name` when it has at most `longest` characters; else its head and a digest of the whole, `longest`
    characters in all (two long names that share a head stay apart)."""
    if len(name) <= longest:
        return name
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[: longest - len(digest) - 1]}-{digest}"


@dataclass(frozen=True)
class StatePaths:
    """Pipeline-private state under the working directory (doit database, caches, scratch)."""

    root: Path

    @property
    def doit_db(self) -> Path:
        return self.root / "doit.sqlite3"

    @property
    def verdict_cache(self) -> Path:
        return self.root / "verdicts"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def environments(self) -> Path:
        """The grading environments `doit environments` builds (one venv per protocol environment)."""
        return self.root / "environments"


@dataclass(frozen=True)
class DataPaths:
    data_dir: Path

    @property
    def scicode_dir(self) -> Path:
        return self.data_dir / "scicode"

    @property
    def manifest(self) -> Path:
        return self.scicode_dir / "manifest.json"

    def file(self, name: str) -> Path:
        return self.scicode_dir / name

    @property
    def derived_targets(self) -> Path:
        return self.scicode_dir / "derived_targets.h5"


@dataclass(frozen=True)
class ResultsPaths:
    """`<results_dir>/scicode/`: every run folder, and the comparisons of two runs."""

    results_dir: Path

    @property
    def root(self) -> Path:
        return Path(self.results_dir) / "scicode"

    def run_dir(self, model: str, run: str) -> Path:
        return self.root / safe_name(model) / safe_name(run)

    def named_run(self, model_and_run: str) -> Path:
        """A run folder named as `<model>/<run>` (as written, under the results folder)."""
        return self.root / model_and_run

    @property
    def compare_dir(self) -> Path:
        return self.root / COMPARE_DIR_NAME

    def comparison(self, label_a: str, label_b: str, tag: str = "") -> Path:
        """The Markdown comparison of two runs; its HTML page and its record are the same name with `.html` and
        `.json`. `tag` names a comparison narrowed to some problems (Settings.summary_tag), beside the full one."""
        suffix = f"-{tag}" if tag else ""
        return self.compare_dir / f"{bounded_name(f'{label_a}__vs__{label_b}{suffix}', LONGEST_FILE_STEM)}.md"

    def comparison_page(self, label_a: str, label_b: str, tag: str = "") -> Path:
        """The HTML page beside the Markdown comparison."""
        return self.comparison(label_a, label_b, tag).with_suffix(".html")

    def comparison_record(self, label_a: str, label_b: str, tag: str = "") -> Path:
        """The comparison's record (schemas/compare.schema.json) beside its Markdown."""
        return self.comparison(label_a, label_b, tag).with_suffix(".json")

    @property
    def runs_index(self) -> Path:
        """`doit runs`: the Markdown index of every run; its HTML page is `runs_page`."""
        return self.root / "runs.md"

    @property
    def runs_page(self) -> Path:
        return self.root / "runs.html"


@dataclass(frozen=True)
class RunPaths:
    """`<results_dir>/scicode/<model>/<run>/` and everything inside it.

    `summary_tag` names a selection other than the whole split with one attempt (see Settings.summary_tag): its
    summary and plots are `summary-<tag>.md/.json` and `plots-<tag>/`, so they never replace the full run's."""

    run_dir: Path
    summary_tag: str = ""

    @classmethod
    def of(cls, results_dir: Path, model: str, run: str, summary_tag: str = "") -> RunPaths:
        return cls(ResultsPaths(Path(results_dir)).run_dir(model, run), summary_tag)

    @property
    def _tag_suffix(self) -> str:
        return f"-{self.summary_tag}" if self.summary_tag else ""

    @property
    def config(self) -> Path:
        """The settings of this selection's last run: `config.json` for the full run, `config-<tag>.json` for a
        subset (a subset never rewrites what the full run's summary was made from)."""
        return self.run_dir / f"config{self._tag_suffix}.json"

    def recorded_config(self) -> Path:
        """The config file a reader of the folder should use: this selection's, else the most recent one."""
        if self.config.is_file():
            return self.config
        tagged = sorted(self.run_dir.glob("config-*.json"), key=lambda path: path.stat().st_mtime_ns)
        return tagged[-1] if tagged else self.config

    def viewed(self) -> RunPaths:
        """The paths a reader of the folder uses: this selection's, else, when the folder holds no full run, the
        most recent subset's (a folder that only ever ran `sample_ids=1,19` is read as that view)."""
        if self.summary_tag or self.selection.is_file():
            return self
        tagged = sorted(self.run_dir.glob("selection-*.json"), key=lambda path: path.stat().st_mtime_ns)
        if not tagged:
            return self
        return RunPaths(self.run_dir, tagged[-1].name.removeprefix("selection-").removesuffix(".json"))

    def has_selection(self) -> bool:
        """Whether the folder holds a run: a selection or config file of any selection."""
        return any(self.run_dir.glob("selection*.json")) or any(self.run_dir.glob("config*.json"))

    @property
    def selection(self) -> Path:
        """The problems of this selection: the full run's `selection.json`, a subset's `selection-<tag>.json` (a
        subset never replaces the full run's selection)."""
        return self.run_dir / f"selection{self._tag_suffix}.json"

    @property
    def identity(self) -> Path:
        """The generation settings the folder was made with (stages/generate/identity.py)."""
        return self.run_dir / "identity.json"

    @property
    def generations_dir(self) -> Path:
        return self.run_dir / "generations"

    def generation(self, problem_id: str, attempt: int = 0) -> Path:
        """`generations/<id>.json` for attempt 0, `generations/<id>@<attempt>.json` for later attempts."""
        suffix = f"{ATTEMPT_SEPARATOR}{attempt}" if attempt else ""
        return self.generations_dir / f"{problem_id}{suffix}.json"

    def generation_files(self, problem_id: str) -> list[Path]:
        """The generation files of every attempt of a problem that exist, with their reply journals and the record of
        a failed generation (what `doit clean generate` removes)."""
        folder = self.generations_dir
        journals = self.replies_dir
        return (
            sorted(folder.glob(f"{problem_id}.json"))
            + sorted(folder.glob(f"{problem_id}{ATTEMPT_SEPARATOR}*.json"))
            + sorted(journals.glob(f"{problem_id}.jsonl"))
            + sorted(journals.glob(f"{problem_id}{ATTEMPT_SEPARATOR}*.jsonl"))
            + [path for path in (self.not_generated(problem_id),) if path.exists()]
        )

    @property
    def replies_dir(self) -> Path:
        return self.run_dir / "replies"

    def replies(self, problem_id: str, attempt: int = 0) -> Path:
        """The reply journal of a problem's attempt (stages/generate/journal.py): the replies of the step being
        generated, saved before they are parsed; absent once that step is recorded."""
        suffix = f"{ATTEMPT_SEPARATOR}{attempt}" if attempt else ""
        return self.replies_dir / f"{problem_id}{suffix}.jsonl"

    @property
    def not_generated_dir(self) -> Path:
        return self.run_dir / "not_generated"

    @property
    def invocations(self) -> Path:
        """When each problem's generation and scoring ran, appended as it happens (stages/records/invocations.py)."""
        return self.run_dir / "invocations.jsonl"

    def not_generated(self, problem_id: str) -> Path:
        """Why the last generation task of a problem failed (stages/records/not_generated.py); absent once it succeeds."""
        return self.not_generated_dir / f"{problem_id}.json"

    @property
    def details_dir(self) -> Path:
        return self.run_dir / "details"

    def details(self, problem_id: str) -> Path:
        return self.details_dir / f"{problem_id}.json"

    @property
    def not_scored_dir(self) -> Path:
        return self.run_dir / "not_scored"

    def not_scored(self, problem_id: str) -> Path:
        """Why the last scoring of a problem failed (stages/records/not_scored.py); absent once it is scored."""
        return self.not_scored_dir / f"{problem_id}.json"

    @property
    def summary_md(self) -> Path:
        return self.run_dir / f"summary{self._tag_suffix}.md"

    @property
    def summary_json(self) -> Path:
        return self.run_dir / f"summary{self._tag_suffix}.json"

    @property
    def plots_dir(self) -> Path:
        return self.run_dir / f"plots{self._tag_suffix}"

    @property
    def lock(self) -> Path:
        return self.run_dir / ".lock"

    @property
    def report_html(self) -> Path:
        return self.run_dir / f"report{self._tag_suffix}.html"

    @property
    def export_dir(self) -> Path:
        """`doit export`: the steps table and the inspect_ai log of the selection."""
        return self.run_dir / f"export{self._tag_suffix}"

    @property
    def export_steps_csv(self) -> Path:
        return self.export_dir / "steps.csv"

    @property
    def export_steps_jsonl(self) -> Path:
        return self.export_dir / "steps.jsonl"

    @property
    def export_inspect_dir(self) -> Path:
        """The inspect_ai log folder (`inspect view --log-dir` lists it)."""
        return self.export_dir / "inspect"

    def recorded_tags(self) -> list[str]:
        """The view tags this folder holds records of: the `<tag>` of each `selection-<tag>.json` and
        `config-<tag>.json` the select stage wrote (never guessed from other names in the folder)."""
        tags = {
            path.name.removeprefix(f"{record}-").removesuffix(".json")
            for record in ("selection", "config")
            for path in self.run_dir.glob(f"{record}-*.json")
        }
        return sorted(tag for tag in tags if tag and safe_name(tag) == tag)

    def view_outputs(self) -> list[Path]:
        """The summaries, plots, report and export of this selection, by their exact names."""
        return [self.summary_md, self.summary_json, self.plots_dir, self.report_html, self.export_dir]

    def derived_outputs(self) -> list[Path]:
        """Everything the run derives from its generations, by the exact names the pipeline writes: details,
        records of problems not scored, and the summaries, plots, reports and exports of the full run and of every
        view the folder holds records of (`recorded_tags`). A name the pipeline does not write (`plots.py`,
        `summary_notes.md`, `export_final/`) is never among them."""
        views = [self, *(RunPaths(self.run_dir, tag) for tag in self.recorded_tags())]
        return [self.details_dir, self.not_scored_dir, *(path for view in views for path in view.view_outputs())]

    def written_report(self) -> Path:
        """The report a reader should open: the full run's, else the one of the only summarized selection."""
        tagged = sorted(self.run_dir.glob("report-*.html"))
        return self.report_html if self.report_html.is_file() or len(tagged) != 1 else tagged[0]
