# A new user's first hour (issue #37): setup.sh, demo.sh, stokerd-launch.sh, stokerctl consume
# and prepare, stokerd's start, and the README against the scripts. One ctest entry per check
# of tests/first_hour/test_first_hour.py (Debian's python3 with pytest; the programs from this
# build's bin/). Label scripts: checks of the scripts and the README alone, run in the plain tier only
# (a sanitizer build adds nothing to them). The config error of an unclosed flow is checked in unit/config_test.cpp.
find_program(STOKER_FIRST_HOUR_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(STOKER_FIRST_HOUR_PYTHON)
  set(_first_hour ${CMAKE_CURRENT_SOURCE_DIR}/first_hour/test_first_hour.py)
  # name, label, pytest function
  foreach(_t IN ITEMS
      "setup_waits_for_apt_lock;scripts;test_setup_waits_for_apt_lock"
      "readme_package_list_equals_setup;scripts;test_readme_package_list_equals_setup"
      "readme_cmake_options_and_jobs;scripts;test_readme_cmake_options_and_jobs"
      "user_build_has_no_benchmarks;scripts;test_user_build_has_no_benchmarks"
      "demo_ends_with_images_per_s;integration;test_demo_ends_with_a_human_line_naming_images_per_s"
      "status_rates_after_a_short_run;integration;test_status_rates_right_after_a_short_run"
      "consume_leads_with_steady_rate;integration;test_consume_leads_with_the_steady_rate"
      "batch_larger_than_dataset_warned;integration;test_batch_larger_than_the_dataset_is_warned_at_start"
      "prepare_starting_and_already_stored;integration;test_prepare_says_starting_and_what_was_already_stored"
      "launch_finds_demo_build;scripts;test_launch_finds_what_the_demo_built"
      )
    list(GET _t 0 _name)
    list(GET _t 1 _label)
    list(GET _t 2 _function)
    add_test(NAME first_hour_${_name}
      COMMAND ${STOKER_FIRST_HOUR_PYTHON} -m pytest -q -p no:cacheprovider ${_first_hour}::${_function})
    # TIMEOUT: each takes a few seconds; the cmake configure of user_build_has_no_benchmarks the most.
    set_tests_properties(first_hour_${_name} PROPERTIES LABELS ${_label} TIMEOUT 120
      ENVIRONMENT "STOKER_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
  endforeach()
endif()
