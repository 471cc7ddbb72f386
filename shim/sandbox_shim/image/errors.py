"""The image package's one error: an image that cannot become a bundle."""

from __future__ import annotations

from ..errors import ShimError


class ImageInvalid(ShimError):
    """The image is missing, malformed, fails a digest or size check, exceeds a limit, or holds an entry
    that would land outside the rootfs.  Nothing of the bundle is left behind when it is raised.

    CLI exit status 3 (the same as an invalid bundle: bad input, fix the input).
    """

    exit_status = 3
    kind = "image_invalid"
