"""The client build's one step beyond pyproject.toml: the gRPC API's message
module (``triggerhook_client/grpc/triggerhook_pb2.py`` and its ``.pyi``),
generated from ``triggerhook.proto`` by grpcio-tools' protoc (a build
requirement), never committed. A wheel build and an editable install
(``pip install -e ./client``, which scripts/_venv.sh runs, CI's clean clone
too) both run ``build_py``, which writes them beside the ``.proto`` first, so
the wheel carries them and the source tree imports them. Using them needs the
``grpc`` extra (grpcio, protobuf); the module is generated either way.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO = Path("triggerhook_client/grpc/triggerhook.proto")


def generate() -> None:
    """protoc over the .proto, from the distribution's root so that the module
    is named by its package (triggerhook_client.grpc.triggerhook_pb2)."""
    from grpc_tools import protoc  # noqa: PLC0415 (a build requirement only)

    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            str(ROOT / PROTO),
        ]
    )
    if status != 0:
        raise SystemExit(f"protoc failed on {PROTO} (status {status})")


class BuildPy(build_py):
    def run(self) -> None:
        generate()
        super().run()


setup(cmdclass={"build_py": BuildPy})
