"""The code-block extractor the documents' test runs on (support/docblocks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.docblocks import REPO, Block, Kind, commands, documents, extract, strip_comment

DOCUMENT = """\
# Title

```python
print("hi")
```

Text, then an indented block:

    triggerhook db init      # a comment
    curl -X POST localhost:8080/v1/tasks \\
         -d '{"id": "a#1"}'
    {"id": "a#1", "created": true}

* A list item with a fence:

  ```sh
  set -a; . ./.env; set +a
  # a comment line
  sudo tee /etc/x <<'EOF'
  A=1
  EOF
  ```

```
INFO triggerhook.app: database: ...
```

```console
$ triggerhook --version
triggerhook 0.1.0
```

```json
{"a": 1}
```
"""


@pytest.fixture
def blocks(tmp_path: Path) -> list[Block]:
    path = tmp_path / "doc.md"
    path.write_text(DOCUMENT)
    return extract(path, repo=tmp_path)


def test_blocks_with_their_lines_languages_and_kinds(blocks: list[Block]) -> None:
    shown = [(b.path, b.line, b.lang, b.indented, b.kind) for b in blocks]
    assert shown == [
        ("doc.md", 4, "python", False, Kind.PYTHON),
        ("doc.md", 9, "", True, Kind.SHELL),
        ("doc.md", 17, "sh", False, Kind.SHELL),
        ("doc.md", 25, "", False, Kind.DATA),
        ("doc.md", 29, "console", False, Kind.SHELL),
        ("doc.md", 34, "json", False, Kind.DATA),
    ]
    assert blocks[0].text == 'print("hi")\n'
    assert blocks[2].text.startswith("set -a;")  # the list item's indent taken off
    assert blocks[0].first_line == 'print("hi")'


def test_commands_of_an_indented_block(blocks: list[Block]) -> None:
    found = commands(blocks[1])
    assert [(c.line, c.summary) for c in found] == [
        (9, "triggerhook db init"),
        (10, """curl -X POST localhost:8080/v1/tasks -d '{"id": "a#1"}'"""),
    ]  # the JSON line after them is their output
    assert found[1].text == 'curl -X POST localhost:8080/v1/tasks \\\n     -d \'{"id": "a#1"}\''


def test_commands_of_a_fenced_block_with_a_here_document(blocks: list[Block]) -> None:
    found = commands(blocks[2])
    assert [(c.line, c.summary) for c in found] == [
        (17, "set -a; . ./.env; set +a"),
        (19, "sudo tee /etc/x <<'EOF'"),
    ]
    assert found[1].text == "sudo tee /etc/x <<'EOF'\nA=1\nEOF"


def test_console_prompts_and_output(blocks: list[Block]) -> None:
    assert [c.summary for c in commands(blocks[4])] == ["triggerhook --version"]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("triggerhook db init   # create", "triggerhook db init"),
        ("echo 'a # b'  # c", "echo 'a # b'"),
        ('echo "a # b"', 'echo "a # b"'),
        ("curl localhost:8080/#frag", "curl localhost:8080/#frag"),
        ("echo a\\ #b", "echo a\\ #b"),
        ("# all comment", ""),
    ],
)
def test_strip_comment(line: str, code: str) -> None:
    assert strip_comment(line) == code


def test_an_unclosed_here_document_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_text("```sh\ncat <<EOF\nno end\n```\n")
    with pytest.raises(ValueError, match="EOF"):
        commands(extract(path, repo=tmp_path)[0])


def test_the_documents_tested() -> None:
    names = [path.relative_to(REPO).as_posix() for path in documents()]
    assert names[0] == "README.md"
    assert names[-1] == "client/README.md"
    assert "docs/operations.md" in names
    assert all(name.endswith(".md") for name in names)
