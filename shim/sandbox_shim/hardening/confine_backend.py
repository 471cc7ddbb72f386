"""The control-plane confinement's platform contract: what ``hardening/confinement.py`` calls on the
renderer ``platforms.select.confine_backend`` picks for this OS (``platforms/linux/confine.py``:
bwrap + Landlock; ``platforms/darwin/confine.py``: SBPL).  A renderer is a module; mypy checks each
one against ``ConfineBackend`` in ``platforms/select.py`` on any OS, so a renderer missing a member,
or with another signature, fails ``mypy`` (``tests/test_mechanism_contract.py`` shows it).

The protocol exists for the type checker only: nothing imports ``typing`` at run time (confine runs
per command).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from ..capability import Capability
    from .confine_sets import Sets
    from .egress import EgressProxy

    class ConfineBackend(Protocol):
        """A platform's confinement renderer (a module)."""

        @property
        def EGRESS_TCP(self) -> bool:  # noqa: N802 - a module constant
            """True when the egress proxy listens on a loopback TCP port (else a unix socket)."""
            ...

        @property
        def PROXY_PORT(self) -> int:  # noqa: N802 - a module constant
            """The port the command's proxy variables name inside (0: the proxy's own port)."""
            ...

        def helper_interpreters(self, egress: bool) -> list[str]:
            """Interpreters that run inside before the program (they join the read set)."""
            ...

        def report(self, bwrap: str | None = None) -> list[Capability]:
            """The confinement layers this host offers, as ``Capability`` reports."""
            ...

        def parent_death_signal(self, sig: int) -> bool:
            """Have this process get ``sig`` when its parent ends; False where the OS has no way."""
            ...

        def initial_environ(self) -> dict[str, str] | None:
            """This process's environment as it was exec'd, before the interpreter's start-up changed
            ``os.environ``; None where the OS does not keep it."""
            ...

        def render(
            self,
            exe: str,
            args: Sequence[str],
            sets: Sets,
            cd: str,
            *,
            permit: str,
            env: dict[str, str],
            bwrap: str | None,
            landlock: bool | None,
            trial: bool,
            egress: EgressProxy | None,
        ) -> tuple[list[str], tuple[str, ...], list[str]]:
            """The launch argv, the layers in force and what is not enforced.  Raises ``CannotEnforce``."""
            ...
