"""The Debian archive tests provision into homes of their own: each test gets the suite's
empty per-test home (tests/conftest.py), not the shared, provisioned one that
tests/integration/vm/conftest.py gives the VM tests (which would download the assets
before tests that fetch them themselves)."""

from tests.conftest import roteiro_home  # noqa: F401  (overrides the VM tests' fixture of that name)
