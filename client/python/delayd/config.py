"""Where the daemon is and how to reach it: the same environment variables
delayctl reads, meaning the same thing.

=========================  ===================================================
DELAYD_ENDPOINT            host:port, or several separated by commas (the
                           nodes of a cluster; calls rotate through them when
                           one cannot answer). Default 127.0.0.1:7070.
DELAYD_TOKEN               a bearer token sent with every call
DELAYD_TOKEN_FILE          a file holding the token (first line); read again
                           when the daemon answers UNAUTHENTICATED
DELAYD_TLS                 "1"/"true": TLS, the server checked against the
                           system's CAs
DELAYD_TLS_CA              a PEM file of CAs to check the server against
                           (implies TLS)
DELAYD_TLS_CLIENT_CERT     a client certificate (PEM) for mutual TLS, with
DELAYD_TLS_CLIENT_KEY      its private key
=========================  ===================================================
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Optional, Sequence


@dataclasses.dataclass
class Retry:
    """How calls are retried (see the README, "Retries").

    A retried call waits ``initial_backoff`` seconds, then each wait grows
    by ``multiplier`` up to ``max_backoff``, each cut at random to between
    half and all of itself (jitter); at most ``attempts`` tries in all.
    """

    attempts: int = 6
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0


@dataclasses.dataclass
class Config:
    endpoints: Sequence[str] = ("127.0.0.1:7070",)
    token: Optional[str] = None
    token_file: Optional[str] = None
    tls: bool = False
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    # Seconds each attempt of a unary call may take.
    timeout: float = 10.0
    retry: Retry = dataclasses.field(default_factory=Retry)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None,
                 **overrides) -> "Config":
        """The configuration the DELAYD_* variables give, with `overrides`
        (any field of Config) on top."""
        env = os.environ if env is None else env
        c = cls()
        if env.get("DELAYD_ENDPOINT"):
            c.endpoints = [e.strip() for e in env["DELAYD_ENDPOINT"].split(",")
                           if e.strip()]
        c.token = env.get("DELAYD_TOKEN") or None
        c.token_file = env.get("DELAYD_TOKEN_FILE") or None
        c.tls = env.get("DELAYD_TLS", "").lower() in ("1", "true", "yes")
        c.tls_ca = env.get("DELAYD_TLS_CA") or None
        c.tls_cert = env.get("DELAYD_TLS_CLIENT_CERT") or None
        c.tls_key = env.get("DELAYD_TLS_CLIENT_KEY") or None
        for name, value in overrides.items():
            if not hasattr(c, name):
                raise TypeError(f"Config has no field {name!r}")
            setattr(c, name, value)
        if isinstance(c.endpoints, str):
            c.endpoints = [e.strip() for e in c.endpoints.split(",")]
        if not c.endpoints:
            raise ValueError("no endpoint")
        return c

    @property
    def secure(self) -> bool:
        return bool(self.tls or self.tls_ca or self.tls_cert)

    def bearer(self) -> Optional[str]:
        """The token to send: DELAYD_TOKEN's, else the file's first line."""
        if self.token:
            return self.token
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as f:
                return f.readline().strip() or None
        return None

    def credentials(self):
        """gRPC channel credentials for TLS (None: plaintext)."""
        import grpc
        if not self.secure:
            return None

        def read(path):
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.tls_ca),
            private_key=read(self.tls_key),
            certificate_chain=read(self.tls_cert))
