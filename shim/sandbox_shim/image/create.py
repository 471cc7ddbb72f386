"""``create_bundle``: image reference -> bundle directory (``config.json``, ``rootfs/``, ``storage/``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from .. import posix
from ..errors import OutputUnwritable, ShimError, StateUnwritable
from .blobs import Bounded, Limits, Reader, Verified, decompressor, sniff
from .cache import Cache, Materialized, materialize, snapshot_key
from .config_gen import generate
from .errors import ImageInvalid
from .layer import Applier, LayerReport
from .rootdir import RootDir
from .source import Image, resolve

PROGRESS_MIN_BYTES = 16 * 1024 * 1024  # layers at least this large (compressed) report progress


@dataclass
class Options:
    """What ``bundle create --image`` was asked for (see the CLI's help for each)."""

    args: str | None = None
    env: list[str] = field(default_factory=list)
    readonly: bool = True
    storage: str | None = None
    keep_setuid: bool = False
    limits: Limits = field(default_factory=Limits)


@dataclass
class Result:
    """What was made: the bundle dir, whether the cache already held the image's snapshot, how many
    lower layers came from another image's snapshot, how the rootfs was populated, the warnings, and
    seconds spent."""

    bundle: str
    cached: bool
    reused_layers: int
    rootfs: Materialized
    warnings: list[str]
    seconds: float


def create_bundle(
    reference: str,
    bundle_dir: str,
    state_root: str,
    opts: Options,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Write ``bundle_dir`` from the image ``reference`` (``TRANSPORT:REF``, see ``source.py``).

    ``bundle_dir`` must be missing or empty.  Layers are unpacked once into the cache under
    ``state_root`` and shared (``cache.py``).  The config.json is validated as ``sandbox-shim
    validate`` would; on any error nothing of the bundle is left behind.
    Raises ImageInvalid (image, limits, hostile entries; exit 3), BundleInvalid (the generated
    config; 3), UsageError (``bundle_dir`` not empty; 2); when the host refuses a read or write
    (``OSError``), by where: StateUnwritable (the layer cache under ``state_root``; 11),
    OutputUnwritable (``bundle_dir``; 74), else ImageInvalid (the image could not be read; 3).
    """
    try:
        return _create_bundle(reference, bundle_dir, state_root, opts, progress)
    except OSError as e:
        raise _host_refused(e, bundle_dir, state_root) from e


def _host_refused(e: OSError, bundle_dir: str, state_root: str) -> ShimError:
    """The documented error for an ``OSError`` of ``create_bundle``, by the path it names (README
    "Exit statuses"): the cache is state, the bundle is the caller's output, anything else is input
    (a path on the way to the state root or the bundle, a parent ``makedirs`` met, counts as it)."""
    path = os.fsdecode(e.filename) if e.filename is not None else bundle_dir
    why = e.strerror or str(e)

    def on_the_way(root: str) -> bool:  # ``root`` itself, inside it, or one of its parents (makedirs)
        a, b = os.path.abspath(path), os.path.abspath(root)
        return a == b or a.startswith(b.rstrip(os.sep) + os.sep) or b.startswith(a.rstrip(os.sep) + os.sep)

    if on_the_way(state_root):
        return StateUnwritable(path, e.errno or 0, why)
    if on_the_way(bundle_dir):
        return OutputUnwritable(f"bundle {path}", why, "check the bundle directory's permissions and space")
    return ImageInvalid(f"cannot read the image: {why}: {path}", "check the paths and permissions")


def _create_bundle(
    reference: str, bundle_dir: str, state_root: str, opts: Options, progress: Callable[[str], None] | None
) -> Result:
    from ..errors import UsageError

    if sys.platform == "win32":  # no O_DIRECTORY, fchown, flock: a POSIX host
        raise UsageError(
            "bundle create --image needs a POSIX host (directory file descriptors)",
            "run it on Linux (or macOS) and copy the bundle",
        )
    t0 = time.monotonic()
    say = progress or (lambda s: None)
    bundle_dir = os.path.abspath(bundle_dir)
    if os.path.lexists(bundle_dir) and (not os.path.isdir(bundle_dir) or os.listdir(bundle_dir)):
        raise UsageError(f"{bundle_dir} exists and is not an empty directory", "give a new directory")
    with ExitStack() as stack:
        image = resolve(reference, stack)
        _check_platform(image)
        cache = Cache(state_root)
        key = snapshot_key([la.diff_id for la in image.layers], opts.keep_setuid, os.geteuid() == 0)
        snap = cache.lookup(key)
        report = LayerReport()
        cached = snap is not None
        if snap is None:
            snap = _unpack(image, cache, key, opts, report, say)
        # built beside DIR and renamed into place (rename(2) replaces an empty directory): a crash
        # leaves a ".NAME.partial-*" directory, never a DIR that looks like a bundle
        parent, name = os.path.split(bundle_dir)
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
        made_storage = opts.storage is not None and not os.path.exists(opts.storage)
        try:
            mat = materialize(snap, os.path.join(work, "rootfs"), opts.readonly)
            root = RootDir(os.path.join(work, "rootfs"))
            try:
                cfg, warnings = generate(image.config, root, opts.args, opts.env, opts.readonly, opts.storage)
            finally:
                root.close()
            os.makedirs(opts.storage or os.path.join(work, "storage"), exist_ok=True)
            with open(os.path.join(work, "config.json"), "w", encoding="utf-8") as fh:
                json.dump(cfg, fh, indent=2)
                fh.write("\n")
            from ..bundle import load

            load(work, launch=False)
            umask = os.umask(0o022)
            os.umask(umask)
            os.chmod(work, 0o777 & ~umask)
            os.rename(work, bundle_dir)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            if made_storage and opts.storage:
                shutil.rmtree(opts.storage, ignore_errors=True)
            raise
    return Result(
        bundle_dir, cached, report.reused_layers, mat, report.warnings() + warnings, time.monotonic() - t0
    )


def _check_platform(image: Image) -> None:
    from .source import host_arch

    arch, os_name = image.config.get("architecture"), image.config.get("os")
    if os_name not in (None, "linux") or arch not in (None, host_arch()):
        raise ImageInvalid(
            f"{image.reference}: built for {os_name}/{arch}, this host is linux/{host_arch()}",
            "use an image built for this host",
        )


def _unpack(
    image: Image, cache: Cache, key: str, opts: Options, report: LayerReport, say: Callable[[str], None]
) -> str:
    diff_ids = [la.diff_id for la in image.layers]
    chown = posix.geteuid() == 0
    # an image built on a cached one (its first k layers are that image's layers): start from its snapshot
    base = next(
        (
            (k, snap)
            for k in range(len(diff_ids) - 1, 0, -1)
            if (snap := cache.lookup(snapshot_key(diff_ids[:k], opts.keep_setuid, chown)))
        ),
        (0, None),
    )
    tmp = cache.building(with_rootfs=base[1] is None)
    try:
        if base[1] is not None:
            # a reflink or copy of the base snapshot (materialize never shares the cache's inodes)
            materialize(base[1], os.path.join(tmp, "rootfs"), readonly=True)
            report.reused_layers = base[0]
        root = RootDir(os.path.join(tmp, "rootfs"))
        try:
            applier = Applier(root, keep_setuid=opts.keep_setuid, report=report)
            total = [0]
            for i, layer in enumerate(image.layers):
                if i < base[0]:
                    continue
                what = f"layer {i + 1}/{len(image.layers)} ({layer.diff_id[:19]})"
                _apply_one(image, layer, applier, opts.limits, total, what, say)
        finally:
            root.close()
        with open(os.path.join(tmp, "image.json"), "w", encoding="utf-8") as fh:
            json.dump({"reference": image.reference, "diff_ids": [la.diff_id for la in image.layers]}, fh)
    except BaseException:
        cache.abandon(tmp)
        raise
    return cache.commit(tmp, key)


def _apply_one(
    image: Image,
    layer: object,
    applier: Applier,
    limits: Limits,
    total: list[int],
    what: str,
    say: Callable[[str], None],
) -> None:
    from .source import Layer

    assert isinstance(layer, Layer)
    raw = image.store.open(layer.desc)
    try:
        verified = Verified(raw, layer.desc, what) if layer.desc.size >= 0 else None
        src = verified if verified is not None else raw
        buffered = _Peek(src)
        compression = layer.compression or sniff(buffered.peek(4))
        bounded = Bounded(decompressor(buffered, compression, what), limits, total, what)
        tick = _ticker(what, layer.desc.size, lambda: verified.n if verified else 0, say)
        try:
            applier.apply(bounded, what, tick if layer.desc.size >= PROGRESS_MIN_BYTES else None)
            bounded.drain()
        except ImageInvalid:
            if verified is not None:
                verified.finish()  # an altered blob is reported as such, not as the damage it caused
            raise
        if verified is not None:
            verified.finish()
        if "sha256:" + bounded.h.hexdigest() != layer.diff_id:
            raise ImageInvalid(
                f"{what}: uncompressed content does not match the config's diff_id",
                "the image was altered; fetch it again",
            )
        if layer.desc.size >= PROGRESS_MIN_BYTES:
            say(f"{what}: done, {bounded.n // (1 << 20)} MiB unpacked")
    finally:
        raw.close()


class _Peek:
    """A read-only stream with one ``peek`` (for magic bytes) before reading."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner
        self.head = b""

    def peek(self, n: int) -> bytes:
        self.head = self.inner.read(n)
        return self.head

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            if n < 0:
                return out + self.inner.read()
            return out if len(out) >= n else out + self.inner.read(n - len(out))
        return self.inner.read(n)

    def readable(self) -> bool:
        return True


def _ticker(what: str, size: int, done: Callable[[], int], say: Callable[[str], None]) -> Callable[[], None]:
    last = [time.monotonic()]

    def tick() -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            say(f"{what}: {done() // (1 << 20)} of {size // (1 << 20)} MiB")

    return tick


def stderr_progress(line: str) -> None:
    """The CLI's progress sink: one line on stderr."""
    sys.stderr.write(f"sandbox-shim: {line}\n")
    sys.stderr.flush()
