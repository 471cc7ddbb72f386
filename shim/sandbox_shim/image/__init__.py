"""Images to bundles: an OCI or Docker image unpacked, verified and turned into a runnable bundle.

Platform-neutral (the lifecycle verbs never import it).  Modules, in the order data flows:

* ``source``     image references (``oci:``, ``oci-archive:``, ``docker-archive:``,
                 ``containers-storage:``) -> verified manifest, config and layer list
* ``blobs``      descriptors, digest/size verification, bounded decompression, media types
* ``rootdir``    directory-fd operations confined to the rootfs (``openat2`` ``RESOLVE_IN_ROOT``)
* ``layer``      one layer's tar stream applied with whiteouts, links, modes and ownership
* ``cache``      the content-addressed snapshot cache and how bundles share it
* ``config_gen`` the image config -> config.json under the tenant defaults
* ``create``     ``create_bundle``, the whole flow
"""

from __future__ import annotations

from .blobs import Limits
from .create import Options, Result, create_bundle
from .errors import ImageInvalid

__all__ = ["ImageInvalid", "Limits", "Options", "Result", "create_bundle"]
