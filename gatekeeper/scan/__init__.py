"""Secret scanners: an interface, one module per scanner, redaction and report formats apart."""

from gatekeeper.scan.interface import (
    Finding,
    ScanItem,
    Scanner,
    ScannerInfo,
    ScannerUnavailable,
    fingerprint,
)

__all__ = [
    "Finding",
    "ScanItem",
    "Scanner",
    "ScannerInfo",
    "ScannerUnavailable",
    "fingerprint",
]
