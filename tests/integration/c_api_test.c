/* The C API compiled as C (not C++): it must stand alone, and every entry point must
 * answer with a status and a message rather than crash. Run by ctest with the path of a
 * running daemon's socket in argv[1] (or none: then only the no-daemon paths are checked). */
#include <stdio.h>
#include <string.h>

#include "stoker/stoker.h"

static int failures = 0;
#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                      \
    }                                                                  \
  } while (0)

int main(void) {
  stoker_options o;
  stoker_client* c = NULL;
  stoker_batch* b = NULL;
  char* json = NULL;

  stoker_options_init(&o);
  EXPECT(stoker_client_open(&o, &c) == STOKER_ERR_INVALID_ARGUMENT); /* no job */
  EXPECT(strstr(stoker_last_error(), "job") != NULL);

  o.job = "demo";
  o.socket_path = "/nonexistent/stoker-c-test.sock";
  EXPECT(stoker_client_open(&o, &c) == STOKER_ERR_NO_DAEMON);
  EXPECT(c == NULL);
  EXPECT(strstr(stoker_last_error(), "no stokerd at /nonexistent/stoker-c-test.sock") != NULL);

  EXPECT(stoker_client_next(NULL, 0, &b) == STOKER_ERR_INVALID_ARGUMENT);
  EXPECT(stoker_batch_release(NULL) == STOKER_OK);
  EXPECT(stoker_batch_count(NULL) == 0);
  /* Labels: class indices or (mixup/cutmix) soft rows; a NULL batch has neither. */
  {
    uint64_t shape[2] = {7, 7};
    EXPECT(stoker_batch_labels(NULL) == NULL);
    EXPECT(stoker_batch_label_data(NULL) == NULL);
    EXPECT(stoker_batch_label_shape(NULL, shape) == 0);
    EXPECT(shape[0] == 0 && shape[1] == 0);
    EXPECT(STOKER_INT64 == 4);
  }
  EXPECT(stoker_daemon_status("/nonexistent/stoker-c-test.sock", &json) == STOKER_ERR_NO_DAEMON);
  EXPECT(json == NULL);
  EXPECT(strcmp(stoker_status_name(STOKER_ERR_TIMEOUT), "timeout") == 0);
  stoker_client_close(NULL);

  /* Device entry points answer NULL arguments and bad device names with a status. */
  {
    void* dptr = (void*)1;
    int64_t* lptr = (int64_t*)1;
    EXPECT(stoker_batch_device_images(NULL, NULL, &dptr) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_batch_device_labels(NULL, NULL, &lptr) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_batch_device_to_host(NULL, NULL, NULL) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_batch_device_label_data(NULL, NULL, &dptr) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_batch_device_synchronize(NULL) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_client_pin_memory(NULL, 0) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(stoker_batch_on_device(NULL) == 0);
    o.device = "tpu:0";
    EXPECT(stoker_client_open(&o, &c) == STOKER_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(stoker_last_error(), "'tpu:0' is not \"cuda\" or \"cuda:N\"") != NULL);
    o.device = NULL;
  }

  printf("c_api_test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
