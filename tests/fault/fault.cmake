stoker_add_test(fault_test LABEL fault
  SOURCES fault/fault_test.cpp fault/determinism_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto stoker_sampler)
add_dependencies(fault_test stokerd stokerctl)
