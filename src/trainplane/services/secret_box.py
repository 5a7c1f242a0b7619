"""Encryption at rest of project secrets.

A value is sealed with AES-256-GCM under a key derived (HKDF-SHA256, with a
label of its own) from the server key: ``TRAINPLANE_SECRET_KEY`` when set,
otherwise the key generated once per installation and kept in
``server_secrets`` (``services.attempt_tokens.TokenKey``). The derivation keeps
the two uses apart: knowing an attempt token says nothing about this key.

The project's id and the secret's key are the associated data of each
ciphertext, so a row copied onto another project or key (by someone with
write access to the database but not the server key) fails to open instead
of handing one project's value to another project's jobs.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PURPOSE = b"trainplane project secrets v1"
# The first byte of every ciphertext: the scheme it was sealed with, so a
# later scheme can be told apart from this one.
VERSION = b"\x01"
NONCE_BYTES = 12


class SecretUnreadable(Exception):
    """A stored ciphertext does not open with this server's key."""


def _associated_data(project_id: str, key: str) -> bytes:
    return b"\x00".join((b"trainplane-secret", project_id.encode(), key.encode()))


class SecretBox:
    def __init__(self, server_key: bytes) -> None:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(
            server_key
        )
        self._aead = AESGCM(derived)

    def seal(self, project_id: str, key: str, value: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, value.encode(), _associated_data(project_id, key))
        return VERSION + nonce + sealed

    def open(self, project_id: str, key: str, ciphertext: bytes) -> str:
        if ciphertext[:1] != VERSION:
            raise SecretUnreadable("it was not sealed by this version of trainplane")
        nonce, sealed = ciphertext[1 : 1 + NONCE_BYTES], ciphertext[1 + NONCE_BYTES :]
        try:
            plain = self._aead.decrypt(nonce, sealed, _associated_data(project_id, key))
        except InvalidTag:
            raise SecretUnreadable(
                "it does not open with this server's key (was TRAINPLANE_SECRET_KEY changed?)"
            ) from None
        return plain.decode()
