/* libstoker: the client a trainer links to receive batches from stokerd.
 *
 * Batches are views into shared memory written by the daemon's workers: no copy happens
 * between the worker that wrote a batch and the trainer that reads it. A batch stays valid
 * until stoker_batch_release(), which hands its slot back to the daemon's ring.
 *
 * Every function returns a stoker_status; on failure stoker_last_error() gives a message for
 * the calling thread. No C++ exception ever crosses this API.
 *
 * Thread safety: one thread calls stoker_client_next() at a time; stoker_batch_release() may
 * be called from any thread, also after stoker_client_close() (then it only frees memory). */
#ifndef STOKER_STOKER_H_
#define STOKER_STOKER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STOKER_API __attribute__((visibility("default")))
#else
#define STOKER_API
#endif

typedef enum stoker_status {
  STOKER_OK = 0,
  STOKER_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option */
  STOKER_ERR_NO_DAEMON = 2,        /* nothing listens on the socket */
  STOKER_ERR_REFUSED = 3,          /* unknown job, rank out of range or busy, no device */
  STOKER_ERR_VERSION = 4,          /* client and daemon speak different protocol versions */
  STOKER_ERR_DISCONNECTED = 5,     /* the daemon stopped or dropped this client */
  STOKER_ERR_TIMEOUT = 6,          /* no batch within the timeout; call next() again */
  STOKER_ERR_JOB_FAILED = 7,       /* the job stopped (on_error: fail); message names the file */
  STOKER_ERR_PROTOCOL = 8,         /* the daemon sent something this client cannot use */
  STOKER_ERR_INTERNAL = 9
} stoker_status;

/* STOKER_INT64 is only ever a label type (class indices), never an image type. */
typedef enum stoker_dtype { STOKER_UINT8 = 1, STOKER_FLOAT16 = 2, STOKER_FLOAT32 = 3, STOKER_INT64 = 4 } stoker_dtype;
typedef enum stoker_layout { STOKER_NCHW = 1, STOKER_NHWC = 2 } stoker_layout;

typedef struct stoker_client stoker_client;
typedef struct stoker_batch stoker_batch;

typedef struct stoker_options {
  const char* socket_path; /* NULL: $STOKER_SOCKET, $XDG_RUNTIME_DIR/stoker/stoker.sock, ... */
  const char* job;         /* required */
  uint32_t rank;           /* consumer rank, 0..consumers-1 */
  uint64_t start_epoch;    /* first batch wanted (resume position) */
  uint64_t start_batch;
  int want_device;         /* nonzero: device batches, as device = "cuda" */
  int map_writable;        /* nonzero: map batches read-write, so in-place operations on them
                              (e.g. on a torch tensor) work instead of faulting; writes change
                              only the caller's copy of that batch. Default: read-only. */
  const char* device;      /* NULL or "": host batches. "cuda": device batches on GPU $LOCAL_RANK
                              (0 when unset); "cuda:N": on GPU N as this process numbers them.
                              The daemon copies each batch to that GPU (CUDA IPC; matched by
                              UUID whatever CUDA_VISIBLE_DEVICES each side has). */
  int reconnect_timeout_ms; /* > 0: when the daemon goes away (restart, upgrade), next() waits
                              up to this long for one on the same socket, reconnects at the
                              stream's position and goes on with exactly the batches an
                              uninterrupted run gives; batches still held stay readable.
                              0: next() fails with STOKER_ERR_DISCONNECTED at once. */
  uint32_t reader;         /* fan-out jobs (`readers: K`): which of the rank's K readers this
                              is, 0..K-1; every reader gets the same batches, mapped read-only */
  int split_rank;          /* nonzero: `rank` is the launcher's global process index g (RANK);
                              for a job with readers: K the daemon serves it as rank g / K,
                              reader g % K (consecutive processes form a group, as tensor-
                              parallel groups are numbered); `reader` is ignored. The rank
                              and reader served are in stoker_job_info. */
  uint64_t start_position; /* elastic resume (protocol 2.4): epoch start_epoch begins after the
                              WHOLE world, of whatever size it had, consumed this many positions
                              of the epoch's global order (every rank's batches x batch size x
                              that world); start_batch then counts this rank's batches of the
                              rest, split among this job's world as DistributedSampler splits an
                              epoch. Every rank of the job must pass the same value. 0: none. */
} stoker_options;

typedef struct stoker_job_info {
  uint32_t batch_size, channels, height, width;
  stoker_dtype dtype;
  stoker_layout layout;
  uint64_t image_bytes;       /* one sample */
  uint64_t samples_per_epoch; /* whole dataset */
  uint64_t samples_per_rank;  /* this rank, per epoch */
  uint64_t batches_per_epoch; /* nominal, this rank */
  uint32_t num_classes;
  uint32_t slot_count;        /* batches this client may hold at once */
  uint64_t daemon_generation; /* changes when the daemon restarts */
  int32_t device_ordinal;     /* -1: host batches; else the GPU device batches are on */
  stoker_dtype device_dtype;  /* dtype of the device images (float when normalized there) */
  uint32_t device_backend;    /* 0 none, 1 cuda, 2 hostsim (STOKER_DEVICE_BACKEND) */
  uint32_t device_normalized; /* nonzero: normalized on the GPU from uint8 host samples */
  uint64_t device_image_bytes;/* one sample on the device */
  uint32_t readers;           /* readers of each rank (> 1: fan-out, batches are shared) */
  uint32_t reader;            /* this client's reader index */
  uint32_t rank;              /* the global rank this client reads */
  uint32_t writable;          /* nonzero: batches are mapped read-write (map_writable, and
                                 the job has one reader per rank) */
  /* The labels' type and shape. STOKER_INT64, label_width 1: one class index per sample,
   * shape {count} (jobs without mixing, as always). STOKER_FLOAT32 or STOKER_FLOAT16 (the
   * images' dtype; float32 for uint8 images): a job with mixup/cutmix, whose labels are soft
   * targets, shape {count, label_width} with label_width = num_classes, each row
   * lambda * onehot(own class) + (1 - lambda) * onehot(previous sample's class). */
  stoker_dtype label_dtype;
  uint32_t label_width;
} stoker_job_info;

/* Fills defaults: everything zero/NULL. */
STOKER_API void stoker_options_init(stoker_options* options);

STOKER_API stoker_status stoker_client_open(const stoker_options* options, stoker_client** out);
/* Releases nothing on the caller's behalf: outstanding batches stay mapped (reading them never
 * faults) until released. Their slots, though, go back to stokerd with the connection, which
 * refills them: copy what must outlive the connection before closing it. */
STOKER_API void stoker_client_close(stoker_client* client);
STOKER_API stoker_status stoker_client_info(const stoker_client* client, stoker_job_info* out);

/* Waits up to timeout_ms (<0: forever) for the next batch in order. */
STOKER_API stoker_status stoker_client_next(stoker_client* client, int timeout_ms,
                                            stoker_batch** out);

/* The next batch in order only if it is already here (announced by stokerd and received):
 * never waits, never reconnects, sends nothing; a batch in the client's buffer is taken with
 * no system call, and an empty buffer costs one read of the socket that does not wait.
 * STOKER_OK with *out set, or
 * STOKER_ERR_TIMEOUT (with no error text) when none is buffered, also on the Acquire path
 * (STOKER_ACQUIRE=1, an older daemon) and on a closed or failed connection: then call
 * stoker_client_next(), which waits and reports those. For a binding that would otherwise
 * give up a lock around every call (Python's GIL): it takes a buffered batch holding it. */
STOKER_API stoker_status stoker_client_try_next(stoker_client* client, stoker_batch** out);

/* Hands the slot back and frees the handle. NULL is a no-op. */
STOKER_API stoker_status stoker_batch_release(stoker_batch* batch);

/* A batch holds stoker_batch_count() samples (<= batch_size; the last batch of an epoch may
 * be short, and after skipped bad files a last-in-epoch batch may even hold 0). */
STOKER_API const void* stoker_batch_images(const stoker_batch* batch);
/* int64 class indices; NULL for a job whose labels are soft (stoker_job_info.label_dtype is
 * a float type): read those with stoker_batch_label_data(). */
STOKER_API const int64_t* stoker_batch_labels(const stoker_batch* batch);
/* The labels in the job's label type (stoker_job_info.label_dtype), whatever it is. */
STOKER_API const void* stoker_batch_label_data(const stoker_batch* batch);
/* The labels' shape: {count} (returns 1) for class indices, {count, label_width} (returns 2)
 * for soft labels; 0 for a NULL batch. */
STOKER_API int stoker_batch_label_shape(const stoker_batch* batch, uint64_t shape[2]);
STOKER_API const int64_t* stoker_batch_ids(const stoker_batch* batch);
STOKER_API uint32_t stoker_batch_count(const stoker_batch* batch);
STOKER_API uint64_t stoker_batch_epoch(const stoker_batch* batch);
STOKER_API uint64_t stoker_batch_index(const stoker_batch* batch);
/* The images' shape: {count, C, H, W} for NCHW, {count, H, W, C} for NHWC. */
STOKER_API void stoker_batch_shape(const stoker_batch* batch, uint64_t shape[4]);
/* Nonzero when this is the last batch of its epoch. */
STOKER_API int stoker_batch_last_in_epoch(const stoker_batch* batch);

/* Device batches (options.device set). `stream` is a cudaStream_t / CUstream on the client's
 * device (NULL: the legacy default stream). The first call orders `stream` after the daemon's
 * copy of this batch - on the GPU, the host does not wait - and returns the device pointers;
 * work queued on that stream may read them. stoker_batch_release() then records the release
 * fence on that same stream, so the daemon overwrites the slot only after that work is done:
 * queue the batch's readers on that stream (or make it wait for them) before releasing.
 * Images: stoker_batch_count() samples of device_image_bytes (stoker_job_info); labels: int64. */
STOKER_API stoker_status stoker_batch_device_images(stoker_batch* batch, void* stream, void** out);
/* Device labels are laid out as on the host (label_dtype, stoker_batch_label_shape);
 * stoker_batch_device_labels refuses soft labels (STOKER_ERR_INVALID_ARGUMENT): use
 * stoker_batch_device_label_data for them. */
STOKER_API stoker_status stoker_batch_device_labels(stoker_batch* batch, void* stream, int64_t** out);
STOKER_API stoker_status stoker_batch_device_label_data(stoker_batch* batch, void* stream, void** out);
/* Host wait until the work queued so far on the batch's stream is done (its device copy can
 * then be read by the CPU where device memory is host-addressable: the hostsim backend). */
STOKER_API stoker_status stoker_batch_device_synchronize(stoker_batch* batch);
/* Page-locks this client's mapped ring for the GPU `ordinal` (read-only registration), so a
 * trainer's host-to-device copies of host batches are asynchronous DMA (pin_memory). Undone
 * when the mapping goes away. */
STOKER_API stoker_status stoker_client_pin_memory(stoker_client* client, int ordinal);
/* Nonzero when the batch has a device copy. */
STOKER_API int stoker_batch_on_device(const stoker_batch* batch);
/* Copies the device copy back to host memory (blocking; for checks and dumps):
 * images_out holds count * device_image_bytes, labels_out count * label_width values of
 * label_dtype (count int64 without mixing); either may be NULL. */
STOKER_API stoker_status stoker_batch_device_to_host(stoker_batch* batch, void* images_out,
                                                     void* labels_out);

/* The daemon's status as JSON; free with stoker_free(). */
STOKER_API stoker_status stoker_daemon_status(const char* socket_path, char** json_out);
/* A JSON command to the daemon (protocol 2.2; see proto/LAYOUT.md, message 11): e.g.
 * {"op": "drain", "job": "train"} or {"op": "define_job", "config": "jobs: {...}"}. The JSON
 * reply ({"ok": true, ...} or {"ok": false, "error": "..."}) in *reply_json, free with
 * stoker_free(); timeout_ms bounds the wait (a job definition waits for its dataset scan). */
STOKER_API stoker_status stoker_daemon_command(const char* socket_path, const char* request_json, int timeout_ms,
                                               char** reply_json);
STOKER_API void stoker_free(void* p);

/* Message of the last failed call on this thread ("" if none). */
STOKER_API const char* stoker_last_error(void);
/* Version of the loaded libstoker and the protocol it speaks: "0.1.0 (protocol 2.0)". */
STOKER_API const char* stoker_version(void);
STOKER_API const char* stoker_status_name(stoker_status status);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_STOKER_H_ */
