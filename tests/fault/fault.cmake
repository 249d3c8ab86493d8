stoker_add_test(fault_test LABEL fault
  SOURCES fault/fault_test.cpp fault/determinism_test.cpp fault/machine_faults_test.cpp fault/shm_tamper_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto stoker_sampler)
add_dependencies(fault_test stokerd stokerctl)

# Preloaded into stokerd by tests that inject open() failures (see the file's comment).
add_library(stoker_fail_open SHARED support/fail_open.c)
target_link_libraries(stoker_fail_open PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(fault_test stoker_fail_open)
target_compile_definitions(fault_test PRIVATE STOKER_FAIL_OPEN_LIB="$<TARGET_FILE:stoker_fail_open>")
