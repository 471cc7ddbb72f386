"""Reading blobs that prove themselves: digest and size against the descriptor, decompression bounded.

Rules followed (OCI image-spec descriptor.md, layer.md, media-types.md):

* a descriptor's ``digest`` is ``sha256:<64 hex>`` (other algorithms are refused) and its ``size`` the
  exact byte count: reading stops at ``size + 1`` bytes, so a blob longer than announced is refused
  without being read to its end, and the digest is checked before anything read from it is kept;
* a layer's uncompressed stream must hash to the config's ``rootfs.diff_ids`` entry;
* decompression is bounded: at most ``Limits.layer_bytes`` uncompressed bytes per layer and
  ``Limits.image_bytes`` for the whole image (a gzip bomb stops at the limit with a clear error);
  JSON blobs (index, manifest, config) are at most ``JSON_LIMIT`` bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from dataclasses import dataclass
from typing import IO, Any, Protocol

from .errors import ImageInvalid

JSON_LIMIT = 4 * 1024 * 1024
DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")
GiB = 1024**3

TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_TYPES = {  # media type -> compression (image-spec media-types.md; Docker's image manifest v2.2)
    TAR: "none",
    TAR + "+gzip": "gzip",
    TAR + "+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "none",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "none",
}


@dataclass(frozen=True)
class Limits:
    """Decompression bounds, in bytes of uncompressed tar stream (headers included)."""

    layer_bytes: int = 4 * GiB
    image_bytes: int = 16 * GiB


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: ``media_type``, ``digest`` (``sha256:<hex>``), ``size`` in bytes (-1: not
    given, as in docker-archive), ``annotations``, ``platform``."""

    media_type: str
    digest: str
    size: int
    annotations: dict[str, str]
    platform: dict[str, Any]

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]


def descriptor(obj: Any, where: str) -> Descriptor:
    """Parse a descriptor object (image-spec descriptor.md).  Raises ImageInvalid naming ``where``."""
    if not isinstance(obj, dict):
        raise ImageInvalid(f"{where}: not a descriptor object", "rebuild the image")
    digest, size = obj.get("digest"), obj.get("size")
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ImageInvalid(
            f"{where}/digest: {str(digest)[:80]!r} is not sha256:<64 lowercase hex>",
            "only sha256 digests are supported",
        )
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImageInvalid(f"{where}/size: must be a non-negative integer", "rebuild the image")
    ann = obj.get("annotations") or {}
    plat = obj.get("platform") or {}
    if not isinstance(ann, dict) or not isinstance(plat, dict):
        raise ImageInvalid(f"{where}: annotations and platform must be objects", "rebuild the image")
    return Descriptor(str(obj.get("mediaType", "")), digest, size, ann, plat)


class Reader(Protocol):
    """A binary stream read front to back: ``read(n)`` gives at most ``n`` bytes (all when ``n < 0``),
    ``b""`` at the end.  What a layer passes through: a blob file, ``Verified``, a decompressor,
    ``Bounded``."""

    def read(self, size: int = -1, /) -> bytes: ...


class Verified(io.RawIOBase):
    """A blob stream checked against its descriptor: hashes what is read, refuses more than ``size``
    bytes; ``finish()`` drains the rest and checks size and digest.  Raises ImageInvalid."""

    def __init__(self, fh: Reader, desc: Descriptor, what: str) -> None:
        self.fh, self.desc, self.what = fh, desc, what
        self.h = hashlib.sha256()
        self.n = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        want = len(b)
        if self.desc.size >= 0:
            want = min(want, self.desc.size + 1 - self.n)
        if want <= 0:
            return 0
        data = self.fh.read(want)
        self.n += len(data)
        if self.desc.size >= 0 and self.n > self.desc.size:
            raise ImageInvalid(
                f"{self.what} {self.desc.digest[:19]}: longer than its descriptor's size {self.desc.size}",
                "the image was altered or truncated; fetch it again",
            )
        self.h.update(data)
        b[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        while self.read(1 << 20):
            pass
        if self.desc.size >= 0 and self.n != self.desc.size:
            raise ImageInvalid(
                f"{self.what} {self.desc.digest[:19]}: {self.n} bytes, descriptor says {self.desc.size}",
                "the image was altered or truncated; fetch it again",
            )
        if "sha256:" + self.h.hexdigest() != self.desc.digest:
            raise ImageInvalid(
                f"{self.what} {self.desc.digest[:19]}: digest mismatch (content is "
                f"sha256:{self.h.hexdigest()[:12]}...)",
                "the image was altered; fetch it again",
            )


def read_json_blob(fh: IO[bytes], desc: Descriptor, what: str) -> dict[str, Any]:
    """A verified JSON object blob (index, manifest or config) of at most ``JSON_LIMIT`` bytes."""
    if desc.size > JSON_LIMIT:
        raise ImageInvalid(
            f"{what}: {desc.size} bytes, more than the {JSON_LIMIT}-byte limit",
            "this is not an ordinary image",
        )
    v = Verified(fh, desc, what)
    data = v.read(JSON_LIMIT + 1)
    v.finish()
    return parse_json(data, what)


def parse_json(data: bytes, what: str) -> dict[str, Any]:
    """``data`` as a JSON object, or ImageInvalid."""
    if len(data) > JSON_LIMIT:
        raise ImageInvalid(f"{what}: larger than {JSON_LIMIT} bytes", "this is not an ordinary image")
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ImageInvalid(f"{what}: invalid JSON ({str(e)[:80]})", "rebuild the image") from None
    if not isinstance(obj, dict):
        raise ImageInvalid(f"{what}: not a JSON object", "rebuild the image")
    return obj


class Bounded(io.RawIOBase):
    """The uncompressed layer stream: hashed (the diff-id) and counted against the per-layer and
    whole-image limits.  ``total`` is a one-element list shared by every layer of one image."""

    def __init__(self, inner: Reader, limits: Limits, total: list[int], what: str) -> None:
        self.inner, self.limits, self.total, self.what = inner, limits, total, what
        self.h = hashlib.sha256()
        self.n = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        try:
            data = self.inner.read(min(len(b), 1 << 20))
        except ImageInvalid:
            raise
        except Exception as e:  # OSError/EOFError/zlib.error from gzip, ZstdError from zstandard
            raise ImageInvalid(
                f"{self.what}: cannot decompress ({str(e)[:80]})", "the layer is corrupt; rebuild the image"
            ) from None
        self.n += len(data)
        self.total[0] += len(data)
        if self.n > self.limits.layer_bytes:
            raise ImageInvalid(
                f"{self.what}: more than {self.limits.layer_bytes} bytes uncompressed "
                "(a decompression bomb, or a layer larger than the limit)",
                "raise --max-layer-bytes if the image is trusted and really that large",
            )
        if self.total[0] > self.limits.image_bytes:
            raise ImageInvalid(
                f"{self.what}: the image passes {self.limits.image_bytes} bytes uncompressed in total",
                "raise --max-image-bytes if the image is trusted",
            )
        self.h.update(data)
        b[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def sniff(head: bytes) -> str:
    """Compression from magic bytes (docker-archive layers carry no media type)."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return "none"


def decompressor(raw: Reader, compression: str, what: str) -> Reader:
    """A stream of ``raw`` decompressed.  zstd needs the ``zstandard`` package; without it zstd
    layers are refused with that fix.  Raises ImageInvalid."""
    if compression == "none":
        return raw
    if compression == "gzip":
        # typeshed asks for seek() too; reading front to back calls only read() (Lib/gzip.py)
        unzipped: Reader = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[call-overload]
        return unzipped
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise ImageInvalid(
                f"{what}: zstd-compressed, and the zstandard package is not installed",
                "pip install 'sandbox-shim[image]' (or zstandard)",
            ) from None
        # max_window_size bounds the decoder's memory whatever the frame header asks (RFC 8878 3.1.1.1.2);
        # the stub asks for IO[bytes], the reader calls only read() (zstandard's stream_reader docs)
        return zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(raw)  # type: ignore[arg-type]
    raise ImageInvalid(f"{what}: unknown compression {compression!r}", "use gzip, zstd or none")
