"""pytest configuration of the torch tests: the `quick` marker picks the cases of scripts/test --quick, `frameworks`
the training runs through other frameworks (CTest torch_backend_frameworks)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: one case of each kind, for scripts/test --quick (CTest label quick)")
    config.addinivalue_line("markers", "frameworks: training through PyTorch Lightning and DeepSpeed (CTest "
                                       "torch_backend_frameworks)")
