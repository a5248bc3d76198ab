"""TLS for the two services: a private CA and server certificates, and a client context pinning it.

``python -m shared.service.tls DIR [--if-missing] [--name NAME ...]`` writes ``ca.pem`` (the CA
certificate the clients pin), and for each service name ``NAME.pem`` (its certificate chain) and
``NAME-key.pem`` (its private key, mode 0600). The CA's private key is never written: it signs
the server certificates in memory and is discarded, so nobody can issue another certificate
under it (re-run the command to re-issue everything). Used by the compose ``tls`` profile and by
the tests (throwaway CAs); real deployments may bring certificates from their own CA instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared.errors import InvalidParameterError
from shared.service.files import write_whole

DEFAULT_NAMES = ("labels", "features")
LOCAL_NAMES = ("localhost", "127.0.0.1")
VALID_DAYS = 825


def client_context(ca_file: str | Path) -> ssl.SSLContext:
    """A TLS client context that trusts only ``ca_file`` (hostname checked, TLS 1.2+)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def check_server_files(cert: Path | None, key: Path | None) -> None:
    """A service's https files, checked at its start: both or neither, and a certificate chain
    and private key that load together (a missing or non-PEM file was a traceback at uvicorn's
    start, found by an audit). InvalidParameterError naming the options."""
    if (cert is None) != (key is None):
        raise InvalidParameterError("tls_cert and tls_key go together (give both or neither)")
    if cert is None or key is None:
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except OSError as exc:  # ssl.SSLError is an OSError
        raise InvalidParameterError(
            f"--tls-cert {cert} with --tls-key {key}: not a PEM certificate chain and its private "
            f"key ({_reason(exc)})"
        ) from None


def check_ca_file(ca_file: Path | None, *, option: str) -> None:
    """A CA file to trust, checked at start (a missing one made every call a 500, found by an
    audit): InvalidParameterError naming ``option``."""
    if ca_file is None:
        return
    try:
        client_context(ca_file)
    except OSError as exc:
        raise InvalidParameterError(
            f"{option} {ca_file}: not a readable PEM CA certificate ({_reason(exc)})"
        ) from None


def _reason(exc: OSError) -> str:
    """An OSError's or ssl.SSLError's words, without the errno or OpenSSL's source line."""
    return str(getattr(exc, "reason", None) or exc.strerror or exc)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def make_ca(
    common_name: str = "labeldp private CA",
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (P-256) for issuing the services' certificates."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue(
    ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, names: Sequence[str]
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A server certificate for ``names`` (DNS names or IP addresses), signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_alt_names(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def write_bundle(
    directory: str | Path, names: Sequence[str] = DEFAULT_NAMES, *, if_missing: bool = False
) -> Path:
    """Write ca.pem and NAME.pem / NAME-key.pem for each name (valid for it and localhost).

    ``if_missing``: keep a bundle that is there and usable (every file loads); one that is not
    (an empty ca.pem an older version's crash left, a key deleted by hand) is written anew."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # 0700 when it creates it
    if if_missing and _usable(folder, names):
        return folder
    ca_key, ca_cert = make_ca()
    pem = serialization.Encoding.PEM
    for name in names:
        key, cert = issue(ca_key, ca_cert, [name, *LOCAL_NAMES])
        write_whole(
            folder / f"{name}-key.pem",
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            mode=0o600,
        )
        write_whole(folder / f"{name}.pem", cert.public_bytes(pem), mode=0o644)
    # Last, and whole or absent (shared.service.files): its presence marks the bundle done.
    write_whole(folder / "ca.pem", ca_cert.public_bytes(pem), mode=0o644)
    return folder


def _usable(folder: Path, names: Sequence[str]) -> bool:
    """Whether ``folder`` holds a bundle for ``names`` whose files all load (as each service
    and client would load them at its start)."""
    try:
        check_ca_file(folder / "ca.pem", option="ca.pem")
        for name in names:
            check_server_files(folder / f"{name}.pem", folder / f"{name}-key.pem")
    except InvalidParameterError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.service.tls", description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--name", action="append", help="service name (default: labels, features)")
    parser.add_argument("--if-missing", action="store_true", help="keep an existing bundle")
    args = parser.parse_args(argv)
    folder = write_bundle(args.directory, args.name or DEFAULT_NAMES, if_missing=args.if_missing)
    print(f"TLS bundle in {folder} (pin {folder / 'ca.pem'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
