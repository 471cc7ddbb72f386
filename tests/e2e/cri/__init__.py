"""A small CRI ``runtime.v1`` client for the end-to-end tests: ``runtime_v1.proto`` (the messages the
tests use, written from the CRI API's definitions) is compiled with grpcio-tools at test time into a
temp dir, nothing is downloaded."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

PROTO = Path(__file__).with_name("runtime_v1.proto")


def compile_proto(out: Path) -> tuple[ModuleType, ModuleType]:
    """``(runtime_v1_pb2, runtime_v1_pb2_grpc)`` compiled from ``PROTO`` into ``out``.

    Raises:
        RuntimeError: protoc failed (its status is in the message).
    """
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO.parent}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO),
        ]
    )
    if rc != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (status {rc})")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("runtime_v1_pb2"), importlib.import_module("runtime_v1_pb2_grpc")
    finally:
        sys.path.remove(str(out))


class CRI:
    """``RuntimeService`` over the unix socket ``sock``; ``pb`` is the compiled message module."""

    def __init__(self, sock: str, pb: ModuleType, pb_grpc: ModuleType) -> None:
        import grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(f"unix://{sock}")
        self.rt = pb_grpc.RuntimeServiceStub(self.channel)

    def call(self, name: str, deadline: float = 120, **fields: Any) -> Any:
        """``RuntimeService.NAME(NAMERequest(**fields))`` within ``deadline`` seconds (the gRPC deadline;
        a ``timeout`` among ``fields`` is the request's own field, e.g. StopContainer's grace period)."""
        req = getattr(self.pb, f"{name}Request")(**fields)
        return getattr(self.rt, name)(req, timeout=deadline)

    def close(self) -> None:
        self.channel.close()
