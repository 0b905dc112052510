"""The payload blob of a manifest that can be approved: every item's bytes, in item order,
stored as one blob on worker threads while the manifest is built and signed.

The blob is put exactly as `BlobStore.put` puts any blob (named by its own SHA-256,
written atomically, durable before the put returns); only the waiting moves off the
preview's path. The manifest names the blob, so its digest is taken at once, beside the
put; `stored()` waits for the put and comes before any record that names the blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from evidence import StoreUnavailable
from evidence.blobs import BlobStore


class PayloadPut:
    """One payload being stored (use as a context manager: leaving it waits for the put)."""

    def __init__(self, blobs: BlobStore, parts: Sequence[bytes]) -> None:
        # Joining, hashing and writing 100 MB all let go of the GIL: on a second core they
        # overlap the manifest's canonical JSON and signature, which hold it.
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="oms-transfer-payload")
        pack = self._pool.submit(b"".join, parts)
        self._digest = self._pool.submit(lambda: hashlib.sha256(pack.result()).hexdigest())
        self._put = self._pool.submit(lambda: blobs.put(pack.result()))

    def __enter__(self) -> PayloadPut:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._pool.shutdown(wait=True)

    def digest(self) -> str:
        """The hex SHA-256 of the payload, as the manifest names it."""
        return self._digest.result()

    def stored(self) -> str:
        """The digest, once the blob is stored and durable under exactly that name."""
        digest, put = self.digest(), self._put.result()
        if put != digest:
            raise StoreUnavailable(f"the payload was stored as {put}, not as {digest}")
        return digest
