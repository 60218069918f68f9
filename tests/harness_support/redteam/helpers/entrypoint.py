# Helpers of the effects that replace the function under test (the fixture's entry point,
# calc.add) in place (its code object) so every reference the tests already hold changes too;
# a wrapper's __wrapped__ is followed.
def _ec_target():
    # The package as already loaded (importing it from a thread while it is being imported
    # would wait for ever on its import lock).
    pkg = G(M("sys"), S("modules")).get("calc") or M("calc")
    fn = G(pkg, "add")
    out = [fn]
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
        out.append(fn)
    return out


def _ec_retarget(impl):
    for fn in _ec_target():
        G(fn, "__globals__")["_ec_impl"] = impl
        fn.__code__ = (lambda *a, **k: _ec_impl(*a, **k)).__code__
