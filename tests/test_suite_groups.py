"""The suite's own scheduling: under xdist, tests sharing a costly fixture are grouped onto one worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def module_resource() -> str:
    return "made once for this module"


def test_a_module_fixture_keeps_its_tests_on_one_worker(request: pytest.FixtureRequest, module_resource: str) -> None:
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not run by an xdist worker (-n 0)")
    # loadgroup schedules by the `@<group>` suffix xdist adds to the node id; without it the group is lost
    assert request.node.nodeid.endswith("@tests.test_suite_groups"), request.node.nodeid
