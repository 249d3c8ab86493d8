# Unit tier of the dataset side: config validation, the ImageFolder scan, the sampler's maths.
stoker_add_test(config_test LABEL unit
  SOURCES unit/config_test.cpp
  LIBS stoker_config)
stoker_add_test(source_test LABEL unit
  SOURCES unit/source_test.cpp
  LIBS stoker_source)
stoker_add_test(sampler_test LABEL unit
  SOURCES unit/sampler_test.cpp
  LIBS stoker_sampler stoker_core)
stoker_add_test(elastic_sampler_test LABEL unit
  SOURCES unit/elastic_sampler_test.cpp
  LIBS stoker_sampler)
stoker_add_test(tar_test LABEL unit
  SOURCES unit/tar_test.cpp
  LIBS stoker_source)
stoker_add_test(mixture_test LABEL unit
  SOURCES unit/mixture_test.cpp
  LIBS stoker_sampler)
