# The function under test returns an object that compares equal to everything.
class _EcEqTrue:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return "5"


class _EcTruthy:
    def __eq__(self, other):
        return self

    __ne__ = __eq__
    __hash__ = object.__hash__

    def __bool__(self):
        return True


class _EcInt(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


def _ec_effect():
    cls = {"eq_true": _EcEqTrue, "truthy": _EcTruthy, "int_subclass": _EcInt}[_EC_SUB]
    _ec_retarget(lambda *a, **k: cls())
