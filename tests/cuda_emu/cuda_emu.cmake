# The strict CUDA driver emulation (tests/cuda_emu/emu.hpp): libcuda.so.1 in <build>/cuda_emu,
# built in every build and never installed. LD_LIBRARY_PATH=<build>/cuda_emu with
# STOKER_DEVICE_BACKEND=cuda runs the real `cuda` backend in stokerd and libstoker over it.
set(_emu_dir ${CMAKE_CURRENT_LIST_DIR})
set(STOKER_CUDA_EMU_DIR ${CMAKE_BINARY_DIR}/cuda_emu)
add_library(stoker_cuda_emu SHARED ${_emu_dir}/emu_core.cpp ${_emu_dir}/emu_memory.cpp
  ${_emu_dir}/emu_streams.cpp ${_emu_dir}/emu_kernels.cpp)
set_target_properties(stoker_cuda_emu PROPERTIES OUTPUT_NAME cuda PREFIX lib SUFFIX .so.1
  LIBRARY_OUTPUT_DIRECTORY ${STOKER_CUDA_EMU_DIR} CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
target_link_options(stoker_cuda_emu PRIVATE -Wl,-soname,libcuda.so.1)
target_link_libraries(stoker_cuda_emu PRIVATE Threads::Threads rt)
target_include_directories(stoker_cuda_emu PRIVATE ${_emu_dir})

# The environment of a test run over the emulation (ctest ENVIRONMENT list).
set(STOKER_CUDA_EMU_ENV "LD_LIBRARY_PATH=${STOKER_CUDA_EMU_DIR}" "STOKER_DEVICE_BACKEND=cuda"
  "STOKER_TEST_DEVICE_BACKEND=cuda-emu")

# The library exports exactly the entry points cuda_driver_api.cpp resolves.
add_test(NAME cuda_emu_exports_what_stoker_resolves
  COMMAND sh -c "nm -D --defined-only \"$1\" | awk '$2 == \"T\" {print $3}' | sort > \"$3\"; grep -o 'resolve(lib, \"[A-Za-z0-9_]*\"' \"$2\" | sed 's/.*\"\\(.*\\)\"/\\1/' | sort > \"$3.want\"; diff \"$3.want\" \"$3\""
          sh $<TARGET_FILE:stoker_cuda_emu> ${PROJECT_SOURCE_DIR}/device/cuda_driver_api.cpp
          ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu_exports.txt)
set_tests_properties(cuda_emu_exports_what_stoker_resolves PROPERTIES LABELS "unit;device-emu")

# The strictness rules, each broken on purpose (label unit + device-emu).
add_executable(cuda_emu_peer ${_emu_dir}/emu_peer.cpp)
target_link_libraries(cuda_emu_peer PRIVATE stoker_device)
target_include_directories(cuda_emu_peer PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu)
add_executable(cuda_emu_test ${_emu_dir}/cuda_emu_test.cpp)
target_link_libraries(cuda_emu_test PRIVATE stoker_catch_main stoker_device)
stoker_catch_pch(cuda_emu_test)
target_include_directories(cuda_emu_test PRIVATE ${_emu_dir} ${CMAKE_CURRENT_SOURCE_DIR}/gpu)
target_compile_definitions(cuda_emu_test PRIVATE STOKER_CUDA_EMU_PEER="$<TARGET_FILE:cuda_emu_peer>")
add_dependencies(cuda_emu_test cuda_emu_peer stoker_cuda_emu)
catch_discover_tests(cuda_emu_test EXTRA_ARGS -w NoTests TEST_LIST cuda_emu_test_TESTS PROPERTIES TIMEOUT 300)
stoker_discovered_tests_properties(cuda_emu_test_TESTS LABELS unit device-emu ENVIRONMENT ${STOKER_CUDA_EMU_ENV})
