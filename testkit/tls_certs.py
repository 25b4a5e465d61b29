"""Certificates for TLS tests, made with ``cryptography``: a CA, a server certificate for 127.0.0.1 and localhost,
and client certificates, written as PEM files under a test's directory."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Identity:
    """A private key with its certificate (PEM text) and where they were written."""

    key_pem: str
    cert_pem: str
    key_path: Path
    cert_path: Path
    #: key and certificate in one file, as ``ssl.keystore.location`` of type PEM holds them
    keystore_path: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate,
           password: str | None) -> Identity:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_path, cert_path, keystore_path = (directory / f"{stem}{suffix}" for suffix in
                                          (".key.pem", ".cert.pem", ".keystore.pem"))
    key_path.write_text(key_pem)
    cert_path.write_text(cert_pem)
    keystore_path.write_text(key_pem + cert_pem)
    return Identity(key_pem, cert_pem, key_path, cert_path, keystore_path)


class CertificateAuthority:
    """A self-signed CA that signs server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "fjord test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM).decode()
        self.cert_path = directory / f"{name.replace(' ', '-')}.pem"
        self.cert_path.write_text(self.cert_pem)

    def issue(self, stem: str, *, server: bool, password: str | None = None,
              subject: x509.Name | None = None) -> Identity:
        """A certificate for 127.0.0.1 and localhost (server) or a client named ``stem`` (or ``subject``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject if subject is not None else _name("localhost" if server else stem))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                # A node's certificate also identifies it on its own connections (to the CONTROLLER listener).
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if server
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                             x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return _write(self.directory, stem, key, builder.sign(self._key, hashes.SHA256()), password)
