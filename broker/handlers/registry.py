"""The handler registry and the per-request context handlers receive.

A handler is ``async def f(ctx: RequestContext, request) -> response | None`` registered with
``@handler(api_key=N)``. It receives the decoded kio request entity of the client's version and returns the kio
response entity of the same version (``ctx.build`` makes one with every unspecified field defaulted), or None to
send nothing (Produce with acks=0).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from broker.services import BrokerServices
from wire import codec

logger = logging.getLogger(__name__)

Handler = Callable[["RequestContext", Any], Awaitable[Any]]
H = TypeVar("H", bound=Handler)

_handlers: dict[int, Handler] = {}
_loaded = False


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    node: BrokerServices
    #: Name of the listener the connection arrived on; Metadata answers with that listener's endpoints.
    listener_name: str = "PLAINTEXT"
    client_port: int = 0

    @property
    def response_class(self) -> type[Any]:
        return codec.response_class(self.api_key, self.api_version)

    def build(self, response_cls: type[Any] | None = None, /, **fields: object) -> Any:
        """A response entity (by default this request's response class) with unspecified fields defaulted."""
        return codec.build(response_cls if response_cls is not None else self.response_class, **fields)

    def describe(self) -> str:
        """For logs: who sent what."""
        return (
            f"api_key={self.api_key} v{self.api_version} correlation_id={self.correlation_id} "
            f"client={self.client_id!r}@{self.client_host}:{self.client_port}"
        )


def handler(api_key: int) -> Callable[[H], H]:
    """Registers the decorated coroutine function as the handler of ``api_key``."""

    def register(func: H) -> H:
        existing = _handlers.get(api_key)
        if existing is not None and existing is not func:
            qual = f"{existing.__module__}.{existing.__qualname__}"
            raise RuntimeError(f"api_key {api_key} already has a handler: {qual}")
        _handlers[api_key] = func
        return func

    return register


def load_handlers() -> Mapping[int, Handler]:
    """Imports every module of ``broker.handlers`` once and returns the registered handlers by api key."""
    global _loaded
    if not _loaded:
        import broker.handlers as package

        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name == "registry":
                continue
            try:
                importlib.import_module(f"{package.__name__}.{info.name}")
            except Exception:
                # One broken handler module must not take every other API down with it; its APIs are simply
                # not advertised, and the error says which module and why.
                logger.exception("handler module %s.%s failed to import; its APIs are not served",
                                 package.__name__, info.name)
        _loaded = True
    return MappingProxyType(_handlers)
