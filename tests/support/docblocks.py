"""The code blocks of the project's Markdown documents, for the test that runs them.

:func:`documents` names the documents (README.md, docs/*.md, client/README.md),
read afresh at every test run, so a later edit of a document is tested as it is.
:func:`extract` returns a document's code blocks, fenced (```lang) and indented
(four spaces), with their line numbers, parsed by markdown-it-py (CommonMark's
reference rules, lists and all; in the venv through rich, pinned by constraints.txt). Each block has
a :class:`Kind`: Python, shell commands, or data (JSON, TOML, output, diagrams:
nothing to run). :func:`commands` splits a shell block into the commands a
shell would read: backslash continuations joined, here-documents kept whole,
``$ `` prompts taken off (a console block's other lines are its output),
comment lines dropped; in a block without a language, a line that does not
start with a known command is output shown after the one before.

Pure: no I/O beyond reading the documents, nothing run.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]

PYTHON_LANGS = frozenset({"python", "py", "python3", "pycon"})
SHELL_LANGS = frozenset({"sh", "bash", "shell", "console", "shell-session", "zsh"})

# A block without a language is a shell block when its first command starts
# with one of these (or a path: scripts/..., ./..., /opt/...); otherwise it is
# output or a diagram. A word missing here makes a command block pass as data:
# add it when a document shows a new program.
COMMAND_WORDS = frozenset(
    {
        "triggerhook",
        "curl",
        "pip",
        "pip3",
        "python",
        "python3",
        "docker",
        "systemctl",
        "systemd-run",
        "systemd-analyze",
        "journalctl",
        "mysqldump",
        "mysql",
        "install",
        "sudo",
        "export",
        "set",
        "cd",
        "git",
        "apt",
        "apt-get",
        "openssl",
        "editor",
        "echo",
        "cat",
        "influx",
        "printf",
        "uv",
        "pytest",
        "top",
        "ps",
        "kill",
    }
)
_PATH_PREFIXES = ("scripts/", "./", "/opt/", ".venv/", "~/")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*$")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


class Kind(enum.Enum):
    PYTHON = "python"
    SHELL = "shell"
    DATA = "data"


@dataclass(frozen=True)
class Block:
    """One code block: ``line`` is the 1-based line of its first line of code."""

    path: str  # relative to the repository, e.g. "docs/operations.md"
    line: int
    lang: str  # the info string's first word, lower case; "" for none and indented blocks
    text: str
    indented: bool

    @property
    def kind(self) -> Kind:
        if self.lang in PYTHON_LANGS:
            return Kind.PYTHON
        if self.lang in SHELL_LANGS:
            return Kind.SHELL
        if self.lang == "" and _looks_like_commands(self.text):
            return Kind.SHELL
        return Kind.DATA

    @property
    def first_line(self) -> str:
        return next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line} ({self.lang or ('indented' if self.indented else 'plain')})"
        )


@dataclass(frozen=True)
class Command:
    """One shell command of a block: ``text`` as a shell reads it (continuations
    and here-documents included); ``summary`` the same on one line, without the
    continuations, here-document and comments (what the tables match on)."""

    block: Block
    line: int  # 1-based, in the document
    text: str
    summary: str

    def __str__(self) -> str:
        return f"{self.block.path}:{self.line}: {self.summary}"


def documents(repo: Path = REPO) -> list[Path]:
    """The documents whose code blocks are tested, README first."""
    found = [repo / "README.md", *sorted((repo / "docs").glob("*.md")), repo / "client/README.md"]
    return [path for path in found if path.is_file()]


def extract(path: Path, repo: Path = REPO) -> list[Block]:
    """Every code block of one Markdown document, in document order."""
    name = path.resolve().relative_to(repo).as_posix()
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    blocks = []
    for token in tokens:
        if token.type not in ("fence", "code_block") or token.map is None:
            continue
        fenced = token.type == "fence"
        lang = token.info.split()[0].lower() if fenced and token.info.strip() else ""
        first = token.map[0] + (2 if fenced else 1)
        blocks.append(Block(name, first, lang, token.content, indented=not fenced))
    return blocks


def _looks_like_commands(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return False
    return program(_unprompt(lines[0]) or lines[0]) != ""


def program(command: str) -> str:
    """The program a command line runs: its first word after variable
    assignments and ``sudo``; "" when the line does not look like a command."""
    words = command.split()
    while words and (_ASSIGNMENT.match(words[0]) or words[0] == "sudo"):
        words = words[1:]
    if not words:
        return ""
    first = words[0]
    if first in COMMAND_WORDS or first.startswith(_PATH_PREFIXES):
        return first
    return ""


def _unprompt(line: str) -> str | None:
    """A console line's command without its ``$ `` prompt; None for output."""
    stripped = line.lstrip()
    if stripped.startswith("$ "):
        return stripped[2:]
    return None


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` after a blank, outside quotes)."""
    quote = ""
    escaped = False
    blank_before = True  # an unescaped blank (or the start) precedes this character
    for i, char in enumerate(line):
        was_escaped, escaped = escaped, False
        if was_escaped:
            pass
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and blank_before:
            return line[:i].rstrip()
        blank_before = char.isspace() and not was_escaped and not quote
    return line.rstrip()


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, in order."""
    lines = block.text.splitlines()
    prompted = any(_unprompt(ln) is not None for ln in lines)
    # Without a language, a line that does not start with a command is output.
    plain = block.lang not in SHELL_LANGS
    found: list[Command] = []
    i = 0
    while i < len(lines):
        start = i
        line = lines[i]
        i += 1
        if prompted:
            unprompted = _unprompt(line)
            if unprompted is None:
                continue  # output shown after a prompt
            line = unprompted
        code = strip_comment(line)
        if not code.strip() or (plain and not prompted and not program(code)):
            continue
        parts = [code]
        while parts[-1].endswith("\\") and i < len(lines):
            nxt = lines[i]
            i += 1
            if prompted and nxt.lstrip().startswith("> "):
                nxt = nxt.lstrip()[2:]
            parts.append(strip_comment(nxt))
        text = "\n".join(parts)
        summary = " ".join(p.removesuffix("\\").strip() for p in parts)
        heredoc = _HEREDOC.search(summary)
        if heredoc:
            body, i = _heredoc_body(lines, i, heredoc.group(3), dashed=heredoc.group(1) == "-")
            text = "\n".join([text, *body])
        found.append(Command(block, block.line + start, text, summary.strip()))
    return found


def _heredoc_body(lines: list[str], i: int, word: str, dashed: bool) -> tuple[list[str], int]:
    body = []
    while i < len(lines):
        line = lines[i]
        i += 1
        body.append(line)
        if (line.lstrip("\t") if dashed else line) == word:
            return body, i
    raise ValueError(f"here-document {word!r} is not closed")
