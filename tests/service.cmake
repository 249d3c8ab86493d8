# Running stokerd as a system service: access by group, socket resolution, state folder
# (unit), client-defined jobs' rules (unit), peers of other users refused or admitted (integration, as
# root), the .deb (package).
stoker_add_test(service_test LABEL unit
  SOURCES unit/service_test.cpp unit/client_job_rules_test.cpp
  LIBS stoker_app stoker_config stoker_control stoker_job stoker_source stoker_daemon_fixture)

# Against a real stokerd: the state folder; client-defined jobs (what they may read and write,
# their caps); other uids (forked children that drop to uid 65534),
# as root only, otherwise those cases exit 77 and ctest reports them Skipped.
add_executable(service_integration_test integration/access_test.cpp integration/state_dir_test.cpp
  integration/client_job_access_test.cpp)
target_link_libraries(service_integration_test PRIVATE stoker_catch_main stoker_daemon_fixture stoker::client)
stoker_catch_pch(service_integration_test)
catch_discover_tests(service_integration_test EXTRA_ARGS -w NoTests PROPERTIES LABELS integration
  SKIP_RETURN_CODE 77 TIMEOUT 300)
add_dependencies(service_integration_test stokerd)

# The .deb (label package): built by scripts/package.sh in its own build folder and inspected;
# over 20 s because it is a whole release build (ccache serves it from this build's objects in
# scripts/test.sh: docs/TESTING.md);
# then, as root, installed with apt, used from /usr and purged. Not in sanitizer builds (the
# package is a plain release build of its own).
if(NOT STOKER_SANITIZE AND NOT STOKER_TSAN AND NOT STOKER_FUZZ)
  # A sibling of this build folder (build -> build-deb-test): at the same depth below the clone,
  # so ccache (scripts/test.sh: CCACHE_BASEDIR) serves the package's compiles from this build's.
  set(_deb_work ${CMAKE_BINARY_DIR}-deb-test)
  add_test(NAME deb_package_builds_with_its_files_and_dependencies
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/deb_test.sh build ${_deb_work})
  # The package build compiles through the same launcher (ccache) as this build, if any.
  set_tests_properties(deb_package_builds_with_its_files_and_dependencies PROPERTIES
    LABELS package TIMEOUT 1200 COST 60 FIXTURES_SETUP stoker_deb
    ENVIRONMENT "CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER};CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER};STOKER_DEB_FLAGS=${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  add_test(NAME deb_package_installs_runs_and_purges_cleanly
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/deb_test.sh install ${_deb_work})
  # RESOURCE_LOCK: the install writes /usr; the python tier's `import stoker` must not meet a
  # half-installed package (its PYTHONPATH comes first anyway).
  set_tests_properties(deb_package_installs_runs_and_purges_cleanly PROPERTIES
    LABELS package TIMEOUT 600 FIXTURES_REQUIRED stoker_deb SKIP_RETURN_CODE 77 RESOURCE_LOCK system_packages)
endif()
