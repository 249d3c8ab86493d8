# Fuzz harnesses (tests/fuzz). Two ways to build each:
#  - always: `<name>_replay`, the harness with a plain main that runs the seed files once
#    (ctest label unit; under the ASan build this is a sanitized regression run of every seed);
#  - with -DSTOKER_FUZZ=ON and clang: `<name>`, a libFuzzer binary (scripts/fuzz.sh).
set(_fuzz_dir ${CMAKE_CURRENT_LIST_DIR})
set(_seed_images ${CMAKE_CURRENT_SOURCE_DIR}/data/demo ${CMAKE_CURRENT_SOURCE_DIR}/data/corpus
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/formats ${CMAKE_CURRENT_SOURCE_DIR}/data/fuzz-regressions)
set(_seed_configs ${CMAKE_CURRENT_SOURCE_DIR}/data/configs-malformed ${PROJECT_SOURCE_DIR}/configs)

set(_seed_control ${CMAKE_CURRENT_SOURCE_DIR}/data/control-messages)
set(_seed_http ${CMAKE_CURRENT_SOURCE_DIR}/data/http-requests)
set(_seed_remote ${CMAKE_CURRENT_SOURCE_DIR}/data/remote-messages)
set(_seed_segment ${CMAKE_CURRENT_SOURCE_DIR}/data/segment-headers)
set(_seed_list_xml ${CMAKE_CURRENT_SOURCE_DIR}/data/list-xml)

# The client's segment check alone (client/src/segment_check.cpp): a pure function of three
# records, without the rest of libstoker.
add_library(stoker_segment_check STATIC ${PROJECT_SOURCE_DIR}/client/src/segment_check.cpp)
target_include_directories(stoker_segment_check PUBLIC ${PROJECT_SOURCE_DIR}/client/src)
target_link_libraries(stoker_segment_check PUBLIC stoker::proto stoker_base)

set(_harnesses sample_processor config control metrics_http segment_check list_xml)
if(STOKER_HAVE_REMOTE)  # remote workers (#27): the worker's stream handling
  list(APPEND _harnesses remote_worker)
endif()
foreach(h ${_harnesses})
  if(h STREQUAL "remote_worker")
    set(_lib stoker_remote_worker)
    set(_seeds ${_seed_remote})
  elseif(h STREQUAL "sample_processor")
    set(_lib stoker_image)
    set(_seeds ${_seed_images})
  elseif(h STREQUAL "segment_check")
    set(_lib stoker_segment_check)
    set(_seeds ${_seed_segment})
  elseif(h STREQUAL "list_xml")  # issue #35: object-store listings
    set(_lib stoker_objstore)
    set(_seeds ${_seed_list_xml})
  elseif(h STREQUAL "config")
    set(_lib stoker_config)
    set(_seeds ${_seed_configs})
  elseif(h STREQUAL "metrics_http")
    set(_lib stoker_control)
    set(_seeds ${_seed_http})
  else()
    set(_lib stoker_control)
    set(_seeds ${_seed_control})
  endif()
  add_executable(fuzz_${h}_replay ${_fuzz_dir}/fuzz_${h}.cpp ${_fuzz_dir}/replay_main.cpp)
  target_link_libraries(fuzz_${h}_replay PRIVATE ${_lib})
  target_compile_definitions(fuzz_${h}_replay PRIVATE STOKER_FUZZ_DEMO_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/demo")
  add_test(NAME fuzz_${h}_seeds COMMAND fuzz_${h}_replay ${_seeds})
  set_tests_properties(fuzz_${h}_seeds PROPERTIES LABELS unit TIMEOUT 300)
  if(STOKER_FUZZ)
    add_executable(fuzz_${h} ${_fuzz_dir}/fuzz_${h}.cpp)
    target_link_libraries(fuzz_${h} PRIVATE ${_lib})
    target_compile_definitions(fuzz_${h} PRIVATE STOKER_FUZZ_DEMO_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/demo")
    target_compile_options(fuzz_${h} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${h} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()
