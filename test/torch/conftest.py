"""pytest configuration of the torch tests: the `quick` marker picks the cases of scripts/test --quick, `frameworks`
the training runs through other frameworks (CTest torch_backend_frameworks). --load-runs N repeats the cases that
take a `load_run` argument (the fault-tolerance scenarios run beside busy loops) N times: once in CI, 20 times in
scripts/study/ft-under-load."""


def pytest_addoption(parser):
    parser.addoption("--load-runs", type=int, default=1,
                     help="runs of each case taking `load_run` (the fault-tolerance scenarios under load)")


def pytest_generate_tests(metafunc):
    if "load_run" in metafunc.fixturenames:
        metafunc.parametrize("load_run", range(metafunc.config.getoption("load_runs")))


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: one case of each kind, for scripts/test --quick (CTest label quick)")
    config.addinivalue_line("markers", "frameworks: training through PyTorch Lightning and DeepSpeed (CTest "
                                       "torch_backend_frameworks)")
