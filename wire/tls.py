"""TLS for Kafka listeners: an :class:`ssl.SSLContext` built from PEM files or PEM text, with the standard library;
the server side of a listener (:func:`server_context`) and a node's own connections to one (:func:`client_context`).

Kept apart from the config keys (``settings.security`` reads ``ssl.*`` and per-listener overrides, and
names the key in its errors): this module only knows plain paths, PEM strings and the choices Kafka's ``ssl.*``
settings offer. Each :class:`TlsError` names the :class:`TlsSettings` field at fault, never a secret's value, so the
caller can turn it into a one-line error that names the key without echoing a password or key material.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: ``ssl.client.auth``: whether the listener asks clients for a certificate, and whether it insists on one.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
#: ``ssl.enabled.protocols``: TLS 1.0 and 1.1 are left out (Kafka disabled them by default in 3.0).
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

#: What a client connection speaks TLS with: a context, or a callable read at each connect that gives the current
#: one (``wire.tls_reload.ReloadingClientContext``), so renewed certificates reach the node's own connections too.
ClientTls = ssl.SSLContext | Callable[[], ssl.SSLContext]


def current_context(tls: ClientTls | None) -> ssl.SSLContext | None:
    """The context to connect with now (None: plaintext)."""
    return tls() if callable(tls) else tls


class TlsError(ValueError):
    """A TLS setting cannot be used; ``setting`` is the :class:`TlsSettings` field at fault. The message never
    holds a password or key material."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One listener's TLS: its key and certificate chain (a PEM file, or PEM text inline as in KIP-651), the CAs
    client certificates are checked against, and what is negotiated. Secrets are left out of ``repr``."""

    keystore_location: str | None = None  # one PEM file: the private key and the certificate chain
    keystore_key: str | None = field(default=None, repr=False)  # inline PEM private key
    keystore_certificate_chain: str | None = field(default=None, repr=False)  # inline PEM certificates
    key_password: str | None = field(default=None, repr=False)  # of an encrypted private key
    truststore_location: str | None = None  # PEM CA certificates
    truststore_certificates: str | None = field(default=None, repr=False)  # inline PEM CA certificates
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()  # empty: OpenSSL's defaults
    check_hostname: bool = True  # of a server this node connects to (client contexts only)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server-side context of one listener; :class:`TlsError` if a file is missing, a key cannot be
    decrypted, the key does not match its certificate, or a protocol or cipher suite is not available."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = _set_protocols(context, settings.enabled_protocols)
    _set_cipher_suites(context, settings.cipher_suites, versions)
    _load_keystore(context, settings)
    has_truststore = _load_truststore(context, settings)
    if settings.client_auth not in CLIENT_AUTH:
        raise TlsError("client_auth", f"must be one of {', '.join(CLIENT_AUTH)}")
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    if context.verify_mode != ssl.CERT_NONE and not has_truststore:
        raise TlsError("client_auth", f"{settings.client_auth} needs a truststore to check client certificates")
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a node's own connections to an SSL listener (a broker or voter to the CONTROLLER
    listener, a broker to its peers' inter-broker listener): the server is checked against the truststore (the
    system's CAs without one) and its host name, as Kafka's ``ssl.endpoint.identification.algorithm=https`` (its
    default) does; the keystore, when there is one, is the client certificate a listener with ``ssl.client.auth``
    asks for. :class:`TlsError` as for :func:`server_context`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = settings.check_hostname
    versions = _set_protocols(context, settings.enabled_protocols)
    _set_cipher_suites(context, settings.cipher_suites, versions)
    if settings.keystore_location is not None or settings.keystore_key is not None:
        _load_keystore(context, settings)
    if not _load_truststore(context, settings):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


def _set_protocols(context: ssl.SSLContext, enabled: tuple[str, ...]) -> list[ssl.TLSVersion]:
    unknown = [name for name in enabled if name not in PROTOCOLS]
    if unknown:
        raise TlsError("enabled_protocols", f"{', '.join(unknown)} not supported (allowed: {', '.join(PROTOCOLS)})")
    versions = sorted({PROTOCOLS[name] for name in enabled})
    if not versions:
        raise TlsError("enabled_protocols", "no protocol enabled")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    return versions


def openssl_cipher_name(name: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name, as Kafka (Java) spells them:
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 is ECDHE-RSA-AES128-GCM-SHA256. Other names come back unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, _, cipher = name[len("TLS_"):].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_CBC", "")
    if cipher.startswith("CHACHA20_POLY1305"):
        cipher = "CHACHA20_POLY1305"
    return "-".join([*([] if exchange == "RSA" else [exchange]), cipher]).replace("_", "-")


def _set_cipher_suites(context: ssl.SSLContext, suites: tuple[str, ...], versions: list[ssl.TLSVersion]) -> None:
    """Restricts the suites. Python's ``ssl`` cannot pick among TLS 1.3's suites, so those are all listed or none
    (then TLS 1.3 is off, as it is in Java when no TLS 1.3 suite is enabled); a list without TLS 1.2 suites turns
    TLS 1.2 off."""
    if not suites:
        return
    available = {cipher["name"]: cipher["protocol"] for cipher in context.get_ciphers()}
    tls13 = {name for name, protocol in available.items() if protocol == "TLSv1.3"}
    chosen: list[str] = []
    for suite in suites:
        name = suite if suite in available else openssl_cipher_name(suite)
        if name not in available:
            raise TlsError("cipher_suites", f"cipher suite {suite} is unknown or not available")
        chosen.append(name)
    chosen13 = set(chosen) & tls13
    chosen12 = [name for name in chosen if name not in tls13]
    if chosen13 and chosen13 != tls13:
        raise TlsError("cipher_suites", f"TLS 1.3 suites can only be enabled all together ({', '.join(sorted(tls13))})")
    if not chosen13:
        versions = [v for v in versions if v is not ssl.TLSVersion.TLSv1_3]
    if not chosen12:
        versions = [v for v in versions if v is not ssl.TLSVersion.TLSv1_2]
    if not versions:
        raise TlsError("cipher_suites", "no listed suite belongs to an enabled protocol")
    if chosen12:
        context.set_ciphers(":".join(chosen12))
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.keystore_location is not None:
        if settings.keystore_key is not None or settings.keystore_certificate_chain is not None:
            raise TlsError("keystore_location", "set either a keystore file or an inline key and chain, not both")
        try:
            pem = Path(settings.keystore_location).read_bytes()
        except OSError as exc:
            raise TlsError("keystore_location", f"cannot read {settings.keystore_location}: {exc.strerror}") from None
        _load_chain(context, settings.keystore_location, pem, settings.key_password, "keystore_location")
        return
    if settings.keystore_key is None:
        raise TlsError("keystore_location", "an SSL listener needs a keystore (a PEM file, or an inline key and chain)")
    if settings.keystore_certificate_chain is None:
        raise TlsError("keystore_certificate_chain", "the inline key has no certificate chain")
    _check_inline_chain(settings.keystore_certificate_chain)  # so a bad chain is not blamed on the key below
    pem = f"{settings.keystore_key.strip()}\n{settings.keystore_certificate_chain.strip()}\n".encode()
    with _pem_path(pem) as path:
        _load_chain(context, path, pem, settings.key_password, "keystore_key")


def _check_inline_chain(chain: str) -> None:
    """An inline certificate chain (``ssl.keystore.certificate.chain``) parsed on its own: loaded with its key, a
    chain OpenSSL cannot read fails as the pair, and would be reported as the key's fault."""
    if "-----END CERTIFICATE-----" not in chain:
        raise TlsError("keystore_certificate_chain", "no complete PEM certificate")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cadata=chain)
    except (ssl.SSLError, ValueError) as exc:
        detail = f" ({exc.reason})" if isinstance(exc, ssl.SSLError) and exc.reason else ""
        raise TlsError("keystore_certificate_chain", f"not a PEM certificate chain{detail}") from None


def _load_chain(context: ssl.SSLContext, path: str, pem: bytes, password: str | None, source: str) -> None:
    """Loads the certificate chain and private key from one PEM file. The password is always given as a callable,
    so an encrypted key without one fails here instead of OpenSSL prompting on the terminal. A file without a whole
    certificate (cut short while being written, say) is said to be so, not blamed on the key's password."""
    if b"-----END CERTIFICATE-----" not in pem:
        raise TlsError(source, "no complete PEM certificate (a file cut short, or only a key)")
    try:
        context.load_cert_chain(path, password=lambda: password or "")
    except ssl.SSLError as exc:
        if b"ENCRYPTED" in pem and exc.reason in (None, "BAD_DECRYPT", "PEM_LIB", "BAD_PASSWORD_READ"):
            problem = "is wrong" if password else "is missing"
            raise TlsError("key_password", f"the private key is encrypted and its password {problem}") from None
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsError(source, "the private key does not match the certificate") from None
        detail = f" ({exc.reason})" if exc.reason else ""
        raise TlsError(source, f"not a PEM private key with its certificate chain{detail}") from None


@contextlib.contextmanager
def _pem_path(pem: bytes) -> Iterator[str]:
    """A path to ``pem``: ``ssl`` loads keys from files only. On Linux an anonymous in-memory file keeps inline
    key material off the disk; elsewhere it lives in a private temporary directory for the moment of loading."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("fjord-tls-keystore")
        try:
            with open(fd, "wb", closefd=False) as out:
                out.write(pem)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="fjord-tls-") as directory:
        path = Path(directory) / "keystore.pem"
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(pem)
        yield str(path)


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Loads the CAs client certificates are checked against; False when there are none."""
    if settings.truststore_location is not None and settings.truststore_certificates is not None:
        raise TlsError("truststore_location", "set either a truststore file or inline certificates, not both")
    try:
        if settings.truststore_location is not None:
            context.load_verify_locations(cafile=settings.truststore_location)
        elif settings.truststore_certificates is not None:
            context.load_verify_locations(cadata=settings.truststore_certificates)
        else:
            return False
    except (OSError, ValueError) as exc:
        source = "truststore_location" if settings.truststore_location is not None else "truststore_certificates"
        reason = exc.reason if isinstance(exc, ssl.SSLError) else getattr(exc, "strerror", None) or str(exc)
        raise TlsError(source, f"no PEM CA certificates could be read ({reason})") from None
    return True
