"""pytest configuration of the torch tests: the `quick` marker picks the cases of scripts/test --quick."""


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: one case of each kind, for scripts/test --quick (CTest label quick)")
