"""The test suite."""

#: keys one SCAN call walks when a teardown deletes a namespace's keys: the Redis of a run
#: holds every test's keys, and SCAN's default of 10 made a teardown take a second
SCAN_COUNT = 1000
