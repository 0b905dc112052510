"""Trusted toolchains: dependencies built outside the sandbox from the trusted base's
lockfile, kept outside `$OMS_HOME` and every repository, digest-verified before use and
bound read-only into the checks that name them."""
