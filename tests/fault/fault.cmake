stoker_add_test(fault_test LABEL fault
  SOURCES fault/fault_test.cpp fault/determinism_test.cpp fault/machine_faults_test.cpp fault/shm_tamper_test.cpp
          fault/control_wait_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto stoker_sampler JPEG::JPEG)
add_dependencies(fault_test stokerd stokerctl)

# Kill storm of device consumers on the host simulation (issue 24): stokerd stays up, flat, clean.
# About 20 s in a RelWithDebInfo build; a longer limit than other cases for the 2-core
# sanitizer runs, where each of the 304 consumer processes starts several times slower.
add_executable(device_storm_test fault/device_storm_test.cpp)
target_link_libraries(device_storm_test PRIVATE stoker_catch_main stoker_daemon_fixture stoker::client)
stoker_catch_pch(device_storm_test)
catch_discover_tests(device_storm_test EXTRA_ARGS -w NoTests PROPERTIES LABELS "fault;device" TIMEOUT 900)
add_dependencies(device_storm_test stokerd stokerctl)

# Preloaded into stokerd by tests that inject open() failures (see the file's comment).
add_library(stoker_fail_open SHARED support/fail_open.c)
target_link_libraries(stoker_fail_open PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(fault_test stoker_fail_open)
target_compile_definitions(fault_test PRIVATE STOKER_FAIL_OPEN_LIB="$<TARGET_FILE:stoker_fail_open>")
# Preloaded to make reads of some files slow (storage latency): the read-ahead fault test and
# scripts/bench-coldread.py.
add_library(stoker_slow_read SHARED support/slow_read.c)
target_link_libraries(stoker_slow_read PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
add_dependencies(fault_test stoker_slow_read)
target_compile_definitions(fault_test PRIVATE STOKER_SLOW_READ_LIB="$<TARGET_FILE:stoker_slow_read>")
# Preloaded to make stokerd report another pid (as from another PID namespace): stokerctl
# reload must reach it through the socket, not by that number (control_wait_test.cpp).
add_library(stoker_fake_pid SHARED support/fake_pid.c)
add_dependencies(fault_test stoker_fake_pid)
target_compile_definitions(fault_test PRIVATE STOKER_FAKE_PID_LIB="$<TARGET_FILE:stoker_fake_pid>")

# Soak (issue #13): 20 epochs, 4 consumers, one SIGKILLed and restarted every 1.5 s, bad files;
# daemon RSS and descriptors must stay flat after the first epoch and the consumers that stayed
# must get exactly an undisturbed run's batches. Not in sanitizer builds (ASan's quarantine of
# freed memory grows RSS by design).
if(NOT STOKER_SANITIZE AND NOT STOKER_TSAN)
  find_program(STOKER_SOAK_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(STOKER_SOAK_PYTHON)
    add_test(NAME soak_20_epochs_flat_memory COMMAND ${STOKER_SOAK_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/soak.py
             ${CMAKE_BINARY_DIR} 20)
    set_tests_properties(soak_20_epochs_flat_memory PROPERTIES LABELS fault TIMEOUT 900 COST 16)
  endif()
endif()
