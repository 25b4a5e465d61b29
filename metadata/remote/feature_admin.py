"""An operator's feature requests, as ``kafka-features.sh`` sends them through Kafka's Admin client.

``describeFeatures`` is an ApiVersions exchange (v3+ carries the supported ranges, the finalized levels and their
epoch) with one node: a bootstrap server, a named broker (``--node-id``, found through Metadata) or a controller.
``updateFeatures`` is UpdateFeatures: any broker forwards it to the active controller; through
``--bootstrap-controller`` it goes to the quorum's leader, found with DescribeQuorum (``metadata.remote.quorum_admin``),
the one controller that may decide it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.admin.feature_wire import read_update_features_response, update_features_request
from metadata.controller_api import FeatureUpdate, FeatureUpdateResult
from metadata.remote.quorum_admin import QuorumAdminError, QuorumClient, QuorumStatus
from metadata.rpc.kafka_apis import API_VERSIONS, UPDATE_FEATURES
from wire import codec, schema
from wire.client import ClientConnection
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

_CLIENT_ID = "fjord-features"
_API_VERSIONS_VERSION = 4
_METADATA = 3
_METADATA_VERSION = 12


class FeatureAdminError(Exception):
    """Nobody answered, or the answer was an error; the message names the servers asked or Kafka's error."""


@dataclass(frozen=True, slots=True)
class FeatureView:
    """One node's ApiVersions: what it supports, the cluster's finalized levels, and their epoch (None: unknown)."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, int]
    epoch: int | None


@dataclass(frozen=True, slots=True)
class FeatureClient:
    """Where to ask: brokers (``controllers`` False) or the quorum's CONTROLLER listeners, and how to connect."""

    addresses: tuple[tuple[str, int], ...]
    controllers: bool = False
    tls: ClientTls | None = None
    sasl: SaslCredentials | None = None
    timeout_s: float = 30.0

    async def describe(self, node_id: int | None = None) -> FeatureView:
        """The features as ``node_id`` reports them (None: the first server that answers)."""
        addresses = self.addresses if node_id is None else (await self._node_address(node_id),)
        response = await self._first_answer(addresses, self._api_versions_request(), "ApiVersions")
        if response.error_code != ErrorCode.none:
            raise FeatureAdminError(f"ApiVersions: {ErrorCode(int(response.error_code)).name.upper()}")
        epoch = int(response.finalized_features_epoch)
        return FeatureView(
            {str(f.name): (int(f.min_version), int(f.max_version)) for f in response.supported_features},
            {str(f.name): int(f.max_version_level) for f in response.finalized_features},
            epoch if epoch >= 0 else None,
        )

    async def update(self, updates: Sequence[FeatureUpdate], validate_only: bool) -> list[FeatureUpdateResult]:
        """Each update's result (the controller applies them all or none, so a refusal names every feature)."""
        addresses = self.addresses if not self.controllers else (await self._leader(),)
        if self.controllers:  # an embedded single node's CONTROLLER listener only reads: say so, as Kafka's Admin
            served = await self._first_answer(addresses, self._api_versions_request(), "ApiVersions")
            if UPDATE_FEATURES not in {int(k.api_key) for k in served.api_keys}:
                host, port = addresses[0]
                raise FeatureAdminError(f"the controller at {host}:{port} does not serve UpdateFeatures (the "
                                        "CONTROLLER listener of a single node keeping a local metadata log only "
                                        "reads): use --bootstrap-server")
        response = await self._first_answer(addresses, update_features_request(updates, validate_only),
                                            "UpdateFeatures")
        return read_update_features_response(response, updates)

    @staticmethod
    def _api_versions_request() -> Any:
        return schema.build(codec.request_class(API_VERSIONS, _API_VERSIONS_VERSION),
                            client_software_name=_CLIENT_ID, client_software_version="1")

    async def _quorum(self) -> QuorumStatus:
        quorum = QuorumClient(self.addresses, tls=self.tls, sasl=self.sasl, timeout_s=self.timeout_s)
        try:
            return await quorum.status()
        except QuorumAdminError as exc:
            raise FeatureAdminError(str(exc)) from None

    async def _leader(self) -> tuple[str, int]:
        status = await self._quorum()
        leader = status.endpoints.get(status.leader_id)
        if leader is None:
            raise FeatureAdminError(f"the quorum's leader, controller {status.leader_id}, has no known listener")
        return leader

    async def _node_address(self, node_id: int) -> tuple[str, int]:
        """A broker's address from Metadata, or a voter's from DescribeQuorum."""
        if self.controllers:
            endpoints = (await self._quorum()).endpoints
        else:
            request = schema.build(codec.request_class(_METADATA, _METADATA_VERSION), topics=())
            response = await self._first_answer(self.addresses, request, "Metadata")
            endpoints = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        known = ", ".join(str(n) for n in sorted(endpoints))
        if node_id not in endpoints:
            kind = "controller" if self.controllers else "live broker"
            raise FeatureAdminError(f"--node-id {node_id}: no such {kind} (the cluster names {known or 'none'})")
        return endpoints[node_id]

    async def _first_answer(self, addresses: Sequence[tuple[str, int]], request: Any, what: str) -> Any:
        problems = []
        for host, port in addresses:
            connection = ClientConnection(host, port, client_id=_CLIENT_ID, timeout=self.timeout_s,
                                          ssl_context=self.tls, sasl=self.sasl)
            try:
                return await connection.request(request, timeout=self.timeout_s)
            except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
                problems.append(str(exc) if f"{host}:{port}" in str(exc) else f"{host}:{port}: {exc}")
            finally:
                await connection.close()
        raise FeatureAdminError(f"{what}: no server answered ({'; '.join(problems)})")
