"""A registry of named families: what the mechanism and the estimator registries share.

Each family has a ``name``; registration order is kept (``mechanism="auto"`` compares the label
mechanisms in it); a second family of one name, or a reserved name, is refused; an unknown name
is refused listing the known ones (``InvalidParameterError``, so a service answers 4xx).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from shared.errors import InvalidParameterError


class Named(Protocol):
    @property
    def name(self) -> str: ...


F = TypeVar("F", bound=Named)


class Registry(Generic[F]):
    """Families of one ``kind`` ("mechanism", "estimator") by name, in registration order."""

    def __init__(
        self,
        kind: str,
        *,
        reserved: tuple[str, ...] = (),
        check: Callable[[F], None] = lambda family: None,
    ) -> None:
        self.kind = kind
        self.reserved = reserved
        self._check = check
        self._families: dict[str, F] = {}

    def register(self, family: F) -> F:
        """Add ``family`` once (``check`` may refuse it, naming why)."""
        if family.name in self._families or family.name in self.reserved:
            raise InvalidParameterError(
                f"{self.kind} {family.name!r} is already registered or reserved"
            )
        self._check(family)
        self._families[family.name] = family
        return family

    def unregister(self, name: str) -> None:
        """Remove a family (tests that register a toy one clean up with this)."""
        self._families.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._families)

    def families(self) -> tuple[F, ...]:
        return tuple(self._families.values())

    def get(self, name: str) -> F:
        """The family called ``name``; an unknown name is refused listing the known ones."""
        family = self._families.get(name) if isinstance(name, str) else None
        if family is None:
            known = ", ".join(self._families)
            raise InvalidParameterError(f"{self.kind} ({name!r}) must be one of {known}")
        return family
