stoker_add_test(dataset_test LABEL unit
  SOURCES unit/dataset_test.cpp
  LIBS stoker_config stoker_source stoker_sampler)
