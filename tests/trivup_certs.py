"""The client certificate files trivup (the harness librdkafka's own suite runs under) makes for the suite's SSL
tests, and the ``SSL_*`` environment variables naming them.

0097 ssl_verify loads the client's key, certificate and CA in every form librdkafka takes (``ssl.*.location`` files,
``ssl.*.pem`` strings, ``set_ssl_cert()`` with PEM, DER or PKCS#12 bytes), finding each file through the variable
trivup's ``LibrdkafkaTestApp`` sets (``SslApp.create_cert``); it skips itself when they are missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12

from testkit.tls_certs import CertificateAuthority


@dataclass(frozen=True)
class TrivupClientCertificate:
    """A client's certificate files in trivup's shapes, and what the suite's ``test.conf`` says about them."""

    env: dict[str, str]  # the SSL_* variables for the suite's test runner
    client_conf: dict[str, str]  # security.protocol=SSL and the ssl.* properties trivup writes to test.conf


def write_trivup_client_certificate(
    ca: CertificateAuthority, password: str, name: str = "librdkafka"
) -> TrivupClientCertificate:
    """A client certificate ``name`` signed by ``ca``, written as trivup writes it beside ``ca``'s files: the key in
    PEM encrypted with ``password`` and in plain DER, the certificate in PEM and DER, a PKCS#12 file under ``password``
    with the key, the certificate and ``ca``'s certificate, ``ca``'s certificate in PEM and DER, and a bundle of
    several CAs' certificates ("all CAs", the form 0097 checks a multi-certificate CA input with), ``ca``'s last."""
    directory = ca.directory
    identity = ca.issue(name, server=False, password=password)
    key = serialization.load_pem_private_key(identity.key_pem.encode(), password.encode())
    if not isinstance(key, ec.EllipticCurvePrivateKey):  # what CertificateAuthority.issue makes
        raise TypeError(f"{identity.key_path} holds a {type(key).__name__}, not an elliptic curve key")
    cert = x509.load_pem_x509_certificate(identity.cert_pem.encode())
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    other_ca = CertificateAuthority(directory / "other-ca", "unrelated test CA")
    files = {
        "priv_pem": identity.key_path,
        "priv_der": directory / f"{name}-priv.der",
        "pub_pem": identity.cert_path,
        "pub_der": directory / f"{name}-pub.der",
        "pkcs": directory / f"{name}.pfx",
        "ca_pem": ca.cert_path,
        "ca_der": ca.cert_path.with_suffix(".der"),
        "all_cas_pem": directory / "all-cas.pem",
    }
    files["priv_der"].write_bytes(
        key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    files["pub_der"].write_bytes(cert.public_bytes(serialization.Encoding.DER))
    files["pkcs"].write_bytes(
        pkcs12.serialize_key_and_certificates(
            name.encode(), key, cert, [ca_cert], serialization.BestAvailableEncryption(password.encode())
        )
    )
    files["ca_der"].write_bytes(ca_cert.public_bytes(serialization.Encoding.DER))
    files["all_cas_pem"].write_text(other_ca.cert_pem + ca.cert_pem)
    env = {f"SSL_{kind}": str(path) for kind, path in files.items()}
    env["SSL_password"] = password
    client_conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca.cert_path),
        "ssl.certificate.location": str(identity.cert_path),
        "ssl.key.location": str(identity.key_path),
        "ssl.key.password": password,
    }
    return TrivupClientCertificate(env, client_conf)
