"""Bearer-token authentication, as a FastAPI dependency, and the rules for starting a server.

The token comes from the environment variable ``MSROUTE_TOKEN``; requests carry it as
``Authorization: Bearer <token>``. Tokens are compared with ``hmac.compare_digest`` (time
independent of where they differ) and never written to logs or error messages. Running without a
token needs ``--no-auth`` and is allowed on a loopback address only.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException

from msroute.errors import InvalidValueError

__all__ = ["TOKEN_ENV", "BearerToken", "check_start", "is_loopback"]

TOKEN_ENV = "MSROUTE_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only the local machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_start(host: str, token: str | None, no_auth: bool) -> str | None:
    """The token to require, or None for ``--no-auth``; refuse unsafe combinations.

    Raises
    ------
    InvalidValueError
        No token and no ``--no-auth``; ``--no-auth`` on a host that is not loopback; a token
        that is blank or contains whitespace. With ``--no-auth`` a token in the environment is
        ignored.
    """
    if no_auth:
        if not is_loopback(host):
            raise InvalidValueError(
                f"--no-auth with --host {host}: an unauthenticated server may only bind a "
                "loopback address (127.0.0.1, ::1, localhost)"
            )
        return None
    if token is None or not token.strip():
        raise InvalidValueError(
            f"no token: set the environment variable {TOKEN_ENV} (clients send "
            "'Authorization: Bearer <token>'), or pass --no-auth on a loopback host"
        )
    if token != token.strip() or any(c.isspace() for c in token):
        raise InvalidValueError(f"{TOKEN_ENV} must not contain whitespace")
    return token


class BearerToken(HTTPBearer):
    """The dependency that lets a request through only with ``Authorization: Bearer <token>``.

    A subclass of FastAPI's ``HTTPBearer``, so the OpenAPI schema declares the bearer
    scheme, but one dependency without sub-dependencies (this runs on every request). With
    ``token=None`` (``--no-auth``) every request passes.
    """

    def __init__(self, token: str | None) -> None:
        super().__init__(
            auto_error=False, description=f"The token of the environment variable {TOKEN_ENV}."
        )
        self._expected = None if token is None else token.encode()

    def refusal(self, authorization: str) -> HTTPException | None:
        """The 401 for a request with this ``Authorization`` header, or None if it may pass."""
        if self._expected is None:
            return None
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credentials:
            return HTTPException(
                401,
                "Authorization: a bearer token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(credentials.strip().encode(), self._expected):
            return HTTPException(
                401,
                "Authorization: the bearer token is not valid",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return None

    async def __call__(self, request: Request) -> None:  # type: ignore[override]
        refusal = self.refusal(request.headers.get("authorization", ""))
        if refusal is not None:
            raise refusal
