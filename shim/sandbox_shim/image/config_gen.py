"""An image config (image-spec config.md) turned into a config.json under the tenant defaults.

Mapping (the image's ``config`` object):

* ``Entrypoint`` + ``Cmd`` -> ``process.args`` (``--args`` replaces both);
* ``Env`` over the defaults of ``sandbox-shim spec`` (then ``--env``): a variable whose *name* the
  tenant policy forbids (``hardening/tenant.py``) is dropped with a warning naming it, never its value;
* ``WorkingDir`` -> ``process.cwd``;
* ``User`` (``user``, ``uid``, ``user:group``, ``uid:gid``) -> ``process.user``; names are looked up in
  the image's own ``/etc/passwd`` and ``/etc/group``, read inside the rootfs (``RootDir.read_file``);
  a name that is not there is refused;
* ``ExposedPorts`` -> annotation ``sandbox-shim.port`` (the lowest TCP port);
* ``Labels`` -> annotations, except keys under ``RUNTIME_PREFIXES`` (``sandbox-shim.``, crun's
  ``run.oci.``, ``io.kubernetes.``, ...: an image cannot set runtime settings; dropped with a warning);
* ``Volumes``, ``StopSignal``, ``Healthcheck`` and ``OnBuild`` have no place in a runtime bundle: a
  warning names each one present.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..hardening.tenant import forbidden_fragment
from ..template import default_config
from .errors import ImageInvalid
from .rootdir import RootDir

NAME_FILE_LIMIT = 1 << 20
#: annotation prefixes that runtimes and orchestrators read as settings (ours; crun's ``run.oci.``;
#: Kubernetes' and containerd's): an image label must not arrive there
RUNTIME_PREFIXES = ("sandbox-shim.", "run.oci.", "io.kubernetes.", "io.containerd.", "io.podman.")


def _strings(v: Any, where: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ImageInvalid(f"image config {where}: must be a list of strings", "rebuild the image")
    return list(v)


def _lookup(root: RootDir, file: str, name: str, field_no: int) -> int | None:
    """Field ``field_no`` (uid or gid) of the line for ``name`` in ``/etc/passwd`` or ``/etc/group``."""
    data = root.read_file(file, NAME_FILE_LIMIT)
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        f = line.split(":")
        if len(f) > field_no and f[0] == name and f[field_no].isdigit():
            return int(f[field_no])
    return None


def resolve_user(user: str, root: RootDir) -> dict[str, int]:
    """``User`` as ``{"uid": N, "gid": M}`` (image-spec config.md ``User``).  Raises ImageInvalid."""
    if not user:
        return {"uid": 0, "gid": 0}
    name, _, group = user.partition(":")
    if name.isdigit():
        uid, gid = int(name), None
    else:
        data = root.read_file("etc/passwd", NAME_FILE_LIMIT)
        entry = next(
            (
                ln.split(":")
                for ln in (data or b"").decode("utf-8", "replace").splitlines()
                if ln.split(":")[0] == name
            ),
            None,
        )
        if entry is None or len(entry) < 4 or not entry[2].isdigit() or not entry[3].isdigit():
            raise ImageInvalid(
                f"image config User {name!r}: not in the image's /etc/passwd",
                "use a numeric uid, or an image that defines the user",
            )
        uid, gid = int(entry[2]), int(entry[3])
    if group:
        gid = int(group) if group.isdigit() else _lookup(root, "etc/group", group, 2)
        if gid is None:
            raise ImageInvalid(
                f"image config User group {group!r}: not in the image's /etc/group",
                "use a numeric gid, or an image that defines the group",
            )
    if uid > 0xFFFFFFFE or (gid or 0) > 0xFFFFFFFE:
        raise ImageInvalid(f"image config User {user!r}: id out of range", "use ids below 2^32-1")
    return {"uid": uid, "gid": gid if gid is not None else 0}


def generate(
    image_config: dict[str, Any],
    root: RootDir,
    args: str | None,
    env: list[str],
    readonly: bool,
    storage: str | None,
) -> tuple[dict[str, Any], list[str]]:
    """The config.json (a dict) and warnings.  ``args``: shell words replacing Entrypoint+Cmd;
    ``env``: ``NAME=VALUE`` overrides (a forbidden name is refused); ``storage``: the bind source of
    ``/storage`` (default ``storage``, in the bundle).  Raises ImageInvalid."""
    c = image_config.get("config") or {}
    if not isinstance(c, dict):
        raise ImageInvalid("image config /config: must be an object", "rebuild the image")
    warnings: list[str] = []
    cfg = default_config()
    proc = cfg["process"]
    if args is not None:
        proc["args"] = shlex.split(args)
    else:
        proc["args"] = _strings(c.get("Entrypoint"), "Entrypoint") + _strings(c.get("Cmd"), "Cmd")
    if not proc["args"]:
        raise ImageInvalid("the image has neither Entrypoint nor Cmd", "pass --args 'PROGRAM ARG...'")
    merged: dict[str, str] = {e.split("=", 1)[0]: e for e in proc["env"]}
    for e in _strings(c.get("Env"), "Env"):
        name = e.split("=", 1)[0]
        if not name or "=" not in e or "\x00" in e:
            warnings.append(f"image Env entry {name[:40]!r} dropped: not NAME=VALUE")
        elif forbidden_fragment(name):
            warnings.append(
                f"image Env {name} dropped: the tenant policy forbids names containing "
                f"{forbidden_fragment(name)} (pass credentials as files)"
            )
        else:
            merged[name] = e
    for e in env:
        name = e.split("=", 1)[0]
        if not name or "=" not in e:
            raise ImageInvalid(f"--env {name[:40]!r}: must be NAME=VALUE", "write --env NAME=VALUE")
        if forbidden_fragment(name):
            raise ImageInvalid(
                f"--env {name}: the tenant policy forbids names containing {forbidden_fragment(name)}",
                "pass credentials to a sandbox as files",
            )
        merged[name] = e
    proc["env"] = list(merged.values())
    wd = c.get("WorkingDir") or "/"
    if not isinstance(wd, str) or not wd.startswith("/"):
        raise ImageInvalid(f"image config WorkingDir {str(wd)[:60]!r}: must be absolute", "rebuild the image")
    proc["cwd"] = wd
    user = c.get("User") or ""
    if not isinstance(user, str):
        raise ImageInvalid("image config User: must be a string", "rebuild the image")
    proc["user"] = resolve_user(user, root)
    cfg["root"]["readonly"] = readonly
    if storage is not None:
        for m in cfg["mounts"]:
            if m["destination"] == "/storage":
                m["source"] = storage
    ann: dict[str, str] = cfg["annotations"]
    labels = c.get("Labels") or {}
    if isinstance(labels, dict):
        for k, v in labels.items():
            if not isinstance(k, str) or not isinstance(v, str):
                continue
            if k.startswith(RUNTIME_PREFIXES):
                warnings.append(f"image label {k} dropped: an image cannot set runtime settings")
            else:
                ann[k] = v
    ports = sorted(
        int(p.split("/")[0])
        for p in (c.get("ExposedPorts") or {})
        if isinstance(p, str)
        and p.split("/")[0].isdigit()
        and (p.partition("/")[2] or "tcp") == "tcp"
        and 0 < int(p.split("/")[0]) < 65536
    )
    if ports:
        ann["sandbox-shim.port"] = str(ports[0])
    for key in ("Volumes", "StopSignal", "Healthcheck", "OnBuild"):
        if c.get(key):
            warnings.append(f"image config {key} is not applied (no place for it in a runtime bundle)")
    return cfg, warnings
