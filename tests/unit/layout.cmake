stoker_add_test(layout_golden_test LABEL unit
  SOURCES unit/layout_golden_test.cpp
  LIBS stoker::proto)

# The client's segment check, a pure function (its fuzz harness: tests/fuzz/fuzz.cmake).
stoker_add_test(segment_check_test LABEL unit
  SOURCES unit/segment_check_test.cpp
  LIBS stoker_segment_check)
