"""Spin runs of the project's Promela models for the tests in tests/model:
generate, compile and run the verifier. The ownership protocol's model
(models/ownership.pml) is the default; the outbox's (models/outbox.pml) is
given as ``model=OUTBOX``, the lanes' (models/lanes.pml) as ``model=LANES``."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "models" / "ownership.pml"
OUTBOX = MODEL.with_name("outbox.pml")
LANES = MODEL.with_name("lanes.pml")
DEPTH_LIMIT = 1_000_000
TIMEOUT_S = 1200  # the longest search (I4 with R8p) took 11 minutes on a loaded 2-core machine


@dataclass(frozen=True)
class Verdict:
    errors: int
    complete: bool  # the whole state space was searched
    violation: str  # the first "assertion violated ..." or "acceptance cycle" line
    output: str


def check(
    tmp_path: Path, *, liveness: bool, defines: tuple[str, ...] = (), model: Path = MODEL
) -> Verdict:
    """Generate, compile and run the verifier for ``model`` (``MODEL`` unless
    given) with ``defines``."""
    for tool in ("spin", "gcc"):
        assert shutil.which(tool), f"{tool} is missing: scripts/test installs it"
    shutil.copy(model, tmp_path / model.name)

    def run(*command: str) -> str:
        done = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        return done.stdout + done.stderr

    flags = [f"-D{define}" for define in defines]
    generated = run("spin", *flags, "-a", model.name)
    assert (tmp_path / "pan.c").exists(), generated
    # COLLAPSE halves the memory of the search (about 2 GB for the liveness check).
    compile_flags = ["-O2", "-DCOLLAPSE"] + ([] if liveness else ["-DNOCLAIM"])
    compiled = run("gcc", *compile_flags, "-o", "pan", "pan.c")
    assert (tmp_path / "pan").exists(), compiled
    output = run("./pan", *(["-a"] if liveness else []), f"-m{DEPTH_LIMIT}")
    found = re.search(r"errors: (\d+)", output)
    assert found, output
    depth = re.search(r"depth reached (\d+)", output)
    assert depth, output
    violation = re.search(r"^pan:1: (.*)$", output, re.MULTILINE)
    return Verdict(
        errors=int(found.group(1)),
        complete=int(depth.group(1)) < DEPTH_LIMIT - 1,
        violation=violation.group(1) if violation else "",
        output=output,
    )


# The liveness checks leave out the replace (R6r, MAX_REPLACE=0), which would double
# their search: but for a series' restart, the instances cannot tell it from a
# reschedule (models/ownership.pml, at the client).
NO_REPLACE = ("MAX_REPLACE=0",)
