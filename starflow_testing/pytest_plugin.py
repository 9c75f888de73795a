"""pytest plugin for starflow_testing (fixtures are added by the testing harness)."""
