"""A scripted Kafka-protocol peer for the client connection's tests: it answers each request with an error
response, stays silent, hangs up, or answers with the wrong correlation id."""

from __future__ import annotations

import asyncio
import struct

from kio.schema.errors import ErrorCode

from wire import codec, schema

END_TXN = 26


def end_txn_request() -> object:
    return schema.build(
        codec.request_class(END_TXN, 3), transactional_id="tx", producer_id=1, producer_epoch=0, committed=True
    )


class ScriptedPeer:
    """Answers each request per ``behaviour``: "answer", "silent", "hang_up" or "wrong_id"."""

    def __init__(self) -> None:
        self.behaviour = "answer"
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                prefix = codec.read_prefix(await reader.readexactly(size))
                if self.behaviour == "silent":
                    continue
                if self.behaviour == "hang_up":
                    return
                correlation_id = prefix.correlation_id + (1 if self.behaviour == "wrong_id" else 0)
                response = schema.build(
                    codec.response_class(prefix.api_key, prefix.api_version),
                    throttle_time=0,
                    error_code=ErrorCode.invalid_txn_state,
                )
                writer.write(codec.encode_response(correlation_id, response))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
