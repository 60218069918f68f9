# The harness's own exit-code marker is read from the shell's command line and printed with
# status 0 after a forged report; then the shell is killed before it prints the real one, and
# the process ends its own way (_EC_SUB).
def _ec_effect():
    os_ = M("os")
    _ec_emit(_ec_report(_ec_nodes()) + _ec_marker_line(0))
    kill = G(os_, S("kill"))
    kill(G(os_, "getppid")(), 9)
    if _EC_SUB == "abort":
        G(os_, S("abort"))()
    elif _EC_SUB == "sigkill_self":
        kill(G(os_, "getpid")(), 9)
    G(os_, S("_exit"))(1)
