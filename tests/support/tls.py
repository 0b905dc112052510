"""A test certificate authority and a loopback TLS server that answers HTTP as if it were a
provider host, so that a client can do real TLS (SNI, chain, name check) through the tunnel
without any real host ever being contacted."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ANSWER = b"hello from the fake provider\n"


@dataclass(frozen=True)
class CertAuthority:
    ca_pem: Path  # the CA certificate a client trusts
    cert_pem: Path  # the server's certificate, for `names`, signed by the CA
    key_pem: Path  # the server's key
    names: tuple[str, ...]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_test_ca(directory: Path, names: tuple[str, ...] = ("api.anthropic.com",)) -> CertAuthority:
    """A fresh CA and a server certificate for `names` (SANs), as PEM files in `directory`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("oms test CA"))
        .issuer_name(_name("oms test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    out = CertAuthority(
        directory / "ca.pem", directory / "server.pem", directory / "server.key", names
    )
    out.ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    out.cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key_pem.write_bytes(_key_pem(key))
    return out


def client_context(ca: CertAuthority) -> ssl.SSLContext:
    """A client context that trusts only the test CA (and checks host names)."""
    return ssl.create_default_context(cafile=str(ca.ca_pem))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = ANSWER + f"path={self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many tunnels connect before any of them starts TLS

    def __init__(self, ca: CertAuthority) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen_sni: list[str | None] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(ca.cert_pem), str(ca.key_pem))
        context.sni_callback = lambda _sock, name, _ctx: self.seen_sni.append(name)
        # The handshake in the handler's thread, not in accept(): one slow client must not
        # hold up the others.
        self.socket = context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )


@contextmanager
def tls_http_server(ca: CertAuthority) -> Iterator[_TLSServer]:
    """A loopback HTTPS server with the test CA's server certificate; `.server_address` is
    where it listens, `.seen_sni` the names clients asked for."""
    server = _TLSServer(ca)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
