# gpu tier (label gpu): CUDA IPC end to end and the device normalize kernel. The tests are
# built with and without the CUDA parts; without a usable device each test case exits 77,
# which ctest reports as "Skipped" (SKIP_RETURN_CODE), never as passed. scripts/gpu-check.sh
# sets STOKER_REQUIRE_GPU=1, which turns a missing device into a failure.
# Also here: unit tests of the no-device fallback (label unit).
set(_gpu_dir ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(_gpu_root ${_gpu_dir}/../.. ABSOLUTE)

if(STOKER_HAVE_CUDA)
  add_library(stoker_gpu_test_support STATIC ${_gpu_dir}/gpu_test_support.cu)
  target_link_libraries(stoker_gpu_test_support PUBLIC stoker_cuda_exporter PRIVATE CUDA::cudart_static)
  set_target_properties(stoker_gpu_test_support PROPERTIES CUDA_ARCHITECTURES "${STOKER_CUDA_ARCHITECTURES}")
else()
  add_library(stoker_gpu_test_support STATIC ${_gpu_dir}/gpu_test_support_stub.cpp)
  target_link_libraries(stoker_gpu_test_support PUBLIC stoker_cuda_exporter)
endif()
target_include_directories(stoker_gpu_test_support PUBLIC ${_gpu_dir})

# Catch2 tests of the gpu tier: like stoker_add_test, plus SKIP_RETURN_CODE.
function(stoker_add_gpu_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE stoker_catch_main stoker_gpu_test_support ${T_LIBS})
  catch_discover_tests(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
endfunction()

stoker_add_gpu_test(gpu_normalize_test SOURCES ${_gpu_dir}/normalize_test.cpp)

# The trainer's side of the IPC test: a separate program (a forked child of a process that
# has initialized CUDA cannot use CUDA).
add_executable(stoker_gpu_ipc_peer ${_gpu_dir}/ipc_peer.cpp)
target_link_libraries(stoker_gpu_ipc_peer PRIVATE stoker_cuda_importer stoker_gpu_test_support)
stoker_add_gpu_test(gpu_ipc_test SOURCES ${_gpu_dir}/ipc_test.cpp LIBS stoker_cuda_exporter stoker_cuda_importer)
add_dependencies(gpu_ipc_test stoker_gpu_ipc_peer)

# No-device fallback, against this build's libraries and against the stub sources alone.
stoker_add_test(cuda_fallback_test LABEL unit SOURCES ${_gpu_dir}/cuda_fallback_test.cpp
  LIBS stoker_cuda_exporter stoker_cuda_importer)
add_executable(cuda_stub_test ${_gpu_dir}/cuda_fallback_test.cpp
  ${_gpu_root}/daemon/cuda/device_exporter_stub.cpp ${_gpu_root}/daemon/cuda/gpu_uuid.cpp
  ${_gpu_root}/client/cuda/device_importer_stub.cpp)
target_link_libraries(cuda_stub_test PRIVATE stoker_catch_main stoker_daemon_base)
target_include_directories(cuda_stub_test PRIVATE ${_gpu_root}/client)
target_compile_definitions(cuda_stub_test PRIVATE STOKER_TEST_STUB)
catch_discover_tests(cuda_stub_test TEST_PREFIX "stub_build." PROPERTIES LABELS unit TIMEOUT 300)
