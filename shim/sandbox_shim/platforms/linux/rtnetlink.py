"""The few rtnetlink(7) requests of ``network.py``, on a plain netlink socket (netlink(7)).

Importing pyroute2 costs 100-160 ms (more on a loaded host) on every isolated-network ``create`` and
``delete``; what they send is six kinds of message: look a link up by name or index, create a veth
pair whose peer is made directly in another network namespace (``IFLA_NET_NS_PID``), delete a link,
bring a link up, add an IPv4 address, and dump the IPv4 addresses and main-table routes.  Message
layouts: <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>, <linux/veth.h>, <linux/if_addr.h>.
A request the kernel refuses raises ``OSError`` with the kernel's errno (NLMSG_ERROR).
"""

from __future__ import annotations

import errno as _errno
import os
import socket
import struct

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_GETADDR, RTM_GETROUTE = 20, 22, 26
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLM_F_DUMP = 0x1, 0x4, 0x200, 0x400, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
IFLA_IFNAME, IFLA_LINKINFO, IFLA_NET_NS_PID = 3, 18, 19
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_TABLE = 1, 15
IFF_UP = 0x1
NLA_F_NESTED = 0x8000
RT_TABLE_MAIN = 254

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def _name(text: str) -> bytes:
    return text.encode() + b"\0"


def attrs(data: bytes) -> dict[int, bytes]:
    """The attributes of a message body (type without the nested/byte-order flags -> payload)."""
    out: dict[int, bytes] = {}
    i = 0
    while i + 4 <= len(data):
        n, kind = struct.unpack_from("=HH", data, i)
        if n < 4:
            break
        out[kind & 0x3FFF] = data[i + 4 : i + n]
        i += (n + 3) & ~3
    return out


class Rtnl:
    """One NETLINK_ROUTE socket in the calling thread's network namespace (opened at construction)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def request(self, kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
        """Send one request; the replies ``(type, body)`` until the ACK or the end of the dump.

        Raises:
            OSError: the kernel answered with an error (its errno).
        """
        self.seq += 1
        seq = self.seq
        self.sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags | NLM_F_REQUEST, seq, 0) + body)
        out: list[tuple[int, bytes]] = []
        while True:
            data = self.sock.recv(1 << 16)
            i = 0
            while i + _NLMSGHDR.size <= len(data):
                n, mtype, _, mseq, _ = _NLMSGHDR.unpack_from(data, i)
                if n < _NLMSGHDR.size:
                    raise OSError(_errno.EPROTO, "malformed netlink reply")
                payload = data[i + _NLMSGHDR.size : i + n]
                i += (n + 3) & ~3
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", payload)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return out  # the ACK
                if mtype == NLMSG_DONE:
                    return out
                out.append((mtype, payload))
                if not flags & NLM_F_DUMP and not flags & NLM_F_ACK:
                    return out

    # -- links ------------------------------------------------------------------------------------
    def link_index(self, name: str) -> int | None:
        """The index of the link named ``name`` in this namespace, or None."""
        try:
            got = self.request(
                RTM_GETLINK, 0, _IFINFOMSG.pack(0, 0, 0, 0, 0) + _attr(IFLA_IFNAME, _name(name))
            )
        except OSError as e:
            if e.errno in (_errno.ENODEV, _errno.ENOENT):
                return None
            raise
        return _IFINFOMSG.unpack_from(got[0][1])[2] if got else None

    def link_kind(self, index: int) -> str | None:
        """``IFLA_INFO_KIND`` of link ``index`` ("veth", ...), or None (no such link, no kind)."""
        try:
            got = self.request(RTM_GETLINK, 0, _IFINFOMSG.pack(0, 0, index, 0, 0))
        except OSError as e:
            if e.errno in (_errno.ENODEV, _errno.ENOENT):
                return None
            raise
        if not got:
            return None
        info = attrs(got[0][1][_IFINFOMSG.size :]).get(IFLA_LINKINFO)
        kind = attrs(info).get(IFLA_INFO_KIND) if info else None
        return kind.rstrip(b"\0").decode() if kind else None

    def link_names(self) -> list[str]:
        """The names of every link in this namespace."""
        out = []
        for _, body in self.request(RTM_GETLINK, NLM_F_DUMP, _IFINFOMSG.pack(0, 0, 0, 0, 0)):
            name = attrs(body[_IFINFOMSG.size :]).get(IFLA_IFNAME)
            if name:
                out.append(name.rstrip(b"\0").decode())
        return out

    def add_veth(self, name: str, peer: str, peer_netns_pid: int) -> None:
        """A veth pair: ``name`` here, ``peer`` made in the network namespace of ``peer_netns_pid``
        (veth(4); the peer's ``ifinfomsg`` + attributes nest in VETH_INFO_PEER).  EEXIST if taken."""
        peer_msg = (
            _IFINFOMSG.pack(0, 0, 0, 0, 0)
            + _attr(IFLA_IFNAME, _name(peer))
            + _attr(IFLA_NET_NS_PID, struct.pack("=I", peer_netns_pid))
        )
        info = _attr(IFLA_INFO_KIND, b"veth") + _attr(
            IFLA_INFO_DATA | NLA_F_NESTED, _attr(VETH_INFO_PEER | NLA_F_NESTED, peer_msg)
        )
        body = (
            _IFINFOMSG.pack(0, 0, 0, 0, 0)
            + _attr(IFLA_IFNAME, _name(name))
            + _attr(IFLA_LINKINFO | NLA_F_NESTED, info)
        )
        self.request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, body)

    def set_up(self, index: int) -> None:
        self.request(RTM_NEWLINK, NLM_F_ACK, _IFINFOMSG.pack(0, 0, index, IFF_UP, IFF_UP))

    def delete_link(self, index: int) -> None:
        self.request(RTM_DELLINK, NLM_F_ACK, _IFINFOMSG.pack(0, 0, index, 0, 0))

    # -- addresses and routes ---------------------------------------------------------------------
    def add_ipv4(self, index: int, address: str, prefixlen: int) -> None:
        """``address/prefixlen`` on link ``index`` (IFA_LOCAL and IFA_ADDRESS, scope universe)."""
        raw = socket.inet_aton(address)
        body = (
            _IFADDRMSG.pack(socket.AF_INET, prefixlen, 0, 0, index)
            + _attr(IFA_LOCAL, raw)
            + _attr(IFA_ADDRESS, raw)
        )
        self.request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, body)

    def ipv4_addresses(self) -> list[tuple[str, int]]:
        """Every IPv4 address of this namespace as ``(address, prefixlen)``."""
        out = []
        for _, body in self.request(RTM_GETADDR, NLM_F_DUMP, _IFADDRMSG.pack(socket.AF_INET, 0, 0, 0, 0)):
            family, plen, _, _, _ = _IFADDRMSG.unpack_from(body)
            a = attrs(body[_IFADDRMSG.size :])
            raw = a.get(IFA_ADDRESS) or a.get(IFA_LOCAL)
            if family == socket.AF_INET and raw and len(raw) == 4:
                out.append((socket.inet_ntoa(raw), plen))
        return out

    def ipv4_routes(self, table: int = RT_TABLE_MAIN) -> list[tuple[str, int]]:
        """Destinations ``(network, prefixlen)`` of the IPv4 routes in ``table`` (a default route, with
        no RTA_DST, is left out)."""
        out = []
        query = _RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)
        for _, body in self.request(RTM_GETROUTE, NLM_F_DUMP, query):
            family, dst_len, _, _, tbl, _, _, _, _ = _RTMSG.unpack_from(body)
            a = attrs(body[_RTMSG.size :])
            if RTA_TABLE in a and len(a[RTA_TABLE]) == 4:
                (tbl,) = struct.unpack("=I", a[RTA_TABLE])
            dst = a.get(RTA_DST)
            if family == socket.AF_INET and tbl == table and dst and len(dst) == 4:
                out.append((socket.inet_ntoa(dst), dst_len))
        return out
