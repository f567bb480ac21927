"""AsyncClient: every call of the daemon as a coroutine (aio.py says how
the asyncio side is used; _api.py holds the calls both clients share)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

import grpc

from . import errors, types
from ._api import Api, subscribe_request
from ._retry import Attempts
from .client import CHANNEL_OPTIONS
from .config import Config
from .v1 import delayd_pb2_grpc as pb_grpc


class AsyncClient(Api):
    def __init__(self, config: Optional[Config] = None, **overrides) -> None:
        self.config = config if config is not None else \
            Config.from_env(**overrides)
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, pb_grpc.DelaydStub] = {}  # one per channel
        self._at = 0
        self._token = self.config.bearer()

    def _stub(self, i: int) -> pb_grpc.DelaydStub:
        stub = self._stubs.get(i)
        if stub is None:
            endpoint = self.config.endpoints[i]
            creds = self.config.credentials()
            channel = grpc.aio.secure_channel(endpoint, creds, CHANNEL_OPTIONS) \
                if creds is not None else \
                grpc.aio.insecure_channel(endpoint, CHANNEL_OPTIONS)
            self._channels[i] = channel
            stub = self._stubs[i] = pb_grpc.DelaydStub(channel)
        return stub

    def _endpoint(self) -> int:
        return self._at

    def _rotate(self, failed: int) -> None:
        if self._at == failed:
            self._at = (failed + 1) % len(self.config.endpoints)

    def metadata(self):
        return (("authorization", f"Bearer {self._token}"),) \
            if self._token else ()

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._stubs = {}
        for channel in channels.values():
            await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _invoke(self, rpc, request, kind, parse,
                      not_found_after_loss=None):
        attempts = Attempts(self.config.retry, kind)
        reread = False
        while True:
            i = self._endpoint()
            try:
                response = await getattr(self._stub(i), rpc)(
                    request, timeout=self.config.timeout,
                    metadata=self.metadata())
                return parse(response)
            except grpc.RpcError as rpc_error:
                err = errors.from_rpc_error(rpc_error)
            if err.code == "UNAUTHENTICATED" and not reread:
                reread = True
                fresh = self.config.bearer()
                if self.config.token_file and fresh != self._token:
                    self._token = fresh
                    continue
            if (err.code == "NOT_FOUND" and attempts.lost and
                    not_found_after_loss is not None):
                return not_found_after_loss[0]
            wait = attempts.failed(err)
            self._rotate(i)
            await asyncio.sleep(wait)

    async def _pages(self, page) -> AsyncIterator:
        token = ""
        while True:
            items, token = await page(token)
            for item in items:
                yield item
            if not token:
                return

    def list_timers(self, *, namespace: Optional[str] = None,
                    prefix: str = "", page_size: int = 100,
                    payloads: bool = True) -> AsyncIterator[types.Timer]:
        return self._pages(lambda token: self._list_timers_page(
            namespace, prefix, page_size, token, payloads))

    def dead_letters(self, *, namespace: Optional[str] = None,
                     page_size: int = 100) -> AsyncIterator[types.Record]:
        return self._pages(lambda token: self._dead_letters_page(
            namespace, page_size, token))

    def list_schedules(self, *, namespace: Optional[str] = None,
                       prefix: str = "",
                       page_size: int = 100) -> AsyncIterator[types.Record]:
        return self._pages(lambda token: self._schedules_page(
            namespace, prefix, page_size, token))

    async def subscribe(self, *, namespace: Optional[str] = None,
                        watcher: bool = False, max_in_flight: int = 0,
                        keep_leases: bool = False,
                        ack_timeout=None, on_registered=None
                        ) -> AsyncIterator[types.Event]:
        """A raw stream of events (one endpoint, no reconnection), as an
        async iterator; cancel the task reading it to end it."""
        req = subscribe_request(namespace, watcher, max_in_flight,
                                keep_leases, ack_timeout)
        call = self._stub(self._endpoint()).Subscribe(
            req, metadata=self.metadata())
        try:
            async for msg in call:
                if on_registered is not None:
                    on_registered()
                    on_registered = None
                for e in msg.events:
                    yield types.Event.from_pb(e)
        except grpc.RpcError as rpc_error:
            if rpc_error.code() != grpc.StatusCode.CANCELLED:
                raise errors.from_rpc_error(rpc_error) from None
        finally:
            call.cancel()
