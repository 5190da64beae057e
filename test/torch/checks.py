"""What the test workers share: the check that a call fails with an error naming the problem."""


def expect_error(failures, what, fn, *fragments, errors=(RuntimeError,)):
    """fn() must raise one of `errors` whose message contains every fragment; otherwise a line goes to `failures`."""
    try:
        fn()
    except errors as e:
        missing = [f for f in fragments if f not in str(e)]
        if missing:
            failures.append(f"{what}: message {str(e)!r} lacks {missing}")
        return
    failures.append(f"{what}: no error raised")
