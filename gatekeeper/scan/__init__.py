"""Secret scanners: an interface, one module per scanner, report formats apart."""

from gatekeeper.scan.interface import (
    Finding,
    ScanItem,
    Scanner,
    ScannerInfo,
    ScannerUnavailable,
    fingerprint,
    redact_lines,
)

__all__ = [
    "Finding",
    "ScanItem",
    "Scanner",
    "ScannerInfo",
    "ScannerUnavailable",
    "fingerprint",
    "redact_lines",
]
