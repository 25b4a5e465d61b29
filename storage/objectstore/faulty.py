"""A fault-injecting wrapper around any object store, for tests of retry, fencing and recovery paths.

Real S3 fails in ways the local and in-memory stores never do: requests time out, are throttled, or succeed on
the server while the response is lost. Wrapping a real store with ``FaultyObjectStore`` reproduces those cases
deterministically (a seeded ``random.Random`` decides probabilistic faults) without mocking the store itself.

Example::

    store = FaultyObjectStore(MemoryObjectStore(), seed=7)
    store.fail("put", ObjectStoreError("injected 503"), probability=0.3)
    store.fail_after(10, TimeoutError, op="get")       # the 11th get and every later one fails
    store.add_latency(0.05, op="put")
    ...
    store.heal()                                         # back to the healthy store
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore

T = TypeVar("T")

Operation = Literal["put", "get", "get_tail", "size", "delete", "list", "copy"]
OPERATIONS: tuple[Operation, ...] = ("put", "get", "get_tail", "size", "delete", "list", "copy")

ErrorSpec = BaseException | type[BaseException]


@dataclass(slots=True)
class _Fault:
    op: Operation | None  # None: every operation
    error: ErrorSpec
    probability: float
    after: int  # calls of ``op`` that pass before this fault is armed
    times: int | None  # how many more times it may fire; None: unlimited
    when: Literal["before", "after"]  # "after": the inner store performs the request, then the caller sees an error

    def applies(self, op: Operation, call_number: int) -> bool:
        return (self.op is None or self.op == op) and call_number > self.after and self.times != 0


class FaultyObjectStore:
    """Delegates to ``inner`` and injects errors and latency on the operations chosen.

    ``calls`` counts every call per operation (including failed ones), ``injected`` the faults that fired.
    """

    def __init__(self, inner: ObjectStore, seed: int = 0) -> None:
        self._inner = inner
        self._random = random.Random(seed)
        self._faults: list[_Fault] = []
        self._latency: dict[Operation | None, float] = {}
        self.calls: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.stats = inner.stats

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    @property
    def name(self) -> str:
        return f"faulty+{self._inner.name}"

    def fail(
        self,
        op: Operation | None,
        error: ErrorSpec,
        *,
        probability: float = 1.0,
        after: int = 0,
        times: int | None = None,
        when: Literal["before", "after"] = "before",
    ) -> None:
        """Makes ``op`` (every operation if None) raise ``error`` with ``probability``, once ``after`` calls of
        it have passed, at most ``times`` times. ``when="after"`` lets the request reach the inner store first
        (a write that landed but whose response was lost)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {probability}")
        if op is not None and op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(OPERATIONS)}")
        self._faults.append(_Fault(op, error, probability, after, times, when))

    def fail_after(self, calls: int, error: ErrorSpec, op: Operation | None = None) -> None:
        """Every call after the first ``calls`` calls (of ``op``, or of all operations) fails."""
        self.fail(op, error, after=calls)

    def add_latency(self, seconds: float, op: Operation | None = None) -> None:
        """Delays each call of ``op`` (or every call) by ``seconds`` before it reaches the inner store."""
        if seconds < 0:
            raise ValueError(f"latency must not be negative, got {seconds}")
        self._latency[op] = seconds

    def heal(self) -> None:
        """Removes every fault and every added latency."""
        self._faults.clear()
        self._latency.clear()

    async def _call(self, op: Operation, request: Callable[[], Awaitable[T]]) -> T:
        self.calls[op] += 1
        # Counting calls of all operations together lets ``fail_after(n, err)`` with no op mean "after n calls".
        self.calls["*"] += 1
        delay = self._latency.get(op, self._latency.get(None, 0.0))
        if delay:
            await asyncio.sleep(delay)
        fault = self._pick(op)
        if fault is not None and fault.when == "before":
            raise self._raise(op, fault)
        result = await request()
        if fault is not None:
            raise self._raise(op, fault)
        return result

    def _pick(self, op: Operation) -> _Fault | None:
        for fault in self._faults:
            number = self.calls[op] if fault.op is not None else self.calls["*"]
            if fault.applies(op, number) and (fault.probability >= 1.0 or self._random.random() < fault.probability):
                if fault.times is not None:
                    fault.times -= 1
                return fault
        return None

    def _raise(self, op: Operation, fault: _Fault) -> BaseException:
        self.injected[op] += 1
        error = fault.error
        return error(f"injected fault on {op} ({self.name})") if isinstance(error, type) else error

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        await self._call("put", lambda: self._inner.put(key, data, if_none_match=if_none_match))

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._call("get", lambda: self._inner.get(key, start, end))

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        return await self._call("get_tail", lambda: self._inner.get_tail(key, length))

    async def size(self, key: str) -> int:
        return await self._call("size", lambda: self._inner.size(key))

    async def delete(self, keys: Sequence[str]) -> None:
        await self._call("delete", lambda: self._inner.delete(keys))

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self._call("list", lambda: self._inner.list(prefix))

    def copies_from(self, source: ObjectStore) -> bool:
        return self._inner.copies_from(source)

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        await self._call("copy", lambda: self._inner.copy(source, source_key, key))

    async def close(self) -> None:
        await self._inner.close()


if TYPE_CHECKING:  # mypy proves the wrapper is a complete ObjectStore

    def _conforms(store: FaultyObjectStore) -> ObjectStore:
        return store
