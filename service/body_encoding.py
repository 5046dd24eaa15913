"""Request bodies are JSON in UTF-8: a body in any other encoding is a 400 naming ``body``.

FastAPI parses a JSON body with ``json.loads(bytes)``, and Python's decoder detects UTF-16 and
UTF-32 from the bytes (a byte-order mark, or the NUL bytes their ASCII characters carry) and decodes
them. So a UTF-16 or UTF-32 body was accepted, or, when its text carried a byte-order mark of its own
too (what some Windows tools write), refused as malformed JSON (422 "JSON decode error"), where
docs/api.md says a body that is not UTF-8 is a 400 (``field: body``); bytes that decode as nothing
were a 400 from FastAPI's own handler, worded otherwise. ``check_utf8`` gives all of them the one
answer, from the problem table (``BodyEncodingError``). A UTF-8 byte-order mark is still UTF-8 and
is accepted, as before (RFC 8259 lets a parser ignore it).

A body is read as sent: the service decodes no content coding, so one sent with ``Content-Encoding``
other than ``identity`` is refused unread, 415 (``ContentCodingError``, ``check_coding``). A gzipped
body had been refused as "not UTF-8" (400, the wrong cause), and a plain one labelled ``br`` was read
and stored as if it were not labelled at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from service.problems.table import BodyEncodingError, ContentCodingError, is_json

UTF8 = ("utf-8", "utf-8-sig")  # what ``json.detect_encoding`` names UTF-8 (with its BOM or without)
# Byte-order marks by which json.loads reads a body as UTF-32 or UTF-16 (the longer ones first).
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # the methods a route of the service reads a body of


class Utf8BodyRoute(APIRoute):
    """A route whose JSON body is checked to be UTF-8 (``check_request_body``) before FastAPI reads
    it: the service's routes (``service.auth.scopes.AuthFirstRoute`` extends it) and the sidecar's
    pull API."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, preceded by the body's encoding check where it reads a body."""
        handler = super().get_route_handler()
        if self.body_field is None:  # a route without one ignores what is sent
            return handler

        async def checked(request: Request) -> Response:
            await check_request_body(request)
            return await handler(request)

        return checked


async def check_request_body(request: Request) -> None:
    """``check_utf8`` on the request's body where FastAPI may parse it as JSON: a method that carries
    one, sent as JSON or without a type (a GET's long poll is not made to read a body it has none
    of). The body read here is the one the route reads (Starlette keeps it)."""
    if request.method in BODY_METHODS:
        check_coding(request.headers.get("content-encoding", ""))
    content_type = request.headers.get("content-type")
    if request.method not in BODY_METHODS or (content_type and not is_json(content_type)):
        return
    try:
        body = await request.body()
    except ClientDisconnect:  # gone, or cut off at the size limit: the route meets it as before
        return
    check_utf8(body)


def check_coding(header: str) -> None:
    """``ContentCodingError`` unless the ``Content-Encoding`` header names no coding but
    ``identity`` (the codings are listed in the order applied, comma-separated; RFC 9110, 8.4)."""
    codings = [coding.strip() for coding in header.split(",") if coding.strip()]
    for coding in codings:
        if coding.lower() != "identity":
            raise ContentCodingError(
                f"Content-Encoding: {header.strip()} is not read: a body is read as sent, no content "
                "coding decoded; send the JSON body uncompressed",
                field="Content-Encoding",
                value=header.strip(),
            )


def check_utf8(body: bytes) -> None:
    """``BodyEncodingError`` unless ``body`` is UTF-8 (empty is: FastAPI reads no JSON from it)."""
    if not body:
        return
    detected = json.detect_encoding(body)  # what json.loads would decode it as
    if detected not in UTF8:
        raise BodyEncodingError(f"the body is {_named(body, detected)}, not UTF-8", field="body")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BodyEncodingError(
            f"the body is not UTF-8: byte 0x{body[error.start]:02x} at offset {error.start}, {error.reason}",
            field="body",
        ) from None


def _named(body: bytes, detected: str) -> str:
    """The encoding ``body`` is in, in words: its byte-order mark's, else what its NULs say."""
    for mark, name in _BOMS:
        if body.startswith(mark):
            return f"{name} (it starts with a {name} byte-order mark, {mark.hex(' ').upper()})"
    return f"{detected.upper()} (by the NUL bytes of its first characters)"
