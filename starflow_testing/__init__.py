"""starflow_testing: test harness for starflow workflows."""
