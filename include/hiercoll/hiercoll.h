/* hiercoll C API: the communicator and its collectives for programs not written in C++.
 * Every call returns a hiercoll_result_t; on failure hiercoll_last_error() describes it (per thread).
 * C++ exceptions never cross this boundary. */
#ifndef HIERCOLL_HIERCOLL_H_
#define HIERCOLL_HIERCOLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HIERCOLL_C_API __attribute__((visibility("default")))

typedef enum {
  HIERCOLL_SUCCESS = 0,
  HIERCOLL_ERROR_INVALID_USAGE = 1, /* fix the call; the communicator is still usable */
  HIERCOLL_ERROR_TIMEOUT = 2,       /* a peer did not answer: destroy the communicator */
  HIERCOLL_ERROR_REMOTE = 3,        /* a peer failed: destroy the communicator */
  HIERCOLL_ERROR_SYSTEM = 4,
  HIERCOLL_ERROR_FABRIC = 5,
  HIERCOLL_ERROR_CUDA = 6,
  HIERCOLL_ERROR_INTERNAL = 7
} hiercoll_result_t;

/* Same order as hiercoll::DataType and hiercoll::ReduceOp. */
typedef enum {
  HIERCOLL_FLOAT32,
  HIERCOLL_FLOAT64,
  HIERCOLL_FLOAT16,
  HIERCOLL_BFLOAT16,
  HIERCOLL_INT8,
  HIERCOLL_UINT8,
  HIERCOLL_INT32,
  HIERCOLL_INT64
} hiercoll_datatype_t;
typedef enum { HIERCOLL_SUM, HIERCOLL_PROD, HIERCOLL_MIN, HIERCOLL_MAX, HIERCOLL_AVG } hiercoll_redop_t;

typedef struct hiercoll_comm* hiercoll_comm_t;
typedef struct hiercoll_work* hiercoll_work_t;

/* Rank, size and rendezvous from the environment (see docs/tuning.md). */
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_init_env(hiercoll_comm_t* comm);
/* Waits for pending operations, then frees. */
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_destroy(hiercoll_comm_t comm);
/* Fails pending operations without waiting for peers, then frees. */
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_abort(hiercoll_comm_t comm);
/* Told once when the communicator breaks for a reason other than its own abort: an operation of this rank failed
 * (told before that operation completes), or a peer died, aborted or went silent. Runs on one of hiercoll's threads
 * with the error code, a NUL-terminated reason (valid during the call) and `user_data`; it must return soon and must
 * not call into `comm`. Told at once if the communicator broke before. fn == NULL removes it, waiting for a call in
 * progress to return. */
typedef void (*hiercoll_failure_fn)(hiercoll_result_t code, const char* reason, void* user_data);
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_on_failure(hiercoll_comm_t comm, hiercoll_failure_fn fn,
                                                          void* user_data);
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_rank(hiercoll_comm_t comm, int* rank);
HIERCOLL_C_API hiercoll_result_t hiercoll_comm_size(hiercoll_comm_t comm, int* size);

/* Collectives. With work == NULL the call blocks until done; otherwise it returns at once and *work must be
 * waited for with hiercoll_work_wait and released with hiercoll_work_free. In builds with CUDA, buffers may be
 * device memory (ordered after the legacy default stream); the waits block the host until the result is there. */
HIERCOLL_C_API hiercoll_result_t hiercoll_allreduce(hiercoll_comm_t comm, const void* in, void* out, size_t count,
                                                    hiercoll_datatype_t type, hiercoll_redop_t op,
                                                    hiercoll_work_t* work);
HIERCOLL_C_API hiercoll_result_t hiercoll_reduce_scatter(hiercoll_comm_t comm, const void* in, void* out,
                                                         size_t recv_count, hiercoll_datatype_t type,
                                                         hiercoll_redop_t op, hiercoll_work_t* work);
HIERCOLL_C_API hiercoll_result_t hiercoll_allgather(hiercoll_comm_t comm, const void* in, void* out, size_t send_count,
                                                    hiercoll_datatype_t type, hiercoll_work_t* work);
HIERCOLL_C_API hiercoll_result_t hiercoll_broadcast(hiercoll_comm_t comm, const void* in, void* out, size_t count,
                                                    hiercoll_datatype_t type, int root, hiercoll_work_t* work);
HIERCOLL_C_API hiercoll_result_t hiercoll_barrier(hiercoll_comm_t comm);

/* Waits up to timeout_ms (negative: forever); HIERCOLL_ERROR_TIMEOUT if still running, else the operation's result. */
HIERCOLL_C_API hiercoll_result_t hiercoll_work_wait(hiercoll_work_t work, int64_t timeout_ms);
/* 1 if finished (successfully or not), else 0. */
HIERCOLL_C_API int hiercoll_work_is_completed(hiercoll_work_t work);
HIERCOLL_C_API void hiercoll_work_free(hiercoll_work_t work);

/* Gradient bucketing (see hiercoll/bucketer.hpp): n gradients, averaged across ranks in fused buckets whose
 * allreduce starts as soon as their gradients are marked ready. bucket_cap_bytes 0 means 25 MB. */
typedef struct hiercoll_bucketer* hiercoll_bucketer_t;
HIERCOLL_C_API hiercoll_result_t hiercoll_bucketer_create(hiercoll_comm_t comm, void* const* data, const size_t* counts,
                                                          const hiercoll_datatype_t* types, size_t n,
                                                          size_t bucket_cap_bytes, hiercoll_bucketer_t* bucketer);
HIERCOLL_C_API hiercoll_result_t hiercoll_bucketer_mark_ready(hiercoll_bucketer_t bucketer, size_t index);
/* Waits for every bucket and writes the averages back into the gradients. */
HIERCOLL_C_API hiercoll_result_t hiercoll_bucketer_finish(hiercoll_bucketer_t bucketer);
HIERCOLL_C_API void hiercoll_bucketer_free(hiercoll_bucketer_t bucketer);

/* Message of this thread's last failed call ("" if none). Valid until its next call. */
HIERCOLL_C_API const char* hiercoll_last_error(void);

/* One line through hiercoll's log, as the library's own ("host:pid [rank] HIERCOLL INFO ..." on stderr), printed when
 * HIERCOLL_DEBUG asks for its level: for bindings and programs whose notes belong beside hiercoll's. */
typedef enum { HIERCOLL_LOG_WARN = 1, HIERCOLL_LOG_INFO = 2, HIERCOLL_LOG_TRACE = 3 } hiercoll_log_level_t;
HIERCOLL_C_API void hiercoll_log(hiercoll_log_level_t level, const char* message);

/* The library's version, "major.minor.patch" (the wheels' and the CMake package's: one VERSION file). Static. */
HIERCOLL_C_API const char* hiercoll_version(void);

/* What this process's hiercoll runs on, as one JSON object: version, libfabric (loaded, path, version, providers, or
 * why none loaded), hwloc, pmix, device_buffers (built with the CUDA path). Loads libfabric if no communicator has.
 * Valid until this thread's next call; NULL (and hiercoll_last_error) only on an internal error. */
HIERCOLL_C_API const char* hiercoll_runtime_report(void);

#ifdef __cplusplus
}
#endif

#endif /* HIERCOLL_HIERCOLL_H_ */
