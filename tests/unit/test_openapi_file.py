"""The committed OpenAPI document (docs/openapi.json) is the one the code
generates: a change to the API shows in its diff."""

from __future__ import annotations

import json
from pathlib import Path

from triggerhook.api import openapi_file
from triggerhook.api.openapi_file import DOCUMENT_PATH, REGENERATE, default_document, stale


def test_the_committed_document_is_current() -> None:
    assert not stale(), f"{DOCUMENT_PATH} is stale: run {REGENERATE}"
    assert json.loads(DOCUMENT_PATH.read_text(encoding="utf-8")) == default_document()


def test_a_stale_or_missing_file_is_found(tmp_path: Path) -> None:
    edited = tmp_path / "openapi.json"
    edited.write_text(openapi_file.rendered().replace('"3.1.0"', '"3.0.0"'), encoding="utf-8")
    assert stale(edited)
    assert stale(tmp_path / "missing.json")
    current = tmp_path / "current.json"
    current.write_text(openapi_file.rendered(), encoding="utf-8")
    assert not stale(current)
