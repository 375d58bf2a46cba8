"""Fault tests on "hosts": Sluice processes whose links to PostgreSQL and the broker the
test cuts, holds, slows and makes lossy (`proxy`, `hosts`), checked by `checker`."""
