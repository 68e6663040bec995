"""The AWS KMS provider against moto's KMS server (a separate process speaking the KMS API), with the real boto3.

moto is a test server: it answers as KMS does for the calls made here, encryption contexts
included, but it does not refuse a disabled key or one pending deletion (KMS does): those answers,
and the provider's reading of them, are tested against botocore's Stubber in
tests/unit/test_aws_kms_answers.py. docs/concepts/erasure.md says what neither can show.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3.session
import pytest

from pipeline.core.events import CaseRef
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.keys.aws_kms import AwsKmsProvider
from pipeline.keys.providers import KeyDestroyedError, KeyServiceUnavailableError
from tests.key_provider_contract import rotation_rewraps_and_erasure_after_it_opens_nothing, sealed_here_opens_there
from tests.kms_support import REGION, aws_credentials, moto_server

pytestmark = pytest.mark.integration
SECRET = b"k" * 32


@pytest.fixture(scope="module", autouse=True)
def credentials() -> Iterator[None]:
    with aws_credentials():
        yield


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as port:
        yield f"http://127.0.0.1:{port}"


def _provider(endpoint: str, prefix: str, timeout_s: float = 5.0) -> AwsKmsProvider:
    return AwsKmsProvider(region=REGION, alias_prefix=f"dpm/{prefix}", endpoint=endpoint, timeout_s=timeout_s)


def test_a_data_key_wraps_under_the_tenants_kms_key_and_opens_for_its_own_case_only(endpoint: str) -> None:
    provider = _provider(endpoint, "bound")
    case = CaseRef("bank-a", "c-1")
    wrapped = provider.wrap(case, SECRET)
    assert wrapped.kek_id == "v1"
    assert SECRET not in wrapped.blob
    assert provider.unwrap(case, wrapped) == SECRET
    assert provider.versions("bank-a") == ["v1"]
    with pytest.raises(KeyDestroyedError, match="not this case's"):  # the encryption context names the case
        provider.unwrap(CaseRef("bank-a", "c-2"), wrapped)
    with pytest.raises(KeyDestroyedError):  # nor another tenant's: its key is another KMS key
        provider.unwrap(CaseRef("bank-b", "c-1"), wrapped)


def test_rotation_makes_a_new_version_current_and_old_ones_unwrap_until_retired(endpoint: str) -> None:
    provider = _provider(endpoint, "rotation")
    case = CaseRef("bank-a", "c-1")
    old = provider.wrap(case, SECRET)
    assert provider.rotate("bank-a") == "v2"
    assert provider.wrap(case, SECRET).kek_id == "v2"
    assert provider.unwrap(case, old) == SECRET
    provider.retire("bank-a", "v1")
    assert provider.versions("bank-a") == ["v2"]
    assert _state(endpoint, old.blob) == "PendingDeletion"  # KMS refuses it from now on (moto does not: see above)
    provider.retire("bank-a", "v1")  # a retirement run again does nothing more


def _state(endpoint: str, blob: bytes) -> str:
    """The state of the KMS key a ciphertext names, as KMS keeps it."""
    kms = boto3.session.Session().client("kms", region_name=REGION, endpoint_url=endpoint)
    for key in kms.list_keys()["Keys"]:
        try:
            kms.decrypt(CiphertextBlob=blob, KeyId=key["KeyId"], EncryptionContext={"dpm:tenant": "bank-a",
                                                                                    "dpm:case": "c-1"})  # fmt: skip
        except kms.exceptions.ClientError:
            continue
        return str(kms.describe_key(KeyId=key["KeyId"])["KeyMetadata"]["KeyState"])
    raise AssertionError("no key opens the ciphertext")


def test_a_destroyed_tenant_unwraps_nothing_again(endpoint: str) -> None:
    provider = _provider(endpoint, "destroyed")
    case = CaseRef("bank-a", "c-1")
    wrapped = provider.wrap(case, SECRET)
    provider.rotate("bank-a")
    assert provider.destroy("bank-a") == 2
    assert provider.versions("bank-a") == []
    assert _state(endpoint, wrapped.blob) == "PendingDeletion"  # every version disabled, deletion scheduled


def test_a_key_service_that_is_away_is_unavailable_not_an_erasure() -> None:
    port = free_cluster_port(1)  # nothing listens there
    provider = _provider(f"http://127.0.0.1:{port}", "away", timeout_s=1.0)
    with pytest.raises(KeyServiceUnavailableError, match="cannot be reached"):
        provider.wrap(CaseRef("bank-a", "c-1"), SECRET)


def test_a_process_without_aws_credentials_is_told_what_to_set(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    provider = _provider(endpoint, "nocreds", timeout_s=1.0)
    with pytest.raises(KeyServiceUnavailableError, match="no AWS credentials found"):
        provider.wrap(CaseRef("bank-a", "c-1"), SECRET)


def test_case_keys_seal_and_open_through_kms_and_two_processes_share_a_tenants_key(endpoint: str) -> None:
    """The pipeline's key ring over KMS: a case's key made by one process opens in another (a fresh provider)."""
    sealed_here_opens_there(lambda: _provider(endpoint, "ring"))


def test_a_rotation_rewraps_every_case_key_in_kms_and_an_erasure_after_it_opens_nothing(endpoint: str) -> None:
    rotation_rewraps_and_erasure_after_it_opens_nothing(lambda: _provider(endpoint, "rotate"))
