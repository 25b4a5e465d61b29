"""PUTs that carry Fjord's CRC32C over https are signed with ``x-amz-content-sha256: UNSIGNED-PAYLOAD``.

SigV4 puts a hash of the body into the signed request: botocore's S3 signer hashes the whole body with SHA-256
unless ``S3SigV4Auth._should_sha256_sign_payload`` says otherwise, and (botocore 1.43) it says otherwise only over
https *and* when the checksum header botocore itself chose is present. Fjord's PutObject passes its own
``ChecksumCRC32C``, so botocore chooses no checksum (``httpchecksum.resolve_request_checksum_algorithm`` returns
early when a checksum header is set), looks for ``Content-MD5`` instead, does not find it, and hashes the body even
over https, where it would not hash a body it had checksummed itself. That SHA-256 costs about 1 ms of event-loop
CPU per MiB uploaded (figures below), on top of the CRC32C that already protects the body.

Over https this module gives Fjord's checksummed PUTs what botocore gives its own: no body hash. That is as safe:

* TLS protects the body in transit against anyone altering it.
* S3 (and MinIO) verify ``x-amz-checksum-crc32c`` against the body they receive and refuse a mismatch (400
  ``BadDigest``) before storing anything, so a body corrupted on the way is never stored.
* The checksum header is signed: SigV4 signs every header except a fixed list of hop-by-hop and tracing headers
  (``botocore.auth.SIGNED_HEADERS_BLACKLIST``; ``SigV4Auth.headers_to_sign``), and the checksum header is not on
  it (checked here: if a botocore release ever listed it, payloads would be hashed as before).

Over plain http (MinIO on a laptop or a private network, moto in the tests) the body stays hashed. There the
SHA-256 is what stops someone on the path from rewriting a PUT: CRC32C is not a cryptographic hash, and a body can
be crafted to any CRC32C, so a signed CRC32C alone would let an attacker who can rewrite the traffic store data of
their choosing under Fjord's signature. botocore makes the same choice for its own checksums.

Only PutObject requests that carry Fjord's CRC32C header change; every other request (UploadPart, whose checksum
botocore computes, DeleteObjects, CompleteMultipartUpload, GETs) is signed as before. The switch is botocore's own
``s3.payload_signing_enabled`` option, which ``S3SigV4Auth`` reads from the request context's ``client_config``
and lets take precedence; a ``before-sign`` hook on the store's own client puts a copy of the client's config with
that option off into the context of each such request. The hook lives on that client's event emitter (botocore
copies the session's emitter for every client it creates), so no other botocore client in the process is touched.

Measured here (2 shared cores) with ``time.process_time`` of the storing process around 64 PUTs of 8 MiB through
:class:`~storage.objectstore.s3.S3ObjectStore` to moto on 127.0.0.1 (the hook applied to http for the measurement
only), moto in a process of its own, six runs of each alternating: 2.9 ms of CPU per MiB with the body hashed
(median; 2.7 to 3.9), 1.9 ms per MiB with UNSIGNED-PAYLOAD (1.65 to 2.7): about 1 ms per MiB, a third of what a PUT
costs the broker.
"""

from __future__ import annotations

import copy
from typing import Any

from botocore.auth import SIGNED_HEADERS_BLACKLIST

CHECKSUM_HEADER = "x-amz-checksum-crc32c"
"""The header holding the CRC32C Fjord computes for a PutObject body (``ChecksumCRC32C``)."""

UNSIGNED_OPERATIONS = ("PutObject",)
"""The operations whose body carries Fjord's CRC32C; UploadPart's checksum is botocore's, so its parts are not here."""


def checksum_header_is_signed() -> bool:
    """Whether SigV4 signs :data:`CHECKSUM_HEADER` in this botocore: the condition for skipping the payload hash."""
    return CHECKSUM_HEADER not in SIGNED_HEADERS_BLACKLIST


def is_https(url: str) -> bool:
    """Whether a request goes over TLS, the condition (with the signed checksum) for not hashing its body."""
    return url.lower().startswith("https://")


def sign_checksummed_puts_unsigned(client: Any) -> None:
    """Registers, on ``client`` (an aiobotocore S3 client) alone, the hook that signs PUTs carrying Fjord's CRC32C
    over https with UNSIGNED-PAYLOAD."""
    if not checksum_header_is_signed():
        return
    config = client.meta.config
    unsigned = copy.copy(config)
    unsigned.s3 = {**(config.s3 or {}), "payload_signing_enabled": False}

    def before_sign(request: Any, **_: Any) -> None:
        # The header is set by the caller's ChecksumCRC32C, never by botocore for these operations; without it, or
        # over plain http, the body is hashed as before.
        if request.headers.get(CHECKSUM_HEADER) and is_https(request.url):
            request.context["client_config"] = unsigned

    for operation in UNSIGNED_OPERATIONS:
        client.meta.events.register(f"before-sign.s3.{operation}", before_sign)
