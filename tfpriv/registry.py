"""`Registry`: named values in order, the one container behind tfpriv's extension points.

The layer rules, the accountants and the datasets are each a `Registry`, so they register, refuse
a name twice, list in order and report an unknown name the same way. Base layer: it imports nothing of
tfpriv, so the caller gives the error class of its lookups (e.g. `tfpriv.errors.ConfigError`).
"""
from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Values of one kind by name, in registration order (`first=True` puts one ahead of the others).

    `kind` names the values in a refused registration; `parameter` (default: `kind`) is the library
    parameter an unknown name was given as, which starts the lookup's one-line `error`;
    `also_valid` lists names the caller resolves itself before the lookup (e.g. `tfds:<name>`),
    so that the error lists them too.

    Example:
        >>> from tfpriv.registry import Registry
        >>> colours = Registry("colour", error=ValueError)
        >>> colours.register("red", 0xFF0000)
        16711680
        >>> colours.register("blue", 0x0000FF, first=True)
        255
        >>> colours.names()
        ('blue', 'red')
        >>> colours.get("green")
        Traceback (most recent call last):
        ...
        ValueError: colour: must be one of blue, red, got 'green'
    """

    def __init__(self, kind: str, *, parameter: str | None = None, error: type[Exception] = LookupError,
                 also_valid: tuple[str, ...] = ()):
        self._kind = kind
        self._parameter = parameter or kind
        self._error = error
        self._also_valid = also_valid
        self._values: dict[str, T] = {}

    def register(self, name: str, value: T, *, first: bool = False) -> T:
        """Registers `value` under `name` and returns it; `first`: ahead of those already registered
        (a user's layer rule is tried before the built-in ones).

        Registering the same value again changes nothing; another value under a taken name is a
        ValueError, so that a registration cannot silently replace one.
        """
        if name in self._values:
            if self._values[name] is value:
                return value
            raise ValueError(f"name: {self._kind} {name!r} is already registered to another value; "
                             f"choose another name")
        self._values = {name: value, **self._values} if first else {**self._values, name: value}
        return value

    def copy(self) -> "Registry[T]":
        """A registry of the same kind holding the same values (a test changes the copy, not this one)."""
        out: Registry[T] = Registry(self._kind, parameter=self._parameter, error=self._error,
                                    also_valid=self._also_valid)
        out._values = dict(self._values)
        return out

    def remove(self, name: str) -> T:
        """Unregisters `name` and returns its value (e.g. a test's rule, afterwards)."""
        return self._values.pop(name)

    def get(self, name: str) -> T:
        """The value registered under `name`; `error` naming `parameter` and the valid names otherwise."""
        try:
            return self._values[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name
            valid = ", ".join((*self._values, *self._also_valid))
            raise self._error(f"{self._parameter}: must be one of {valid}, got {name!r}") from None

    def names(self) -> tuple[str, ...]:
        """The registered names, in order."""
        return tuple(self._values)

    def values(self) -> tuple[T, ...]:
        """The registered values, in order."""
        return tuple(self._values.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._values
