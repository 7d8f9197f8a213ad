"""Run secrets at rest: encrypted with a key made per experiment run (Fernet: AES-128-CBC with HMAC-SHA256).

The producer encrypts when it enqueues; the service decrypts for every request
that hands a run out, so the cost and the exposure of a payload are real.
The key reaches the service process through its environment, never its
command line.
"""

from __future__ import annotations

import json

from cryptography.fernet import Fernet, InvalidToken

KEY_ENVIRONMENT = "CLAIMRACE_SECRETS_KEY"


def new_key() -> bytes:
    return Fernet.generate_key()


def encrypt(key: bytes, secrets: dict) -> bytes:
    return Fernet(key).encrypt(json.dumps(secrets, separators=(",", ":")).encode())


def decrypt(key: bytes, token: bytes) -> dict:
    try:
        return json.loads(Fernet(key).decrypt(bytes(token)))
    except InvalidToken:
        raise ValueError("a run's secrets do not decrypt with this service's key") from None
