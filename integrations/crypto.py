"""Sealing vault secrets: credentials, OAuth tokens, PKCE verifiers and OAuth client secrets.

Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under the keys in ATRIUM_VAULT_KEYS: the
first seals, every one unseals, so a key is rotated by putting a new one first, running
`manage.py vault_rotate` (which reseals every row under it) and then dropping the old one.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from core.errors import DomainError


class SealBroken(DomainError):
    code = "vault_key_mismatch"
    http_status = 500


@functools.cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def _current() -> MultiFernet:
    return _fernet(tuple(settings.ATRIUM_VAULT_KEYS))


def new_key() -> str:
    return Fernet.generate_key().decode()


def valid_key(key: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(key.encode())) == 32
    except ValueError:
        return False


def seal(value: Any) -> str:
    """A JSON value as a Fernet token ("" for None)."""
    if value is None:
        return ""
    return _current().encrypt(json.dumps(value, separators=(",", ":")).encode()).decode()


def unseal(token: str) -> Any:
    if not token:
        return None
    try:
        return json.loads(_current().decrypt(token.encode()))
    except InvalidToken:
        raise SealBroken("A stored secret cannot be opened with the vault keys in ATRIUM_VAULT_KEYS: the key it "
                         "was sealed with is missing. Restore that key (it may follow the new one).") from None


def reseal(token: str) -> str:
    """The same secret sealed under the first key (unchanged when it already is)."""
    if not token:
        return token
    try:
        return _current().rotate(token.encode()).decode()
    except InvalidToken:
        raise SealBroken("A stored secret cannot be opened with the vault keys in ATRIUM_VAULT_KEYS.") from None
