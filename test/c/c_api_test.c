/* One rank of the C API test (launched by hiercoll_launch): allreduce, broadcast and allgather against
 * a reference computed here, plus error codes and messages for bad calls, and the failure callback. Plain C. */
#include <hiercoll/hiercoll.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static int failures = 0;
#define EXPECT(cond)                                                             \
  do {                                                                           \
    if (!(cond)) {                                                               \
      printf("FAIL line %d: %s (%s)\n", __LINE__, #cond, hiercoll_last_error()); \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

/* The failure callback's record: the code it was told (0 until then). */
static _Atomic int told = 0;
static void on_failure(hiercoll_result_t code, const char* reason, void* user_data) {
  (void)reason;
  atomic_store((_Atomic int*)user_data, (int)code);
}

int main(void) {
  hiercoll_comm_t comm = NULL;
  EXPECT(hiercoll_comm_init_env(&comm) == HIERCOLL_SUCCESS);
  if (comm == NULL) return 1;
  int rank = -1, size = 0;
  EXPECT(hiercoll_comm_rank(comm, &rank) == HIERCOLL_SUCCESS);
  EXPECT(hiercoll_comm_size(comm, &size) == HIERCOLL_SUCCESS);

  enum { kCount = 1000 };
  double in[kCount], out[kCount];
  for (int i = 0; i < kCount; ++i) in[i] = rank * 10.0 + i;
  hiercoll_work_t work = NULL;
  EXPECT(hiercoll_allreduce(comm, in, out, kCount, HIERCOLL_FLOAT64, HIERCOLL_SUM, &work) == HIERCOLL_SUCCESS);
  EXPECT(hiercoll_work_wait(work, -1) == HIERCOLL_SUCCESS);
  EXPECT(hiercoll_work_is_completed(work) == 1);
  hiercoll_work_free(work);
  for (int i = 0; i < kCount; ++i) {
    double want = 10.0 * size * (size - 1) / 2 + (double)i * size;
    if (out[i] != want) {
      printf("FAIL allreduce element %d: %g != %g\n", i, out[i], want);
      ++failures;
      break;
    }
  }

  int value = rank == size - 1 ? 42 : 0;
  EXPECT(hiercoll_broadcast(comm, &value, &value, 1, HIERCOLL_INT32, size - 1, NULL) == HIERCOLL_SUCCESS);
  EXPECT(value == 42);

  int mine = rank * rank, all[64];
  EXPECT(hiercoll_allgather(comm, &mine, all, 1, HIERCOLL_INT32, NULL) == HIERCOLL_SUCCESS);
  for (int r = 0; r < size; ++r) EXPECT(all[r] == r * r);

  /* Bucketed averaging of two gradients, marked ready last-first. */
  {
    float g0[300], g1[70];
    for (int i = 0; i < 300; ++i) g0[i] = (float)(rank + i);
    for (int i = 0; i < 70; ++i) g1[i] = (float)(2 * rank - i);
    void* data[2] = {g0, g1};
    size_t counts[2] = {300, 70};
    hiercoll_datatype_t types[2] = {HIERCOLL_FLOAT32, HIERCOLL_FLOAT32};
    hiercoll_bucketer_t bucketer = NULL;
    EXPECT(hiercoll_bucketer_create(comm, data, counts, types, 2, 1024, &bucketer) == HIERCOLL_SUCCESS);
    EXPECT(hiercoll_bucketer_mark_ready(bucketer, 1) == HIERCOLL_SUCCESS);
    EXPECT(hiercoll_bucketer_mark_ready(bucketer, 1) == HIERCOLL_ERROR_INVALID_USAGE); /* twice */
    EXPECT(hiercoll_bucketer_mark_ready(bucketer, 0) == HIERCOLL_SUCCESS);
    EXPECT(hiercoll_bucketer_finish(bucketer) == HIERCOLL_SUCCESS);
    double mean_rank = (size - 1) / 2.0;
    for (int i = 0; i < 300; ++i) EXPECT(g0[i] == (float)(mean_rank + i));
    for (int i = 0; i < 70; ++i) EXPECT(g1[i] == (float)(2 * mean_rank - i));
    hiercoll_bucketer_free(bucketer);
  }

  /* Bad calls: a code, a message, and a communicator that still works. */
  EXPECT(hiercoll_allreduce(comm, NULL, out, 4, HIERCOLL_FLOAT64, HIERCOLL_SUM, NULL) == HIERCOLL_ERROR_INVALID_USAGE);
  EXPECT(strstr(hiercoll_last_error(), "input buffer is null") != NULL);
  EXPECT(hiercoll_allreduce(comm, in, out, 4, HIERCOLL_INT32, HIERCOLL_AVG, NULL) == HIERCOLL_ERROR_INVALID_USAGE);
  EXPECT(hiercoll_broadcast(comm, in, out, 4, HIERCOLL_FLOAT64, size + 5, NULL) == HIERCOLL_ERROR_INVALID_USAGE);
  EXPECT(hiercoll_comm_rank(NULL, &rank) == HIERCOLL_ERROR_INVALID_USAGE);
  EXPECT(hiercoll_barrier(comm) == HIERCOLL_SUCCESS);

  /* A failure callback: the last rank aborts (it is not told of its own abort); every other rank is told that a
   * peer gave up, with nothing of its own in flight. */
  EXPECT(hiercoll_comm_on_failure(comm, on_failure, &told) == HIERCOLL_SUCCESS);
  EXPECT(hiercoll_barrier(comm) == HIERCOLL_SUCCESS);
  if (rank == size - 1) {
    EXPECT(hiercoll_comm_abort(comm) == HIERCOLL_SUCCESS);
    EXPECT(atomic_load(&told) == 0);
  } else {
    for (int i = 0; i < 1000 && atomic_load(&told) == 0; ++i) {
      struct timespec tick = {0, 10 * 1000 * 1000};
      nanosleep(&tick, NULL);
    }
    EXPECT(atomic_load(&told) == HIERCOLL_ERROR_REMOTE);
    EXPECT(hiercoll_comm_on_failure(comm, NULL, NULL) == HIERCOLL_SUCCESS);
    EXPECT(hiercoll_comm_destroy(comm) == HIERCOLL_SUCCESS);
  }
  printf("c api: %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
