"""The library's version: the daemon's (CMakeLists.txt's project VERSION),
kept equal by tests/clients/python/install_test.sh."""
__version__ = "0.2.0"
