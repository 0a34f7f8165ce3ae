"""Which problems of a split a command looks at: `sample_ids`, `category` and `attempts` as one value.

A `View` owns the two things every reader of those settings needs: the predicate that selects a problem (the
select stage writes the selection with it; compare narrows two runs' common problems with it) and the tag that
names the view's files (`summary-<tag>.md`, `compare-...-<tag>.md`; "" for the whole split with one attempt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stages.storage.artifacts import fingerprint
from stages.storage.paths import safe_name

if TYPE_CHECKING:
    from stages.benchmark.categories import Category

LONGEST_IDS_IN_TAG = 40  # characters of joined ids a tag spells out; longer lists are named by count and digest
LONGEST_CATEGORIES_IN_TAG = 100  # the same for joined category names


@dataclass(frozen=True)
class View:
    """`sample_ids` (empty: every problem), `categories` (None: every category) and `attempts` (the view a command
    line's settings ask for is `Settings.view`)."""

    sample_ids: tuple[str, ...] = ()
    categories: tuple[str, ...] | None = None
    attempts: int = 1

    def of_one_attempt(self) -> View:
        """The same problems with one attempt (what compare names its files by)."""
        return View(self.sample_ids, self.categories)

    def selects(self, problem_id: str, taxonomy: Category) -> bool:
        """Whether a problem with this id and category is in the view."""
        return (not self.sample_ids or problem_id in self.sample_ids) and (
            self.categories is None or any(taxonomy.matches(name) for name in self.categories)
        )

    @property
    def narrowing(self) -> str | None:
        """`sample_ids=1,19 category=x`, or None when the view is every problem."""
        parts = [f"sample_ids={','.join(self.sample_ids)}"] if self.sample_ids else []
        parts += [f"category={','.join(self.categories)}"] if self.categories is not None else []
        return " ".join(parts) or None

    @property
    def tag(self) -> str:
        """ "" for the whole split with one attempt; else a tag naming the view (`ids-1_3`, `cat-x`, `k3`), so a
        subset or an attempts change gets its own files beside the full run's instead of replacing them."""
        parts = [self._ids_tag()] if self.sample_ids else []
        if self.categories is not None:
            parts.append(self._categories_tag(self.categories))
        if self.attempts != 1:
            parts.append(f"k{self.attempts}")
        return safe_name("-".join(parts)) if parts else ""

    def _ids_tag(self) -> str:
        return spelled_or_counted("ids", self.sample_ids, LONGEST_IDS_IN_TAG)

    @staticmethod
    def _categories_tag(categories: tuple[str, ...]) -> str:
        return spelled_or_counted("cat", categories, LONGEST_CATEGORIES_IN_TAG)


def spelled_or_counted(prefix: str, names: tuple[str, ...], longest: int) -> str:
    """`<prefix>-a_b` while the joined names fit in `longest` characters, else `<prefix>-<count>-<digest>`: a tag
    names a file, so its length is bounded whatever the list."""
    joined = "_".join(names)
    if len(joined) <= longest:
        return f"{prefix}-{joined}"
    return f"{prefix}-{len(names)}-{fingerprint(list(names))[:8]}"
