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
# shuffle: {window_shards: N}, the shard-windowed epoch order (issue #35).
stoker_add_test(window_order_test LABEL unit
  SOURCES unit/window_order_test.cpp
  LIBS stoker_sampler)

# Issue #34: the one confined open (base/confined_open.hpp), and a client-defined job's reads
# (source/read_access.hpp) against a folder swapped for a symlink while they read (10 s).
stoker_add_test(confined_open_test LABEL unit
  SOURCES unit/confined_open_test.cpp
  LIBS stoker_base)
stoker_add_test(read_access_race_test LABEL unit
  SOURCES unit/read_access_race_test.cpp
  LIBS stoker_source)

# Issue #35: URLs, credentials, ListObjectsV2 pages and the libcurl fetcher (loopback stub).
stoker_add_test(objstore_test LABEL unit
  SOURCES unit/objstore_test.cpp
  LIBS stoker_objstore)
# Signatures checked against AWS's specification (tests/support/sigv4_check.hpp, libcrypto).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
stoker_add_test(objstore_sigv4_test LABEL unit
  SOURCES unit/objstore_sigv4_test.cpp
  LIBS stoker_objstore OpenSSL::Crypto)
