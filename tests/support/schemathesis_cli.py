"""Run Schemathesis' ``st`` command with one workaround (``python -m`` style:
``python -P tests/support/schemathesis_cli.py run URL ...``).

On CPython 3.11.7, Hypothesis describing a lambda (for a strategy's repr)
re-parses the lambda's source file with ``ast.parse`` deep inside a drawing
stack, and that intermittently fails with ``SystemError: AST constructor
recursion depth mismatch`` — a crash inside the fuzzer, not an answer of the
API under test. Descriptions are only cosmetic, so they are replaced by a
fixed text before Schemathesis starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from hypothesis.internal import lambda_sources
from schemathesis.cli import schemathesis


def _plain_description(_function: Callable[..., object]) -> str:
    return "lambda"


if __name__ == "__main__":
    lambda_sources.lambda_description = _plain_description
    sys.argv[0] = "st"
    sys.exit(schemathesis())
