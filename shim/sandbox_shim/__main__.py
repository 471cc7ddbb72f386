"""``python -m sandbox_shim``: the same CLI as the ``sandbox-shim`` console script."""

from .cli import main

main()
