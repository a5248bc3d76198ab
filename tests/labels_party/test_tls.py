"""TLS: a real ``labeldp serve labels`` process over https with a throwaway CA (shared.service.tls).

The client pinning the CA works; without it (system CAs) the certificate does not verify; the
features party's labels client uses its ``labels_ca_file``.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from features_party.config import Settings as FeaturesSettings
from features_party.pull import labels_client
from shared.service.client import LabelsPartyClient, RetryPolicy, ServiceUnavailableError
from shared.service.tls import check_ca_file, check_server_files, client_context, write_bundle
from tests.labels_party.conftest import TOKENS, TOKENS_ENV, free_port

pytestmark = pytest.mark.integration
NO_RETRY = RetryPolicy(attempts=1)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundle(tmp_path_factory.mktemp("tls") / "bundle", ["labels"])


def spawn_https(
    args: list[str], env: dict[str, str], log_path: Path, ca_file: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m labeldp serve ARGS --port P`` and wait for https /healthz."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "labeldp", "serve", *args, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    url = f"https://127.0.0.1:{port}"
    context = client_context(ca_file)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(log_path.read_text())
        try:
            if httpx.get(f"{url}/healthz", verify=context, timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def https_server(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("server")
    process, url = spawn_https(
        ["labels", "--db", str(folder / "l.db"), "--log-level", "warning",
         "--tls-cert", str(bundle / "labels.pem"), "--tls-key", str(bundle / "labels-key.pem")],
        {"LABELDP_TOKENS": TOKENS_ENV, "LABELDP_WARMUP": "0"},
        folder / "server.log",
        bundle / "ca.pem",
    )  # fmt: skip
    try:
        yield url
    finally:
        stop(process)


def test_the_features_party_serves_https_and_calls_the_labels_party_over_it(
    https_server: str, bundle: Path, tmp_path: Path
) -> None:
    ca = bundle / "ca.pem"
    features_bundle = write_bundle(tmp_path / "f", ["features"])  # its own CA: a second pin
    process, url = spawn_https(
        ["features", "--db", str(tmp_path / "f.db"), "--labels-url", https_server,
         "--labels-ca-file", str(ca), "--log-level", "warning",
         "--tls-cert", str(features_bundle / "features.pem"),
         "--tls-key", str(features_bundle / "features-key.pem")],
        {"LABELDP_PUBLISHER_TOKEN": TOKENS.publisher, "LABELDP_FEATURES_TOKEN": "features-token"},
        tmp_path / "features.log",
        features_bundle / "ca.pem",
    )  # fmt: skip
    try:
        auth = {"Authorization": "Bearer features-token"}
        context = client_context(features_bundle / "ca.pem")
        # Registering examples goes through the labels party over https with the pinned CA.
        with LabelsPartyClient(https_server, token=TOKENS.operator, ca_file=ca) as operator:
            operator.create_dataset(
                "tls_ds", label_min=0.0, label_max=1.0, default_label=0.0, epsilon_budget=1.0
            )
        upload = httpx.post(
            f"{url}/v1/datasets/tls_ds/features",
            content="example_id,x\na,1\nb,2\n",
            headers={**auth, "Content-Type": "text/csv"},
            verify=context,
        )
        assert upload.status_code == 200, upload.text
        synced = httpx.post(f"{url}/v1/datasets/tls_ds/examples/sync", headers=auth, verify=context)
        assert synced.status_code == 200, synced.text
        assert synced.json()["registered"] == 2
    finally:
        stop(process)


def test_the_pinned_ca_verifies_the_server(https_server: str, bundle: Path) -> None:
    with LabelsPartyClient(
        https_server, token=TOKENS.operator, ca_file=bundle / "ca.pem", retry=NO_RETRY
    ) as client:
        assert client.healthz()["status"] == "ok"
        assert isinstance(client.ledger()["entries"], list)


def test_without_the_ca_verification_fails(https_server: str, bundle: Path) -> None:
    with LabelsPartyClient(https_server, token=TOKENS.operator, retry=NO_RETRY) as client:
        with pytest.raises(ServiceUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            client.healthz()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{https_server}/healthz", verify=ssl.create_default_context())
    # Another CA's certificate does not help either.
    other = write_bundle(bundle.parent / "other", ["labels"])
    with LabelsPartyClient(https_server, ca_file=other / "ca.pem", retry=NO_RETRY) as client:
        with pytest.raises(ServiceUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            client.healthz()
    # Plain http to the TLS port is not served.
    with pytest.raises(httpx.HTTPError):
        httpx.get(https_server.replace("https://", "http://") + "/healthz", timeout=5)


def test_the_features_party_uses_its_labels_ca(
    https_server: str, bundle: Path, tmp_path: Path
) -> None:
    settings = FeaturesSettings(
        db_path=tmp_path / "f.db",
        labels_url=https_server,
        labels_token=TOKENS.publisher,
        labels_ca_file=bundle / "ca.pem",
        pull_retry=NO_RETRY,
    )
    with labels_client(settings) as client:
        assert client.healthz()["status"] == "ok"


def test_bundle_files_and_modes(bundle: Path) -> None:
    assert bundle.stat().st_mode & 0o777 == 0o700  # the folder it created holds private keys
    assert (bundle / "labels-key.pem").stat().st_mode & 0o777 == 0o600
    assert (bundle / "ca.pem").stat().st_mode & 0o777 == 0o644
    assert not any("ca-key" in path.name for path in bundle.iterdir())  # the CA key is not kept
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((bundle / "labels.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "labels" in names.get_values_for_type(x509.DNSName)
    # --if-missing keeps an existing bundle.
    before = (bundle / "ca.pem").read_bytes()
    write_bundle(bundle, ["labels"], if_missing=True)
    assert (bundle / "ca.pem").read_bytes() == before


@pytest.mark.parametrize(
    "damage", ["empty ca.pem", "no key", "key not PEM", "no ca.pem", "another name"]
)
def test_if_missing_writes_an_unusable_bundle_anew(tmp_path: Path, damage: str) -> None:
    """An empty ca.pem (what a kill left before files were written whole) was kept by
    --if-missing, the compose one-shot, and TLS stayed down until someone deleted it."""
    folder = write_bundle(tmp_path / "tls", ["labels", "features"])
    before = (folder / "ca.pem").read_bytes()
    names = ["labels", "features"]
    if damage == "empty ca.pem":
        (folder / "ca.pem").write_bytes(b"")
    elif damage == "no key":
        (folder / "features-key.pem").unlink()
    elif damage == "key not PEM":
        (folder / "labels-key.pem").write_text("junk\n")
    elif damage == "no ca.pem":
        (folder / "ca.pem").unlink()
    else:
        names = ["labels", "spark"]  # a bundle asked for a name it lacks
    write_bundle(folder, names, if_missing=True)
    after = (folder / "ca.pem").read_bytes()
    assert after and after != before
    for name in names:
        check_server_files(folder / f"{name}.pem", folder / f"{name}-key.pem")
    check_ca_file(folder / "ca.pem", option="ca.pem")


@pytest.mark.parametrize("service", ["labels", "features"])
def test_unusable_tls_files_stop_the_start_naming_them(
    service: str, bundle: Path, tmp_path: Path
) -> None:
    """Found by the CLI audit: a missing or non-PEM --tls-cert/--tls-key was a traceback at
    uvicorn's start, and a missing --labels-ca-file let the features party start, every call
    needing the labels party then a 500. Each is now one line naming the option, exit 2."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not PEM\n")
    missing = tmp_path / "missing.pem"
    base = ["serve", service, "--db", str(tmp_path / f"{service}.db"), "--port", "0"]
    if service == "features":
        base += ["--labels-url", "https://127.0.0.1:9", "--token", "t" * 16]
    env = {**os.environ, "LABELDP_TOKENS": TOKENS_ENV}
    cases = [
        (["--tls-cert", str(missing), "--tls-key", str(missing)], "--tls-cert", "No such file"),
        (["--tls-cert", str(junk), "--tls-key", str(junk)], "--tls-cert", "not a PEM"),
        (["--tls-cert", str(bundle / "labels.pem"), "--tls-key", str(junk)], "--tls-cert", "PEM"),
    ]
    if service == "features":
        cases += [
            (["--labels-ca-file", str(missing)], "--labels-ca-file", "No such file"),
            (["--labels-ca-file", str(junk)], "--labels-ca-file", "not a readable PEM"),
        ]
    for extra, option, words in cases:
        done = subprocess.run(
            [sys.executable, "-m", "labeldp", *base, *extra], capture_output=True, text=True,
            timeout=120, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"labeldp serve {service}: {option}") and words in last, last
        assert "Traceback" not in done.stderr


def test_tls_settings_go_together(tmp_path: Path) -> None:
    from labels_party.config import Settings
    from shared.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="tls_cert and tls_key"):
        Settings(database_url="sqlite:///x.db", tokens=TOKENS, tls_cert=tmp_path / "c.pem")
    with pytest.raises(InvalidParameterError, match="tls_cert and tls_key"):
        FeaturesSettings(
            db_path=tmp_path / "f.db", labels_url="https://x", labels_token="t", tls_key=tmp_path
        )
