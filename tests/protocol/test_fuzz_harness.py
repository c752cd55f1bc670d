"""The atheris harness's check runs (without atheris) on seeds and random inputs, so it cannot
rot between fuzzing campaigns; its assertions are the fuzzer's oracle."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from stalkd.protocol.commands import Use
from stalkd.protocol.parser import Item, Parser

_PATH = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_parser.py"
_spec = importlib.util.spec_from_file_location("fuzz_parser", _PATH)
assert _spec is not None and _spec.loader is not None
fuzz_parser = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_parser)

SEEDS = [
    b"\x10\x02\x00\x05\x00\x09put 0 0 1 3\r\nabc\r\nreserve\r\n",
    b"\x02\x01\x00\x03put 0 0 0 11\r\ndelete 9999\r\nuse t\r\n",
    b"\xff\x00" + b"x" * 500 + b"\r\nuse a\r\n",
    b"\xff\x00" + b"use a\rb\r\n" + b"y" * 300 + b"\r\nuse c\r\n",
    b"\xff\x03\x00\x01\x00\xdf\x00\xe0" + b"x" * 223 + b"\r\nuse a\r\nuse b\r\n",
]


@pytest.mark.parametrize("seed", SEEDS)
def test_seed(seed: bytes) -> None:
    fuzz_parser.check(seed)


def test_random_inputs() -> None:
    rng = random.Random(4)
    alphabet = b"put 0123456789\r\n usedeletreservkick-jobabc\x00\xff"
    for _ in range(300):
        n = rng.randrange(0, 400)
        data = bytes([rng.randrange(256), rng.randrange(256)]) + bytes(rng.choice(alphabet) for _ in range(n))
        fuzz_parser.check(data)


def test_check_detects_a_wrong_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    # The oracle must be able to fail: break the parser's line limit and expect an assertion.
    monkeypatch.setattr("stalkd.protocol.parser.LINE_MAX", 300)
    with pytest.raises(AssertionError):
        fuzz_parser.check(b"\xff\x00" + b"x" * 250 + b"\r\nuse a\r\n", compiled=None)


def test_check_detects_a_compiled_parser_that_differs() -> None:
    # The differential half must be able to fail too: a "compiled" parser that drops an item.
    with pytest.raises(AssertionError, match="the C parser differs"):
        fuzz_parser.check(b"\xff\x00use a\r\nuse b\r\n", compiled=_Lossy)


class _Lossy(Parser):
    """Loses every ``use`` command, as a wrong accelerator might."""

    def next(self) -> Item:
        item = super().next()
        return super().next() if type(item) is Use else item
