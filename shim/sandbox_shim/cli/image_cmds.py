"""``bundle create --image``: an OCI/Docker image turned into a bundle (see ``sandbox_shim.image``)."""

from __future__ import annotations

import click

from .output import Globals


@click.group("bundle")
def bundle() -> None:
    """Make bundles (from images)."""


@bundle.command("create")
@click.option(
    "--image",
    "reference",
    required=True,
    metavar="TRANSPORT:REF",
    help="oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE or containers-storage:NAME.",
)
@click.option(
    "--args",
    "args",
    default=None,
    help="Command line replacing the image's Entrypoint+Cmd (split like a shell: 'python3 -c \"print(1)\"').",
)
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="Set a variable (repeatable).")
@click.option(
    "--readonly-rootfs/--writable-rootfs",
    "readonly",
    default=True,
    show_default=True,
    help="root.readonly; a read-only rootfs may share the cache's files by hard link.",
)
@click.option(
    "--storage",
    default=None,
    metavar="DIR",
    help="Bind DIR at /storage instead of the bundle's own storage/.",
)
@click.option("--keep-setuid", is_flag=True, help="Keep setuid/setgid bits of the image's files.")
@click.option(
    "--max-layer-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse a layer larger than this uncompressed (default 4 GiB).",
)
@click.option(
    "--max-image-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse an image larger than this uncompressed (default 16 GiB).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress or warnings on stderr.")
@click.argument("directory", metavar="DIR")
@click.pass_obj
def create(
    g: Globals,
    reference: str,
    args: str | None,
    env: tuple[str, ...],
    readonly: bool,
    storage: str | None,
    keep_setuid: bool,
    max_layer_bytes: int | None,
    max_image_bytes: int | None,
    quiet: bool,
    directory: str,
) -> None:
    """Write DIR/config.json, DIR/rootfs and DIR/storage from an image (layers cached under --root)."""
    import os

    from ..image import Limits, Options, create_bundle
    from ..image.create import stderr_progress
    from ..state import resolve_root

    d = Limits()
    limits = Limits(max_layer_bytes or d.layer_bytes, max_image_bytes or d.image_bytes)
    opts = Options(
        args=args,
        env=list(env),
        readonly=readonly,
        storage=os.path.abspath(storage) if storage else None,
        keep_setuid=keep_setuid,
        limits=limits,
    )
    res = create_bundle(reference, directory, resolve_root(g.root), opts, None if quiet else stderr_progress)
    if not quiet:
        for w in res.warnings:
            click.echo(f"warning: {w}", err=True)
    how = "cached layers" if res.cached else "layers unpacked"
    if res.reused_layers:
        how += f", {res.reused_layers} lower from the cache"
    click.echo(f"wrote {res.bundle} ({how}; rootfs by {res.rootfs.method}; {res.seconds:.2f}s)")
