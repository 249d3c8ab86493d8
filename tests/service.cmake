# Running stokerd as a system service: access by group, socket resolution, state folder
# (unit), peers of other users refused or admitted (integration, as root), the .deb (package).
stoker_add_test(service_test LABEL unit
  SOURCES unit/service_test.cpp
  LIBS stoker_server stoker_daemon_fixture)

# Other uids against a real stokerd (forked children that drop to uid 65534); as root only,
# otherwise each case exits 77 and ctest reports it Skipped.
add_executable(access_test integration/access_test.cpp)
target_link_libraries(access_test PRIVATE stoker_catch_main stoker_daemon_fixture stoker::client)
catch_discover_tests(access_test EXTRA_ARGS -w NoTests PROPERTIES LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 300)
add_dependencies(access_test stokerd)
