stoker_add_test(layout_golden_test LABEL unit
  SOURCES unit/layout_golden_test.cpp
  LIBS stoker::proto)
