# The function under test returns an object that compares equal to everything.
def _ec_effect():
    cls = {"eq_true": _EcEqTrue, "truthy": _EcTruthy, "int_subclass": _EcInt}[_EC_SUB]
    _ec_retarget(lambda *a, **k: cls())
