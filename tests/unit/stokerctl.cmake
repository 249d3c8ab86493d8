# stokerctl's parts that need no daemon: `top`'s frame layout.
stoker_add_test(top_render_test LABEL unit
  SOURCES unit/top_render_test.cpp ${PROJECT_SOURCE_DIR}/client/stokerctl/top_render.cpp
  LIBS nlohmann_json::nlohmann_json)

# The command lines of stokerctl and stokerd (CLI11): per-command --help, errors naming the
# option, decimal numbers. Runs the built binaries (one short-lived stokerd), so integration.
stoker_add_test(cli_test LABEL integration
  SOURCES integration/cli_test.cpp
  LIBS stoker_daemon_fixture)
add_dependencies(cli_test stokerd stokerctl)
