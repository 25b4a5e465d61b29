"""PUTs that carry Fjord's CRC32C are signed with ``x-amz-content-sha256: UNSIGNED-PAYLOAD``.

SigV4 puts a hash of the body into the signed request: botocore's S3 signer hashes the whole body with SHA-256
unless ``S3SigV4Auth._should_sha256_sign_payload`` says otherwise, and (botocore 1.43) it says otherwise only over
https *and* when the checksum header botocore itself chose is present. Fjord's PutObject passes its own
``ChecksumCRC32C``, so botocore chooses no checksum (``httpchecksum.resolve_request_checksum_algorithm`` returns
early when a checksum header is set), looks for ``Content-MD5`` instead, does not find it, and hashes the body over
https as well as over plain http (MinIO on a laptop or a private network, moto in the tests). That SHA-256 costs
about 1 ms of event-loop CPU per MiB uploaded (figures below), on top of the CRC32C that already protects the
body.

Why dropping it keeps the request as safe:

* S3 (and MinIO) verify ``x-amz-checksum-crc32c`` against the body they receive and refuse a mismatch (400
  ``BadDigest``) before storing anything, so a body altered in transit is never stored.
* The checksum header is signed. SigV4 signs every header of the request except a fixed list of hop-by-hop and
  tracing headers (``botocore.auth.SIGNED_HEADERS_BLACKLIST``; ``SigV4Auth.headers_to_sign``), and the checksum
  header is not on it (checked here: if a botocore release ever listed it, payloads would be hashed as before). So
  whoever alters the body cannot alter the checksum to match without breaking the signature: the signature still
  binds the body, through its CRC32C instead of its SHA-256. ``x-amz-content-sha256: UNSIGNED-PAYLOAD`` is itself
  a signed header, so it cannot be switched back to a forged hash either.
* CRC32C is not a cryptographic hash: someone who can rewrite the traffic could craft a different body with the
  same CRC32C. That attacker already reads every byte of a plain-http connection; over https (where botocore
  itself sends UNSIGNED-PAYLOAD for uploads it checksums) TLS stops them. What the signature guarantees (who sent
  the request, to which key, when, with which checksum) is unchanged, and accidental corruption is caught as before.

Only requests that carry Fjord's CRC32C header change; every other request (UploadPart, whose checksum botocore
computes, DeleteObjects, CompleteMultipartUpload, GETs) is signed as before. The switch is botocore's own
``s3.payload_signing_enabled`` option, which ``S3SigV4Auth`` reads from the request context's ``client_config``
and lets take precedence; a ``before-sign`` hook on the store's own client puts a copy of the client's config with
that option off into the context of each such request. The hook lives on that client's event emitter (botocore
copies the session's emitter for every client it creates), so no other botocore client in the process is touched.

Measured here (2 shared cores) with ``time.process_time`` of the storing process around 64 PUTs of 8 MiB through
:class:`~storage.objectstore.s3.S3ObjectStore` to moto over http on 127.0.0.1, moto in a process of its own, six
runs of each alternating: 2.9 ms of CPU per MiB with the body hashed (median; 2.7 to 3.9), 1.9 ms per MiB with
UNSIGNED-PAYLOAD (1.65 to 2.7): about 1 ms per MiB, a third of what a PUT costs the broker. Before this, Fjord's
PUTs over https were hashed too (see above); they no longer are.
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


def sign_checksummed_puts_unsigned(client: Any) -> None:
    """Registers, on ``client`` (an aiobotocore S3 client) alone, the hook that signs PUTs carrying Fjord's CRC32C
    with UNSIGNED-PAYLOAD."""
    if not checksum_header_is_signed():
        return
    config = client.meta.config
    unsigned = copy.copy(config)
    unsigned.s3 = {**(config.s3 or {}), "payload_signing_enabled": False}

    def before_sign(request: Any, **_: Any) -> None:
        # The header is set by the caller's ChecksumCRC32C, never by botocore for these operations; without it the
        # body is hashed as before.
        if request.headers.get(CHECKSUM_HEADER):
            request.context["client_config"] = unsigned

    for operation in UNSIGNED_OPERATIONS:
        client.meta.events.register(f"before-sign.s3.{operation}", before_sign)
