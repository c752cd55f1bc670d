"""Tasks put as they are called: ``add.put(2, 3)``, ``add.put(a=2, b=3)`` (Celery's delay, RQ's
enqueue, Dramatiq's send), beside the one-payload form, in testing mode and checked by mypy."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from stalkd.worker import App
from stalkd.worker.task import CallTask, Task


def test_a_function_of_several_parameters_is_put_as_called() -> None:
    app = App(middleware=[], result_ttl=60)
    seen: list[tuple[int, int, int]] = []

    @app.task
    def add(a: int, b: int, scale: int = 1) -> int:
        seen.append((a, b, scale))
        return (a + b) * scale

    @app.task(tube="payloads")
    def one(payload: dict[str, int]) -> int:
        return payload["n"]

    assert isinstance(add, CallTask) and type(one) is Task
    with app.testing() as t:
        h1 = add.put(2, 3)
        h2 = add.put(a=2, b=3, scale=10)
        h3 = add.apply((1, 1), {"scale": 2}, delay=5)
        h4 = one.put({"n": 7})
        t.drain()
        assert h1 is not None and h2 is not None and h3 is not None and h4 is not None
        # Then each ran with its arguments, and its result is kept
        assert seen == [(2, 3, 1), (2, 3, 10), (1, 1, 2)]
        assert (h1.result(), h2.result(), h3.result(), h4.result()) == (5, 50, 4, 7)
    assert add(4, 5) == 9  # still callable directly


def test_functions_of_no_parameters_and_async_ones_are_call_tasks_too() -> None:
    app = App(middleware=[])
    ran: list[str] = []

    @app.task
    def tick() -> None:
        ran.append("tick")

    @app.task
    async def fetch(url: str, *, retries: int) -> None:
        await asyncio.sleep(0)
        ran.append(f"{url} {retries}")

    with app.testing() as t:
        tick.put()
        fetch.put("http://x", retries=2)
        t.drain()
    assert ran == ["tick", "http://x 2"]


def test_mypy_checks_the_arguments_of_put(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    src = tmp_path / "use.py"
    src.write_text(textwrap.dedent("""\
        from stalkd.worker import App
        app = App()

        @app.task
        def add(a: int, b: int) -> int:
            return a + b

        @app.task(tube="t")
        def send(payload: dict[str, str]) -> None: ...

        add.put(2, 3)
        add.put(a=2, b=3)
        send.put({"to": "x"})
        add.put(2, "three")
        send.put(5)
        """))
    out, _, _ = api.run(["--strict", "--no-incremental", "--cache-dir=/dev/null", str(src)])
    errors = [ln for ln in out.splitlines() if ": error:" in ln]
    # Then the good calls pass, and the two bad ones (lines 14 and 15) are reported
    assert [ln.split(":")[1] for ln in errors] == ["14", "15"], out


def test_result_of_a_task_that_keeps_no_results_fails_at_once_and_says_why() -> None:
    from stalkd.worker.results import NoResultsKept

    app = App(middleware=[])
    keeps = app.task(lambda p: p, name="keeps", result_ttl=60)
    forgets = app.task(lambda p: p, name="forgets")
    with app.testing() as t:
        kept, lost = keeps.put(1), forgets.put(2)
        t.drain()
        assert kept is not None and lost is not None
        assert kept.result(timeout=5) == 1
        # Then asking the other one for its result raises at once, naming the fix
        with pytest.raises(NoResultsKept, match="task forgets keeps no results .*result_ttl"):
            lost.result(timeout=0.5)
        with pytest.raises(NoResultsKept):
            asyncio.run(lost.aresult(timeout=0.5))
