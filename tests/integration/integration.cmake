# Real stokerd processes: the tests need the binaries built first.
add_library(stoker_daemon_fixture STATIC support/daemon_fixture.cpp)
target_link_libraries(stoker_daemon_fixture PUBLIC stoker_catch_main)

stoker_add_test(integration_test LABEL integration
  SOURCES integration/serve_test.cpp integration/startup_test.cpp
  LIBS stoker_daemon_fixture stoker::client stoker::proto Boost::headers)
add_dependencies(integration_test stokerd stokerctl)
