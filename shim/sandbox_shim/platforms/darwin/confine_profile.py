"""The confinement profile's SBPL: ``seatbelt.build_profile`` plus what only ``confine`` asks for.

On top of the shared builder (deny default, runtime read set, data boundary denied, read-write
paths; the tenant profile's output is untouched) this appends, in this order (a later matching
rule wins in SBPL):

1. read-only islands: ``(deny file-write* (subpath ISLAND_i))`` for protected names (whether or
   not they exist: a path rule) and read-only extras inside a read-write path, then
   ``(deny file-write* (literal ANCHOR_i))`` for the directories above them (no rename, no removal);
2. network: without an allow-list ``(allow network*)`` (egress open, as the profile promises);
   with one, only ``(allow network-outbound (remote ip "localhost:PORT"))`` — the egress proxy,
   which listens on the host's loopback there — and nothing else: the allow-list is the proxy's.

macOS has no abstract unix sockets and no private ``/tmp``: the caller gives a fresh per-confinement
directory as a read-write path and points ``TMPDIR`` at it.  Paths go as ``-D`` parameters, as in
``seatbelt.py``; sources: ``sandbox-exec(1)``, Apple's ``/System/Library/Sandbox/Profiles/*.sb``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .seatbelt import Profile, _resolved, build_profile


def build(
    read_only: Sequence[str],
    read_write: Sequence[str],
    *,
    deny: Sequence[str] = (),
    islands: Sequence[str] = (),
    anchors: Sequence[str] = (),
    proxy_port: int | None = None,
    resolve: Callable[[str], str] = os.path.realpath,
) -> Profile:
    """The confinement profile.

    Args:
        read_only, read_write, deny: as ``seatbelt.build_profile`` (read_write[0] is permit_path).
        islands: absolute paths inside ``read_write`` that stay read-only.
        anchors: the directories between a read-write root and an island: ``(deny file-write*
            (literal ...))`` on each, so they cannot be renamed or removed (entries inside them
            are their own paths and stay writable).  Not tried on a Mac here: golden text only.
        proxy_port: None: egress open.  A port: outbound traffic only to ``localhost:PORT``.
        resolve: path resolver (tests pass a macOS-like one).

    Raises:
        ValueError: a path is relative or contains NUL/newline; a port outside 1..65535.
    """
    base = build_profile(
        read_only, read_write[:1], network=False, deny=deny, extra_read_write=read_write[1:], resolve=resolve
    )
    params = dict(base.params)
    lines = [base.text.rstrip("\n")]
    isl = _resolved(islands, resolve)
    if isl:
        refs = []
        for i, p in enumerate(isl):
            params[f"ISLAND_{i}"] = p
            refs.append(f'(subpath (param "ISLAND_{i}"))')
        lines.append("; read-only islands inside the read-write paths (after them: they win)")
        lines.append("(deny file-write*\n  " + "\n  ".join(refs) + ")")
    anc = _resolved(anchors, resolve)
    if anc:
        refs = []
        for i, p in enumerate(anc):
            params[f"ANCHOR_{i}"] = p
            refs.append(f'(literal (param "ANCHOR_{i}"))')
        lines.append("; the islands' parent directories: not renamed or removed (entries stay writable)")
        lines.append("(deny file-write*\n  " + "\n  ".join(refs) + ")")
    if proxy_port is None:
        lines.append("(allow network*)")
    else:
        if not 0 < int(proxy_port) < 65536:
            raise ValueError(f"proxy port {proxy_port} is out of range")
        lines.append("; egress only through the allow-list proxy on the host's loopback")
        lines.append(f'(allow network-outbound (remote ip "localhost:{int(proxy_port)}"))')
    return Profile("\n".join(lines) + "\n", params)
