# stokerctl's parts that need no daemon: `top`'s frame layout.
stoker_add_test(top_render_test LABEL unit
  SOURCES unit/top_render_test.cpp ${PROJECT_SOURCE_DIR}/client/stokerctl/top_render.cpp
  LIBS)
