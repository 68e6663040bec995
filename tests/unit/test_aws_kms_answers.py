"""How the AWS KMS provider reads KMS's answers, against botocore's Stubber (KMS's own error codes and messages).

The answers moto's server does not give (tests/integration/test_aws_kms.py runs the rest against
it): a disabled key, a key pending deletion, throttling, refused credentials.
"""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from pipeline.core.events import CaseRef
from pipeline.keys.aws_kms import AwsKmsProvider
from pipeline.keys.providers import KeyDestroyedError, KeyRevokedError, KeyServiceUnavailableError, WrappedKey

CASE = CaseRef("bank-a", "c-1")
WRAPPED = WrappedKey("v1", b"\x01" * 64)


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _answered(code: str, message: str) -> Exception:
    provider = AwsKmsProvider(region="eu-west-1", alias_prefix="dpm/test")
    with Stubber(provider._kms) as stub:
        stub.add_client_error("decrypt", service_error_code=code, service_message=message, http_status_code=400)
        with pytest.raises(Exception) as raised:
            provider.unwrap(CASE, WRAPPED)
    return raised.value


def test_a_disabled_key_is_revoked_not_destroyed() -> None:
    error = _answered("DisabledException", "arn:aws:kms:eu-west-1:111122223333:key/x is disabled.")
    assert isinstance(error, KeyRevokedError)
    assert "enable the key again" in str(error)


def test_a_key_pending_deletion_is_destroyed() -> None:
    error = _answered("KMSInvalidStateException", "arn:aws:kms:eu-west-1:111122223333:key/x is pending deletion.")
    assert isinstance(error, KeyDestroyedError)


def test_a_key_in_another_state_is_revoked() -> None:
    error = _answered("KMSInvalidStateException", "arn:aws:kms:eu-west-1:111122223333:key/x is pending import.")
    assert isinstance(error, KeyRevokedError)


@pytest.mark.parametrize("code", ["ThrottlingException", "KMSInternalException", "DependencyTimeoutException"])
def test_a_service_that_cannot_answer_now_is_unavailable(code: str) -> None:
    error = _answered(code, "try again")
    assert isinstance(error, KeyServiceUnavailableError)
    assert "asked again later" in str(error)


@pytest.mark.parametrize("code", ["AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"])
def test_refused_credentials_name_the_provider_and_what_to_check(code: str) -> None:
    error = _answered(code, "no")
    assert isinstance(error, KeyServiceUnavailableError)
    assert "AWS KMS (eu-west-1) refused unwrapping a data key" in str(error)
    assert "kms:Decrypt" in str(error)


def test_a_ciphertext_of_another_key_is_not_this_cases_key() -> None:
    error = _answered("IncorrectKeyException", "The key ID in the request does not identify a CMK that can do this.")
    assert isinstance(error, KeyDestroyedError)


def test_a_disabled_current_version_refuses_a_new_case_s_key_as_revoked_not_unavailable() -> None:
    """Wrapping asks the current version twice (it may have been rotated meanwhile); disabled both times: revoked."""
    provider = AwsKmsProvider(region="eu-west-1", alias_prefix="dpm/test")
    aliases = {"Aliases": [{"AliasName": provider._alias(CASE.tenant, "v1")}]}
    disabled = "arn:aws:kms:eu-west-1:111122223333:key/x is disabled."
    with Stubber(provider._kms) as stub:
        for _ in range(2):
            stub.add_response("list_aliases", aliases)
            stub.add_client_error("encrypt", service_error_code="DisabledException", service_message=disabled,
                                  http_status_code=400)  # fmt: skip
        with pytest.raises(KeyRevokedError, match="enable the key again"):
            provider.wrap(CASE, b"k" * 32)
