"""One registry mechanism for the families of interchangeable parts (pass kinds, pass predictors,
step terms): a dict of members by name, in registration order, that refuses a name twice and
answers an unknown name with a one-line UserError naming the members."""

from __future__ import annotations

from typing import Callable, Generic, Iterable, TypeVar

from costmodel.errors import UserError

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """name -> member. `what` names the family in messages ("pass kind")."""

    def __init__(self, what: str, members: Iterable[T] = (), key: Callable[[T], str] = lambda m: m.name):
        super().__init__()
        self.what, self.key = what, key
        for m in members:
            self.register(m)

    def register(self, member: T) -> T:
        name = self.key(member)
        if name in self:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self[name] = member
        return member

    def unregister(self, name: str) -> None:
        self.pop(name, None)

    def get_member(self, name: str) -> T:
        try:
            return self[name]
        except KeyError:
            raise UserError(f"unknown {self.what} {name!r}", f"use one of {', '.join(self)}") from None
