"""Secrets to plant: an AWS key id, a GitHub token and an RSA private key from one seed
(bench/corpus.py's generators), shared by the scanner tests and the scan-cache tests."""

from __future__ import annotations

import random

import corpus


class PlantedSecrets:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.aws = corpus.aws_access_key_id(rng)
        self.github = corpus.github_pat(rng)
        self.pem = corpus.private_key(rng, "RSA")

    def secrets(self) -> list[str]:
        """Every secret string, and each line of the key long enough to mean something."""
        return [self.aws, self.github, self.pem, *[x for x in self.pem.split("\n") if len(x) > 20]]
