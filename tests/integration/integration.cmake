# Real stokerd processes: the tests need the binaries built first.
add_library(stoker_daemon_fixture STATIC support/daemon_fixture.cpp)
# nlohmann_json: the status documents the integration and fault tests read.
target_link_libraries(stoker_daemon_fixture PUBLIC stoker_catch_main nlohmann_json::nlohmann_json)

stoker_add_test(integration_test LABEL integration
  SOURCES integration/serve_test.cpp integration/startup_test.cpp integration/multinode_test.cpp
          integration/status_test.cpp integration/fanout_test.cpp integration/fair_share_test.cpp
          integration/tar_serve_test.cpp integration/reload_test.cpp integration/mix_test.cpp
          integration/metrics_serve_test.cpp integration/augment_serve_test.cpp integration/formats_serve_test.cpp
          integration/reload_outcome_test.cpp integration/refusal_race_test.cpp integration/announce_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto Boost::headers stoker_sampler PNG::PNG)
add_dependencies(integration_test stokerd stokerctl)

# Elastic resume on another world size (issue 25): its own executable, a few daemons each.
stoker_add_test(elastic_test LABEL integration
  SOURCES integration/elastic_test.cpp
  LIBS stoker_daemon_fixture stoker::client)
add_dependencies(elastic_test stokerd stokerctl)

# The /metrics responder over loopback sockets, no daemon: slow peers, extra bytes (issue 24).
stoker_add_test(metrics_http_test LABEL integration
  SOURCES integration/metrics_http_test.cpp
  LIBS stoker_control)

# The C header compiled as C.
add_executable(c_api_test integration/c_api_test.c)
target_link_libraries(c_api_test PRIVATE stoker::client)
if(STOKER_SANITIZE)
  # A sanitized libstoker.so needs UBSan's C++ runtime (clang: __ubsan_vptr_type_cache), which
  # only the C++ driver links; the program itself is still compiled as C.
  set_target_properties(c_api_test PROPERTIES LINKER_LANGUAGE CXX)
endif()
add_test(NAME c_api_compiled_as_c COMMAND c_api_test)
set_tests_properties(c_api_compiled_as_c PROPERTIES LABELS integration)

# `cmake --install` into a temporary prefix, then a trainer-like project finds the package
# with find_package(stoker) and with pkg-config, and links it. (Not in sanitizer builds: the
# plain consumer cannot load an ASan-instrumented libstoker.)
if(NOT STOKER_SANITIZE AND NOT STOKER_TSAN)
add_test(NAME installed_package_is_usable
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/install
          -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install-check -P ${CMAKE_CURRENT_SOURCE_DIR}/install/check.cmake)
# RESOURCE_LOCK: the python tier also runs `cmake --install` of this build folder, and two
# installs of one build at once race on its install_manifest.txt.
set_tests_properties(installed_package_is_usable PROPERTIES LABELS integration TIMEOUT 300
  RESOURCE_LOCK cmake_install_of_the_build)
endif()

# The device path against the backend STOKER_TEST_DEVICE_BACKEND names (default hostsim, so it
# runs everywhere; scripts/gpu-check.sh runs it with cuda). Labels: integration + device.
add_executable(device_test integration/device_test.cpp)
target_link_libraries(device_test PRIVATE stoker_catch_main stoker_daemon_fixture stoker::client stoker::proto)
stoker_catch_pch(device_test)
catch_discover_tests(device_test EXTRA_ARGS -w NoTests TEST_LIST device_test_HOSTSIM PROPERTIES TIMEOUT 300)
stoker_discovered_tests_properties(device_test_HOSTSIM LABELS integration device)
add_dependencies(device_test stokerd stokerctl stoker_cuda_emu)
target_include_directories(device_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu)
if(STOKER_HAVE_CUDA)
  target_compile_definitions(device_test PRIVATE STOKER_HAVE_NORMALIZE_FATBIN)
endif()
if(STOKER_TSAN)
  target_compile_definitions(device_test PRIVATE STOKER_TEST_TSAN)  # a shorter kill storm
endif()
# The same cases again on the real `cuda` backend in stokerd and the consumers, over the CUDA
# driver emulation (tests/cuda_emu): "cuda-emu: " names, labels + device-emu. (A second
# discovery of one target needs different EXTRA_ARGS: Catch.cmake names its files by them.)
catch_discover_tests(device_test TEST_PREFIX "cuda-emu/" EXTRA_ARGS -w NoTests --use-colour no
  TEST_LIST device_test_EMU PROPERTIES TIMEOUT 600)
stoker_discovered_tests_properties(device_test_EMU LABELS integration device device-emu
  ENVIRONMENT ${STOKER_CUDA_EMU_ENV})

# The decoded store (issue 26): cold/warm/restart/worker counts, sharing, faults.
stoker_add_test(decoded_store_serve_test LABEL integration
  SOURCES integration/decoded_store_serve_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto)
add_dependencies(decoded_store_serve_test stokerd stokerctl)

# Weighted mixtures of sources (`sources:`, issue #25): a real stokerd serving one.
stoker_add_test(mixture_serve_test LABEL integration
  SOURCES integration/mixture_serve_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker_sampler)
add_dependencies(mixture_serve_test stokerd stokerctl)

# Issue #34, B4: a store refused at start is off for its job (reason in status); every job serves.
stoker_add_test(store_trust_serve_test LABEL integration
  SOURCES integration/store_trust_serve_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto)
add_dependencies(store_trust_serve_test stokerd stokerctl)

# Issue #35: tar shards in object storage (s3rver on loopback; skipped without it), ~10 s.
stoker_add_test(object_store_serve_test LABEL integration
  SOURCES integration/object_store_serve_test.cpp
  LIBS stoker_daemon_fixture stoker::client PkgConfig::CURL)
add_dependencies(object_store_serve_test stokerd)
