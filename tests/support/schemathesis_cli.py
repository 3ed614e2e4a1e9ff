"""Run Schemathesis' ``st`` command with one workaround and one hook (``python -m``
style: ``python -P tests/support/schemathesis_cli.py run URL ...``).

The workaround: on CPython 3.11.7, Hypothesis describing a lambda (for a
strategy's repr) re-parses the lambda's source file with ``ast.parse`` deep
inside a drawing stack, and that intermittently fails with ``SystemError: AST
constructor recursion depth mismatch`` — a crash inside the fuzzer, not an
answer of the API under test. Descriptions are only cosmetic, so they are
replaced by a fixed text before Schemathesis starts.

The hook: a listing's ``cursor`` is opaque — valid only as a ``next_cursor``
the API gave out, which no schema can generate. A positive case (one every
schema admits, so it must be accepted) therefore gets a real cursor, made from
the drawn one; negative cases keep what was drawn.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis.internal import lambda_sources
from schemathesis.cli import schemathesis as st_command
from schemathesis.generation.case import Case
from schemathesis.hooks import HookContext

from triggerhook.domain.listing import encode_cursor
from triggerhook.domain.task import MAX_DUE_MS


def _plain_description(_function: Callable[..., object]) -> str:
    return "lambda"


def cursor_like(drawn: str) -> str:
    """A cursor this API could have given out, derived from ``drawn``."""
    digest = zlib.crc32(drawn.encode("utf-8", "surrogatepass"))
    return encode_cursor((digest * 65_537 % (MAX_DUE_MS + 1), f"c-{digest:08x}"))


def real_cursor(context: HookContext, case: Case[Any]) -> Case[Any]:
    """``map_case``: a real cursor in a positive case of ``GET /v1/tasks``."""
    operation = context.operation
    if operation is None or (operation.method.upper(), operation.path) != ("GET", "/v1/tasks"):
        return case
    query = case.query
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and isinstance(query, dict) and isinstance(query.get("cursor"), str):
        query["cursor"] = cursor_like(query["cursor"])
    return case


def register_hooks() -> None:
    schemathesis.hook("map_case")(real_cursor)


if __name__ == "__main__":
    lambda_sources.lambda_description = _plain_description
    register_hooks()
    sys.argv[0] = "st"
    sys.exit(st_command())
