"""Path rules of config.json past form: length limits, and paths the tenant profile's masks would hide.

* ``length_problems``: a path field (mount destinations and sources, ``maskedPaths``, ``readonlyPaths``,
  ``process.cwd``, hook paths, ``root.path``, namespace and device paths, ``process.args[0]``) longer
  than ``PATH_MAX`` (4096 bytes with its NUL) or with a component longer than ``NAME_MAX`` (255 bytes)
  is refused with its pointer: the kernel answers ENAMETOOLONG (path_resolution(7), limits.h), which
  create would meet only after making the sandbox's resources.
* ``hidden_problems``: a ``process.cwd`` at or below a ``linux.maskedPaths`` entry, or below a
  ``linux.readonlyPaths`` entry, is refused at ``/process/cwd``: the directory made for it would make
  the masked or read-only path exist after the launcher decided there was nothing to protect, so the
  mask would not be applied (runtime-spec config-linux.md "Masked Paths", "Readonly Paths").  Decided
  from the config alone, whether or not the path exists in the rootfs yet (``bwrap._cwd`` decides the
  same after symlinks).  Mount points below a masked path are protected by the launcher as if made
  (``bwrap.layout``: the mask covers them).
"""

from __future__ import annotations

import posixpath

from .errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

NAME_MAX = 255  # limits.h: bytes of one path component
PATH_MAX = 4096  # limits.h: bytes of a path, its terminating NUL included


def _ptr(parts: list[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def length_problems(fields: list[tuple[list[Any], Any]]) -> list[BundleProblem]:
    """``fields``: (pointer parts, value) of path-valued fields; a non-string value is the schema's."""
    out: list[BundleProblem] = []
    for path, value in fields:
        if not isinstance(value, str):
            continue
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) >= PATH_MAX:
            out.append(
                BundleProblem(
                    _ptr(path),
                    f"path is {len(raw)} bytes; at most {PATH_MAX - 1} can be resolved",
                    "limits.h PATH_MAX (path_resolution(7) ENAMETOOLONG)",
                    "use a shorter path",
                )
            )
            continue
        longest = max((len(c) for c in raw.split(b"/")), default=0)
        if longest > NAME_MAX:
            out.append(
                BundleProblem(
                    _ptr(path),
                    f"a path component is {longest} bytes; at most {NAME_MAX}",
                    "limits.h NAME_MAX (path_resolution(7) ENAMETOOLONG)",
                    "use shorter file names",
                )
            )
    return out


def _under(path: str, top: str, equal: bool) -> bool:
    return (equal and path == top) or path.startswith(top + "/")


def hidden_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """A cwd made inside a masked or read-only path (module docstring)."""
    got = cfg.get("linux")
    linux: dict[str, Any] = got if isinstance(got, dict) else {}

    def paths(key: str) -> list[str]:
        v = linux.get(key)
        return (
            [posixpath.normpath(p) for p in v if isinstance(p, str) and p.startswith("/")]
            if isinstance(v, list)
            else []
        )

    masked, readonly = paths("maskedPaths"), paths("readonlyPaths")
    out: list[BundleProblem] = []
    proc = cfg.get("process")
    cwd = proc.get("cwd") if isinstance(proc, dict) else None
    if isinstance(cwd, str) and cwd.startswith("/"):
        cwd = posixpath.normpath(cwd)
        hit = next((("masked", m) for m in masked if m != "/" and _under(cwd, m, True)), None) or next(
            (("read-only", r) for r in readonly if r != "/" and _under(cwd, r, False)), None
        )
        if hit:
            where = "in" if cwd == hit[1] else "below"
            out.append(
                BundleProblem(
                    "/process/cwd",
                    f"cwd {cwd} lies {where} the {hit[0]} path {hit[1]}: it "
                    f"could not be made without undoing the {hit[0]} path",
                    "runtime-spec config-linux.md masked/readonly paths",
                    f"use a cwd outside {hit[1]}, or remove {hit[1]} from the list",
                )
            )
    return out
