stoker_add_test(image_test LABEL unit
  SOURCES unit/image_test.cpp unit/image_reference_test.cpp unit/image_png_test.cpp unit/image_formats_test.cpp
  LIBS stoker_image JPEG::JPEG PNG::PNG)
stoker_add_test(augment_test LABEL unit SOURCES unit/augment_test.cpp unit/augment_policy_test.cpp unit/augment_schema_test.cpp
  unit/augment_simd_test.cpp
  LIBS stoker_image)
