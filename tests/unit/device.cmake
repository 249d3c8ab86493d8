# The device backend seam: the host simulation's contract and its aborts.
stoker_add_test(hostsim_test LABEL unit
  SOURCES unit/hostsim_test.cpp
  LIBS stoker_device)
