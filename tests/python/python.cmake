# The python tier: `import stoker` against real daemons, with Debian's interpreter (the one
# python3-torch belongs to). One ctest entry per file, so `ctest -j` runs them side by side
# (each test starts its own stokerd on its own socket). Torch-only tests skip without torch.
# Included from tests/CMakeLists.txt when the module is built (target stoker_python_native).
if(TARGET stoker_python_native)
  foreach(part loader errors torch packaging)
    add_test(NAME python_${part}
      COMMAND ${STOKER_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
              ${CMAKE_CURRENT_LIST_DIR}/test_${part}.py)
    set_tests_properties(python_${part} PROPERTIES LABELS python TIMEOUT 600
      ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;STOKER_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
  endforeach()
endif()
