"""Retrying a call to the Hugging Face Hub through its transient faults.

Under load the Hub answers 429 (with ``Retry-After``) or 5xx, and connections drop or time out;
``huggingface_hub`` retries some of its calls but lets others fail at once (a 429 on the
repository's info ends ``snapshot_download``). :func:`with_hub_retries` calls again after a bounded
exponential wait, or the ``Retry-After`` the Hub asked for. A file cut short is fetched again
by ``huggingface_hub`` itself: from where it stopped once a write chunk (10 MB) of it is in the
``.incomplete`` part, from its start before that. Anything else (a gated or missing repository, a
missing revision) is raised at once, for the caller to explain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger("condensation")

__all__ = ["DownloadMismatch", "HubRetries", "transient_fault", "with_hub_retries"]

T = TypeVar("T")

TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)
"""HTTP statuses worth another try: a timeout, the rate limit, the server's own faults."""
TRANSIENT_ERRORS = ("TransportError", "TimeoutException", "ConnectionError", "Timeout", "ChunkedEncodingError",
                    "IncompleteRead", "ProtocolError", "DownloadMismatch")
"""Class names (anywhere in an exception's MRO) of dropped or slow connections in httpx, requests
and urllib3: named, not imported, so that the library's version decides nothing."""
SIZE_MISMATCH = "Consistency check failed"
"""How ``huggingface_hub`` begins the ``OSError`` of a file whose size is not the Hub's: cut short."""
OFFLINE_ERRORS = ("OfflineModeIsEnabled",)
"""``HF_HUB_OFFLINE=1`` refusing the network: a ``ConnectionError`` that no wait cures."""


class DownloadMismatch(OSError):
    """A downloaded file whose checksum is not the one the Hub gave: removed, and fetched again."""


@dataclass(frozen=True)
class HubRetries:
    """How often and how long to wait.

    attempts: calls in all before the last fault is raised.
    first_wait_s: the wait after the first fault without ``Retry-After``; it doubles each time.
    max_wait_s: no wait is longer, a ``Retry-After`` included (a Hub asking for an hour would
        otherwise hold a job that long; the scheduler's retry comes later anyway).
    """

    attempts: int = 6
    first_wait_s: float = 2.0
    max_wait_s: float = 120.0


def transient_fault(error: BaseException) -> tuple[str, float | None] | None:
    """``(what, Retry-After seconds or None)`` when ``error`` or what caused it is a transient
    fault of the Hub or the connection; None for any other error (offline mode included)."""
    chain: list[BaseException] = []
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    if any(type(link).__name__ in OFFLINE_ERRORS for link in chain):
        return None
    for link in chain:
        response = getattr(link, "response", None)
        status = getattr(response, "status_code", None)
        if status in TRANSIENT_STATUS:
            return f"HTTP {status}", _retry_after(response)
        if {cls.__name__ for cls in type(link).__mro__} & set(TRANSIENT_ERRORS) or (
                isinstance(link, OSError) and str(link).startswith(SIZE_MISMATCH)):
            return f"{type(link).__name__}: {link}", None
    return None


def _retry_after(response: object) -> float | None:
    value = (getattr(response, "headers", None) or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: waited for as any other fault
        return None


def with_hub_retries(call: Callable[[], T], what: str, retries: HubRetries | None = None) -> T:
    """``call()``, called again after each transient fault (:func:`transient_fault`) until
    ``retries.attempts`` calls; the last fault, or any other error, is raised."""
    retries = retries or HubRetries()
    for attempt in range(1, retries.attempts + 1):
        try:
            return call()
        except Exception as error:
            fault = transient_fault(error)
            if fault is None or attempt == retries.attempts:
                raise
            reason, retry_after = fault
            wait = min(retries.max_wait_s,
                       retry_after if retry_after is not None else retries.first_wait_s * 2 ** (attempt - 1))
            log.warning("%s: %s (attempt %d of %d); trying again in %.0f s", what, reason, attempt,
                        retries.attempts, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises
