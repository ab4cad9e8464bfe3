"""RFC 3161 time-stamp tokens over checkpoint notes: the request the log sends its time-stamp authority (TSA), and
the checks on the reply, shared by the log (which stores the reply) and `leroy-verify` (which checks it again).

The message is the whole signed checkpoint note, as served at /log/checkpoint (UTF-8); its imprint is SHA-256.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from rfc3161_client import (
    HashAlgorithm,
    PKIStatus,
    TimeStampRequest,
    TimestampRequestBuilder,
    TimeStampResponse,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

SHA256_OID = x509.ObjectIdentifier("2.16.840.1.101.3.4.2.1")


class TimestampError(ValueError):
    """The reply is not a granted, matching, verifiable time-stamp token for the message."""


@dataclass(frozen=True)
class Stamp:
    response: bytes  # the DER TimeStampResp
    gen_time: datetime
    tsa_subject: str  # RFC 4514 subject of the certificate that signed the token ("" if it carries none)
    chain_verified: bool  # signature and certificate chain checked against the given roots


def request_for(message: bytes) -> TimeStampRequest:
    """A SHA-256 request with a random nonce that asks for the TSA's certificate in the token."""
    builder = TimestampRequestBuilder().data(message).hash_algorithm(HashAlgorithm.SHA256)
    return builder.nonce(nonce=True).cert_request(cert_request=True).build()


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise TimestampError(f"not a PEM certificate bundle: {error}") from None


def _signer_subject(response: TimeStampResponse) -> str:
    infos = list(response.signed_data.signer_infos)
    for der in response.signed_data.certificates:
        cert = x509.load_der_x509_certificate(der)
        if len(infos) == 1 and (cert.issuer, cert.serial_number) == (infos[0].issuer, infos[0].serial_number):
            return cert.subject.rfc4514_string()
    return ""


def check(
    der: bytes,
    message: bytes,
    *,
    nonce: int | None,
    roots: list[x509.Certificate],
    tsa_certificate: x509.Certificate | None = None,
) -> Stamp:
    """Status granted, a SHA-256 imprint of `message`, the request's nonce (when known); with `roots` (self-signed
    ones are trust anchors, the rest intermediates) also the CMS signature, the chain and the timeStamping EKU."""
    try:
        response = decode_timestamp_response(der)
    except ValueError as error:
        raise TimestampError(f"not a DER TimeStampResp: {error}") from None
    if response.status != PKIStatus.GRANTED:
        said = "; ".join(response.status_string)
        raise TimestampError(f"the TSA did not grant it (PKIStatus {response.status}{': ' + said if said else ''})")
    try:
        info = response.tst_info
        imprint = info.message_imprint
        algorithm, digest, got_nonce, gen_time = imprint.hash_algorithm, imprint.message, info.nonce, info.gen_time
    except ValueError as error:
        raise TimestampError(f"the token has no readable TSTInfo: {error}") from None
    if algorithm != SHA256_OID or digest != hashlib.sha256(message).digest():
        raise TimestampError("the token's message imprint is not the SHA-256 of this checkpoint note")
    if nonce is not None and got_nonce != nonce:
        raise TimestampError("the token's nonce is not the request's (a replayed or foreign reply)")
    if roots:
        anchors = [cert for cert in roots if cert.issuer == cert.subject]
        builder = VerifierBuilder(
            roots=anchors or roots,
            intermediates=[cert for cert in roots if cert.issuer != cert.subject],
            tsa_certificate=tsa_certificate,
            nonce=nonce,
        )
        try:
            builder.build().verify_message(response, message)
        except VerificationError as error:
            raise TimestampError(f"the token does not verify against the given roots: {error}") from None
    return Stamp(response=der, gen_time=gen_time, tsa_subject=_signer_subject(response), chain_verified=bool(roots))
