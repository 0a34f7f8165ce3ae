"""stages.execution.safe_ast: parses from many threads at once never fail, even with finalizers switching threads."""

from __future__ import annotations

import ast
import sys
import threading

import pytest

from stages.execution.safe_ast import parse, parse_module

THREADS = 8
ROUNDS = 30


class _CyclicWithFinalizer:
    """Garbage whose collection runs Python code (a chance for the interpreter to switch threads)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


def _source(index: int) -> str:
    body = "\n".join(
        f"    v{i} = [x * {i} for x in range(3) if x] or {{'k': (v{i - 1} if {i} else 0)}}" for i in range(1, 40)
    )
    return f"def f{index}():\n    v0 = 0\n{body}\n    return v39\n"


@pytest.fixture
def frequent_thread_switches():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def test_parses_in_many_threads_with_finalizers_never_fail(frequent_thread_switches) -> None:
    sources = [_source(index) for index in range(5)]
    failures: list[BaseException] = []

    def work() -> None:
        for _ in range(ROUNDS):
            for source in sources:
                _CyclicWithFinalizer()
                try:
                    parse_module(source)
                except BaseException as error:  # noqa: BLE001 - collected for the assertion
                    failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_parse_is_ast_parse() -> None:
    assert ast.dump(parse_module("x = 1\n")) == ast.dump(ast.parse("x = 1\n"))
    assert isinstance(parse("1 + 2", mode="eval"), ast.Expression)
    with pytest.raises(SyntaxError):
        parse_module("def broken(:\n")
