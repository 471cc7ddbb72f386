"""Image references (skopeo's transport names) and the stores they name.

``oci:DIR[:TAG]``            an OCI image layout directory (image-spec image-layout.md)
``oci-archive:FILE[:TAG]``   the same layout as a tar file
``docker-archive:FILE``      ``docker save``/``podman save`` output (``manifest.json`` + config + layers)
``containers-storage:[[DRIVER@]ROOT+RUNROOT]NAME``  an image in podman's store, exported with
                             ``podman image save --format oci-archive`` (podman must be installed)

Each store hands out blobs by digest (``Store.open``); ``resolve`` turns a reference into the verified
manifest and config (``Image``).  Blob files are opened without following a final symlink and must be
regular files; in an archive, every member read (index, manifest, config, layer) must be a regular tar
member: a symlink or hard link member is refused, never followed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO, Any

from .. import posix
from .blobs import Descriptor, descriptor, parse_json, read_json_blob
from .errors import ImageInvalid

INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
MANIFEST_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}
CONFIG_TYPES = {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
REF_NAME = "org.opencontainers.image.ref.name"
TRANSPORTS = ("oci", "oci-archive", "docker-archive", "containers-storage")
_GOARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def host_arch() -> str:
    """This host's architecture in the image-spec's (GOARCH) terms, e.g. ``amd64``."""
    m = platform.machine()
    return _GOARCH.get(m, m)


@dataclass
class Layer:
    """One layer to apply: its descriptor (size -1 when the store gives none), the diff-id it must
    hash to, and its compression (from the media type, or ``sniff`` when the store has none)."""

    desc: Descriptor
    diff_id: str
    compression: str | None


@dataclass
class Image:
    """A resolved image: the verified ``config`` JSON, its ``layers`` in order, and where they came from."""

    reference: str
    config: dict[str, Any]
    layers: list[Layer]
    store: Store


class Store:
    """Blobs by descriptor."""

    def open(self, desc: Descriptor) -> IO[bytes]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class LayoutDir(Store):
    """An OCI image layout directory: blobs at ``blobs/sha256/<hex>``."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise ImageInvalid(f"oci:{path}: not a directory", "give an OCI image layout directory")
        self.path = path

    def open(self, desc: Descriptor) -> IO[bytes]:
        p = os.path.join(self.path, "blobs", "sha256", desc.hex)
        try:
            fd = os.open(p, os.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC)
        except OSError as e:
            raise ImageInvalid(
                f"blob {desc.digest[:19]}: {e.strerror} ({p})", "the layout is incomplete; copy it again"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ImageInvalid(f"blob {desc.digest[:19]}: not a regular file", "the layout is damaged")
        return os.fdopen(fd, "rb")

    def read_small(self, name: str) -> bytes:
        try:
            with open(os.path.join(self.path, name), "rb") as fh:
                return fh.read(4 * 1024 * 1024 + 1)
        except OSError as e:
            raise ImageInvalid(f"{self.path}/{name}: {e.strerror}", "give an OCI image layout") from None


class Archive(Store):
    """A tar archive holding a layout (oci-archive) or docker-archive; members read by name."""

    def __init__(self, path: str) -> None:
        try:
            self.tf = tarfile.open(path, "r:*")
            self.members = {os.path.normpath(m.name).lstrip("/"): m for m in self.tf.getmembers()}
        except (OSError, tarfile.TarError) as e:
            raise ImageInvalid(
                f"{path}: cannot read the archive ({str(e)[:80]})", "give an image archive"
            ) from None
        self.path = path

    def member(self, name: str) -> IO[bytes]:
        m = self.members.get(os.path.normpath(name).lstrip("/"))
        if m is None:
            raise ImageInvalid(f"{self.path}: no file {name!r} in the archive", "the archive is incomplete")
        if not m.isreg() or m.issparse():  # a symlink or hard link would name a file outside the archive
            raise ImageInvalid(
                f"{self.path}: archive member {name!r} is not a regular file (tar type {m.type!r})",
                "give an archive written by podman/skopeo save",
            )
        fh = self.tf.extractfile(m)
        if fh is None:
            raise ImageInvalid(f"{self.path}: no file {name!r} in the archive", "the archive is incomplete")
        return fh

    def open(self, desc: Descriptor) -> IO[bytes]:
        return self.member(f"blobs/sha256/{desc.hex}")

    def close(self) -> None:
        self.tf.close()


def split_reference(ref: str) -> tuple[str, str]:
    """``TRANSPORT:REST`` -> (transport, rest).  Raises ImageInvalid naming the accepted transports."""
    transport, sep, rest = ref.partition(":")
    if not sep or transport not in TRANSPORTS or not rest:
        raise ImageInvalid(
            f"image reference {ref!r}: unknown transport", "use " + ", ".join(f"{t}:..." for t in TRANSPORTS)
        )
    return transport, rest


def _path_tag(rest: str) -> tuple[str, str | None]:
    path, sep, tag = rest.rpartition(":")
    if sep and path and "/" not in tag:
        return path, tag or None
    return rest, None


def resolve(ref: str, stack: ExitStack) -> Image:
    """Open the store ``ref`` names and return its verified manifest's image.  Temporary files (a
    podman export) are removed when ``stack`` closes.  Raises ImageInvalid."""
    transport, rest = split_reference(ref)
    if transport == "oci":
        path, tag = _path_tag(rest)
        store = LayoutDir(path)
        return _from_layout(ref, store, parse_json(store.read_small("index.json"), "index.json"), tag)
    if transport == "oci-archive":
        path, tag = _path_tag(rest)
        archive = Archive(path)
        stack.callback(archive.close)
        return _from_layout(ref, archive, _archive_index(archive), tag)
    if transport == "docker-archive":
        archive = Archive(rest)
        stack.callback(archive.close)
        return _from_docker(ref, archive)
    return _from_podman(ref, rest, stack)


def _pick(entries: list[Descriptor], tag: str | None, ref: str) -> Descriptor:
    if tag is not None:
        hits = [d for d in entries if d.annotations.get(REF_NAME) == tag]
        if not hits:
            raise ImageInvalid(f"{ref}: no manifest tagged {tag!r}", "list the tags in index.json")
        entries = hits
    want = host_arch()
    fits = [
        d
        for d in entries
        if not d.platform
        or (d.platform.get("os", "linux") == "linux" and d.platform.get("architecture", want) == want)
    ]
    if not fits:
        raise ImageInvalid(f"{ref}: no manifest for linux/{want}", "use an image built for this host")
    if len(fits) > 1 and tag is None:
        raise ImageInvalid(f"{ref}: the index holds {len(fits)} images", "name one with :TAG")
    return fits[0]


def _from_layout(ref: str, store: Store, index: dict[str, Any], tag: str | None) -> Image:
    for _ in range(4):  # an index may point at an index (image-spec image-index.md); a few levels suffice
        ms = index.get("manifests")
        if not isinstance(ms, list):
            raise ImageInvalid(f"{ref}: index has no manifests list", "give an OCI image layout")
        d = _pick([descriptor(m, f"index/manifests/{i}") for i, m in enumerate(ms)], tag, ref)
        doc = read_json_blob(store.open(d), d, "manifest")
        mt = d.media_type or str(doc.get("mediaType", ""))
        if mt in INDEX_TYPES:
            index, tag = doc, None
            continue
        if mt not in MANIFEST_TYPES:
            raise ImageInvalid(
                f"{ref}: manifest media type {mt!r} is not an image manifest",
                "give a container image (not an artifact)",
            )
        return _from_manifest(ref, store, doc)
    raise ImageInvalid(f"{ref}: indexes nested too deep", "give an ordinary image")


def _from_manifest(ref: str, store: Store, manifest: dict[str, Any]) -> Image:
    from .blobs import LAYER_TYPES

    cd = descriptor(manifest.get("config"), "manifest/config")
    if cd.media_type not in CONFIG_TYPES:
        raise ImageInvalid(f"{ref}: config media type {cd.media_type!r}", "give a container image")
    config = read_json_blob(store.open(cd), cd, "config")
    raw = manifest.get("layers")
    if not isinstance(raw, list):
        raise ImageInvalid(f"{ref}: manifest has no layers list", "rebuild the image")
    descs = [descriptor(x, f"manifest/layers/{i}") for i, x in enumerate(raw)]
    for i, d in enumerate(descs):
        if d.media_type not in LAYER_TYPES:
            raise ImageInvalid(
                f"manifest/layers/{i}: media type {d.media_type!r} is not a layer type this runtime unpacks",
                "use tar, tar+gzip or tar+zstd layers",
            )
    diff_ids = _diff_ids(config, len(descs), ref)
    layers = [Layer(d, diff, LAYER_TYPES[d.media_type]) for d, diff in zip(descs, diff_ids, strict=True)]
    return Image(ref, config, layers, store)


def _diff_ids(config: dict[str, Any], n: int, ref: str) -> list[str]:
    rootfs = config.get("rootfs")
    ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(ids, list) or len(ids) != n:
        raise ImageInvalid(
            f"{ref}: config rootfs.diff_ids does not list one entry per layer", "rebuild the image"
        )
    for i, x in enumerate(ids):
        descriptor({"digest": x, "size": 0}, f"config/rootfs/diff_ids/{i}")
    return [str(x) for x in ids]


def _from_docker(ref: str, archive: Archive) -> Image:
    data = archive.member("manifest.json").read((4 << 20) + 1)
    entries = parse_json(b'{"m":' + data + b"}", "manifest.json")["m"]
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise ImageInvalid(f"{ref}: manifest.json must list exactly one image", "save one image per archive")
    entry = entries[0]
    cfg_name, layer_names = entry.get("Config"), entry.get("Layers")
    if not isinstance(cfg_name, str) or not isinstance(layer_names, list):
        raise ImageInvalid(f"{ref}: manifest.json lacks Config or Layers", "give a docker-archive")
    data = archive.member(cfg_name).read((4 << 20) + 1)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    stem = os.path.basename(cfg_name).removesuffix(".json")
    if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem) and stem != digest[7:]:
        raise ImageInvalid(f"{ref}: config {cfg_name} does not hash to its name", "the archive was altered")
    config = parse_json(data, "config")
    diff_ids = _diff_ids(config, len(layer_names), ref)
    layers = []
    for name, diff in zip(layer_names, diff_ids, strict=True):
        if not isinstance(name, str):
            raise ImageInvalid(f"{ref}: manifest.json Layers must be file names", "give a docker-archive")
        layers.append(Layer(Descriptor("", diff, -1, {"file": name}, {}), diff, None))
    return Image(ref, config, layers, _DockerStore(archive))


class _DockerStore(Store):
    def __init__(self, archive: Archive) -> None:
        self.archive = archive

    def open(self, desc: Descriptor) -> IO[bytes]:
        return self.archive.member(desc.annotations["file"])


def _from_podman(ref: str, rest: str, stack: ExitStack) -> Image:
    podman = shutil.which("podman")
    if podman is None:
        raise ImageInvalid(f"{ref}: containers-storage needs podman", "apt-get install podman")
    opts: list[str] = []
    name = rest
    if rest.startswith("["):  # skopeo's [DRIVER@ROOT+RUNROOT] store specification
        spec, sep, name = rest[1:].partition("]")
        if not sep:
            raise ImageInvalid(f"{ref}: unterminated [store] specification", "write [ROOT+RUNROOT]NAME")
        driver, _, roots = spec.rpartition("@")
        root, _, runroot = roots.partition("+")
        opts = (
            ["--root", root]
            + (["--runroot", runroot] if runroot else [])
            + (["--storage-driver", driver] if driver else [])
        )
    if not name or name.startswith("-"):
        raise ImageInvalid(f"{ref}: no image name", "write containers-storage:NAME")
    tmp = tempfile.mkdtemp(prefix="sandbox-shim-image-")
    stack.callback(shutil.rmtree, tmp, True)
    out = os.path.join(tmp, "image.tar")
    r = subprocess.run(
        [podman, *opts, "image", "save", "--format", "oci-archive", "-o", out, name],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise ImageInvalid(
            f"{ref}: podman image save failed: {r.stderr.strip()[-200:]}", "check the name with podman images"
        )
    archive = Archive(out)
    stack.callback(archive.close)
    return _from_layout(ref, archive, _archive_index(archive), None)


def _archive_index(archive: Archive) -> dict[str, Any]:
    return parse_json(archive.member("index.json").read((4 << 20) + 1), "index.json")
